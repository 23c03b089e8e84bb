//! A hostile peer on QP1: the CM and the MAD layer against floods of REQs
//! and SIDR_REQs with fresh communication IDs (bounded by the listen
//! backlog and the connection table, the excess dropped unanswered), forged
//! RTU/REJ/DREQ for connections the sender is not part of (ignored and
//! counted), malformed MADs, and MADs of classes no one serves here
//! (a GET or SET answered "unsupported", anything else dropped).
//! Every MAD is crafted straight into B's endpoint, from any source address.

mod common;

use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use rdma_transport::cm::{Cm, CmConfig, CmEvent, ConnId, ConnParams, MAX_PEER_RESPONSE_TIMEOUT};
use rdma_transport::sim::{LinkConfig, Sim};
use rdma_transport::*;
use rdma_wire::cm::{
    CmMadRepr, CmMessage, DreqRepr, PathRepr, RejReason, RejRepr, ReqRepr, RtuRepr, SidrReqRepr, DREQ_PRIVATE_DATA_LEN,
    REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};
use rdma_wire::mad::{Mad, GSI_QKEY, MAD_LEN};
use rdma_wire::RoceV2Packet;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
/// The attacker's own address.
const C: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));
const SERVICE: u64 = 0x0000_0106_0000_4e20;

/// A UD SEND to QP1 from `from` to B carrying `payload` (a MAD).
fn to_qp1(from: IpAddr, payload: &[u8]) -> Vec<u8> {
    common::to_qp1(from, B, GSI_QKEY, payload)
}

fn cm_mad(tid: u64, message: CmMessage) -> [u8; MAD_LEN] {
    let mut b = [0u8; MAD_LEN];
    let repr = CmMadRepr { transaction_id: tid, attribute_modifier: 0, message };
    repr.emit(&mut Mad::new_checked(&mut b[..]).unwrap()).unwrap();
    b
}

fn req(comm_id: u32, qpn: u32, service_id: u64) -> CmMessage {
    CmMessage::Req(ReqRepr {
        local_comm_id: comm_id,
        vendor_id: 0,
        service_id,
        local_ca_guid: 0x0202_00ff_fe00_0003,
        local_qkey: 0,
        local_qpn: qpn,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: false,
        starting_psn: 0x100,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: PathRepr { hop_limit: 64, local_ack_timeout: 14, ..PathRepr::ZERO },
        alternate_path: PathRepr::ZERO,
        sap_supported: false,
        private_data: [0; REQ_PRIVATE_DATA_LEN],
    })
}

/// What B sends after `cm.process`: each packet's destination and MAD.
fn sent(ep: &mut Endpoint, now: Instant) -> Vec<(IpAddr, [u8; MAD_LEN])> {
    let mut buf = vec![0u8; MAX_PACKET];
    let mut out = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut buf) {
        let p = RoceV2Packet::new_checked(&buf[..t.len]).unwrap();
        let tr = p.transport();
        if let Ok(m) = <[u8; MAD_LEN]>::try_from(tr.payload()) {
            out.push((t.dest, m));
        }
    }
    out
}

fn events(cm: &mut Cm) -> Vec<CmEvent> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

#[test]
fn a_req_flood_fills_the_backlog_and_no_more() {
    let mut ep = Endpoint::with_seed(B, 2);
    let mut cm = Cm::new(CmConfig::default());
    cm.listen_with_backlog(SERVICE, 16);
    let now = Instant::ZERO;
    for i in 0..1000u32 {
        // Fresh communication IDs and QPNs, from ever other addresses.
        let from = IpAddr::V4(Ipv4Addr::new(10, 9, (i >> 8) as u8, i as u8));
        ep.handle_packet(now, &to_qp1(from, &cm_mad(u64::from(i), req(0x5000 + i, 0x1000 + i, SERVICE))));
        cm.process(now, &mut ep);
    }
    let reqs = events(&mut cm).iter().filter(|e| matches!(e, CmEvent::ConnectRequest { .. })).count();
    assert_eq!(reqs, 16, "the backlog's worth reaches the consumer");
    assert_eq!(cm.connections(), 16);
    assert_eq!(cm.stats().backlog_dropped, 984);
    assert!(sent(&mut ep, now).is_empty(), "a dropped REQ is not answered (the peer retries)");

    // The consumer's answer makes room: a rejected request leaves the backlog.
    let first = ConnId(0x1000);
    cm.reject(&mut ep, first, RejReason::CONSUMER_DEFINED, b"").unwrap();
    ep.handle_packet(now, &to_qp1(C, &cm_mad(7777, req(0x9999, 0x4444, SERVICE))));
    cm.process(now, &mut ep);
    assert!(
        events(&mut cm).iter().any(|e| matches!(e, CmEvent::ConnectRequest { remote_qpn: 0x4444, .. })),
        "a new request fits again"
    );
}

