//! The engine over each link kind: RoCE v1 (GRH framing) and native IB
//! (LRH framing, LID addressing, VCRC) carry every operation with the
//! same completions and data as RoCE v2, the packets on the link are of
//! the kind asked for (checked by the wire crate's parsers, CRCs
//! included), a lossy link is recovered from, and damaged or misaddressed
//! packets are dropped with their reason.

mod common;

use common::*;
use core::time::Duration;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Side, Sim, Verdict};
use rdma_transport::*;
use rdma_wire::{IbPacket, Lnh, Opcode, RoceV1Packet};
use std::cell::RefCell;
use std::rc::Rc;

const LIMIT: Duration = Duration::from_secs(10);

/// Every packet the link carried, in order.
type Seen = Rc<RefCell<Vec<Vec<u8>>>>;

fn pair(link: LinkKind, faults: LinkConfig) -> (Sim, Side, Side, Seen) {
    let mut sim = Sim::new(7, faults);
    let (a, b) = connect(&mut sim, PairConfig { link, ..PairConfig::default() });
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    sim.set_filter(move |_, p| {
        s.borrow_mut().push(p.to_vec());
        Verdict::Deliver
    });
    (sim, a, b, seen)
}

/// The opcode of a packet of `link`, after checking that it parses as
/// that kind with good CRCs (and, on IB, that it is a local route
/// between LIDs 1 and 2).
fn check_packet(link: LinkKind, p: &[u8]) -> Opcode {
    match link {
        LinkKind::RoceV1 => {
            let q = RoceV1Packet::new_checked(p).expect("a RoCE v1 packet");
            assert!(q.icrc_ok(), "RoCE v1 ICRC");
            let g = q.grh();
            let ends = [g.src().segments()[7], g.dst().segments()[7]];
            assert!(ends == [1, 2] || ends == [2, 1], "GIDs fe80::1 and fe80::2, got {ends:?}");
            q.transport().bth().opcode()
        }
        LinkKind::Ib => {
            let q = IbPacket::new_checked(p).expect("a native IB packet");
            assert!(q.icrc_ok() && q.vcrc_ok(), "IB ICRC and VCRC");
            let l = q.lrh();
            assert_eq!(l.lnh(), Lnh::IbaLocal, "a LID-routed AV sends no GRH");
            assert!((l.slid(), l.dlid()) == (1, 2) || (l.slid(), l.dlid()) == (2, 1));
            assert_eq!(usize::from(l.pkt_len()) * 4 + 2, p.len(), "PktLen counts LRH through ICRC");
            q.transport().bth().opcode()
        }
        LinkKind::RoceV2 => opcode_of(p),
    }
}

fn every_operation(link: LinkKind, faults: LinkConfig) -> (Sim, Side, Side, Vec<Opcode>) {
    let (mut sim, a, b, seen) = pair(link, faults);
    // A SEND of several packets, a WRITE with immediate, a READ, two atomics.
    let data = fill(&a, 0, 5000, 3);
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 100, sg_list: sge(&b, 0, 8192) }).unwrap();
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 101, sg_list: sge(&b, 8192, 16) }).unwrap();
    let post = |sim: &mut Sim, id, op, off, len| sim.ep(a.ep).post_send(a.qpn, SendWr::new(id, op, sge(&a, off, len)));
    post(&mut sim, 1, SendOp::Send, 0, 5000).unwrap();
    post(&mut sim, 2, SendOp::RdmaWriteWithImm { remote_addr: b.va + 100_000, rkey: b.rkey, imm: 9 }, 0, 3000).unwrap();
    let remote = fill(&b, 200_000, 2500, 11);
    post(&mut sim, 3, SendOp::RdmaRead { remote_addr: b.va + 200_000, rkey: b.rkey }, 10_000, 2500).unwrap();
    b.mem.write(300_000, &40u64.to_ne_bytes());
    post(&mut sim, 4, SendOp::FetchAdd { remote_addr: b.va + 300_000, rkey: b.rkey, add: 2 }, 20_000, 8).unwrap();
    let cas = SendOp::CompareSwap { remote_addr: b.va + 300_000, rkey: b.rkey, compare: 42, swap: 7 };
    post(&mut sim, 5, cas, 20_008, 8).unwrap();
    assert!(sim.run_until(LIMIT, |s| s.ep(a.ep).cq_len(a.send_cq) == 5), "every request completes");
    let swc = sim.ep(a.ep).poll_cq(a.send_cq, 16);
    assert_eq!(
        swc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (1..=5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    let rwc = sim.ep(b.ep).poll_cq(b.recv_cq, 16);
    assert_eq!(rwc.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), [(100, 5000), (101, 3000)]);
    assert_eq!(rwc[1].imm_data, Some(9));
    assert_eq!(read(&b, 0, 5000), data);
    assert_eq!(read(&b, 100_000, 3000), data[..3000]);
    assert_eq!(read(&a, 10_000, 2500), remote);
    assert_eq!(read(&a, 20_000, 8), 40u64.to_ne_bytes());
    assert_eq!(read(&a, 20_008, 8), 42u64.to_ne_bytes());
    assert_eq!(read(&b, 300_000, 8), 7u64.to_ne_bytes());
    let ops = seen.borrow().iter().map(|p| check_packet(link, p)).collect();
    (sim, a, b, ops)
}

