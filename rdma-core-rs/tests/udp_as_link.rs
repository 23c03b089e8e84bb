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
fn what_the_udp_link_cannot_do_is_refused() {
    let (a_ip, _) = addresses();
    let shared = DeviceConfig { udp_as_link: true, shared: true, ..DeviceConfig::default() };
    let e = Device::with_config("bad", a_ip, shared).unwrap_err().to_string();
    assert!(e.contains("shared port"), "{e}");
    // IP multicast needs the backend's group sockets: an error, not silence.
    let (ctx_side, _) =
        Side::new("mc", a_ip, QpType::Ud, DeviceConfig { udp_as_link: true, ..DeviceConfig::default() }, None);
    let mgid = Gid::from_ip("ff0e::ffff:e000:0101".parse().unwrap());
    let e = ctx_side.qp.attach_mcast(mgid, 0).unwrap_err();
    assert!(e.to_string().contains("multicast"), "{e}");
}