#[test]
fn half_open_connections_expire_as_the_cm_timers_say() {
    // Accepted requests whose RTU never comes: the REP's retries run out
    // (the REQ's own response timeout and retries, capped at about 33 s a
    // try even where it names 2.3 hours), the connections go, and the
    // table is empty again.
    let mut sim = Sim::new(3, LinkConfig::default());
    sim.add_endpoint(Endpoint::with_seed(B, 2));
    let mut cm =
        Cm::new(CmConfig { response_timeout: Duration::from_millis(10), max_retries: 2, ..CmConfig::default() });
    cm.listen(SERVICE);
    let (pd, cq) = {
        let ep = sim.ep(0);
        let pd = ep.alloc_pd();
        (pd, ep.create_cq(64))
    };
    for i in 0..20u32 {
        let now = sim.now;
        let mut r = req(0x6000 + i, 0x2000 + i, SERVICE);
        if let CmMessage::Req(q) = &mut r {
            // Half of them name the longest timeout the field holds.
            (q.local_cm_response_timeout, q.max_cm_retries) = if i % 2 == 0 { (31, 15) } else { (12, 2) };
        }
        sim.ep(0).handle_packet(now, &to_qp1(C, &cm_mad(u64::from(i), r)));
    }
    let now = sim.now;
    cm.process(now, sim.ep(0));
    for e in events(&mut cm) {
        let CmEvent::ConnectRequest { id, .. } = e else { continue };
        let qpn = sim.ep(0).create_qp(QpInitAttr::new(QpType::Rc, pd, cq)).unwrap();
        cm.accept(sim.ep(0), id, qpn, b"", ConnParams::default()).unwrap();
    }
    assert_eq!(cm.connections(), 20);
    let mut timed_out = 0;
    // 16 tries of at most 2^15 ms each.
    sim.run_until(Duration::from_secs(16 * 33 + 1), |s| {
        let now = s.now;
        cm.process(now, s.ep(0));
        cm.handle_timeout(now);
        timed_out += events(&mut cm).iter().filter(|e| matches!(e, CmEvent::TimedOut { .. })).count();
        cm.connections() == 0
    });
    // One of them came with transaction ID 0 (its REP went out under a
    // fresh one, which its timeout report names).
    assert_eq!((timed_out, cm.connections()), (20, 0), "every half-open connection timed out and went");
    assert!(sim.now <= Instant::ZERO + 16 * MAX_PEER_RESPONSE_TIMEOUT, "no longer than the cap allows");
}

#[test]
fn the_connection_table_is_bounded_whatever_the_services() {
    let mut ep = Endpoint::with_seed(B, 2);
    let mut cm = Cm::new(CmConfig { max_connections: 32, ..CmConfig::default() });
    for s in 0..4 {
        cm.listen(SERVICE + s);
    }
    let now = Instant::ZERO;
    for i in 0..200u32 {
        let m = cm_mad(u64::from(i), req(0x7000 + i, 0x3000 + i, SERVICE + u64::from(i % 4)));
        ep.handle_packet(now, &to_qp1(C, &m));
        cm.process(now, &mut ep);
    }
    assert_eq!(cm.connections(), 32);
    assert_eq!(cm.stats().table_full, 168);
    assert!(sent(&mut ep, now).is_empty());
}