#[test]
fn roce_v1_and_native_ib_carry_every_operation() {
    for link in [LinkKind::RoceV1, LinkKind::Ib] {
        let (_, _, _, ops) = every_operation(link, LinkConfig::default());
        for op in [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_LAST,
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            Opcode::RC_RDMA_READ_REQUEST,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            Opcode::RC_FETCH_ADD,
            Opcode::RC_COMPARE_SWAP,
            Opcode::RC_ATOMIC_ACKNOWLEDGE,
            Opcode::RC_ACKNOWLEDGE,
        ] {
            assert!(ops.contains(&op), "{}: no {op:?} on the link", link.name());
        }
    }
}

#[test]
fn a_lossy_reordering_link_is_recovered_from_on_every_kind() {
    let faults = LinkConfig { loss: 0.05, reorder: 0.05, duplicate: 0.02, ..LinkConfig::default() };
    for link in [LinkKind::RoceV1, LinkKind::Ib] {
        let (sim, a, _, _) = every_operation(link, faults);
        assert!(sim.stats.lost > 0, "{}: the link lost packets", link.name());
        let _ = a;
    }
}

#[test]
fn corrupted_packets_are_dropped_by_their_crc() {
    for link in [LinkKind::RoceV1, LinkKind::Ib] {
        let faults = LinkConfig { corrupt: 0.05, ..LinkConfig::default() };
        let (mut sim, a, b) = {
            let mut sim = Sim::new(11, faults);
            let (a, b) = connect(&mut sim, PairConfig { link, ..PairConfig::default() });
            (sim, a, b)
        };
        let data = fill(&a, 0, 64 * 1024, 5);
        let w = SendWr::new(1, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, sge(&a, 0, 64 * 1024));
        sim.ep(a.ep).post_send(a.qpn, w).unwrap();
        assert!(sim.run_until(LIMIT, |s| s.ep(a.ep).cq_len(a.send_cq) == 1));
        assert_eq!(sim.ep(a.ep).poll_cq(a.send_cq, 1)[0].status, WcStatus::Success);
        assert_eq!(read(&b, 0, 64 * 1024), data, "{}: the data arrived whole", link.name());
        let drops = |sim: &mut Sim, i| sim.ep(i).stats().drops;
        let mut caught = 0;
        for i in [a.ep, b.ep] {
            let d = drops(&mut sim, i);
            caught +=
                d.get(&Drop::IcrcMismatch).copied().unwrap_or(0) + d.get(&Drop::VcrcMismatch).copied().unwrap_or(0);
            caught += d.get(&Drop::Malformed).copied().unwrap_or(0);
        }
        assert!(sim.stats.corrupted > 0 && caught > 0, "{}: corruption caught by a CRC", link.name());
        if link == LinkKind::Ib {
            let vcrc: u64 =
                [a.ep, b.ep].iter().map(|&i| drops(&mut sim, i).get(&Drop::VcrcMismatch).copied().unwrap_or(0)).sum();
            assert!(vcrc > 0, "IB: the VCRC catches link damage first");
        }
    }
}

