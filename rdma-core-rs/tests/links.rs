//! The frame backends through the verbs API, on in-process fabrics (no
//! root): RoCE v1 and native IB devices connect and carry WRITE, READ,
//! SEND and atomics; UD over IB addresses by LID; captures hold every
//! frame, in a form whose CRCs check; faults injected over the link are
//! recovered from; and configurations that cannot work are refused with
//! what was wrong.

use rdma_core_rs::*;
use rdma_wire::{IbPacket, RoceV1Packet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

struct Side {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

/// A fresh fabric name and MAC prefix per call, so tests in parallel never meet.
fn fabric() -> (String, u8) {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (format!("links-test-{}-{n}", std::process::id()), n)
}

fn side(name: &str, fab: &str, mac: [u8; 6], cfg: DeviceConfig, qp_type: QpType) -> Side {
    let dev = Device::in_process(name, fab, mac, cfg).expect("device");
    let ctx = dev.open().expect("open");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4096, None).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(qp_type, &cq)).unwrap();
    let mr = pd.reg_mr(1 << 20, Access::ALL).unwrap();
    Side { ctx, pd, cq, qp, mr }
}

fn config(link: LinkKind, lid: u16) -> DeviceConfig {
    DeviceConfig { link, lid, progress: Progress::Thread, ..DeviceConfig::default() }
}

/// Two connected sides over `link`; `cfg_a` may add a capture or faults.
fn pair(link: LinkKind, qp_type: QpType, cfg_a: impl FnOnce(DeviceConfig) -> DeviceConfig) -> (Side, Side) {
    let (fab, n) = fabric();
    let a = side(&format!("{fab}-a"), &fab, [2, n, 0, 0, 0, 1], cfg_a(config(link, 1)), qp_type);
    let b = side(&format!("{fab}-b"), &fab, [2, n, 0, 0, 0, 2], config(link, 2), qp_type);
    for (me, peer, psn, peer_psn) in [(&a, &b, 0x100, 0x200), (&b, &a, 0x200, 0x100)] {
        let info = PeerInfo { qpn: peer.qp.qp_num(), psn: peer_psn, gid: peer.ctx.query_gid(0).unwrap() };
        let opts = ConnectOptions { dlid: peer.ctx.lid(), ..ConnectOptions::default() };
        me.qp.connect(psn, &info, &opts).unwrap();
    }
    (a, b)
}

fn wait_one(s: &Side) -> WorkCompletion {
    let mut out = Vec::new();
    assert_eq!(s.cq.wait(&mut out, 1, WAIT).unwrap(), 1, "no completion; stats {:?}", s.ctx.stats());
    out[0]
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// WRITE, READ, SEND and both atomics between `a` and `b`, checked.
fn exercise(a: &Side, b: &Side) {
    let data = pattern(200_000, 3);
    a.mr.write(0, &data).unwrap();
    let w = SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: b.mr.addr() + 1000, rkey: b.mr.rkey() },
        vec![a.mr.sge(0, 200_000).unwrap()],
    );
    a.qp.post_send(&[w]).unwrap();
    assert_eq!(wait_one(a).status, WcStatus::Success);
    let mut got = vec![0u8; 200_000];
    b.mr.read(1000, &mut got).unwrap();
    assert!(got == data, "the WRITE's bytes arrived");
    let remote = pattern(9000, 8);
    b.mr.write(300_000, &remote).unwrap();
    let r = SendWr::new(
        2,
        SendOp::RdmaRead { remote_addr: b.mr.addr() + 300_000, rkey: b.mr.rkey() },
        vec![a.mr.sge(400_000, 9000).unwrap()],
    );
    a.qp.post_send(&[r]).unwrap();
    assert_eq!(wait_one(a).status, WcStatus::Success);
    let mut got = vec![0u8; 9000];
    a.mr.read(400_000, &mut got).unwrap();
    assert_eq!(got, remote, "the READ's bytes came back");
    b.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: vec![b.mr.sge(500_000, 4096).unwrap()] }]).unwrap();
    a.qp.post_send(&[SendWr::new(3, SendOp::Send, vec![a.mr.sge(0, 3000).unwrap()])]).unwrap();
    assert_eq!(wait_one(a).status, WcStatus::Success);
    let wc = wait_one(b);
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (7, WcStatus::Success, 3000));
    b.mr.write(600_000, &5u64.to_ne_bytes()).unwrap();
    let fa = SendWr::new(
        4,
        SendOp::FetchAdd { remote_addr: b.mr.addr() + 600_000, rkey: b.mr.rkey(), add: 10 },
        vec![a.mr.sge(700_000, 8).unwrap()],
    );
    a.qp.post_send(&[fa]).unwrap();
    assert_eq!(wait_one(a).status, WcStatus::Success);
    let mut v = [0u8; 8];
    a.mr.read(700_000, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 5, "fetch-add returns the old value");
    b.mr.read(600_000, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 15);
}

