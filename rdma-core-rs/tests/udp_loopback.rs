//! The verbs API over real UDP sockets on loopback: two soft devices, one
//! per loopback address, exchanging RoCE v2 packets through the kernel.

mod common;
use common::*;
use rdma_core_rs::*;

#[test]
fn rc_write_and_send_arrive_byte_exact() {
    let (a, b) = pair(QpType::Rc);
    let data = pattern(100_000, 7);
    a.mr.write(0, &data).unwrap();
    let wr = SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: b.mr.addr() + 1000, rkey: b.mr.rkey() },
        vec![a.mr.sge(0, data.len() as u32).unwrap()],
    );
    a.qp.post_send(&[wr]).unwrap();
    let wc = a.wait_one();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::RdmaWrite));
    let mut got = vec![0u8; data.len()];
    b.mr.read(1000, &mut got).unwrap();
    assert_eq!(got, data);

    b.qp.post_recv(&[RecvWr { wr_id: 9, sg_list: vec![b.mr.sge(500_000, 5000).unwrap()] }]).unwrap();
    a.qp.post_send(&[SendWr::new(2, SendOp::SendWithImm { imm: 0xdead_beef }, vec![a.mr.sge(10, 3000).unwrap()])])
        .unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let r = b.wait_one();
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.imm_data),
        (9, WcStatus::Success, WcOpcode::Recv, 3000, Some(0xdead_beef))
    );
    let mut got = vec![0u8; 3000];
    b.mr.read(500_000, &mut got).unwrap();
    assert_eq!(got, &data[10..3010]);
}

#[test]
fn bulk_payloads_leave_straight_from_their_regions_and_arrive_intact() {
    let (a, b) = pair(QpType::Rc);
    // Sizes that end in a packet with pad, and a READ whose responses are
    // sent from the responder's region.
    let data = pattern(100_003, 3);
    a.mr.write(0, &data).unwrap();
    let remote = pattern(50_001, 4);
    b.mr.write(300_000, &remote).unwrap();
    let write = SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: b.mr.addr() + 7, rkey: b.mr.rkey() },
        vec![a.mr.sge(0, data.len() as u32).unwrap()],
    );
    let read = SendWr::new(
        2,
        SendOp::RdmaRead { remote_addr: b.mr.addr() + 300_000, rkey: b.mr.rkey() },
        vec![a.mr.sge(200_000, remote.len() as u32).unwrap()],
    );
    a.qp.post_send(&[write, read]).unwrap();
    assert_eq!((a.wait_one().status, a.wait_one().status), (WcStatus::Success, WcStatus::Success));
    let mut got = vec![0u8; data.len()];
    b.mr.read(7, &mut got).unwrap();
    assert!(got == data, "the WRITE did not land intact");
    let mut got = vec![0u8; remote.len()];
    a.mr.read(200_000, &mut got).unwrap();
    assert!(got == remote, "the READ did not bring the bytes back intact");
    let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
    assert_eq!(sa.retransmits + sb.retransmits, 0, "nothing had to be sent twice: {sa:?} {sb:?}");
    assert_eq!(sa.drops.values().sum::<u64>() + sb.drops.values().sum::<u64>(), 0, "no ICRC was wrong");
    // Every packet of the WRITE and of the READ's responses, on either
    // driver: none is shorter than BY_REF_MIN.
    let (ia, ib) = (a.ctx.io_stats(), b.ctx.io_stats());
    let mtu = a.qp.query().unwrap().1.mtu.bytes() as usize;
    let packets = |n: usize| n.div_ceil(mtu) as u64;
    assert_eq!(ia.payloads_by_reference, packets(data.len()), "{:?}: {ia:?}", a.ctx.io_driver());
    assert_eq!(ib.payloads_by_reference, packets(remote.len()), "{:?}: {ib:?}", b.ctx.io_driver());
}

