//! The UDP backend as a `rdma_link::Link` (`DeviceConfig::udp_as_link`):
//! driven by the frame driver like every other link, one packet a call,
//! with the link wrappers for faults and capture. Its packets must be the
//! same RoCE v2 packets as the batched backend's: every test talks to a
//! device on the batched backend.

mod common;
use common::*;
use rdma_core_rs::*;
use rdma_wire::RoceV2Packet;
use std::time::Duration;

/// One side on the link path (configured by `cfg`), one batched, connected.
fn mixed_pair(cfg: DeviceConfig) -> (Side, Side) {
    let (a_ip, b_ip) = addresses();
    let (a, _) = Side::new(&format!("rxe-{a_ip}"), a_ip, QpType::Rc, DeviceConfig { udp_as_link: true, ..cfg }, None);
    let batched = DeviceConfig { progress: Progress::Thread, ..DeviceConfig::default() };
    let (b, _) = Side::new(&format!("rxe-{b_ip}"), b_ip, QpType::Rc, batched, None);
    a.qp.connect(0x100, &b.info(0x200), &ConnectOptions::default()).unwrap();
    b.qp.connect(0x200, &a.info(0x100), &ConnectOptions::default()).unwrap();
    (a, b)
}

/// A WRITE and a READ of several packets each way, a SEND with immediate
/// and a fetch-add, from `a` to `b`, every byte checked.
fn exercise(a: &Side, b: &Side) {
    let data = pattern(200_003, 3);
    a.mr.write(0, &data).unwrap();
    a.qp.post_send(&[write_wr(1, a, 0, data.len() as u32, b, 1000)]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let mut got = vec![0u8; data.len()];
    b.mr.read(1000, &mut got).unwrap();
    assert!(got == data, "the WRITE's bytes arrived");
    let remote = pattern(90_001, 8);
    b.mr.write(300_000, &remote).unwrap();
    let read = SendWr::new(
        2,
        SendOp::RdmaRead { remote_addr: b.mr.addr() + 300_000, rkey: b.mr.rkey() },
        vec![a.mr.sge(400_000, remote.len() as u32).unwrap()],
    );
    a.qp.post_send(&[read]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let mut got = vec![0u8; remote.len()];
    a.mr.read(400_000, &mut got).unwrap();
    assert!(got == remote, "the READ's bytes came back");
    b.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: vec![b.mr.sge(500_000, 4096).unwrap()] }]).unwrap();
    a.qp.post_send(&[SendWr::new(3, SendOp::SendWithImm { imm: 0x1234_5678 }, vec![a.mr.sge(0, 3000).unwrap()])])
        .unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let wc = b.wait_one();
    assert_eq!((wc.wr_id, wc.status, wc.byte_len, wc.imm_data), (7, WcStatus::Success, 3000, Some(0x1234_5678)));
    b.mr.write(600_000, &5u64.to_ne_bytes()).unwrap();
    let fa = SendWr::new(
        4,
        SendOp::FetchAdd { remote_addr: b.mr.addr() + 600_000, rkey: b.mr.rkey(), add: 10 },
        vec![a.mr.sge(700_000, 8).unwrap()],
    );
    a.qp.post_send(&[fa]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let mut v = [0u8; 8];
    a.mr.read(700_000, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 5, "fetch-add returns the old value");
}

/// Until the device's link is quiet (the last ACKs may still be on their way).
fn settle(ctx: &Context) -> IoStats {
    let mut io = ctx.io_stats();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = ctx.io_stats();
        if now == io {
            return io;
        }
        io = now;
    }
}

#[test]
fn the_udp_backend_as_a_link_talks_to_the_batched_backend_both_ways() {
    let (a, b) = mixed_pair(DeviceConfig { progress: Progress::Thread, ..DeviceConfig::default() });
    exercise(&a, &b);
    exercise(&b, &a);
    let io = settle(&a.ctx);
    // One packet a call: every packet one system call each way, nothing
    // offloaded, nothing by reference.
    assert_eq!(io.gso_sends + io.gro_receives + io.payloads_by_reference, 0, "{io:?}");
    assert_eq!(io.send_syscalls, io.datagrams_sent, "{io:?}");
    assert!(io.datagrams_sent > 100 && io.datagrams_received > 100, "{io:?}");
    assert_eq!(a.ctx.offloads(), Offloads { gso: false, gro: false });
    for s in [a.ctx.stats(), b.ctx.stats()] {
        assert!(s.drops.is_empty(), "no packet dropped on either side: {s:?}");
    }
}

