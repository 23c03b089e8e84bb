//! UC, UD, SRQ, the QP state machine, and the RC corner cases: PSN wrap,
//! ghost ACKs, duplicated, reordered and corrupted packets.

mod common;

use common::*;
use core::net::IpAddr;
use core::time::Duration;
use rdma_transport::sim::{bring_up, connect, LinkConfig, PairConfig, Side, Sim, Verdict};
use rdma_transport::*;
use rdma_wire::{Opcode, RoceV2Packet};

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn uc_send_and_write_complete_without_acks() {
    let cfg = PairConfig { qp_type: QpType::Uc, ..PairConfig::default() };
    let mut sim = Sim::new(1, LinkConfig::default());
    let (a, b) = connect(&mut sim, cfg);
    let data = fill(&a, 0, 3000, 1);
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 5, sg_list: sge(&b, 0, 4096) }).unwrap();
    sim.ep(a.ep).post_send(a.qpn, SendWr::new(1, SendOp::Send, sge(&a, 0, 3000))).unwrap();
    sim.ep(a.ep)
        .post_send(
            a.qpn,
            SendWr::new(2, SendOp::RdmaWrite { remote_addr: b.va + 8192, rkey: b.rkey }, sge(&a, 0, 3000)),
        )
        .unwrap();
    sim.run_idle(LIMIT);
    assert_eq!(read(&b, 0, 3000), data);
    assert_eq!(read(&b, 8192, 3000), data);
    assert_eq!(statuses(&sim.ep(a.ep).poll_cq(a.send_cq, 10)), [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(statuses(&sim.ep(b.ep).poll_cq(b.recv_cq, 10)), [(5, WcStatus::Success)]);
    assert_eq!(sim.stats.sent, 6, "3 + 3 packets, no ACK");
    // UC has no READ or atomics.
    let err = sim
        .ep(a.ep)
        .post_send(a.qpn, SendWr::new(3, SendOp::RdmaRead { remote_addr: b.va, rkey: b.rkey }, sge(&a, 0, 8)));
    assert!(matches!(err, Err(VerbsError::UnsupportedOp { op: "RDMA_READ", .. })), "{err:?}");
}

#[test]
fn uc_gap_drops_the_rest_of_the_message_and_keeps_the_receive() {
    let cfg = PairConfig { qp_type: QpType::Uc, ..PairConfig::default() };
    let mut sim = Sim::new(2, LinkConfig::default());
    let (a, b) = connect(&mut sim, cfg);
    let mut dropped = false;
    sim.set_filter(move |_, p| {
        if !dropped && opcode_of(p) == Opcode::UC_SEND_MIDDLE {
            dropped = true;
            return Verdict::Drop;
        }
        Verdict::Deliver
    });
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 7, sg_list: sge(&b, 0, 4096) }).unwrap();
    fill(&a, 0, 3000, 2);
    let second = fill(&a, 4096, 100, 3);
    sim.ep(a.ep).post_send(a.qpn, SendWr::new(1, SendOp::Send, sge(&a, 0, 3000))).unwrap();
    sim.ep(a.ep).post_send(a.qpn, SendWr::new(2, SendOp::Send, sge(&a, 4096, 100))).unwrap();
    sim.run_idle(LIMIT);
    // The sender saw both succeed; the receiver got only the second, in the same WQE.
    assert_eq!(statuses(&sim.ep(a.ep).poll_cq(a.send_cq, 10)), [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let r = sim.ep(b.ep).poll_cq(b.recv_cq, 10);
    assert_eq!(statuses(&r), [(7, WcStatus::Success)]);
    assert_eq!(r[0].byte_len, 100);
    assert_eq!(read(&b, 0, 100), second);
    let s = sim.ep(b.ep).stats();
    assert_eq!(s.drops_for(Drop::PsnOutOfSequence), 1);
    assert_eq!(s.drops_for(Drop::UcMessageDropped), 1, "the LAST after the gap goes with its message");
    assert_eq!(s.naks_sent, 0, "UC never NAKs");
}

fn ud_pair(seed: u64) -> (Sim, Side, Side) {
    let cfg = PairConfig { qp_type: QpType::Ud, ..PairConfig::default() };
    let mut sim = Sim::new(seed, LinkConfig::default());
    let (a, b) = connect(&mut sim, cfg);
    (sim, a, b)
}

fn ud_send(sim: &mut Sim, a: &Side, b: &Side, wr_id: u64, len: u32, qkey: u32) {
    let mut wr = SendWr::new(wr_id, SendOp::SendWithImm { imm: 0x1234 }, sge(a, 0, len));
    wr.ud = Some(UdDest::new(IpAddr::from([127, 0, 0, 2]), b.qpn, qkey));
    sim.ep(a.ep).post_send(a.qpn, wr).unwrap();
}

#[test]
fn ud_delivers_with_the_grh_area_and_checks_the_qkey() {
    let (mut sim, a, b) = ud_pair(3);
    let data = fill(&a, 0, 512, 4);
    for i in 0..3 {
        sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 10 + i, sg_list: sge(&b, i * 4096, 1024 + 40) }).unwrap();
    }
    ud_send(&mut sim, &a, &b, 1, 512, 0x1111_1111);
    ud_send(&mut sim, &a, &b, 2, 512, 0x2222_2222); // wrong Q_Key: dropped at the receiver
    ud_send(&mut sim, &a, &b, 3, 512, 0x8000_0000); // high bit: the sender's own Q_Key is used
    sim.run_idle(LIMIT);
    assert_eq!(
        statuses(&sim.ep(a.ep).poll_cq(a.send_cq, 10)),
        [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]
    );
    let r = sim.ep(b.ep).poll_cq(b.recv_cq, 10);
    assert_eq!(statuses(&r), [(10, WcStatus::Success), (11, WcStatus::Success)]);
    for w in &r {
        assert_eq!((w.byte_len, w.src_qp, w.imm_data), (552, a.qpn, Some(0x1234)));
        assert_eq!(w.wc_flags & wc_flags::GRH, wc_flags::GRH);
        // The packet type in `sl`, as ConnectX reports it: UCX's ud_verbs
        // (before 1.19) reads it to find the destination address in the
        // GRH area, and dropped every packet while it was 0.
        assert_eq!(w.sl, roce_packet_type::ROCE_V2_IPV4);
    }
    // The GRH area: 20 unused bytes, then the IPv4 header from 127.0.0.1.
    let grh = read(&b, 0, 40);
    assert_eq!(grh[20] >> 4, 4);
    assert_eq!(&grh[32..36], &[127, 0, 0, 1]);
    assert_eq!(read(&b, 40, 512), data);
    assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::QkeyMismatch), 1);
    // Messages larger than the MTU are refused at post time.
    let mut wr = SendWr::new(9, SendOp::Send, sge(&a, 0, 2000));
    wr.ud = Some(UdDest::new(IpAddr::from([127, 0, 0, 2]), b.qpn, 0x1111_1111));
    assert!(matches!(sim.ep(a.ep).post_send(a.qpn, wr), Err(VerbsError::MessageTooLong { len: 2000, max: 1024, .. })));
}