#[test]
fn the_callers_own_memory_goes_by_reference_on_sockets_and_is_copied_on_io_uring() {
    // io_uring copies payloads in memory registered with reg_mr_raw: were
    // its ring to break with sends queued, it could keep only memory it
    // owns alive for them.
    for driver in [IoDriver::Sockets, IoDriver::IoUring] {
        let config = DeviceConfig { progress: Progress::Thread, io_driver: driver, ..DeviceConfig::default() };
        let (a, b) = pair_with(QpType::Rc, config, ConnectOptions::default());
        let data = pattern(20_000, 5);
        let mut buf = data.clone().into_boxed_slice();
        // SAFETY: `buf` outlives `raw` (dropped before it below, after the
        // WRITE has completed) and is touched only through `raw` meanwhile.
        let raw = unsafe { a.pd.reg_mr_raw(buf.as_mut_ptr(), buf.len(), Access::ALL).unwrap() };
        // And a region of its own (`a.mr`): by reference on both drivers.
        a.mr.write(0, &data).unwrap();
        let wrs = [
            SendWr::new(
                1,
                SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
                vec![raw.sge(0, data.len() as u32).unwrap()],
            ),
            write_wr(2, &a, 0, data.len() as u32, &b, 100_000),
        ];
        a.qp.post_send(&wrs).unwrap();
        assert_eq!((a.wait_one().status, a.wait_one().status), (WcStatus::Success, WcStatus::Success));
        drop(raw);
        drop(buf);
        let mut got = vec![0u8; data.len()];
        for at in [0, 100_000] {
            b.mr.read(at, &mut got).unwrap();
            assert!(got == data, "{driver:?}: the WRITE at {at} did not land intact");
        }
        let packets = data.len().div_ceil(a.qp.query().unwrap().1.mtu.bytes() as usize) as u64;
        let by_ref = a.ctx.io_stats().payloads_by_reference;
        match a.ctx.io_driver() {
            IoDriver::Sockets => assert_eq!(by_ref, 2 * packets, "sockets: both WRITEs by reference"),
            IoDriver::IoUring => assert_eq!(by_ref, packets, "io_uring: only the device's own region by reference"),
        }
    }
}

#[test]
fn rc_read_write_with_imm_atomics_inline_and_unsignaled() {
    let (a, b) = pair(QpType::Rc);
    let data = pattern(20_000, 3);
    b.mr.write(0, &data).unwrap();
    // READ
    let rd = SendWr::new(
        1,
        SendOp::RdmaRead { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
        vec![a.mr.sge(100_000, 20_000).unwrap()],
    );
    a.qp.post_send(&[rd]).unwrap();
    let wc = a.wait_one();
    assert_eq!((wc.status, wc.opcode, wc.byte_len), (WcStatus::Success, WcOpcode::RdmaRead, 20_000));
    let mut got = vec![0u8; 20_000];
    a.mr.read(100_000, &mut got).unwrap();
    assert_eq!(got, data);

    // WRITE with immediate consumes a receive and reports the immediate.
    b.qp.post_recv(&[RecvWr { wr_id: 77, sg_list: vec![] }]).unwrap();
    let wi = SendWr::new(
        2,
        SendOp::RdmaWriteWithImm { remote_addr: b.mr.addr() + 300_000, rkey: b.mr.rkey(), imm: 0x0102_0304 },
        vec![a.mr.sge(100_000, 5000).unwrap()],
    );
    a.qp.post_send(&[wi]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let r = b.wait_one();
    assert_eq!((r.wr_id, r.opcode, r.imm_data, r.byte_len), (77, WcOpcode::RecvRdmaWithImm, Some(0x0102_0304), 5000));
    b.mr.read(300_000, &mut got[..5000]).unwrap();
    assert_eq!(&got[..5000], &data[..5000]);

    // Atomics: host-order 64-bit values in memory.
    b.mr.write(8192, &100u64.to_ne_bytes()).unwrap();
    let fa = SendWr::new(
        3,
        SendOp::FetchAdd { remote_addr: b.mr.addr() + 8192, rkey: b.mr.rkey(), add: 5 },
        vec![a.mr.sge(0, 8).unwrap()],
    );
    let cs = SendWr::new(
        4,
        SendOp::CompareSwap { remote_addr: b.mr.addr() + 8192, rkey: b.mr.rkey(), compare: 105, swap: 7 },
        vec![a.mr.sge(8, 8).unwrap()],
    );
    a.qp.post_send(&[fa, cs]).unwrap();
    let (w1, w2) = (a.wait_one(), a.wait_one());
    assert_eq!((w1.wr_id, w1.opcode, w2.wr_id, w2.opcode), (3, WcOpcode::FetchAdd, 4, WcOpcode::CompSwap));
    assert_eq!((a.mr.read_u64(0).unwrap(), a.mr.read_u64(8).unwrap()), (100, 105));
    assert_eq!(b.mr.read_u64(8192).unwrap(), 7);

    // Inline data is copied at post time: changing the source afterwards
    // does not change what arrives. Unsignaled requests complete silently.
    b.qp.post_recv(&[RecvWr { wr_id: 5, sg_list: vec![b.mr.sge(0, 64).unwrap()] }]).unwrap();
    let mut inline = SendWr::new(6, SendOp::Send, vec![]);
    inline.inline_data = Some(b"inline payload".to_vec());
    inline.signaled = false;
    let mut quiet = write_wr(7, &a, 0, 16, &b, 1024);
    quiet.signaled = false;
    let last = write_wr(8, &a, 0, 16, &b, 2048);
    a.qp.post_send(&[inline, quiet, last]).unwrap();
    assert_eq!(a.wait_one().wr_id, 8, "only the signaled request completes");
    let r = b.wait_one();
    assert_eq!(r.byte_len, 14);
    b.mr.read(0, &mut got[..14]).unwrap();
    assert_eq!(&got[..14], b"inline payload");
}

#[test]
fn uc_send_and_write_with_imm() {
    let (a, b) = pair(QpType::Uc);
    let data = pattern(9000, 11);
    a.mr.write(0, &data).unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(0, 9000).unwrap()] }]).unwrap();
    a.qp.post_send(&[SendWr::new(1, SendOp::Send, vec![a.mr.sge(0, 9000).unwrap()])]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let r = b.wait_one();
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 9000));
    assert_eq!(&b.mr.to_vec()[..9000], &data[..]);
    b.qp.post_recv(&[RecvWr { wr_id: 2, sg_list: vec![] }]).unwrap();
    let wr = SendWr::new(
        2,
        SendOp::RdmaWriteWithImm { remote_addr: b.mr.addr() + 50_000, rkey: b.mr.rkey(), imm: 9 },
        vec![a.mr.sge(0, 3000).unwrap()],
    );
    a.qp.post_send(&[wr]).unwrap();
    a.wait_one();
    assert_eq!(b.wait_one().imm_data, Some(9));
    // READ is not a UC operation.
    let rd =
        SendWr::new(3, SendOp::RdmaRead { remote_addr: b.mr.addr(), rkey: b.mr.rkey() }, vec![a.mr.sge(0, 8).unwrap()]);
    assert!(matches!(a.qp.post_send(&[rd]), Err(Error::Post { index: 0, .. })));
}