#[test]
fn faults_and_capture_are_the_link_wrappers_on_the_udp_link() {
    let dir = std::env::temp_dir().join(format!("udp-as-link-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("a.pcap");
    let faults = FaultConfig { loss: 0.03, corrupt: 0.02, reorder: 0.03, duplicate: 0.02, seed: 11 };
    let cfg = DeviceConfig { progress: Progress::Thread, faults, pcap: Some(path.clone()), ..DeviceConfig::default() };
    let (a, b) = mixed_pair(cfg);
    exercise(&a, &b);
    let s = a.ctx.stats();
    assert!(s.retransmits > 0, "losses made the requester retransmit: {s:?}");
    let icrc = b.ctx.stats().drops.get(&DropReason::IcrcMismatch).copied().unwrap_or(0);
    let io = settle(&a.ctx);
    assert!(
        io.injected_losses > 0 && io.injected_corruptions > 0 && io.injected_duplicates > 0 && io.injected_reorders > 0,
        "{io:?}"
    );
    // A corruption flips a bit after the UDP header: the peer's ICRC check
    // catches it (never a packet sent elsewhere).
    assert!(icrc > 0 && icrc <= io.injected_corruptions + io.injected_duplicates, "{icrc} ICRC drops, {io:?}");
    // The capture (outside the injector) holds every packet handed to the
    // link and every packet received, IPv4 with good ICRCs.
    drop((a, b));
    let bytes = std::fs::read(&path).unwrap();
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!((word(0), word(20)), (0xa1b2_c3d4, 1), "classic pcap of Ethernet frames");
    let (mut at, mut records) = (24, 0u64);
    while at < bytes.len() {
        let len = word(at + 8) as usize;
        let frame = &bytes[at + 16..at + 16 + len];
        assert_eq!(frame[12..14], [0x08, 0x00], "IPv4");
        let p = RoceV2Packet::new_checked(&frame[14..]).expect("a RoCE v2 packet");
        assert!(p.icrc_ok(), "record {records}: the ICRC checks");
        records += 1;
        at += 16 + len;
    }
    assert_eq!(records, io.datagrams_sent + io.datagrams_received, "{io:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_shared_port_is_refused_on_the_udp_link() {
    let (a_ip, _) = addresses();
    let shared = DeviceConfig { udp_as_link: true, shared: true, ..DeviceConfig::default() };
    let e = Device::with_config("bad", a_ip, shared).unwrap_err().to_string();
    assert!(e.contains("shared port"), "{e}");
}

/// A UD QP at RTS with Q_Key `QKEY`, its CQ and a buffer.
struct Ud {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

const QKEY: u32 = 0x1111_2222;

fn ud(addr: std::net::IpAddr, udp_as_link: bool) -> Ud {
    let cfg = DeviceConfig { progress: Progress::Thread, udp_as_link, ..DeviceConfig::default() };
    let ctx = Device::with_config(&format!("mc-{addr}"), addr, cfg).unwrap().open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq)).unwrap();
    let mr = pd.reg_mr(16384, Access::ALL).unwrap();
    let me = PeerInfo { qpn: qp.qp_num(), psn: 0, gid: ctx.query_gid(0).unwrap() };
    qp.connect(0, &me, &ConnectOptions { qkey: QKEY, ..ConnectOptions::default() }).unwrap();
    Ud { ctx, pd, cq, qp, mr }
}

impl Ud {
    fn wait(&self) -> WorkCompletion {
        let mut out = Vec::new();
        assert_eq!(self.cq.wait(&mut out, 1, WAIT).unwrap(), 1, "nothing arrived: {:?}", self.ctx.stats());
        out[0]
    }

    /// Sends `data` to the group `g` (QPN 0xFFFFFF) and waits for the send.
    fn send_to(&self, g: Gid, data: &[u8]) {
        self.mr.write(8192, data).unwrap();
        let ah = self.pd.create_ah(&AhAttr::new(g)).unwrap();
        let mut wr = SendWr::new(1, SendOp::Send, vec![self.mr.sge(8192, data.len() as u32).unwrap()]);
        wr.ud = Some(ah.ud_dest(MULTICAST_QPN, QKEY));
        self.qp.post_send(&[wr]).unwrap();
        assert_eq!(self.wait().status, WcStatus::Success);
    }
}

/// IP multicast through the link: the UDP link joins the group's IP
/// group, receives what a batched device sends to it, and what it sends
/// reaches a batched member, each with the GRH area a UD receive shows
/// (sender, group).
#[test]
fn multicast_works_through_the_udp_link_both_ways() {
    let (l_ip, b_ip) = addresses();
    let (std::net::IpAddr::V4(l4), std::net::IpAddr::V4(b4)) = (l_ip, b_ip) else { unreachable!() };
    let group_ip = std::net::Ipv4Addr::new(239, 22, l4.octets()[1], l4.octets()[2]);
    let g = Gid::from_ip(group_ip.into());
    let (link, batched) = (ud(l_ip, true), ud(b_ip, false));
    for m in [&link, &batched] {
        m.qp.attach_mcast(g, 0).unwrap();
        m.qp.post_recv(&[RecvWr { wr_id: 5, sg_list: vec![m.mr.sge(0, 4096).unwrap()] }]).unwrap();
    }
    // Each sender's device is a member too: IP multicast loops back to it.
    let data = pattern(900, 5);
    batched.send_to(g, &data);
    for (m, from) in [(&link, b4), (&batched, b4)] {
        let wc = m.wait();
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 940));
        let got = m.mr.to_vec();
        assert_eq!(&got[40..940], &data[..]);
        assert_eq!(got[32..36], from.octets(), "GRH area: the sender");
        assert_eq!(got[36..40], group_ip.octets(), "GRH area: the group");
    }
    for m in [&link, &batched] {
        m.qp.post_recv(&[RecvWr { wr_id: 6, sg_list: vec![m.mr.sge(0, 4096).unwrap()] }]).unwrap();
    }
    let data = pattern(300, 9);
    link.send_to(g, &data);
    for m in [&link, &batched] {
        let wc = m.wait();
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 340));
        let got = m.mr.to_vec();
        assert_eq!(&got[40..340], &data[..]);
        assert_eq!(got[32..36], l4.octets(), "GRH area: the sender");
    }
    link.qp.detach_mcast(g, 0).unwrap();
    batched.qp.detach_mcast(g, 0).unwrap();
}