#[test]
fn ud_receive_too_small_completes_with_a_length_error() {
    let (mut sim, a, b) = ud_pair(4);
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 1, sg_list: sge(&b, 0, 100) }).unwrap();
    ud_send(&mut sim, &a, &b, 1, 512, 0x1111_1111);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&sim.ep(b.ep).poll_cq(b.recv_cq, 10)), [(1, WcStatus::LocLenErr)]);
}

#[test]
fn srq_feeds_two_qps_and_raises_its_limit_event() {
    let mut sim = Sim::new(5, LinkConfig::default());
    let cfg = PairConfig::default();
    let addrs: [IpAddr; 2] = [[127, 0, 0, 1].into(), [127, 0, 0, 2].into()];
    let mut eps = [Endpoint::new(addrs[0]), Endpoint::new(addrs[1])];
    let pds = [eps[0].alloc_pd(), eps[1].alloc_pd()];
    let cqs = [eps[0].create_cq(64), eps[1].create_cq(64)];
    let mems = [RegionMemory::zeroed(65536), RegionMemory::zeroed(65536)];
    // The SRQ and its buffers live in a PD of their own: receives from an
    // SRQ are checked against the SRQ's PD, not the receiving QP's.
    let srq_pd = eps[1].alloc_pd();
    let keys = [
        eps[0].reg_mr(pds[0], 0x10000, mems[0].clone(), Access::ALL).0,
        eps[1].reg_mr(srq_pd, 0x10000, mems[1].clone(), Access::ALL).0,
    ];
    let srq = eps[1].create_srq(srq_pd, 16, 0);
    let mut qps = [[0u32; 2]; 2];
    for (i, side) in qps.iter_mut().enumerate() {
        for qpn in side.iter_mut() {
            let srq = (i == 1).then_some(srq);
            let init = QpInitAttr {
                qp_type: QpType::Rc,
                pd: pds[i],
                send_cq: cqs[i],
                recv_cq: cqs[i],
                srq,
                cap: QpCap::default(),
                sq_sig_all: true,
            };
            *qpn = eps[i].create_qp(init).unwrap();
        }
    }
    for (&qa, &qb) in qps[0].iter().zip(&qps[1]) {
        bring_up(&mut eps[0], qa, addrs[1], qb, 100, 200, &cfg);
        bring_up(&mut eps[1], qb, addrs[0], qa, 200, 100, &cfg);
    }
    for i in 0..4u64 {
        let sg = vec![Sge { addr: 0x10000 + i * 1024, length: 1024, lkey: keys[1] }];
        eps[1].post_srq_recv(srq, RecvWr { wr_id: 100 + i, sg_list: sg }).unwrap();
    }
    assert!(matches!(eps[1].post_recv(qps[1][0], RecvWr { wr_id: 0, sg_list: vec![] }), Err(VerbsError::QpHasSrq(_))));
    eps[1].arm_srq(srq, 2).unwrap();
    let [ep0, ep1] = eps;
    let (e0, e1) = (sim.add_endpoint(ep0), sim.add_endpoint(ep1));
    mems[0].write(0, b"hello from QP zero, and one");
    for (n, q) in [0usize, 1, 0].into_iter().enumerate() {
        let sg = vec![Sge { addr: 0x10000, length: 27, lkey: keys[0] }];
        sim.ep(e0).post_send(qps[0][q], SendWr::new(n as u64, SendOp::Send, sg)).unwrap();
    }
    sim.run_idle(LIMIT);
    let got = sim.ep(e1).poll_cq(cqs[1], 10);
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
    assert_eq!(&mems[1].to_vec()[..27], b"hello from QP zero, and one");
    assert_eq!(got.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [100, 101, 102], "taken from the SRQ in order");
    assert_eq!(got.iter().filter(|w| w.qp_num == qps[1][1]).count(), 1, "by both QPs");
    assert_eq!(sim.ep(e1).poll_event(), Some(AsyncEvent::SrqLimitReached(srq)), "fewer than 2 left");
    assert_eq!(sim.ep(e1).poll_event(), None, "the event fires once");
}