#[test]
fn ud_send_through_an_address_handle_with_the_grh_area() {
    let (a_ip, b_ip) = addresses();
    let cfg = DeviceConfig { progress: Progress::Thread, ..DeviceConfig::default() };
    let (a, _) = Side::new("ud-a", a_ip, QpType::Ud, cfg.clone(), None);
    let (b, _) = Side::new("ud-b", b_ip, QpType::Ud, cfg, None);
    let opts = ConnectOptions::default();
    a.qp.connect(1, &b.info(0), &opts).unwrap();
    b.qp.connect(2, &a.info(0), &opts).unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(0, 40 + 512).unwrap()] }]).unwrap();
    let ah = a.pd.create_ah(&AhAttr::new(b.ctx.query_gid(0).unwrap())).unwrap();
    a.mr.write(0, &pattern(512, 5)).unwrap();
    let mut wr = SendWr::new(1, SendOp::SendWithImm { imm: 42 }, vec![a.mr.sge(0, 512).unwrap()]);
    wr.ud = Some(ah.ud_dest(b.qp.qp_num(), opts.qkey));
    a.qp.post_send(&[wr]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let r = b.wait_one();
    assert_eq!((r.status, r.byte_len, r.src_qp, r.imm_data), (WcStatus::Success, 552, a.qp.qp_num(), Some(42)));
    assert_ne!(r.wc_flags & wc_flags::GRH, 0);
    assert_eq!(&b.mr.to_vec()[40..552], &pattern(512, 5)[..]);
    // A UD message larger than the MTU is refused at post time.
    let mut big = SendWr::new(2, SendOp::Send, vec![a.mr.sge(0, 8192).unwrap()]);
    big.ud = Some(ah.ud_dest(b.qp.qp_num(), opts.qkey));
    assert!(a.qp.post_send(&[big]).is_err());
}