#[test]
fn a_sidr_flood_fills_the_backlog_and_no_more() {
    let mut ep = Endpoint::with_seed(B, 2);
    let mut cm = Cm::new(CmConfig::default());
    cm.listen_with_backlog(SERVICE, 8);
    let now = Instant::ZERO;
    for i in 0..100u32 {
        let m = cm_mad(
            u64::from(i),
            CmMessage::SidrReq(SidrReqRepr {
                request_id: 0x8000 + i,
                pkey: 0xffff,
                service_id: SERVICE,
                private_data: [0; SIDR_REQ_PRIVATE_DATA_LEN],
            }),
        );
        ep.handle_packet(now, &to_qp1(C, &m));
        cm.process(now, &mut ep);
    }
    let reqs = events(&mut cm).iter().filter(|e| matches!(e, CmEvent::SidrRequest { .. })).count();
    assert_eq!((reqs, cm.stats().backlog_dropped), (8, 92));
    assert!(sent(&mut ep, now).is_empty());
}

/// A and B connected through the CM on the simulated link.
struct Pair {
    sim: Sim,
    a: Cm,
    b: Cm,
    a_qpn: u32,
    b_qpn: u32,
    a_id: ConnId,
    b_id: ConnId,
}

fn connected() -> Pair {
    let mut sim = Sim::new(5, LinkConfig::default());
    sim.add_endpoint(Endpoint::with_seed(A, 1));
    sim.add_endpoint(Endpoint::with_seed(B, 2));
    let mut qp = |i: usize| {
        let ep = sim.ep(i);
        let pd = ep.alloc_pd();
        let cq = ep.create_cq(64);
        ep.create_qp(QpInitAttr::new(QpType::Rc, pd, cq)).unwrap()
    };
    let (a_qpn, b_qpn) = (qp(0), qp(1));
    let mut a = Cm::new(CmConfig { first_comm_id: 0x100, ..CmConfig::default() });
    let mut b = Cm::new(CmConfig { first_comm_id: 0x900, ..CmConfig::default() });
    b.listen(SERVICE);
    let a_id = a.connect(sim.ep(0), a_qpn, B, SERVICE, b"", ConnParams::default()).unwrap();
    let mut b_id = None;
    let (mut up_a, mut up_b) = (false, false);
    sim.run_until(Duration::from_secs(2), |s| {
        let now = s.now;
        a.process(now, s.ep(0));
        b.process(now, s.ep(1));
        for e in events(&mut a) {
            up_a |= matches!(e, CmEvent::Established { .. });
        }
        for e in events(&mut b) {
            match e {
                CmEvent::ConnectRequest { id, .. } => {
                    b.accept(s.ep(1), id, b_qpn, b"", ConnParams::default()).unwrap();
                    b_id = Some(id);
                }
                CmEvent::Established { .. } => up_b = true,
                _ => {}
            }
        }
        up_a && up_b
    });
    assert!(up_a && up_b, "the pair connects");
    Pair { sim, a, b, a_qpn, b_qpn, a_id, b_id: b_id.unwrap() }
}