#[test]
fn qp_state_machine_follows_ibv_modify_qp() {
    let mut ep = Endpoint::new(IpAddr::from([127, 0, 0, 1]));
    let pd = ep.alloc_pd();
    let cq = ep.create_cq(16);
    let init = QpInitAttr::new(QpType::Rc, pd, cq);
    let qpn = ep.create_qp(init).unwrap();
    let to = |s| QpAttr { qp_state: Some(s), ..QpAttr::default() };
    assert!(matches!(
        ep.modify_qp(qpn, &to(QpState::Rts)),
        Err(VerbsError::InvalidTransition { from: QpState::Reset, to: QpState::Rts, .. })
    ));
    assert!(matches!(
        ep.modify_qp(qpn, &to(QpState::Init)),
        Err(VerbsError::MissingAttribute { attr: "pkey_index", .. })
    ));
    let mut a = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(2),
        qp_access_flags: Some(Access::ALL),
        ..QpAttr::default()
    };
    assert!(
        matches!(ep.modify_qp(qpn, &a), Err(VerbsError::InvalidAttribute { value: 1, .. })),
        "port 2 does not exist"
    );
    a.port_num = Some(1);
    ep.modify_qp(qpn, &a).unwrap();
    let rtr = QpAttr { qp_state: Some(QpState::Rtr), path_mtu: Some(Mtu::Mtu1024), ..QpAttr::default() };
    assert!(matches!(ep.modify_qp(qpn, &rtr), Err(VerbsError::MissingAttribute { attr: "av", .. })));
    assert_eq!(ep.query_qp(qpn).unwrap().0, QpState::Init, "a refused modify changes nothing");
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(Mtu::Mtu1024),
        av: Some(AddressVector::new(IpAddr::from([127, 0, 0, 2]))),
        dest_qp_num: Some(0x1000000),
        rq_psn: Some(0),
        max_dest_rd_atomic: Some(1),
        min_rnr_timer: Some(12),
        ..QpAttr::default()
    };
    assert!(matches!(ep.modify_qp(qpn, &rtr), Err(VerbsError::InvalidAttribute { attr: "dest_qp_num", .. })));
    ep.modify_qp(qpn, &QpAttr { dest_qp_num: Some(0x12), ..rtr }).unwrap();
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        timeout: Some(14),
        retry_cnt: Some(8),
        rnr_retry: Some(7),
        max_rd_atomic: Some(1),
        ..QpAttr::default()
    };
    assert!(matches!(ep.modify_qp(qpn, &rts), Err(VerbsError::InvalidAttribute { attr: "retry_cnt", value: 8, .. })));
    // Posting a send before RTS is an error, not a silent drop.
    assert!(matches!(
        ep.post_send(qpn, SendWr::new(1, SendOp::Send, vec![])),
        Err(VerbsError::WrongState { state: QpState::Rtr, .. })
    ));
    ep.modify_qp(qpn, &QpAttr { retry_cnt: Some(7), ..rts }).unwrap();
    ep.modify_qp(qpn, &to(QpState::Sqd)).unwrap();
    ep.modify_qp(qpn, &to(QpState::Rts)).unwrap();
    // ERR flushes what is posted, and what is posted afterwards.
    ep.post_send(qpn, SendWr::new(1, SendOp::Send, vec![])).unwrap();
    ep.post_recv(qpn, RecvWr { wr_id: 2, sg_list: vec![] }).unwrap();
    ep.modify_qp(qpn, &to(QpState::Err)).unwrap();
    ep.post_send(qpn, SendWr::new(3, SendOp::Send, vec![])).unwrap();
    assert_eq!(
        statuses(&ep.poll_cq(cq, 10)),
        [(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr), (3, WcStatus::WrFlushErr)]
    );
    ep.modify_qp(qpn, &to(QpState::Reset)).unwrap();
    assert!(matches!(ep.modify_qp(0x999, &to(QpState::Init)), Err(VerbsError::NoSuchQp(0x999))));
}