/// A UD receive's GRH area holds the IP header the packet arrived with,
/// as libibverbs applications read it: with the TTL / hop limit and the
/// traffic class the sender's address handle asked for (9 and DSCP 26;
/// the engine adds ECT(0) to data packets), not a guess (64). The sender's kernel must send them, and the
/// receiver's must report them. Both drivers; IPv4 between two devices,
/// IPv6 between two QPs of one device on ::1, the one IPv6 loopback address.
#[test]
fn a_ud_receive_sees_the_senders_hop_limit_and_traffic_class_in_its_grh() {
    const HOP_LIMIT: u8 = 9;
    const DSCP_26: u8 = 0x68;
    const ECT0: u8 = 0b10;
    for driver in [IoDriver::Sockets, IoDriver::IoUring] {
        // Manual progress: each wait drives its device, and a dropped
        // device has closed its sockets (::1 port 4791 is free again).
        let cfg = DeviceConfig { progress: Progress::Manual, io_driver: driver, ..DeviceConfig::default() };
        let (a_ip, b_ip) = addresses();
        let (a, _) = Side::new(&format!("ud-ttl-a-{}", driver.name()), a_ip, QpType::Ud, cfg.clone(), None);
        let (b, _) = Side::new(&format!("ud-ttl-b-{}", driver.name()), b_ip, QpType::Ud, cfg.clone(), None);
        eprintln!("driver {}", b.ctx.io_driver().name());
        let (grh, sl) = ud_grh(&a, &b.qp, &b.cq, &b.mr, b.ctx.query_gid(0).unwrap(), HOP_LIMIT, DSCP_26);
        // The packet type in `sl`, as ConnectX reports it (UCX reads it).
        assert_eq!(sl, roce_packet_type::ROCE_V2_IPV4, "{}: RoCE v2 over IPv4", driver.name());
        let ip = &grh[20..];
        assert_eq!(ip[0], 0x45, "{}: an IPv4 header in the GRH's last 20 bytes: {grh:02x?}", driver.name());
        assert_eq!((ip[8], ip[1]), (HOP_LIMIT, DSCP_26 | ECT0), "{}: IPv4 TTL and TOS", driver.name());
        let std::net::IpAddr::V4(a4) = a_ip else { unreachable!("addresses() are IPv4") };
        assert_eq!(&ip[12..16], &a4.octets()[..], "the sender's address");

        let lo = std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
        let (c, _) = Side::new(&format!("ud-ttl-6-{}", driver.name()), lo, QpType::Ud, cfg, None);
        let cq = c.ctx.create_cq(16, None).unwrap();
        let qp = c.pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq)).unwrap();
        let mr = c.pd.reg_mr(4096, Access::ALL).unwrap();
        let (grh, sl) = ud_grh(&c, &qp, &cq, &mr, c.ctx.query_gid(0).unwrap(), HOP_LIMIT, DSCP_26);
        assert_eq!(grh[0] >> 4, 6, "{}: an IPv6 header: {grh:02x?}", driver.name());
        assert_eq!(sl, roce_packet_type::ROCE_V2_IPV6, "{}: RoCE v2 over IPv6", driver.name());
        let traffic_class = (grh[0] << 4) | (grh[1] >> 4);
        assert_eq!((grh[7], traffic_class), (HOP_LIMIT, DSCP_26 | ECT0), "{}: hop limit, traffic class", driver.name());
    }
}

/// Sends 64 bytes from `from`'s UD QP through an address handle to `gid`
/// with `hop_limit` and `traffic_class`, to UD QP `qp` (completions on
/// `cq`, buffer in `mr`), and returns the receive's 40-byte GRH area and
/// its completion's `sl`.
fn ud_grh(
    from: &Side,
    qp: &QueuePair,
    cq: &CompletionQueue,
    mr: &MemoryRegion,
    gid: Gid,
    hop_limit: u8,
    traffic_class: u8,
) -> (Vec<u8>, u8) {
    let qkey = ConnectOptions::default().qkey;
    // UD "connects" only to reach RTS: the peer is the address handle's.
    from.qp.connect(1, &PeerInfo { qpn: qp.qp_num(), psn: 0, gid }, &ConnectOptions::default()).unwrap();
    qp.connect(2, &from.info(0), &ConnectOptions::default()).unwrap();
    qp.post_recv(&[RecvWr { wr_id: 7, sg_list: vec![mr.sge(0, 40 + 64).unwrap()] }]).unwrap();
    let ah = from.pd.create_ah(&AhAttr { hop_limit, traffic_class, ..AhAttr::new(gid) }).unwrap();
    from.mr.write(0, &pattern(64, 3)).unwrap();
    let mut wr = SendWr::new(1, SendOp::Send, vec![from.mr.sge(0, 64).unwrap()]);
    wr.ud = Some(ah.ud_dest(qp.qp_num(), qkey));
    from.qp.post_send(&[wr]).unwrap();
    assert_eq!(from.wait_one().status, WcStatus::Success);
    let mut out = Vec::new();
    assert_eq!(cq.wait(&mut out, 1, WAIT).unwrap(), 1, "no receive completion");
    let r = out[0];
    assert_eq!((r.wr_id, r.status, r.byte_len, r.src_qp), (7, WcStatus::Success, 40 + 64, from.qp.qp_num()));
    assert_ne!(r.wc_flags & wc_flags::GRH, 0);
    let got = mr.to_vec();
    assert_eq!(&got[40..104], &pattern(64, 3)[..]);
    (got[..40].to_vec(), r.sl)
}

