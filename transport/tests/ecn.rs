//! ECN in the engine: data packets (requests, READ responses) leave
//! ECN-capable (ECT(0)) unless the device turns it off, ACKs keep the
//! traffic class as given, and received CE marks are counted per device
//! and per QP.

mod common;

use common::*;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Side, Sim};
use rdma_transport::*;
use rdma_wire::{Opcode, RoceV2Packet};

fn pair() -> (Sim, Side, Side) {
    let mut sim = Sim::new(3, LinkConfig::default());
    let (a, b) = connect(&mut sim, PairConfig::default());
    (sim, a, b)
}

/// Every packet `ep` has to send now, whole (IP header through ICRC).
fn drain(ep: &mut Endpoint, now: Instant) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; MAX_PACKET];
    let mut out = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut buf) {
        assert!(t.payload.is_none(), "by-reference payloads are off by default");
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// The IPv4 TOS byte (DSCP << 2 | ECN).
fn tos(p: &[u8]) -> u8 {
    p[1]
}

/// Rewrites the ECN bits of an IPv4 packet (the ICRC masks the TOS byte;
/// the header checksum is recomputed), as a congested switch marks CE.
fn mark(p: &mut [u8], ecn: u8) {
    p[1] = (p[1] & !3) | ecn;
    p[10..12].copy_from_slice(&[0, 0]);
    let sum = rdma_wire::ipv4::checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
}

fn write(a: &Side, b: &Side, wr_id: u64, len: u32) -> SendWr {
    SendWr::new(wr_id, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, sge(a, 0, len))
}

/// A WRITE of three packets and a READ: the requests and the READ
/// responses carry ECT(0), the ACKs TOS 0 (the QPs' traffic class is 0).
#[test]
fn data_packets_leave_ect0_and_acks_keep_the_traffic_class() {
    let (mut sim, a, b) = pair();
    let now = Instant::from_nanos(0);
    sim.ep(a.ep).post_send(a.qpn, write(&a, &b, 1, 3000)).unwrap();
    let read = SendWr::new(2, SendOp::RdmaRead { remote_addr: b.va, rkey: b.rkey }, sge(&a, 8192, 2048));
    sim.ep(a.ep).post_send(a.qpn, read).unwrap();
    let requests = drain(sim.ep(a.ep), now);
    assert_eq!(requests.len(), 4, "three WRITE packets and a READ request");
    for p in &requests {
        assert_eq!(tos(p), 0b10, "a request leaves ECT(0): {:?}", opcode_of(p));
        assert!(RoceV2Packet::new_checked(&p[..]).unwrap().icrc_ok());
    }
    for p in &requests {
        sim.ep(b.ep).handle_packet(now, p);
    }
    let answers = drain(sim.ep(b.ep), now);
    let (mut acks, mut responses) = (0, 0);
    for p in &answers {
        match opcode_of(p) {
            Opcode::RC_ACKNOWLEDGE => {
                acks += 1;
                assert_eq!(tos(p), 0, "an ACK keeps the traffic class");
            }
            op => {
                responses += 1;
                assert_eq!(tos(p), 0b10, "a READ response leaves ECT(0): {op:?}");
            }
        }
    }
    assert!(acks >= 1 && responses == 2, "{acks} ACKs, {responses} READ responses");
}

/// Turned off, nothing is marked; turned on again, existing QPs mark again.
#[test]
fn ecn_capable_off_sends_the_traffic_class_unchanged() {
    let (mut sim, a, b) = pair();
    let now = Instant::from_nanos(0);
    sim.ep(a.ep).set_ecn_capable(false);
    sim.ep(a.ep).post_send(a.qpn, write(&a, &b, 1, 100)).unwrap();
    let p = drain(sim.ep(a.ep), now);
    assert_eq!(p.len(), 1);
    assert_eq!(tos(&p[0]), 0);
    sim.ep(a.ep).set_ecn_capable(true);
    sim.ep(a.ep).post_send(a.qpn, write(&a, &b, 2, 100)).unwrap();
    assert_eq!(tos(&drain(sim.ep(a.ep), now)[0]), 0b10);
}

/// The marking, on its own: ECT(0) only where the ECN bits are 00.
#[test]
fn for_data_sets_ect0_only_over_ecn_bits_00() {
    let av = |tc| AddressVector { traffic_class: tc, ..AddressVector::new([10, 0, 0, 1].into()) };
    assert_eq!(av(26 << 2).for_data(true).traffic_class, 0x6a, "DSCP 26 | ECT(0)");
    assert_eq!(av(26 << 2).for_data(false).traffic_class, 0x68);
    assert_eq!(av(0x69).for_data(true).traffic_class, 0x69, "ECT(1) asked for is kept");
    assert_eq!(av(0x6b).for_data(true).traffic_class, 0x6b, "CE asked for is kept");
}

/// CE-marked packets count on the device and on the QP they are for;
/// one for an unknown QP counts on the device only.
#[test]
fn received_ce_marks_are_counted_per_device_and_per_qp() {
    let (mut sim, a, b) = pair();
    let now = Instant::from_nanos(0);
    sim.ep(a.ep).post_send(a.qpn, write(&a, &b, 1, 3000)).unwrap();
    let mut requests = drain(sim.ep(a.ep), now);
    assert_eq!(requests.len(), 3);
    mark(&mut requests[0], 3);
    mark(&mut requests[2], 3);
    let mut stray = requests[1].clone();
    for p in &requests {
        sim.ep(b.ep).handle_packet(now, p);
    }
    let ep = sim.ep(b.ep);
    assert_eq!(ep.stats().drops.values().sum::<u64>(), 0, "CE-marked packets are accepted: {:?}", ep.stats());
    assert_eq!(ep.stats().ecn_ce_received, 2);
    assert_eq!(ep.qp_stats(b.qpn).unwrap().ecn_ce_received, 2);
    // The same packet, CE, for a QP that does not exist.
    mark(&mut stray, 3);
    let bad_qpn = b.qpn ^ 0x40;
    stray[20 + 8 + 5..20 + 8 + 8].copy_from_slice(&bad_qpn.to_be_bytes()[1..]);
    let n = stray.len();
    let icrc = rdma_wire::icrc::roce_v2(&stray[..n - 4]).unwrap();
    stray[n - 4..].copy_from_slice(&rdma_wire::Icrc::wire_bytes(icrc));
    ep.handle_packet(now, &stray);
    assert_eq!(ep.stats().drops_for(Drop::UnknownQp), 1);
    assert_eq!(ep.stats().ecn_ce_received, 3);
    assert_eq!(ep.qp_stats(b.qpn).unwrap().ecn_ce_received, 2);
    assert!(matches!(ep.qp_stats(bad_qpn), Err(VerbsError::NoSuchQp(_))));
    // A's QP saw no CE (the ACKs were not marked).
    let acks = drain(sim.ep(b.ep), now);
    for p in &acks {
        sim.ep(a.ep).handle_packet(now, p);
    }
    assert_eq!(sim.ep(a.ep).qp_stats(a.qpn).unwrap().ecn_ce_received, 0);
}