fn rc_pair(seed: u64, link: LinkConfig, cfg: PairConfig) -> (Sim, Side, Side) {
    let mut sim = Sim::new(seed, link);
    let (a, b) = connect(&mut sim, cfg);
    (sim, a, b)
}

#[test]
fn psn_wraps_through_zero() {
    let cfg = PairConfig { a_psn: 0xff_fffd, mtu: Mtu::Mtu256, ..PairConfig::default() };
    let (mut sim, a, b) = rc_pair(6, LinkConfig::default(), cfg);
    let data = fill(&a, 0, 2048, 5);
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 1, sg_list: sge(&b, 0, 4096) }).unwrap();
    sim.ep(a.ep).post_send(a.qpn, SendWr::new(1, SendOp::Send, sge(&a, 0, 2048))).unwrap();
    sim.ep(a.ep)
        .post_send(a.qpn, SendWr::new(2, SendOp::RdmaRead { remote_addr: b.va, rkey: b.rkey }, sge(&a, 8192, 1024)))
        .unwrap();
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    sim.set_filter(move |src, p| {
        if src == 0 {
            log.borrow_mut().push(RoceV2Packet::new_checked(p).unwrap().transport().bth().psn().value());
        }
        Verdict::Deliver
    });
    sim.run_idle(LIMIT);
    // 8 SEND packets from 0xfffffd, then the READ at 5.
    assert_eq!(*seen.borrow(), [0xff_fffd, 0xff_fffe, 0xff_ffff, 0, 1, 2, 3, 4, 5]);
    assert_eq!(read(&b, 0, 2048), data);
    assert_eq!(read(&a, 8192, 1024), data[..1024]);
    assert_eq!(statuses(&sim.ep(a.ep).poll_cq(a.send_cq, 10)), [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(sim.ep(a.ep).stats().retransmits, 0);
}

#[test]
fn ghost_acks_are_ignored() {
    let (mut sim, a, b) = rc_pair(7, LinkConfig::default(), PairConfig::default());
    // An ACK from B for a PSN A never sent, built by hand.
    let mut ghost = rdma_wire::TransportRepr::new(rdma_wire::BthRepr::new(
        Opcode::RC_ACKNOWLEDGE,
        a.qpn,
        rdma_wire::Psn::new(0x5000),
    ));
    ghost.aeth = Some(rdma_wire::AethRepr { syndrome: rdma_wire::Syndrome::ACK_UNLIMITED, msn: 9 });
    let framer = rdma_transport::framing::Framer::roce_v2(IpAddr::from([127, 0, 0, 2]));
    let mut buf = vec![0u8; 128];
    let n = framer
        .frame(&mut buf, &AddressVector::new(IpAddr::from([127, 0, 0, 1])), 0xc000, &ghost, 0, |_| Ok::<(), ()>(()))
        .unwrap();
    fill(&a, 0, 64, 1);
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 1, sg_list: sge(&b, 0, 64) }).unwrap();
    sim.ep(a.ep).post_send(a.qpn, SendWr::new(1, SendOp::Send, sge(&a, 0, 64))).unwrap();
    let now = sim.now;
    sim.ep(a.ep).handle_packet(now, &buf[..n]);
    assert_eq!(sim.ep(a.ep).stats().drops_for(Drop::GhostResponse), 1);
    assert!(sim.ep(a.ep).poll_cq(a.send_cq, 10).is_empty(), "a ghost completes nothing");
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&sim.ep(a.ep).poll_cq(a.send_cq, 10)), [(1, WcStatus::Success)]);
}