#[test]
fn srq_feeds_two_qps_and_raises_its_limit_event() {
    let (a_ip, b_ip) = addresses();
    let cfg = DeviceConfig { progress: Progress::Thread, ..DeviceConfig::default() };
    let (a, _) = Side::new("srq-a", a_ip, QpType::Rc, cfg.clone(), None);
    let (b, srq) = Side::new("srq-b", b_ip, QpType::Rc, cfg, Some(64));
    let srq = srq.unwrap();
    // A second pair of QPs on the same devices, the receiver on the same SRQ.
    let a2 = a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &a.cq)).unwrap();
    let mut attr = QpInitAttr::new(QpType::Rc, &b.cq);
    attr.srq = Some(&srq);
    let b2 = b.pd.create_qp(&attr).unwrap();
    let opts = ConnectOptions::default();
    a.qp.connect(1, &b.info(2), &opts).unwrap();
    b.qp.connect(2, &a.info(1), &opts).unwrap();
    let gid = |s: &Side| s.ctx.query_gid(0).unwrap();
    a2.connect(3, &PeerInfo { qpn: b2.qp_num(), psn: 4, gid: gid(&b) }, &opts).unwrap();
    b2.connect(4, &PeerInfo { qpn: a2.qp_num(), psn: 3, gid: gid(&a) }, &opts).unwrap();
    assert!(b.qp.post_recv(&[RecvWr { wr_id: 0, sg_list: vec![] }]).is_err(), "a QP with an SRQ takes no receives");
    let wrs: Vec<RecvWr> =
        (0..4).map(|i| RecvWr { wr_id: 100 + i, sg_list: vec![b.mr.sge(i as usize * 1000, 1000).unwrap()] }).collect();
    srq.post_recv(&wrs).unwrap();
    srq.arm_limit(3).unwrap();
    a.qp.post_send(&[SendWr::new(1, SendOp::Send, vec![a.mr.sge(0, 10).unwrap()])]).unwrap();
    a2.post_send(&[SendWr::new(2, SendOp::Send, vec![a.mr.sge(0, 20).unwrap()])]).unwrap();
    let mut got = [b.wait_one(), b.wait_one()];
    got.sort_by_key(|w| w.wr_id);
    assert_eq!((got[0].wr_id, got[1].wr_id), (100, 101));
    let mut qpns = [got[0].qp_num, got[1].qp_num];
    qpns.sort();
    let mut want = [b.qp.qp_num(), b2.qp_num()];
    want.sort();
    assert_eq!(qpns, want);
    let ev = b.ctx.get_async_event(WAIT).unwrap();
    assert_eq!(ev, Some(AsyncEvent::SrqLimitReached(SrqId(srq.id()))));
}