#[test]
fn roce_v1_and_native_ib_devices_carry_every_operation_in_process() {
    for link in [LinkKind::RoceV1, LinkKind::Ib] {
        let (a, b) = pair(link, QpType::Rc, |c| c);
        assert_eq!((a.ctx.link_kind(), b.ctx.link_kind()), (link, link));
        exercise(&a, &b);
        let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
        assert_eq!(sa.drops.values().sum::<u64>() + sb.drops.values().sum::<u64>(), 0, "{}: no drops", link.name());
        assert!(a.ctx.io_stats().datagrams_sent > 50, "{}: frames went through the link", link.name());
        if link == LinkKind::Ib {
            assert_eq!((a.ctx.lid(), b.ctx.lid()), (1, 2));
            // Each side learned its peer's MAC once; the CRCs of the other
            // frames were checked by the engine only, not twice.
            for s in [&a, &b] {
                let io = s.ctx.io_stats();
                assert!(io.datagrams_received > 10, "frames came: {io:?}");
                assert_eq!(io.lids_learned, 1, "the peer's LID learned once: {io:?}");
            }
        } else {
            assert_eq!(a.ctx.lid(), 0, "RoCE has no LIDs");
            let gid = a.ctx.query_gid(0).unwrap().to_string();
            assert!(gid.starts_with("fe80::") && gid.contains("ff:fe"), "an EUI-64 GID: {gid}");
        }
    }
}

#[test]
fn ud_over_native_ib_addresses_by_lid() {
    let (a, b) = pair(LinkKind::Ib, QpType::Ud, |c| c);
    let ah = a.pd.create_ah_av(AddressVector::lid(2, 0)).unwrap();
    assert!(a.pd.create_ah_av(AddressVector::lid(0, 0)).is_err(), "LID 0 is refused");
    let data = pattern(1500, 1);
    a.mr.write(0, &data).unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 5, sg_list: vec![b.mr.sge(0, 4096).unwrap()] }]).unwrap();
    let mut w = SendWr::new(1, SendOp::Send, vec![a.mr.sge(0, 1500).unwrap()]);
    w.ud = Some(ah.ud_dest(b.qp.qp_num(), 0x1111_1111));
    a.qp.post_send(&[w]).unwrap();
    assert_eq!(wait_one(&a).status, WcStatus::Success);
    let wc = wait_one(&b);
    assert_eq!((wc.status, wc.byte_len, wc.src_qp), (WcStatus::Success, 1540, a.qp.qp_num()));
    let mut got = vec![0u8; 1500];
    b.mr.read(40, &mut got).unwrap();
    assert_eq!(got, data);
}

