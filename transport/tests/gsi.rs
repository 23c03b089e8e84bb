//! The GSI (QP1) and its MAD agent on the simulated link: CM MADs cross
//! byte-exact, responses stop retransmission, losses are retried at the
//! timeout and end in a timeout report, and malformed MADs are dropped
//! and counted.

mod common;

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use rdma_transport::gsi::ReceivedMad;
use rdma_transport::sim::{LinkConfig, Sim, Verdict};
use rdma_transport::*;
use rdma_wire::cm::{CmMadRepr, CmMessage, PathRepr, RepRepr, ReqRepr, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN};
use rdma_wire::mad::{self, Mad, MadHeaderRepr, GSI_QKEY, MAD_DATA_LEN, MAD_LEN};
use rdma_wire::{Opcode, RoceV2Packet};
use std::cell::RefCell;
use std::rc::Rc;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const MS: Duration = Duration::from_millis(1);

/// Two endpoints, A (index 0) and B (index 1), on a 5 µs link.
fn sim() -> Sim {
    let mut sim = Sim::new(7, LinkConfig::default());
    assert_eq!(sim.add_endpoint(Endpoint::with_seed(A, 1)), 0);
    assert_eq!(sim.add_endpoint(Endpoint::with_seed(B, 2)), 1);
    sim
}

fn req_mad(tid: u64) -> [u8; MAD_LEN] {
    let mut private_data = [0u8; REQ_PRIVATE_DATA_LEN];
    private_data[..4].copy_from_slice(b"ping");
    let path = PathRepr {
        local_gid: Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(),
        remote_gid: Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped(),
        hop_limit: 64,
        local_ack_timeout: 14,
        ..PathRepr::ZERO
    };
    let req = ReqRepr {
        local_comm_id: 0x1122_3344,
        vendor_id: 0,
        service_id: 0x0000_0106_0000_4e20,
        local_ca_guid: 0x0202_00ff_fe00_0001,
        local_qkey: 0,
        local_qpn: 0x12_3456,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: false,
        starting_psn: 0xab_cdef,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: path,
        alternate_path: PathRepr::ZERO,
        sap_supported: false,
        private_data,
    };
    let mut b = [0u8; MAD_LEN];
    let repr = CmMadRepr { transaction_id: tid, attribute_modifier: 0, message: CmMessage::Req(req) };
    repr.emit(&mut Mad::new_checked(&mut b[..]).unwrap()).unwrap();
    b
}

fn rep_mad(tid: u64) -> [u8; MAD_LEN] {
    let rep = RepRepr {
        local_comm_id: 0x5566_7788,
        remote_comm_id: 0x1122_3344,
        local_qkey: 0,
        local_qpn: 0x65_4321,
        vendor_id: 0,
        local_eecn: 0,
        starting_psn: 0x12_3456,
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 0,
        failover_accepted: 0,
        end_to_end_flow_control: false,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 0x0202_00ff_fe00_0002,
        private_data: [0u8; REP_PRIVATE_DATA_LEN],
    };
    let mut b = [0u8; MAD_LEN];
    let repr = CmMadRepr { transaction_id: tid, attribute_modifier: 0, message: CmMessage::Rep(rep) };
    repr.emit(&mut Mad::new_checked(&mut b[..]).unwrap()).unwrap();
    b
}

fn tid_of(m: &[u8; MAD_LEN]) -> u64 {
    Mad::new_unchecked(&m[..]).transaction_id()
}

/// Runs until endpoint `i` has a MAD for its consumer (or `limit` passes).
/// The limit must reach past any timer pending: `run_until` stops at once
/// when the next event lies beyond it, before sending what is queued.
fn next_mad(sim: &mut Sim, i: usize, limit: Duration) -> Option<ReceivedMad> {
    let mut got = None;
    sim.run_until(limit, |s| {
        got = got.take().or_else(|| s.ep(i).poll_mad());
        got.is_some()
    });
    got
}