#[test]
fn forty_qps_share_sixteen_send_sockets_and_every_write_lands() {
    let (a_ip, b_ip) = addresses();
    // One engine: each engine of a device of several has sixteen.
    let cfg = DeviceConfig { progress: Progress::Thread, threads: 1, ..DeviceConfig::default() };
    let (a, _) = Side::new("many-a", a_ip, QpType::Rc, cfg.clone(), None);
    let (b, _) = Side::new("many-b", b_ip, QpType::Rc, cfg, None);
    let opts = ConnectOptions { mtu: Mtu::Mtu1024, ..ConnectOptions::default() };
    let mut qps = Vec::new();
    for i in 0..40u32 {
        qps.push(connected_qps(&a, &b, &opts, i));
    }
    let ports: std::collections::BTreeSet<u16> = qps.iter().map(|(qa, _)| qa.src_port()).collect();
    assert_eq!(ports.len(), rdma_core_rs::udp::MAX_TX_SOCKETS, "source ports in use: {ports:?}");
    assert!(ports.iter().all(|&p| p >= 0xc000));

    let data = pattern(40 * 8192, 3);
    a.mr.write(0, &data).unwrap();
    for (i, (qa, _)) in qps.iter().enumerate() {
        qa.post_send(&[write_wr(i as u64, &a, i * 8192, 8192, &b, (i * 8192) as u64)]).unwrap();
    }
    for _ in 0..qps.len() {
        assert_eq!(a.wait_one().status, WcStatus::Success);
    }
    let mut got = vec![0u8; data.len()];
    b.mr.read(0, &mut got).unwrap();
    assert!(got == data, "some WRITE did not land intact");
    assert!(a.ctx.io_stats().gso_sends > 0, "8 KiB WRITEs of 1 KiB packets leave as GSO runs");
}

/// A lone packet sent after a GSO run of smaller packets leaves whole: the
/// send batch is reused from round to round, and a UDP_SEGMENT size left
/// over from the run would make the kernel cut the lone packet into pieces
/// (with bad ICRCs) that the peer drops until the requester gives up.
#[test]
fn a_lone_packet_after_a_gso_run_of_smaller_packets_leaves_whole() {
    let (a_ip, b_ip) = addresses();
    // One engine: the runs of one QP on one socket (a device of several
    // also sends with GSO, each engine from its own sockets).
    let cfg = DeviceConfig { progress: Progress::Thread, threads: 1, ..DeviceConfig::default() };
    let (a, _) = Side::new("lone-a", a_ip, QpType::Rc, cfg.clone(), None);
    let (b, _) = Side::new("lone-b", b_ip, QpType::Rc, cfg, None);
    let connect = |mtu: Mtu, psn: u32| connected_qps(&a, &b, &ConnectOptions { mtu, ..ConnectOptions::default() }, psn);
    let (small, _s) = connect(Mtu::Mtu256, 10);
    let (large, _l) = connect(Mtu::Mtu4096, 20);
    let data = pattern(8192, 5);
    a.mr.write(0, &data).unwrap();
    for round in 0..4u64 {
        // four 256-byte packets: one GSO run
        small.post_send(&[write_wr(2 * round, &a, 0, 1024, &b, 0)]).unwrap();
        assert_eq!(a.wait_one().status, WcStatus::Success);
        // one 3000-byte packet, alone in its round
        large.post_send(&[write_wr(2 * round + 1, &a, 1024, 3000, &b, 1024)]).unwrap();
        assert_eq!(a.wait_one().status, WcStatus::Success);
    }
    let mut got = vec![0u8; 4024];
    b.mr.read(0, &mut got).unwrap();
    assert!(got == data[..4024], "the WRITEs did not land intact");
    let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
    assert!(a.ctx.io_stats().gso_sends >= 4, "the small WRITEs leave as GSO runs: {:?}", a.ctx.io_stats());
    assert_eq!(sa.retransmits, 0, "nothing had to be sent twice: {sa:?}");
    assert_eq!(sb.drops.values().sum::<u64>(), 0, "the peer dropped nothing: {sb:?}");
}

/// Manual progress, with lone ACKs held back for up to `delay`.
fn holding_acks(delay: std::time::Duration) -> DeviceConfig {
    DeviceConfig { progress: Progress::Manual, ack_delay: delay, ..DeviceConfig::default() }
}