/// Two ends that only post (no polls, no progress thread) while sending
/// to each other at once: each post must also take in what its peer sent,
/// or the peer's frames pile up unread until the link drops them (the
/// in-process queue holds 8192 frames; a packet socket, its buffer). On
/// native IB between namespaces, qperf's `uc_bi_bw` lost nearly every
/// message that way. 300 UC SENDs of 64 KiB (32 packets each) each way:
/// every one must arrive.
#[test]
fn posting_ends_keep_receiving_what_their_peer_sends() {
    const MSGS: usize = 300;
    const LEN: u32 = 64 << 10;
    let (fab, n) = fabric();
    // Manual progress and no ACK delay: nothing but the posts moves frames.
    let cfg = |lid| DeviceConfig {
        link: LinkKind::Ib,
        lid,
        progress: Progress::Manual,
        ack_delay: Duration::ZERO,
        ..DeviceConfig::default()
    };
    let make = |name: &str, mac: [u8; 6], lid: u16| {
        let dev = Device::in_process(name, &fab, mac, cfg(lid)).expect("device");
        let ctx = dev.open().expect("open");
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4096, None).unwrap();
        let cap = QpCap { max_send_wr: 1024, max_recv_wr: 1024, ..QpCap::default() };
        let qp = pd.create_qp(&QpInitAttr { cap, ..QpInitAttr::new(QpType::Uc, &cq) }).unwrap();
        let mr = pd.reg_mr(1 << 20, Access::ALL).unwrap();
        Side { ctx, pd, cq, qp, mr }
    };
    let a = make(&format!("{fab}-a"), [2, n, 0, 0, 0, 1], 1);
    let b = make(&format!("{fab}-b"), [2, n, 0, 0, 0, 2], 2);
    for (me, peer) in [(&a, &b), (&b, &a)] {
        let info = PeerInfo { qpn: peer.qp.qp_num(), psn: 0x100, gid: peer.ctx.query_gid(0).unwrap() };
        let opts = ConnectOptions { dlid: peer.ctx.lid(), mtu: Mtu::Mtu2048, ..ConnectOptions::default() };
        me.qp.connect(0x100, &info, &opts).unwrap();
        let recvs: Vec<RecvWr> =
            (0..MSGS).map(|i| RecvWr { wr_id: i as u64, sg_list: vec![me.mr.sge(0, LEN).unwrap()] }).collect();
        me.qp.post_recv(&recvs).unwrap();
    }
    for i in 0..MSGS {
        for s in [&a, &b] {
            s.qp.post_send(&[SendWr::new(i as u64, SendOp::Send, vec![s.mr.sge(LEN as usize, LEN).unwrap()])]).unwrap();
        }
    }
    // Now let both take in whatever is left, and count the receives.
    let mut got = [0usize; 2];
    let start = std::time::Instant::now();
    while got.iter().any(|&g| g < MSGS) && start.elapsed() < Duration::from_secs(10) {
        for (k, s) in [&a, &b].into_iter().enumerate() {
            let mut out = Vec::new();
            s.cq.poll(&mut out, 4096).unwrap();
            for wc in out.iter().filter(|wc| wc.opcode == WcOpcode::Recv) {
                assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, LEN), "a whole message");
                got[k] += 1;
            }
        }
    }
    assert_eq!(got, [MSGS; 2], "every message arrived both ways; stats a {:?}, b {:?}", a.ctx.stats(), b.ctx.stats());
}

/// The records of a classic pcap file: (link type, records).
fn read_pcap(path: &std::path::Path) -> (u32, Vec<Vec<u8>>) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(bytes[..4], 0xa1b2_c3d4u32.to_le_bytes(), "pcap magic");
    let linktype = u32::from_le_bytes(bytes[20..24].try_into().unwrap());
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(bytes[at + 16..at + 16 + len].to_vec());
        at += 16 + len;
    }
    assert_eq!(at, bytes.len(), "whole records");
    (linktype, out)
}