/// Records the virtual time of every packet endpoint 0 sends; drops the
/// ones (by index in that list) that `lose` names.
fn tap_a(sim: &mut Sim, lose: impl Fn(usize) -> bool + 'static) -> Rc<RefCell<Vec<Instant>>> {
    let sent = Rc::new(RefCell::new(Vec::new()));
    let log = sent.clone();
    sim.set_tap(move |now, from, _| {
        if from != 0 {
            return Verdict::Deliver;
        }
        let mut l = log.borrow_mut();
        l.push(now);
        if lose(l.len() - 1) {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    sent
}

#[test]
fn a_req_arrives_byte_exact_and_the_rep_answers_it() {
    let mut sim = sim();
    // Transaction ID 0: the agent assigns one.
    let tid = sim.ep(0).gsi_send(B, req_mad(0), Some(50 * MS), 3).unwrap();
    assert_ne!(tid, 0);
    let got = next_mad(&mut sim, 1, 10 * MS).expect("B gets the REQ");
    assert_eq!(got.from, A);
    assert_eq!(got.src_qp, 1);
    assert!(!got.answers_send, "B sent nothing: the REQ is unsolicited");
    assert_eq!(got.mad, req_mad(tid), "byte-exact, with the assigned transaction ID");
    let parsed = CmMadRepr::parse(&Mad::new_checked(&got.mad[..]).unwrap()).unwrap();
    assert!(matches!(parsed.message, CmMessage::Req(r) if r.local_comm_id == 0x1122_3344));

    // B answers with the same transaction ID; its REP expects nothing back.
    assert_eq!(sim.ep(1).gsi_send(A, rep_mad(tid_of(&got.mad)), None, 0).unwrap(), tid);
    let rep = next_mad(&mut sim, 0, Duration::from_secs(1)).expect("A gets the REP");
    assert_eq!((rep.from, rep.src_qp, rep.answers_send), (B, 1, true));
    assert_eq!(rep.mad, rep_mad(tid));

    // Matched: no retransmission, no timeout, ever.
    sim.run_idle(Duration::from_secs(2));
    let (sa, sb) = (sim.ep(0).stats(), sim.ep(1).stats());
    assert_eq!((sa.mads_sent, sa.mad_retries, sa.mad_timeouts, sa.mads_received), (1, 0, 0, 1));
    assert_eq!((sb.mads_sent, sb.mads_received), (1, 1));
    assert!(sim.ep(0).poll_mad_timeout().is_none());
    assert!(sim.ep(1).poll_mad().is_none(), "B got the REQ once");
    assert!(sim.ep(0).poll_timeout().is_none(), "nothing left to time");
}

#[test]
fn a_lost_req_is_sent_again_after_the_timeout() {
    let mut sim = sim();
    let sent = tap_a(&mut sim, |i| i == 0);
    let tid = sim.ep(0).gsi_send(B, req_mad(0x77), Some(50 * MS), 3).unwrap();
    assert_eq!(tid, 0x77, "a non-zero transaction ID is kept");
    let got = next_mad(&mut sim, 1, Duration::from_secs(1)).expect("the retry arrives");
    assert_eq!(got.mad, req_mad(0x77));
    let times = sent.borrow().clone();
    assert_eq!(times.len(), 2);
    assert_eq!(times[1].saturating_since(times[0]), 50 * MS, "retried exactly one timeout later");
    sim.ep(1).gsi_send(A, rep_mad(0x77), None, 0).unwrap();
    let rep = next_mad(&mut sim, 0, Duration::from_secs(1)).expect("A gets the REP");
    assert!(rep.answers_send);
    sim.run_idle(Duration::from_secs(2));
    assert_eq!(sent.borrow().len(), 2, "no copy after the answer");
    let s = sim.ep(0).stats();
    assert_eq!((s.mads_sent, s.mad_retries, s.mad_timeouts), (2, 1, 0));
}

#[test]
fn with_every_copy_lost_the_send_times_out_after_its_retries() {
    let mut sim = sim();
    let sent = tap_a(&mut sim, |_| true);
    let t0 = sim.now;
    let tid = sim.ep(0).gsi_send(B, req_mad(0), Some(10 * MS), 2).unwrap();
    let mut report = None;
    sim.run_until(Duration::from_secs(1), |s| {
        report = s.ep(0).poll_mad_timeout();
        report.is_some()
    });
    let report = report.expect("a timeout is reported");
    assert_eq!(report.dest, B);
    assert_eq!(report.transaction_id, tid);
    assert_eq!(report.attempts, 3, "the first copy and two retries");
    assert_eq!(sim.now, t0 + 30 * MS, "reported one timeout after the last copy");
    assert_eq!(*sent.borrow(), vec![t0, t0 + 10 * MS, t0 + 20 * MS]);
    sim.run_idle(Duration::from_secs(1));
    assert_eq!(sent.borrow().len(), 3, "nothing after the timeout");
    let s = sim.ep(0).stats();
    assert_eq!((s.mads_sent, s.mad_retries, s.mad_timeouts), (3, 2, 1));
    assert!(sim.ep(1).poll_mad().is_none());
}

/// A MAD packet from A to B with the given DETH Q_Key and payload.
fn crafted(qkey: u32, payload: &[u8]) -> Vec<u8> {
    common::to_qp1(A, B, qkey, payload)
}

#[test]
fn mads_with_a_wrong_qkey_length_or_version_are_dropped_and_counted() {
    let mut ep = Endpoint::with_seed(B, 2);
    let now = Instant::ZERO;
    let good = req_mad(5);
    let mut v2 = good;
    v2[0] = 2;
    ep.handle_packet(now, &crafted(0x8001_0001, &good));
    ep.handle_packet(now, &crafted(GSI_QKEY, &good[..252]));
    ep.handle_packet(now, &crafted(GSI_QKEY, &[good.as_slice(), &[0u8; 4]].concat()));
    ep.handle_packet(now, &crafted(GSI_QKEY, &v2));
    let s = ep.stats();
    assert_eq!(s.drops_for(Drop::MadQkeyMismatch), 1);
    assert_eq!(s.drops_for(Drop::MadBadLength), 2, "252 and 260 bytes");
    assert_eq!(s.drops_for(Drop::MadBadVersion), 1);
    assert_eq!(s.drops_for(Drop::IcrcMismatch) + s.drops_for(Drop::UnknownQp), 0, "the crafted packets are sound");
    assert_eq!(s.mads_received, 0);
    assert!(ep.poll_mad().is_none());
    // The same crafting with the right key and length is accepted.
    ep.handle_packet(now, &crafted(GSI_QKEY, &good));
    let got = ep.poll_mad().expect("a sound MAD is accepted");
    assert_eq!((got.from, got.mad), (A, good));
    assert_eq!(ep.stats().mads_received, 1);
}

/// A MAD one engine of a device took in and handed to the engine of the
/// device's GSI (`Endpoint::gsi_forwarded`) is queued there as received,
/// and counted there only (a device adds its engines' counters; a drop
/// there is counted there too).
#[test]
fn a_forwarded_mad_is_queued_by_the_gsi_and_counted_once() {
    let (mut first, mut other) = (Endpoint::with_seed(B, 2), Endpoint::with_seed(B, 3));
    let now = Instant::ZERO;
    let mad = req_mad(9);
    other.handle_packet(now, &crafted(GSI_QKEY, &mad));
    assert_eq!(other.stats().mads_received, 1);
    let m = other.poll_mad_to_forward().expect("the other engine takes the MAD in");
    first.gsi_forwarded(m);
    let got = first.poll_mad().expect("the GSI's engine queues it");
    assert_eq!((got.from, got.mad), (A, mad));
    assert_eq!((other.stats().mads_received, first.stats().mads_received), (0, 1));
}

/// A response that the host steers to an engine other than the one whose
/// GSI sent the request (a device of several engines) is taken in there as
/// a relay (`Endpoint::relay_mads`), not dropped as unmatched, and answers
/// the send on the GSI's engine: no retry, no timeout. Without the relay
/// the other engine drops it and the send times out.
#[test]
fn a_response_another_engine_takes_in_answers_the_send_of_the_gsis_engine() {
    let now = Instant::ZERO;
    let get = MadHeaderRepr { method: mad::method::GET, ..MadHeaderRepr::cm(mad::attr::CLASS_PORT_INFO, 0) };
    let respond = |tid| {
        let resp =
            MadHeaderRepr { method: mad::method::GET_RESP, ..MadHeaderRepr::cm(mad::attr::CLASS_PORT_INFO, tid) };
        gsi::OutgoingMad::from((resp, [3u8; MAD_DATA_LEN])).0
    };
    for relay in [true, false] {
        let (mut first, mut other) = (Endpoint::with_seed(B, 2), Endpoint::with_seed(B, 3));
        if relay {
            other.relay_mads();
        }
        let tid = first.gsi_send(A, (get, [0u8; MAD_DATA_LEN]), Some(50 * MS), 1).unwrap();
        let mut buf = vec![0u8; MAX_PACKET];
        first.poll_transmit(now, &mut buf).expect("the GET leaves");
        other.handle_packet(now + MS, &crafted(GSI_QKEY, &respond(tid)));
        while let Some(m) = other.poll_mad_to_forward() {
            first.gsi_forwarded(m);
        }
        // Past the first timeout, a retry's leaving, and its timeout.
        for t in [now + 60 * MS, now + Duration::from_secs(1)] {
            first.handle_timeout(t);
            while first.poll_transmit(t, &mut buf).is_some() {}
        }
        if relay {
            let got = first.poll_mad().expect("the response reaches the GSI's engine");
            assert!(got.answers_send);
            assert_eq!(&got.mad[24..], &[3u8; MAD_DATA_LEN][..]);
            assert_eq!(first.poll_mad_timeout(), None);
            let s = first.stats();
            assert_eq!((s.mads_received, s.mad_retries, s.mad_timeouts), (1, 0, 0));
            assert_eq!(other.stats().drops_for(Drop::MadUnmatchedResponse), 0);
            assert_eq!(other.stats().mads_received, 0, "counted once, where it was matched");
        } else {
            assert!(first.poll_mad().is_none());
            assert_eq!(other.stats().drops_for(Drop::MadUnmatchedResponse), 1);
            assert_eq!(first.poll_mad_timeout().map(|t| t.transaction_id), Some(tid));
        }
    }
}

#[test]
fn a_repeated_response_is_dropped_as_a_duplicate() {
    let mut sim = sim();
    let get = MadHeaderRepr { method: mad::method::GET, ..MadHeaderRepr::cm(mad::attr::CLASS_PORT_INFO, 0) };
    let tid = sim.ep(0).gsi_send(B, (get, [0u8; MAD_DATA_LEN]), Some(50 * MS), 1).unwrap();
    let req = next_mad(&mut sim, 1, 10 * MS).expect("B gets the GET");
    assert_eq!(Mad::new_unchecked(&req.mad[..]).method(), mad::method::GET);
    let resp = MadHeaderRepr { method: mad::method::GET_RESP, ..MadHeaderRepr::cm(mad::attr::CLASS_PORT_INFO, tid) };
    sim.ep(1).gsi_send(A, (resp, [1u8; MAD_DATA_LEN]), None, 0).unwrap();
    sim.ep(1).gsi_send(A, (resp, [1u8; MAD_DATA_LEN]), None, 0).unwrap();
    // And a response nobody asked for.
    let stray = MadHeaderRepr { transaction_id: tid + 1000, ..resp };
    sim.ep(1).gsi_send(A, (stray, [1u8; MAD_DATA_LEN]), None, 0).unwrap();
    let got = next_mad(&mut sim, 0, Duration::from_secs(1)).expect("the first response");
    assert!(got.answers_send);
    assert_eq!(&got.mad[24..], &[1u8; MAD_DATA_LEN][..]);
    sim.run_idle(Duration::from_secs(1));
    assert!(sim.ep(0).poll_mad().is_none());
    let s = sim.ep(0).stats();
    assert_eq!(s.drops_for(Drop::MadDuplicateResponse), 1);
    assert_eq!(s.drops_for(Drop::MadUnmatchedResponse), 1);
    assert_eq!((s.mads_received, s.mad_retries, s.mad_timeouts), (1, 0, 0));
}

#[test]
fn the_packet_is_a_roce_v2_ud_send_to_qp1() {
    for (a, b) in [(A, B), (IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)), IpAddr::V6(Ipv6Addr::LOCALHOST))] {
        let mut ep = Endpoint::with_seed(a, 1);
        let tid = ep.gsi_send(b, req_mad(0), Some(MS), 0).unwrap();
        let mut buf = vec![0u8; MAX_PACKET];
        let t = ep.poll_transmit(Instant::ZERO, &mut buf).expect("the MAD leaves");
        assert_eq!(t.dest, b);
        assert!(ep.poll_transmit(Instant::ZERO, &mut buf[..]).is_none(), "once");
        let p = RoceV2Packet::new_checked(&buf[..t.len]).unwrap();
        assert!(p.icrc_ok(), "correct ICRC");
        assert_eq!(p.udp().dst_port(), 4791);
        assert_eq!(p.udp().src_port(), t.src_port);
        let tr = p.transport();
        assert_eq!(tr.bth().opcode(), Opcode::UD_SEND_ONLY);
        assert_eq!(tr.bth().dest_qp(), 1);
        assert_eq!(tr.bth().pkey(), 0xffff);
        let deth = tr.deth().expect("a DETH");
        assert_eq!((deth.qkey(), deth.src_qp()), (0x8001_0000, 1));
        assert_eq!(tr.payload(), &req_mad(tid)[..]);
        let s = ep.stats();
        assert_eq!((s.mads_sent, s.packets_sent), (1, 1));
    }
}