/// A QP that has been sending holds a lone ACK back for company
/// (`DeviceConfig::ack_delay`), yet the requester gets it when the
/// responder's application stops calling: the device's ACK flusher sends
/// it once its delay is up, and destroying the QP sends it at once.
#[test]
fn held_acks_reach_the_requester_when_the_responder_stops_calling() {
    let cfg = holding_acks(std::time::Duration::from_micros(300));
    // A retransmit timer of ~1 s: the ACK must come long before it.
    let opts = ConnectOptions { timeout: 18, ..ConnectOptions::default() };
    for destroy in [false, true] {
        let mut held = false;
        for attempt in 0..20 {
            let (a, b) = pair_with(QpType::Rc, cfg.clone(), opts);
            // b sends first, so that its QP is conversing.
            a.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![a.mr.sge(0, 64).unwrap()] }]).unwrap();
            b.qp.post_send(&[SendWr::new(2, SendOp::Send, vec![b.mr.sge(0, 8).unwrap()])]).unwrap();
            assert_eq!(b.wait_one_with(&a).status, WcStatus::Success);
            assert_eq!(a.wait_one().status, WcStatus::Success);
            // a sends; b takes it and then stops calling.
            b.qp.post_recv(&[RecvWr { wr_id: 3, sg_list: vec![b.mr.sge(64, 64).unwrap()] }]).unwrap();
            let sent_before = b.ctx.stats().packets_sent;
            a.qp.post_send(&[SendWr::new(4, SendOp::Send, vec![a.mr.sge(64, 8).unwrap()])]).unwrap();
            assert_eq!(b.wait_one().wr_id, 3);
            if b.ctx.stats().packets_sent != sent_before {
                continue; // more than a millisecond passed: b no longer conversing, ACKed at once
            }
            held = true;
            if destroy {
                drop(b); // QP, then device: nothing of b is left to send a due ACK later
            }
            let wc = a.wait_one();
            assert_eq!((wc.wr_id, wc.status), (4, WcStatus::Success), "destroy {destroy}, attempt {attempt}");
            assert_eq!(a.ctx.stats().retransmits, 0, "the ACK came without a retransmission (destroy {destroy})");
            break;
        }
        assert!(held, "b never held its ACK in 20 attempts (destroy {destroy})");
    }
}