/// A simulated delay (`DeviceConfig::delay`) on one side: the UDP backend
/// runs as a link behind it, every request waits for it before its peer
/// sees it, and nothing is lost or reordered.
#[test]
fn a_simulated_delay_holds_every_packet_for_its_latency() {
    let latency = Duration::from_millis(3);
    let delay = rdma_core_rs::link::delay::DelayConfig { latency, ..Default::default() };
    let (a, b) = mixed_pair(DeviceConfig { progress: Progress::Thread, delay, ..DeviceConfig::default() });
    assert_eq!(a.ctx.offloads(), Offloads { gso: false, gro: false }, "the UDP backend runs as a link");
    let data = pattern(20_000, 4);
    a.mr.write(0, &data).unwrap();
    let start = std::time::Instant::now();
    for i in 0..5u64 {
        a.qp.post_send(&[write_wr(i, &a, 0, data.len() as u32, &b, 4096 * i)]).unwrap();
        assert_eq!(a.wait_one().status, WcStatus::Success);
    }
    // Each WRITE's packets wait 3 ms before they leave: five one after
    // another take at least 15 ms (a lower bound: the delay cannot be
    // skipped; how much longer is the machine's business).
    assert!(start.elapsed() >= latency * 5, "{:?}", start.elapsed());
    let mut got = vec![0u8; data.len()];
    b.mr.read(4096 * 4, &mut got).unwrap();
    assert!(got == data, "the last WRITE's bytes arrived");
    let s = a.ctx.stats();
    assert_eq!(s.retransmits, 0, "a delay below the ACK timeout costs no retransmission: {s:?}");
}