#[test]
fn duplicated_reordered_and_corrupted_packets_are_survived() {
    for (name, link) in [
        ("duplicate", LinkConfig { duplicate: 0.5, ..LinkConfig::default() }),
        ("reorder", LinkConfig { reorder: 0.3, ..LinkConfig::default() }),
        ("corrupt", LinkConfig { corrupt: 0.2, ..LinkConfig::default() }),
    ] {
        let (mut sim, a, b) = rc_pair(8, link, PairConfig::default());
        let data = fill(&a, 0, 20_000, 6);
        sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 1, sg_list: sge(&b, 0, 20_000) }).unwrap();
        sim.ep(a.ep).post_send(a.qpn, SendWr::new(1, SendOp::Send, sge(&a, 0, 20_000))).unwrap();
        sim.ep(a.ep)
            .post_send(
                a.qpn,
                SendWr::new(2, SendOp::FetchAdd { remote_addr: b.va + 65536, rkey: b.rkey, add: 5 }, sge(&a, 32768, 8)),
            )
            .unwrap();
        sim.run_idle(LIMIT);
        assert_eq!(read(&b, 0, 20_000), data, "{name}");
        assert_eq!(
            statuses(&sim.ep(a.ep).poll_cq(a.send_cq, 10)),
            [(1, WcStatus::Success), (2, WcStatus::Success)],
            "{name}"
        );
        assert_eq!(statuses(&sim.ep(b.ep).poll_cq(b.recv_cq, 10)), [(1, WcStatus::Success)], "{name}: one receive");
        assert_eq!(read(&b, 65536, 8), 5u64.to_ne_bytes(), "{name}: the atomic ran once");
        let (sa, sb) = (sim.ep(a.ep).stats(), sim.ep(b.ep).stats());
        match name {
            "duplicate" => assert!(sb.duplicates > 0 && sim.stats.duplicated > 0, "{sb:?}"),
            "reorder" => assert!(sb.naks_sent > 0 && sim.stats.reordered > 0, "{sb:?}"),
            _ => assert!(
                sa.drops_for(Drop::IcrcMismatch)
                    + sb.drops_for(Drop::IcrcMismatch)
                    + sb.drops_for(Drop::Malformed)
                    + sa.drops_for(Drop::Malformed)
                    > 0
            ),
        }
    }
}