#[test]
fn forged_rtu_rej_and_dreq_change_nothing_and_are_counted() {
    let mut p = connected();
    let (a_id, b_id) = (p.a_id.0, p.b_id.0);
    let rej = |local, remote| {
        CmMessage::Rej(RejRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected: 0,
            ari_length: 0,
            reason: RejReason::CONSUMER_DEFINED,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        })
    };
    let dreq = |local, remote, qpn| {
        CmMessage::Dreq(DreqRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            remote_qpn: qpn,
            private_data: [0; DREQ_PRIVATE_DATA_LEN],
        })
    };
    let rtu = |local, remote| {
        CmMessage::Rtu(RtuRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        })
    };
    let forged = [
        // A third party that knows both communication IDs and the QPN.
        (C, rej(a_id, b_id)),
        (C, dreq(a_id, b_id, p.b_qpn)),
        (C, rtu(a_id, b_id)),
        // A's address, but IDs it never used.
        (A, rej(a_id + 1, b_id)),
        (A, dreq(a_id ^ 0x55, b_id, p.b_qpn)),
        // A's address and IDs, but not B's QPN (Linux ignores such a DREQ).
        (A, dreq(a_id, b_id, p.b_qpn ^ 1)),
        // An RTU for a connection already established.
        (A, rtu(a_id, b_id)),
    ];
    let before = p.b.stats().unexpected;
    let now = p.sim.now;
    for (i, (from, m)) in forged.iter().enumerate() {
        p.sim.ep(1).handle_packet(now, &to_qp1(*from, &cm_mad(0xbad0 + i as u64, *m)));
        p.b.process(now, p.sim.ep(1));
    }
    assert_eq!(p.b.stats().unexpected - before, forged.len() as u64, "each forgery counted");
    assert!(events(&mut p.b).is_empty(), "no event for any of them");
    assert_eq!(p.sim.ep(1).query_qp(p.b_qpn).unwrap().0, QpState::Rts, "B's QP still connected");
    // Only the unknown-connection DREQs are answered (a DREP, as Linux does,
    // so that a peer that lost its connection stops retrying).
    let out = sent(p.sim.ep(1), now);
    assert!(out.iter().all(|(_, m)| Mad::new_unchecked(&m[..]).attribute_id() == 0x0016), "only DREPs: {}", out.len());
    // The real peer still disconnects.
    p.a.disconnect(p.sim.ep(0), p.a_id).unwrap();
    let mut down = false;
    p.sim.run_until(Duration::from_secs(2), |s| {
        let now = s.now;
        p.a.process(now, s.ep(0));
        p.b.process(now, s.ep(1));
        down |= events(&mut p.b).iter().any(|e| matches!(e, CmEvent::Disconnected { .. }));
        down
    });
    assert!(down, "the real DREQ disconnects");
    let _ = p.a_qpn;
}

#[test]
fn malformed_cm_mads_are_counted_and_unanswered() {
    let mut ep = Endpoint::with_seed(B, 2);
    let mut cm = Cm::new(CmConfig::default());
    cm.listen(SERVICE);
    let now = Instant::ZERO;
    let mut bad = cm_mad(1, req(0x42, 0x43, SERVICE));
    bad[16..18].copy_from_slice(&0x7777u16.to_be_bytes()); // an attribute the CM does not have
    let mut wrong_version = cm_mad(2, req(0x42, 0x43, SERVICE));
    wrong_version[2] = 9; // class version
    for m in [bad, wrong_version, [0u8; MAD_LEN]] {
        ep.handle_packet(now, &to_qp1(C, &m));
    }
    cm.process(now, &mut ep);
    assert!(events(&mut cm).is_empty());
    assert_eq!(cm.connections(), 0);
    assert!(sent(&mut ep, now).is_empty());
    assert!(cm.stats().malformed >= 2, "{:?}", cm.stats());
}

/// A MAD header of `class` and `method`, transaction `tid`.
fn other_class(class: u8, method: u8, tid: u64) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    m[0] = 1; // base version
    m[1] = class;
    m[2] = 1; // class version
    m[3] = method;
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m[16..18].copy_from_slice(&0x0012u16.to_be_bytes());
    m
}

#[test]
fn a_get_of_an_unserved_class_is_answered_unsupported_and_the_rest_dropped() {
    let mut ep = Endpoint::with_seed(B, 2);
    let mut cm = Cm::new(CmConfig::default());
    let now = Instant::ZERO;
    // PerfMgt (class 4) GET: a GET_RESP back to its sender, same TID,
    // status 0x000c (unsupported method/attribute), as Linux answers.
    ep.handle_packet(now, &to_qp1(C, &other_class(0x04, 0x01, 0xabc)));
    cm.process(now, &mut ep);
    let out = sent(&mut ep, now);
    assert_eq!(out.len(), 1);
    let (dest, resp) = &out[0];
    let r = Mad::new_unchecked(&resp[..]);
    assert_eq!((*dest, r.mgmt_class(), r.method(), r.transaction_id(), r.status()), (C, 0x04, 0x81, 0xabc, 0x000c));
    assert_eq!(cm.stats().unsupported_answered, 1);
    // A SEND or TRAP of another class, and an unmatched response: dropped.
    for (class, method) in [(0x04, 0x03), (0x03, 0x05), (0x0a, 0x81)] {
        ep.handle_packet(now, &to_qp1(C, &other_class(class, method, 0xdef)));
    }
    cm.process(now, &mut ep);
    assert!(sent(&mut ep, now).is_empty(), "nothing answers them");
    assert_eq!(cm.stats().unsupported_answered, 1);
}