/// In a ping-pong the reply leaves in a system call of its own and the
/// held ACK it releases follows in another, never the two as one GSO send
/// (which costs the reply time); every send still completes.
#[test]
fn a_reply_leaves_alone_and_the_ack_it_releases_after_it() {
    // A delay far longer than a round, even on a loaded machine, so that
    // every ACK is still held when the reply goes (a due ACK would leave
    // beside the reply in the first pass of the round, not released by it).
    let cfg = holding_acks(std::time::Duration::from_millis(200));
    let (a, b) = pair_with(QpType::Rc, cfg, ConnectOptions::default());
    let send = |s: &Side, id| s.qp.post_send(&[SendWr::new(id, SendOp::Send, vec![s.mr.sge(0, 8).unwrap()])]).unwrap();
    let recv =
        |s: &Side, id| s.qp.post_recv(&[RecvWr { wr_id: id, sg_list: vec![s.mr.sge(64, 64).unwrap()] }]).unwrap();
    // Waits for the receive `id` on `s`, keeping the send completions met on the way.
    let take = |s: &Side, peer: &Side, id, sends: &mut Vec<WorkCompletion>| loop {
        let wc = s.wait_one_with(peer);
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        if wc.opcode == WcOpcode::Recv {
            assert_eq!(wc.wr_id, id);
            return;
        }
        sends.push(wc);
    };
    let rounds = 40;
    let (mut a_sends, mut b_sends) = (Vec::new(), Vec::new());
    let mut before = None;
    for i in 0..rounds {
        if i == 2 {
            before = Some(b.ctx.io_stats()); // both QPs have sent: ACKs are held from here on
        }
        recv(&a, i);
        recv(&b, i);
        send(&a, 1000 + i);
        take(&b, &a, i, &mut b_sends);
        send(&b, 2000 + i);
        take(&a, &b, i, &mut a_sends);
    }
    let (before, after) = (before.unwrap(), b.ctx.io_stats());
    // The last ACKs leave when their delay is up; every send completes.
    while a_sends.len() < rounds as usize {
        a_sends.push(a.wait_one_with(&b));
    }
    while b_sends.len() < rounds as usize {
        b_sends.push(b.wait_one_with(&a));
    }
    assert!(a_sends.iter().chain(&b_sends).all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
    assert_eq!(after.gso_sends, before.gso_sends, "a reply left in one GSO send with its ACK: {before:?} -> {after:?}");
    assert!(
        after.send_syscalls - before.send_syscalls >= 2 * (rounds - 2),
        "a reply and its ACK in two system calls: {before:?} -> {after:?}"
    );
}

/// A poll that the completions a CQ already holds satisfy answers from
/// them without a round of progress (no receive call: the peer's packet
/// waiting in the socket stays there), and the next poll that finds the
/// CQ short takes that packet. At most `SATISFIED_POLLS` polls in a row
/// skip the round: a loop that posts a UD send before each poll (its
/// completion is always there) still has its socket read. The empty poll
/// right after one that emptied the CQ from the queue skips it too. Manual
/// progress, one thread: nothing else reads the sockets. Addresses
/// 127.0.77.11 and .12.
#[test]
fn a_poll_the_queued_completions_satisfy_makes_no_receive_call() {
    // One engine, driven by the application's polls (a device of several
    // engines makes progress on their threads, never in a poll).
    let cfg = DeviceConfig { progress: Progress::Manual, threads: 1, ..DeviceConfig::default() };
    let ip = |h: u8| std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 77, h));
    let (a, _) = Side::new("satisfied-a", ip(11), QpType::Ud, cfg.clone(), None);
    let (b, _) = Side::new("satisfied-b", ip(12), QpType::Ud, cfg, None);
    let opts = ConnectOptions::default();
    a.qp.connect(1, &b.info(0), &opts).unwrap();
    b.qp.connect(2, &a.info(0), &opts).unwrap();
    let recvs: Vec<RecvWr> = (0..4u64)
        .map(|i| RecvWr { wr_id: 100 + i, sg_list: vec![b.mr.sge(i as usize * 1024, 40 + 64).unwrap()] })
        .collect();
    b.qp.post_recv(&recvs).unwrap();
    let to_b = a.pd.create_ah(&AhAttr::new(b.ctx.query_gid(0).unwrap())).unwrap();
    let to_a = b.pd.create_ah(&AhAttr::new(a.ctx.query_gid(0).unwrap())).unwrap();
    let send = |from: &Side, ah: &AddressHandle, qpn: u32, wr_id: u64| {
        let mut wr = SendWr::new(wr_id, SendOp::Send, vec![from.mr.sge(0, 64).unwrap()]);
        wr.ud = Some(ah.ud_dest(qpn, opts.qkey));
        from.qp.post_send(&[wr]).unwrap();
    };
    // A round of progress, whatever the driver (an io_uring receive may
    // reap the kernel's completions without a system call).
    let rounds = || b.ctx.progress_gaps().rounds;
    let mut out = Vec::new();

    // a's packet waits in b's socket (b makes no progress of its own).
    send(&a, &to_b, b.qp.qp_num(), 1);
    // b's UD send completes at its post: b's CQ holds that completion.
    send(&b, &to_a, a.qp.qp_num(), 2);
    let before = rounds();
    assert_eq!(b.cq.poll(&mut out, 1).unwrap(), 1);
    assert_eq!(out[0].wr_id, 2, "the send's completion");
    assert_eq!(rounds(), before, "a poll the queued completion satisfies makes no round");
    // It emptied the CQ: the poll right after it, the end of a drain one
    // completion at a time, answers "empty" without a round too, once.
    out.clear();
    assert_eq!(b.cq.poll(&mut out, 1).unwrap(), 0, "a's packet waits one poll more");
    assert_eq!(rounds(), before, "the empty poll that ends the drain makes no round");
    // Now the CQ is short: the round takes a's packet.
    let deadline = std::time::Instant::now() + WAIT.unwrap();
    while b.cq.poll(&mut out, 1).unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "a's packet never arrived: {:?}", b.ctx.stats());
    }
    assert_eq!((out[0].wr_id, out[0].status), (100, WcStatus::Success), "a's packet, received");
    assert!(rounds() > before, "the poll that found the CQ short made a round");

    // A poll asking for more than the CQ holds makes its round.
    send(&b, &to_a, a.qp.qp_num(), 3);
    let before = rounds();
    out.clear();
    assert_eq!(b.cq.poll(&mut out, 2).unwrap(), 1);
    assert_eq!(rounds(), before + 1, "a poll for 2 of 1 queued receives");

    // Post, poll, post, poll...: every poll is satisfied, yet one in
    // SATISFIED_POLLS + 1 makes a round.
    let before = rounds();
    for i in 0..SATISFIED_POLLS as u64 {
        send(&b, &to_a, a.qp.qp_num(), 10 + i);
        out.clear();
        assert_eq!(b.cq.poll(&mut out, 1).unwrap(), 1);
    }
    assert_eq!(rounds(), before, "{SATISFIED_POLLS} satisfied polls in a row, no round");
    send(&b, &to_a, a.qp.qp_num(), 99);
    out.clear();
    assert_eq!(b.cq.poll(&mut out, 1).unwrap(), 1);
    assert_eq!(out[0].wr_id, 99);
    assert!(rounds() > before, "the poll after {SATISFIED_POLLS} satisfied ones made a round");
}