#[test]
fn bad_local_key_completes_with_a_local_protection_error() {
    let (mut sim, a, b) = rc_pair(9, LinkConfig::default(), PairConfig::default());
    let bad = vec![Sge { addr: a.va, length: 8, lkey: a.lkey ^ 0x100 }];
    sim.ep(a.ep).post_send(a.qpn, SendWr::new(1, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, bad)).unwrap();
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&sim.ep(a.ep).poll_cq(a.send_cq, 10)), [(1, WcStatus::LocProtErr)]);
    assert_eq!(sim.stats.sent, 0, "nothing went on the wire");
}

#[test]
fn receive_buffer_too_small_is_a_length_error_on_both_sides() {
    let (mut sim, a, b) = rc_pair(10, LinkConfig::default(), PairConfig::default());
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 1, sg_list: sge(&b, 0, 100) }).unwrap();
    sim.ep(a.ep).post_send(a.qpn, SendWr::new(1, SendOp::Send, sge(&a, 0, 200))).unwrap();
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&sim.ep(b.ep).poll_cq(b.recv_cq, 10)), [(1, WcStatus::LocLenErr)]);
    assert_eq!(statuses(&sim.ep(a.ep).poll_cq(a.send_cq, 10)), [(1, WcStatus::RemInvReqErr)]);
}

#[test]
fn a_qp_moved_to_reset_leaves_no_completions_in_its_cqs() {
    let mut sim = Sim::new(41, LinkConfig::default());
    let (_a, b) = connect(&mut sim, PairConfig::default());
    for i in 0..3 {
        sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 10 + i, sg_list: sge(&b, 0, 64) }).unwrap();
    }
    // b errs: its three receives are flushed into its receive CQ; one is polled.
    sim.ep(b.ep).modify_qp(b.qpn, &QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() }).unwrap();
    assert_eq!(statuses(&sim.ep(b.ep).poll_cq(b.recv_cq, 1)), [(10, WcStatus::WrFlushErr)]);
    // Reset takes the other two away (as mlx5 cleans the CQ): the QP's next
    // life does not meet completions of requests it no longer has.
    sim.ep(b.ep).modify_qp(b.qpn, &QpAttr { qp_state: Some(QpState::Reset), ..QpAttr::default() }).unwrap();
    assert_eq!(statuses(&sim.ep(b.ep).poll_cq(b.recv_cq, 10)), []);
}