#[test]
fn captures_hold_every_frame_both_ways_with_good_crcs() {
    let dir = std::env::temp_dir().join(format!("links-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for link in [LinkKind::RoceV1, LinkKind::Ib] {
        let path = dir.join(format!("{}.pcap", link.name()));
        let p = path.clone();
        let (a, b) = pair(link, QpType::Rc, move |c| DeviceConfig { pcap: Some(p), ..c });
        exercise(&a, &b);
        // Until the link is quiet: the last ACKs may still be on their way.
        let mut io = a.ctx.io_stats();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = a.ctx.io_stats();
            if now == io {
                break;
            }
            io = now;
        }
        // Each burst is written out as it ends: the file is whole while
        // the device is still open.
        let (linktype, records) = read_pcap(&path);
        drop((a, b));
        assert_eq!(records.len() as u64, io.datagrams_sent + io.datagrams_received, "{}: every frame", link.name());
        let mut opcodes = std::collections::BTreeSet::new();
        for r in &records {
            if link == LinkKind::Ib {
                assert_eq!(linktype, 197, "ERF");
                assert_eq!((r[8], u16::from_be_bytes([r[10], r[11]]) as usize), (21, r.len()), "ERF type 21, rlen");
                assert_eq!(u16::from_be_bytes([r[14], r[15]]) as usize, r.len() - 16, "wlen");
                let p = IbPacket::new_checked(&r[16..]).expect("an IB packet");
                assert!(p.icrc_ok() && p.vcrc_ok(), "ICRC and VCRC");
                opcodes.insert(p.transport().bth().opcode());
            } else {
                assert_eq!(linktype, 1, "Ethernet");
                assert_eq!(r[12..14], [0x89, 0x15], "EtherType 0x8915");
                let p = RoceV1Packet::new_checked(&r[14..]).expect("a RoCE v1 packet");
                assert!(p.icrc_ok(), "ICRC");
                opcodes.insert(p.transport().bth().opcode());
            }
        }
        assert!(opcodes.len() >= 8, "{}: the capture shows the mix of operations: {opcodes:?}", link.name());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn faults_over_a_frame_link_are_recovered_from() {
    for link in [LinkKind::RoceV1, LinkKind::Ib] {
        let faults = FaultConfig { loss: 0.03, corrupt: 0.02, reorder: 0.03, duplicate: 0.02, seed: 9 };
        let (a, b) = pair(link, QpType::Rc, move |c| DeviceConfig { faults, ..c });
        exercise(&a, &b);
        let s = a.ctx.stats();
        assert!(s.retransmits > 0, "{}: losses made the requester retransmit: {s:?}", link.name());
        let crc_drops: u64 = [DropReason::IcrcMismatch, DropReason::VcrcMismatch, DropReason::Malformed]
            .iter()
            .map(|d| b.ctx.stats().drops.get(d).copied().unwrap_or(0))
            .sum();
        assert!(crc_drops > 0, "{}: corrupted frames were caught", link.name());
        // The injector's counts reach the device's I/O counters, as the UDP
        // backend's do; every frame dropped by a CRC was corrupted by it (or
        // is the duplicate of one: corruption comes first).
        let io = a.ctx.io_stats();
        assert!(
            io.injected_losses > 0
                && io.injected_corruptions > 0
                && io.injected_duplicates > 0
                && io.injected_reorders > 0,
            "{}: {io:?}",
            link.name()
        );
        assert!(
            crc_drops <= io.injected_corruptions + io.injected_duplicates,
            "{}: {io:?}, {crc_drops} CRC drops",
            link.name()
        );
    }
}

#[test]
fn configurations_that_cannot_work_are_refused() {
    let gid = rdma_core_rs::link::gid_of_mac([2, 0, 0, 0, 0, 9]);
    let err = |cfg: DeviceConfig, addr| Device::with_config("bad", addr, cfg).unwrap_err().to_string();
    let e = err(DeviceConfig { link: LinkKind::RoceV1, ..DeviceConfig::default() }, gid);
    assert!(e.contains("roce1 frames need a frame backend"), "{e}");
    let inproc = Backend::InProcess("x".into());
    let e = err(DeviceConfig { backend: inproc.clone(), link: LinkKind::Ib, lid: 0, ..DeviceConfig::default() }, gid);
    assert!(e.contains("LID 0 is not a unicast LID"), "{e}");
    let e = err(DeviceConfig { backend: inproc.clone(), ..DeviceConfig::default() }, gid);
    assert!(e.contains("RoCE v2 goes over the UDP backend"), "{e}");
    let e = err(
        DeviceConfig { backend: inproc, link: LinkKind::RoceV1, ..DeviceConfig::default() },
        "10.0.0.1".parse().unwrap(),
    );
    assert!(e.contains("not a link-local EUI-64 GID"), "{e}");
    let e = Device::on_netdev("bad", "no-such-netdev0", config(LinkKind::RoceV1, 0)).unwrap_err().to_string();
    assert!(e.contains("no network interface \"no-such-netdev0\""), "{e}");
}