/// A packet for another LID is dropped, a packet from a LID other than
/// the QP's peer too, each with its reason.
#[test]
fn ib_checks_the_dlid_and_the_slid() {
    let (mut sim, a, b, _) = pair(LinkKind::Ib, LinkConfig::default());
    let mut buf = vec![0u8; MAX_PACKET];
    let now = Instant::ZERO;
    let w = SendWr::new(1, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, sge(&a, 0, 64));
    sim.ep(a.ep).post_send(a.qpn, w).unwrap();
    let t = sim.ep(a.ep).poll_transmit(now, &mut buf).expect("the WRITE");
    let good = buf[..t.len].to_vec();
    // Re-address: DLID 3, then SLID 9 (the CRCs made right again).
    for (at, value, why) in [(2usize, 3u16, Drop::LidMismatch), (6, 9, Drop::AddressMismatch)] {
        let mut p = good.clone();
        p[at..at + 2].copy_from_slice(&value.to_be_bytes());
        let n = p.len();
        let icrc = rdma_wire::icrc::ib(&p[..n - 6]).unwrap();
        p[n - 6..n - 2].copy_from_slice(&icrc.to_le_bytes());
        let v = rdma_wire::vcrc::vcrc(&p[..n - 2]);
        p[n - 2..].copy_from_slice(&v.to_le_bytes());
        assert!(IbPacket::new_checked(&p[..]).unwrap().vcrc_ok());
        let before = sim.ep(b.ep).stats().drops.get(&why).copied().unwrap_or(0);
        sim.ep(b.ep).handle_packet(now, &p);
        assert_eq!(sim.ep(b.ep).stats().drops.get(&why).copied().unwrap_or(0), before + 1, "{why:?}");
    }
    sim.ep(b.ep).handle_packet(now, &good);
    assert_eq!(sim.ep(b.ep).stats().drops.values().sum::<u64>(), 2, "the original is accepted");
}

/// A RoCE v1 packet whose GRH names another GID is dropped with its reason.
#[test]
fn roce_v1_checks_the_destination_gid() {
    let (mut sim, a, b, _) = pair(LinkKind::RoceV1, LinkConfig::default());
    let mut buf = vec![0u8; MAX_PACKET];
    let w = SendWr::new(1, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, sge(&a, 0, 64));
    sim.ep(a.ep).post_send(a.qpn, w).unwrap();
    let t = sim.ep(a.ep).poll_transmit(Instant::ZERO, &mut buf).expect("the WRITE");
    let mut p = buf[..t.len].to_vec();
    p[39] = 9; // destination GID fe80::9
    let n = p.len();
    let icrc = rdma_wire::icrc::roce_v1(&p[..n - 4]).unwrap();
    p[n - 4..].copy_from_slice(&icrc.to_le_bytes());
    sim.ep(b.ep).handle_packet(Instant::ZERO, &p);
    assert_eq!(sim.ep(b.ep).stats().drops.get(&Drop::GidMismatch), Some(&1));
}

/// UD over native IB: the address handle carries the DLID; the receive
/// gets the payload after 40 bytes left for a GRH.
#[test]
fn ud_over_native_ib_and_roce_v1() {
    for link in [LinkKind::Ib, LinkKind::RoceV1] {
        let mut sim = Sim::new(3, LinkConfig::default());
        let (a, b) = connect(&mut sim, PairConfig { link, qp_type: QpType::Ud, ..PairConfig::default() });
        let data = fill(&a, 0, 700, 1);
        sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 9, sg_list: sge(&b, 0, 1024) }).unwrap();
        let mut ud = UdDest::new([0xfe80, 0, 0, 0, 0, 0, 0, 2].into(), b.qpn, 0x1111_1111);
        if link == LinkKind::Ib {
            ud = UdDest { dest: core::net::Ipv6Addr::UNSPECIFIED.into(), dlid: 2, sl: 5, ..ud };
        }
        let mut w = SendWr::new(1, SendOp::Send, sge(&a, 0, 700));
        w.ud = Some(ud);
        sim.ep(a.ep).post_send(a.qpn, w).unwrap();
        assert!(sim.run_until(LIMIT, |s| s.ep(b.ep).cq_len(b.recv_cq) == 1), "{}", link.name());
        let wc = sim.ep(b.ep).poll_cq(b.recv_cq, 1);
        assert_eq!((wc[0].status, wc[0].byte_len, wc[0].src_qp), (WcStatus::Success, 740, a.qpn));
        // `sl`: the LRH's on IB; on RoCE v1 the packet type (a GRH: 0).
        let sl = if link == LinkKind::Ib { 5 } else { roce_packet_type::ROCE_V1 };
        assert_eq!(wc[0].sl, sl, "{}", link.name());
        assert_eq!(read(&b, 40, 700), data);
        if link == LinkKind::RoceV1 {
            let grh = read(&b, 0, 40);
            assert_eq!(grh[0] >> 4, 6, "the GRH is in the first 40 bytes");
            assert_eq!(grh[8..24], [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], "source GID");
        }
    }
}
