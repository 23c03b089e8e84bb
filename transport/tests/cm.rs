//! The IB CM state machine on the simulated link: REQ/REP/RTU connects an
//! RC pair that then carries a SEND, an unknown service gets REJ 8, a lost
//! REP is recovered through the repeated REQ, and DREQ/DREP tears down;
//! then every handshake path again over 150 seeds of a link that loses,
//! duplicates and reorders packets.

use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use rdma_transport::cm::{Cm, CmConfig, CmEvent, ConnId, ConnParams};
use rdma_transport::sim::{LinkConfig, Sim, Verdict};
use rdma_transport::*;
use rdma_wire::cm::{CmMadRepr, CmMessage, RejReason};
use rdma_wire::mad::Mad;
use rdma_wire::{Opcode, RoceV2Packet};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const SERVICE: u64 = 0x0000_0106_0000_4e20;
const MS: Duration = Duration::from_millis(1);

struct Node {
    cm: Cm,
    qpn: u32,
    cq: CqId,
    mem: RegionMemory,
    lkey: u32,
    events: Vec<CmEvent>,
}

fn node(sim: &mut Sim, i: usize, config: CmConfig) -> Node {
    let ep = sim.ep(i);
    let pd = ep.alloc_pd();
    let cq = ep.create_cq(64);
    let mem = RegionMemory::zeroed(4096);
    let (lkey, _) = ep.reg_mr(pd, 0x1000, mem.clone(), Access::ALL);
    let init = QpInitAttr::new(QpType::Rc, pd, cq);
    let qpn = ep.create_qp(init).unwrap();
    Node { cm: Cm::new(config), qpn, cq, mem, lkey, events: Vec::new() }
}

fn setup(b_config: CmConfig) -> (Sim, Node, Node) {
    setup_on(7, LinkConfig::default(), CmConfig { first_comm_id: 0x100, ..CmConfig::default() }, b_config)
}

/// Two nodes on a link of `link` (seeded with `seed`); B listens.
fn setup_on(seed: u64, link: LinkConfig, a_config: CmConfig, b_config: CmConfig) -> (Sim, Node, Node) {
    let mut sim = Sim::new(seed, link);
    sim.add_endpoint(Endpoint::with_seed(A, 1 + 2 * seed));
    sim.add_endpoint(Endpoint::with_seed(B, 2 + 2 * seed));
    let a = node(&mut sim, 0, a_config);
    let mut b = node(&mut sim, 1, b_config);
    b.cm.listen(SERVICE);
    (sim, a, b)
}

fn params(psn: u32) -> ConnParams {
    ConnParams { starting_psn: psn, responder_resources: 4, initiator_depth: 2, ..ConnParams::default() }
}

/// Runs the link and both CMs; B accepts every connect request with its
/// QP. Stops when `done` holds or at `limit`.
fn run(sim: &mut Sim, a: &mut Node, b: &mut Node, limit: Duration, done: impl Fn(&Node, &Node) -> bool) {
    sim.run_until(limit, |s| {
        let now = s.now;
        a.cm.process(now, s.ep(0));
        b.cm.process(now, s.ep(1));
        while let Some(e) = a.cm.poll_event() {
            a.events.push(e);
        }
        while let Some(e) = b.cm.poll_event() {
            if let CmEvent::ConnectRequest { id, .. } = e {
                b.cm.accept(s.ep(1), id, b.qpn, b"pong", params(0x20)).unwrap();
            }
            b.events.push(e);
        }
        done(a, b)
    });
}

fn established(n: &Node) -> bool {
    n.events.iter().any(|e| matches!(e, CmEvent::Established { .. }))
}

fn connect(sim: &mut Sim, a: &mut Node, b: &mut Node) -> ConnId {
    let id = a.cm.connect(sim.ep(0), a.qpn, B, SERVICE, b"ping", params(0x10)).unwrap();
    run(sim, a, b, Duration::from_secs(5), |a, b| established(a) && established(b));
    id
}

#[test]
fn req_rep_rtu_connects_an_rc_pair_that_carries_a_send() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let id = connect(&mut sim, &mut a, &mut b);
    assert_eq!(a.events, vec![CmEvent::Established { id, qpn: a.qpn, remote_qpn: b.qpn }]);
    let CmEvent::ConnectRequest { from, service_id, remote_qpn, private_data, .. } = b.events[0] else {
        panic!("B first sees the request: {:?}", b.events)
    };
    assert_eq!((from, service_id, remote_qpn, &private_data[..4]), (A, SERVICE, a.qpn, &b"ping"[..]));
    assert!(matches!(b.events[1], CmEvent::Established { qpn, remote_qpn, .. } if qpn == b.qpn && remote_qpn == a.qpn));

    // The QPs hold what REQ and REP carried, depths swapped and bounded:
    // A offered 4 responder resources / depth 2, B the same, so each side
    // issues min(own depth 2, peer's resources 4) and accepts 2.
    let (sa, pa) = sim.ep(0).query_qp(a.qpn).unwrap();
    let (sb, pb) = sim.ep(1).query_qp(b.qpn).unwrap();
    assert_eq!((sa, sb), (QpState::Rts, QpState::Rts));
    assert_eq!((pa.dest_qp, pb.dest_qp), (b.qpn, a.qpn));
    assert_eq!((pa.max_rd_atomic, pa.max_dest_rd_atomic), (2, 2));
    assert_eq!((pb.max_rd_atomic, pb.max_dest_rd_atomic), (2, 2));
    assert_eq!(pb.av.map(|v| v.dest), Some(A));

    // A SEND with data crosses the connection: the PSNs agree.
    b.mem.write(0, &[0u8; 64]);
    let recv = RecvWr { wr_id: 7, sg_list: vec![Sge { addr: 0x1000, length: 64, lkey: b.lkey }] };
    sim.ep(1).post_recv(b.qpn, recv).unwrap();
    a.mem.write(0, b"hello over CM");
    let send = SendWr {
        wr_id: 9,
        op: SendOp::Send,
        sg_list: vec![Sge { addr: 0x1000, length: 13, lkey: a.lkey }],
        signaled: true,
        solicited: false,
        inline_data: None,
        ud: None,
        xrc_srqn: 0,
    };
    sim.ep(0).post_send(a.qpn, send).unwrap();
    let (mut wa, mut wb) = (Vec::new(), Vec::new());
    sim.run_until(Duration::from_secs(1), |s| {
        wa.extend(s.ep(0).poll_cq(a.cq, 8));
        wb.extend(s.ep(1).poll_cq(b.cq, 8));
        !wa.is_empty() && !wb.is_empty()
    });
    assert_eq!(wa.len(), 1);
    assert_eq!((wa[0].wr_id, wa[0].status), (9, WcStatus::Success));
    assert_eq!((wb[0].wr_id, wb[0].status, wb[0].byte_len), (7, WcStatus::Success, 13));
    let mut got = [0u8; 13];
    b.mem.read(0, &mut got);
    assert_eq!(&got, b"hello over CM");
    assert_eq!((a.cm.stats().unexpected, b.cm.stats().unexpected), (0, 0));
}

#[test]
fn a_req_for_an_unknown_service_is_rejected_with_reason_8() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let id = a.cm.connect(sim.ep(0), a.qpn, B, SERVICE + 1, b"", params(0x10)).unwrap();
    run(&mut sim, &mut a, &mut b, Duration::from_secs(5), |a, _| !a.events.is_empty());
    assert!(
        matches!(&a.events[..], [CmEvent::Rejected { id: i, reason: RejReason::INVALID_SERVICE_ID, .. }] if *i == id)
    );
    assert!(b.events.is_empty(), "B's consumer never hears of it");
    assert_eq!((a.cm.connections(), b.cm.connections()), (0, 0));
    // The REJ answered the REQ: no retransmission, no timeout later.
    sim.run_idle(Duration::from_secs(2));
    a.cm.process(sim.now, sim.ep(0));
    assert!(a.cm.poll_event().is_none());
    assert_eq!((sim.ep(0).stats().mads_sent, sim.ep(0).stats().mad_timeouts), (1, 0));
    assert_eq!(sim.ep(1).query_qp(b.qpn).unwrap().0, QpState::Reset);
}

#[test]
fn a_lost_rep_is_sent_again_on_the_repeated_req_and_one_connection_results() {
    // B waits longer than A for an answer, so A's REQ retry comes first.
    let (mut sim, mut a, mut b) = setup(CmConfig { response_timeout: 500 * MS, ..CmConfig::default() });
    let kinds: Rc<RefCell<Vec<(usize, u16)>>> = Rc::default();
    let log = kinds.clone();
    let mut reps_seen = 0;
    sim.set_tap(move |_, from, pkt| {
        // The CM attribute ID sits at MAD offset 16; the MAD ends the
        // packet, ahead of the 4-byte ICRC.
        let mad = &pkt[pkt.len() - 4 - 256..pkt.len() - 4];
        let attr = u16::from_be_bytes([mad[16], mad[17]]);
        log.borrow_mut().push((from, attr));
        if from == 1 && attr == 0x0013 {
            reps_seen += 1;
            if reps_seen == 1 {
                return Verdict::Drop;
            }
        }
        Verdict::Deliver
    });
    let t0 = sim.now;
    let id = connect(&mut sim, &mut a, &mut b);
    assert!(sim.now >= t0 + 50 * MS, "established only after the REQ's retry");
    assert_eq!(a.events, vec![CmEvent::Established { id, qpn: a.qpn, remote_qpn: b.qpn }]);
    let requests = b.events.iter().filter(|e| matches!(e, CmEvent::ConnectRequest { .. })).count();
    assert_eq!(requests, 1, "the repeated REQ is no new connection");
    assert_eq!(b.cm.connections(), 1);
    assert_eq!(b.cm.stats().rep_resent, 1);
    // REQ, REP (lost), REQ again, REP again, RTU.
    assert_eq!(*kinds.borrow(), vec![(0, 0x0010), (1, 0x0013), (0, 0x0010), (1, 0x0013), (0, 0x0014)]);
    sim.run_idle(Duration::from_secs(3));
    assert_eq!(kinds.borrow().len(), 5, "nothing more: every send was answered");
    assert_eq!((sim.ep(0).stats().mad_timeouts, sim.ep(1).stats().mad_timeouts), (0, 0));
}

#[test]
fn dreq_drep_disconnects_and_both_qps_go_to_err() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let id = connect(&mut sim, &mut a, &mut b);
    a.cm.disconnect(sim.ep(0), id).unwrap();
    assert_eq!(sim.ep(0).query_qp(a.qpn).unwrap().0, QpState::Err, "ERR at once, before the DREQ leaves");
    let gone = |n: &Node| n.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }));
    run(&mut sim, &mut a, &mut b, Duration::from_secs(5), |a, b| gone(a) && gone(b));
    assert_eq!(a.events.last(), Some(&CmEvent::Disconnected { id }));
    assert_eq!(sim.ep(0).query_qp(a.qpn).unwrap().0, QpState::Err);
    // The DREQ only reports DISCONNECTED, as Linux's CM: B's QP goes to
    // ERR when B's consumer answers with its own disconnect.
    assert_eq!(sim.ep(1).query_qp(b.qpn).unwrap().0, QpState::Rts);
    b.cm.disconnect(sim.ep(1), disconnected_id(&b)).unwrap();
    assert_eq!(sim.ep(1).query_qp(b.qpn).unwrap().0, QpState::Err);
    // Time-wait: remembered until the CM's own timer fires.
    let deadline = a.cm.poll_timeout().expect("a time-wait timer");
    assert!(b.cm.poll_timeout().is_some());
    a.cm.handle_timeout(deadline);
    b.cm.handle_timeout(deadline + Duration::from_secs(1));
    assert_eq!((a.cm.connections(), b.cm.connections()), (0, 0));
    assert_eq!(sim.ep(0).stats().mad_timeouts, 0, "the DREP answered the DREQ");
}

/// A signaled SEND of `len` bytes from `from`'s buffer.
fn send(wr_id: u64, from: &Node, len: u32) -> SendWr {
    SendWr::new(wr_id, SendOp::Send, vec![Sge { addr: 0x1000, length: len, lkey: from.lkey }])
}

/// fi_pingpong's end, up to B's disconnect: connected A and B exchange
/// SENDs (B first, so it is conversing), B holding the ACK of A's SEND
/// behind a 50 ms ACK delay. Returns B's connection and A's completions
/// so far (its receive; its SEND, `wr_id` 4, waits for that ACK).
fn fin_exchange(sim: &mut Sim, a: &mut Node, b: &mut Node) -> (ConnId, Vec<WorkCompletion>) {
    connect(sim, a, b);
    let b_id = b.events.iter().find_map(|e| match e {
        CmEvent::Established { id, .. } => Some(*id),
        _ => None,
    });
    sim.ep(1).set_ack_delay(Duration::from_millis(50));
    let recv = |n: &Node, wr_id| RecvWr { wr_id, sg_list: vec![Sge { addr: 0x1000, length: 64, lkey: n.lkey }] };
    sim.ep(0).post_recv(a.qpn, recv(a, 1)).unwrap();
    sim.ep(1).post_recv(b.qpn, recv(b, 2)).unwrap();
    sim.ep(1).post_send(b.qpn, send(3, b, 8)).unwrap();
    sim.ep(0).post_send(a.qpn, send(4, a, 4)).unwrap();
    let (mut wa, mut wb) = (Vec::new(), Vec::new());
    sim.run_until(Duration::from_secs(1), |s| {
        wa.extend(s.ep(0).poll_cq(a.cq, 8));
        wb.extend(s.ep(1).poll_cq(b.cq, 8));
        wb.len() == 2 && wa.iter().any(|w| w.wr_id == 1)
    });
    assert!(wb.iter().all(|w| w.status == WcStatus::Success), "{wb:?}");
    assert!(sim.ep(1).holds_acks(), "B holds the ACK of A's SEND");
    (b_id.expect("B's connection"), wa)
}

/// The connection of `n`'s last DISCONNECTED.
fn disconnected_id(n: &Node) -> ConnId {
    match n.events.iter().rev().find(|e| matches!(e, CmEvent::Disconnected { .. })) {
        Some(&CmEvent::Disconnected { id }) => id,
        _ => panic!("no DISCONNECTED: {:?}", n.events),
    }
}

/// libfabric's `fi_pingpong` ends with each side sending "fin" and the
/// server disconnecting as soon as it has the client's: the ACK of that
/// SEND, which B holds back for company (it sent lately, and has an ACK
/// delay), must leave before the DREQ, or A flushes a SEND that arrived.
#[test]
fn a_disconnect_right_after_a_receive_sends_its_ack_before_the_dreq() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let (b_id, mut wa) = fin_exchange(&mut sim, &mut a, &mut b);
    // The capture of what B sends from here on.
    let sent: Rc<RefCell<Vec<Opcode>>> = Rc::default();
    let seen = sent.clone();
    sim.set_filter(move |src, p| {
        if src == 1 {
            // An ACK, or a UD SEND (the DREQ, a MAD on QP1).
            seen.borrow_mut().push(RoceV2Packet::new_checked(p).unwrap().transport().bth().opcode());
        }
        Verdict::Deliver
    });
    b.cm.disconnect(sim.ep(1), b_id).unwrap();
    let gone = |n: &Node| n.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }));
    run(&mut sim, &mut a, &mut b, Duration::from_secs(5), |a, b| gone(a) && gone(b));
    wa.extend(sim.ep(0).poll_cq(a.cq, 8));
    let send_done: Vec<_> = wa.iter().filter(|w| w.wr_id == 4).map(|w| w.status).collect();
    assert_eq!(send_done, [WcStatus::Success], "A's SEND arrived and is acknowledged: {wa:?}");
    assert_eq!(sent.borrow().first(), Some(&Opcode::RC_ACKNOWLEDGE), "the ACK leaves first: {:?}", sent.borrow());
}

/// The same end, with B's ACK overtaken by its DREQ on the way (as when
/// A reads the socket its MADs come on before the one its QP's ACKs come
/// on): the DREQ leaves A's QP alone, as Linux's CM does, so the ACK that
/// comes after it still completes A's SEND, which B executed. (A's QP
/// used to go to ERR on the DREQ, flushing it: fi_pingpong -e msg's
/// client failed with "Work Request Flushed Error" 1 run in ~50.)
#[test]
fn a_dreq_that_overtakes_the_ack_flushes_nothing_the_peer_executed() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let (b_id, mut wa) = fin_exchange(&mut sim, &mut a, &mut b);
    // B's ACKs arrive 2 ms late; its MADs on time.
    let late: Rc<Cell<u32>> = Rc::default();
    let count_late = late.clone();
    sim.set_filter(move |src, p| {
        if src == 1 && RoceV2Packet::new_checked(p).unwrap().transport().bth().opcode() == Opcode::RC_ACKNOWLEDGE {
            count_late.set(count_late.get() + 1);
            return Verdict::Delay(2 * MS);
        }
        Verdict::Deliver
    });
    b.cm.disconnect(sim.ep(1), b_id).unwrap();
    let gone = |n: &Node| n.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }));
    run(&mut sim, &mut a, &mut b, Duration::from_secs(1), |a, _| gone(a));
    assert_eq!(late.get(), 1, "the ACK is still on its way");
    assert_eq!(sim.ep(0).query_qp(a.qpn).unwrap().0, QpState::Rts, "the DREQ left A's QP alone");
    wa.extend(sim.ep(0).poll_cq(a.cq, 8));
    assert!(!wa.iter().any(|w| w.wr_id == 4), "nothing for A's SEND yet: {wa:?}");
    run(&mut sim, &mut a, &mut b, Duration::from_secs(1), |_, _| false);
    wa.extend(sim.ep(0).poll_cq(a.cq, 8));
    let send_done: Vec<_> = wa.iter().filter(|w| w.wr_id == 4).map(|w| w.status).collect();
    assert_eq!(send_done, [WcStatus::Success], "A's SEND, executed by B, is acknowledged: {wa:?}");
    // A answers its DISCONNECTED: now its QP goes to ERR.
    a.cm.disconnect(sim.ep(0), disconnected_id(&a)).unwrap();
    assert_eq!(sim.ep(0).query_qp(a.qpn).unwrap().0, QpState::Err);
}

#[test]
fn garbage_and_unexpected_cm_messages_are_counted_not_fatal() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    // A REP for no connection, and a MAD of another class.
    let rep = CmMadRepr {
        transaction_id: 5,
        attribute_modifier: 0,
        message: CmMessage::Rtu(rdma_wire::cm::RtuRepr { local_comm_id: 1, remote_comm_id: 2, private_data: [0; 224] }),
    };
    let mut buf = [0u8; 256];
    rep.emit(&mut Mad::new_checked(&mut buf[..]).unwrap()).unwrap();
    sim.ep(0).gsi_send(B, buf, None, 0).unwrap();
    let mut other = buf;
    other[1] = 0x03; // management class SA
    sim.ep(0).gsi_send(B, other, None, 0).unwrap();
    run(&mut sim, &mut a, &mut b, 10 * MS, |_, _| false);
    assert_eq!((b.cm.stats().unexpected, b.cm.stats().malformed), (1, 1));
    assert!(b.events.is_empty());
}

/// Runs the link and both CMs without answering connect requests.
fn run_undecided(sim: &mut Sim, a: &mut Node, b: &mut Node, limit: Duration) {
    sim.run_until(limit, |s| {
        let now = s.now;
        a.cm.process(now, s.ep(0));
        b.cm.process(now, s.ep(1));
        for (n, cm) in [(&mut a.events, &mut a.cm), (&mut b.events, &mut b.cm)] {
            while let Some(e) = cm.poll_event() {
                n.push(e);
            }
        }
        false
    });
}

#[test]
fn a_req_repeated_while_the_consumer_decides_gets_an_mra_which_stretches_the_active_timer() {
    // A retries every 50 ms, 3 times: without the MRA it would give up at
    // 200 ms. B has not accepted yet, so its CM answers the repeats with MRAs.
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let id = a.cm.connect(sim.ep(0), a.qpn, B, SERVICE, b"ping", params(0x10)).unwrap();
    run_undecided(&mut sim, &mut a, &mut b, Duration::from_secs(2));
    assert!(b.cm.stats().mra_sent >= 1, "B sent an MRA: {:?}", b.cm.stats());
    assert!(a.cm.stats().mra_received >= 1, "A honoured it: {:?}", a.cm.stats());
    assert!(
        !a.events.iter().any(|e| matches!(e, CmEvent::TimedOut { .. })),
        "no timeout while the MRA's service time (about 68 s) runs: {:?}",
        a.events
    );
    let requests = b.events.iter().filter(|e| matches!(e, CmEvent::ConnectRequest { .. })).count();
    assert_eq!(requests, 1, "repeats are no new requests");
    // B decides now: the connection comes up.
    let CmEvent::ConnectRequest { id: bid, .. } = b.events[0] else { panic!("{:?}", b.events) };
    b.cm.accept(sim.ep(1), bid, b.qpn, b"", params(0x20)).unwrap();
    // (The simulator steps only towards timers; A's is the MRA's, far off.)
    run(&mut sim, &mut a, &mut b, Duration::from_secs(100), |a, b| established(a) && established(b));
    assert!(
        a.events.contains(&CmEvent::Established { id, qpn: a.qpn, remote_qpn: b.qpn }),
        "A: {:?} {:?}\nB: {:?} {:?}",
        a.events,
        a.cm.stats(),
        b.events,
        b.cm.stats()
    );
}

#[test]
fn a_consumer_reject_carries_reason_28_and_private_data() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let id = a.cm.connect(sim.ep(0), a.qpn, B, SERVICE, b"ping", params(0x10)).unwrap();
    sim.run_until(Duration::from_secs(1), |s| {
        let now = s.now;
        a.cm.process(now, s.ep(0));
        b.cm.process(now, s.ep(1));
        while let Some(e) = b.cm.poll_event() {
            if let CmEvent::ConnectRequest { id, .. } = e {
                b.cm.reject(s.ep(1), id, RejReason::CONSUMER_DEFINED, b"go away").unwrap();
            }
        }
        while let Some(e) = a.cm.poll_event() {
            a.events.push(e);
        }
        !a.events.is_empty()
    });
    let [CmEvent::Rejected { id: rid, reason, private_data }] = &a.events[..] else { panic!("{:?}", a.events) };
    assert_eq!((*rid, *reason), (id, RejReason::CONSUMER_DEFINED));
    assert_eq!(&private_data[..7], b"go away");
    assert!(private_data[7..].iter().all(|&b| b == 0));
    assert_eq!(sim.ep(0).query_qp(a.qpn).unwrap().0, QpState::Err);
    // B remembers the rejected REQ for a time-wait, to answer its repeats
    // with the same REJ; then it forgets it without an event.
    assert_eq!((a.cm.connections(), b.cm.connections()), (0, 1));
    let until = b.cm.poll_timeout().expect("the rejected REQ's time-wait");
    b.cm.handle_timeout(until);
    assert_eq!(b.cm.connections(), 0, "nothing left behind");
    assert_eq!(b.cm.poll_event(), None, "no time-wait event for a request the consumer let go");
}

#[test]
fn a_new_req_from_a_connected_qp_is_stale_rej_10_and_the_old_connection_is_torn_down() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    connect(&mut sim, &mut a, &mut b);
    // A "restarts": a fresh CM (new communication IDs) reuses the same QPN
    // towards B, which still holds the old connection.
    let mut a2 = Cm::new(CmConfig { first_comm_id: 0x9000, ..CmConfig::default() });
    sim.ep(0).modify_qp(a.qpn, &QpAttr { qp_state: Some(QpState::Reset), ..QpAttr::default() }).unwrap();
    let id2 = a2.connect(sim.ep(0), a.qpn, B, SERVICE, b"again", params(0x30)).unwrap();
    let mut a2_events = Vec::new();
    b.events.clear();
    sim.run_until(Duration::from_secs(2), |s| {
        let now = s.now;
        a2.process(now, s.ep(0));
        b.cm.process(now, s.ep(1));
        while let Some(e) = a2.poll_event() {
            a2_events.push(e);
        }
        while let Some(e) = b.cm.poll_event() {
            b.events.push(e);
        }
        !a2_events.is_empty() && b.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }))
    });
    assert!(
        matches!(&a2_events[..], [CmEvent::Rejected { id, reason: RejReason::STALE_CONN, .. }] if *id == id2),
        "{a2_events:?}"
    );
    assert_eq!(b.cm.stats().stale_rejected, 1);
    assert!(!b.events.iter().any(|e| matches!(e, CmEvent::ConnectRequest { .. })));
    assert_eq!(sim.ep(1).query_qp(b.qpn).unwrap().0, QpState::Err, "the old connection's QP is torn down");
}

#[test]
fn the_time_wait_ends_with_an_event() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let id = connect(&mut sim, &mut a, &mut b);
    a.cm.disconnect(sim.ep(0), id).unwrap();
    let gone = |n: &Node| n.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }));
    run(&mut sim, &mut a, &mut b, Duration::from_secs(5), |a, b| gone(a) && gone(b));
    let deadline = a.cm.poll_timeout().expect("a time-wait timer");
    a.cm.handle_timeout(sim.now);
    assert_eq!(a.cm.poll_event(), None, "not before its time");
    a.cm.handle_timeout(deadline);
    assert_eq!(a.cm.poll_event(), Some(CmEvent::TimewaitExit { id }));
    assert_eq!(a.cm.connections(), 0);
}

#[test]
fn a_connectx_req_with_an_ece_vendor_id_is_answered_with_zeros() {
    // librdmacm on mlx5 puts the Mellanox vendor ID in the REQ and ECE
    // options in the AttributeModifier; the answer must carry 0 / 0.
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let reps: Rc<RefCell<Vec<CmMadRepr>>> = Rc::default();
    let seen = reps.clone();
    sim.set_tap(move |_, from, pkt| {
        let mad = &pkt[pkt.len() - 4 - 256..pkt.len() - 4];
        if from == 1 {
            if let Ok(m) = CmMadRepr::parse(&Mad::new_checked(mad).unwrap()) {
                seen.borrow_mut().push(m);
            }
        }
        Verdict::Deliver
    });
    let req = rdma_wire::cm::ReqRepr {
        local_comm_id: 0x1234_5678,
        vendor_id: rdma_wire::cm::ECE_VENDOR_MELLANOX,
        service_id: SERVICE,
        local_ca_guid: 0x0202_03ff_fe04_0506,
        local_qkey: 0,
        local_qpn: a.qpn,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: false,
        starting_psn: 0x42,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: rdma_wire::cm::PathRepr {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            hop_limit: 64,
            local_ack_timeout: 17,
            ..rdma_wire::cm::PathRepr::ZERO
        },
        alternate_path: rdma_wire::cm::PathRepr::ZERO,
        sap_supported: false,
        private_data: [0; 92],
    };
    let repr = CmMadRepr { transaction_id: 0x77, attribute_modifier: 0x0000_00ff, message: CmMessage::Req(req) };
    let mut buf = [0u8; 256];
    repr.emit(&mut Mad::new_checked(&mut buf[..]).unwrap()).unwrap();
    sim.ep(0).gsi_send(B, buf, None, 0).unwrap();
    let watch = reps.clone();
    let got_rep = move || watch.borrow().iter().any(|m| matches!(m.message, CmMessage::Rep(_)));
    run(&mut sim, &mut a, &mut b, Duration::from_secs(1), |_, _| got_rep());
    assert!(matches!(b.events[..], [CmEvent::ConnectRequest { .. }]), "{:?}", b.events);
    let reps = reps.borrow();
    let rep = reps.iter().find(|m| matches!(m.message, CmMessage::Rep(_))).expect("B answered with a REP");
    let CmMessage::Rep(r) = rep.message else { unreachable!() };
    assert_eq!((rep.transaction_id, rep.attribute_modifier, r.vendor_id), (0x77, 0, 0));
    assert_eq!(r.remote_comm_id, 0x1234_5678);
}

#[test]
fn sidr_resolves_a_ud_service_and_a_lost_reply_is_sent_again() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let mut dropped = false;
    sim.set_tap(move |_, from, pkt| {
        let mad = &pkt[pkt.len() - 4 - 256..pkt.len() - 4];
        let attr = u16::from_be_bytes([mad[16], mad[17]]);
        if from == 1 && attr == 0x0018 && !dropped {
            dropped = true;
            return Verdict::Drop;
        }
        Verdict::Deliver
    });
    let rid = a.cm.sidr_request(sim.ep(0), B, SERVICE, b"ud?").unwrap();
    let mut requests = 0;
    sim.run_until(Duration::from_secs(2), |s| {
        let now = s.now;
        a.cm.process(now, s.ep(0));
        b.cm.process(now, s.ep(1));
        while let Some(e) = b.cm.poll_event() {
            if let CmEvent::SidrRequest { id, from, service_id, ref private_data } = e {
                assert_eq!((from, service_id, &private_data[..3]), (A, SERVICE, &b"ud?"[..]));
                requests += 1;
                b.cm.sidr_reply(s.ep(1), id, 0, 0x77, 0x0123_4567, b"here").unwrap();
            }
        }
        while let Some(e) = a.cm.poll_event() {
            a.events.push(e);
        }
        !a.events.is_empty()
    });
    assert_eq!(requests, 1, "the repeated SIDR_REQ is answered from the stored reply");
    let [CmEvent::SidrReply { id, status: 0, qpn: 0x77, qkey: 0x0123_4567, ref private_data }] = a.events[..] else {
        panic!("{:?}", a.events)
    };
    assert_eq!((id, &private_data[..4]), (rid, &b"here"[..]));

    // A service nobody listens on: status 1 at once.
    let other = a.cm.sidr_request(sim.ep(0), B, SERVICE + 1, b"").unwrap();
    a.events.clear();
    run(&mut sim, &mut a, &mut b, Duration::from_secs(1), |a, _| !a.events.is_empty());
    assert!(matches!(a.events[..], [CmEvent::SidrReply { id, status: 1, .. }] if id == other), "{:?}", a.events);
}

#[test]
fn a_lost_rtu_is_covered_by_the_first_data_packet() {
    // B would resend its REP only after 500 ms; A's first SEND comes first.
    let (mut sim, mut a, mut b) = setup(CmConfig { response_timeout: 500 * MS, ..CmConfig::default() });
    sim.set_tap(|_, from, pkt| {
        // Only MADs are 256 bytes and more; the attribute ID sits at 16.
        let is_rtu = pkt.len() >= 256 + 4 && {
            let mad = &pkt[pkt.len() - 4 - 256..pkt.len() - 4];
            u16::from_be_bytes([mad[16], mad[17]]) == 0x0014
        };
        if from == 0 && is_rtu {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    // B's receive is posted ahead, in INIT, as rdma_cm applications do.
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(Access::ALL),
        ..QpAttr::default()
    };
    sim.ep(1).modify_qp(b.qpn, &init).unwrap();
    let recv = RecvWr { wr_id: 7, sg_list: vec![Sge { addr: 0x1000, length: 64, lkey: b.lkey }] };
    sim.ep(1).post_recv(b.qpn, recv).unwrap();
    a.cm.connect(sim.ep(0), a.qpn, B, SERVICE, b"", params(0x10)).unwrap();
    run(&mut sim, &mut a, &mut b, Duration::from_secs(1), |a, _| established(a));
    let t0 = sim.now;
    a.mem.write(0, b"first");
    let send = SendWr {
        wr_id: 9,
        op: SendOp::Send,
        sg_list: vec![Sge { addr: 0x1000, length: 5, lkey: a.lkey }],
        signaled: true,
        solicited: false,
        inline_data: None,
        ud: None,
        xrc_srqn: 0,
    };
    sim.ep(0).post_send(a.qpn, send).unwrap();
    run(&mut sim, &mut a, &mut b, Duration::from_secs(2), |_, b| established(b));
    assert!(established(&b), "{:?}", b.events);
    assert!(sim.now < t0 + 100 * MS, "established by the data, not the REP's retry: {:?}", sim.now - t0);
    assert_eq!(b.cm.stats().established_by_data, 1);
}

#[test]
fn the_rep_is_resent_at_the_pace_the_req_asked_for() {
    // A's REQ names a CM response timeout of about 512 ms (2^17 x 4.096 us)
    // and 3 retries; B's own timer (50 ms) does not apply to its REP.
    let mut sim = Sim::new(7, LinkConfig::default());
    sim.add_endpoint(Endpoint::with_seed(A, 1));
    sim.add_endpoint(Endpoint::with_seed(B, 2));
    let mut a = node(&mut sim, 0, CmConfig { response_timeout: 500 * MS, ..CmConfig::default() });
    let mut b = node(&mut sim, 1, CmConfig::default());
    b.cm.listen(SERVICE);
    let reps: Rc<RefCell<Vec<Duration>>> = Rc::default();
    let log = reps.clone();
    let start = sim.now;
    sim.set_tap(move |s, from, pkt| {
        let mad = &pkt[pkt.len() - 4 - 256..pkt.len() - 4];
        match (from, u16::from_be_bytes([mad[16], mad[17]])) {
            (1, 0x0013) => log.borrow_mut().push(s.saturating_since(start)),
            (0, 0x0014) => return Verdict::Drop, // every RTU lost
            _ => {}
        }
        Verdict::Deliver
    });
    a.cm.connect(sim.ep(0), a.qpn, B, SERVICE, b"", params(0x10)).unwrap();
    run(&mut sim, &mut a, &mut b, Duration::from_secs(3), |_, _| false);
    let t = reps.borrow();
    assert!(t.len() >= 3, "{t:?}");
    for w in t.windows(2) {
        let gap = w[1] - w[0];
        assert!(gap >= 500 * MS && gap < 600 * MS, "REP copies {t:?}");
    }
}

// ---- Every handshake path again, on a link that loses, duplicates and
// reorders packets (seeded, so a failing seed replays exactly).

/// 15 % loss, 10 % duplication, 10 % reordering, both ways, on MADs and
/// data alike.
fn lossy() -> LinkConfig {
    LinkConfig { loss: 0.15, duplicate: 0.10, reorder: 0.10, ..LinkConfig::default() }
}

/// rdma_cm's 15 retries: with 15 % loss a handshake step then fails with
/// odds of about 1e-9, so every seed must connect.
fn patient(first_comm_id: u32) -> CmConfig {
    CmConfig { max_retries: 15, first_comm_id, ..CmConfig::default() }
}

thread_local! {
    /// Packets the link lost, duplicated and reordered in this test's runs.
    static FAULTS: RefCell<(u64, u64, u64)> = const { RefCell::new((0, 0, 0)) };
}

/// Checks that the seeds' runs did meet every kind of fault, at least
/// `min` times each (about a third of what the rates give on average).
fn assert_faults_happened(min: u64) {
    let (lost, dup, reord) = FAULTS.with(|f| *f.borrow());
    assert!(lost >= min && dup >= min && reord >= min, "lost {lost}, duplicated {dup}, reordered {reord}");
}

fn count(events: &[CmEvent], f: impl Fn(&CmEvent) -> bool) -> usize {
    events.iter().filter(|e| f(e)).count()
}

/// Ends both time-waits (the simulator steps towards the engines' timers
/// only, not the CMs'), and checks that nothing is left behind.
fn end_time_waits(sim: &mut Sim, a: &mut Node, b: &mut Node, what: &str) {
    FAULTS.with(|f| {
        let mut f = f.borrow_mut();
        f.0 += sim.stats.lost;
        f.1 += sim.stats.duplicated;
        f.2 += sim.stats.reordered;
    });
    for n in [&mut *a, &mut *b] {
        while let Some(t) = n.cm.poll_timeout() {
            n.cm.handle_timeout(t.max(sim.now));
            while let Some(e) = n.cm.poll_event() {
                n.events.push(e);
            }
        }
    }
    assert_eq!((a.cm.connections(), b.cm.connections()), (0, 0), "{what}: connections left behind");
}

#[test]
fn connect_send_and_disconnect_survive_seeded_loss_duplication_and_reordering() {
    for seed in 0..150u64 {
        let (mut sim, mut a, mut b) = setup_on(seed, lossy(), patient(0x100), patient(0x5000));
        let id = a.cm.connect(sim.ep(0), a.qpn, B, SERVICE, b"ping", params(0x10)).unwrap();
        // B may come up only through the first data packet (RTU lost), so
        // A's being up is the signal to post B's receive and send.
        run(&mut sim, &mut a, &mut b, Duration::from_secs(60), |a, _| established(a));
        assert!(established(&a), "seed {seed}: A never connected: {:?} {:?}", a.events, a.cm.stats());
        let recv = RecvWr { wr_id: 7, sg_list: vec![Sge { addr: 0x1000, length: 64, lkey: b.lkey }] };
        sim.ep(1).post_recv(b.qpn, recv).unwrap();
        a.mem.write(0, format!("seed {seed:04}").as_bytes());
        let send = SendWr {
            wr_id: 9,
            op: SendOp::Send,
            sg_list: vec![Sge { addr: 0x1000, length: 9, lkey: a.lkey }],
            signaled: true,
            solicited: false,
            inline_data: None,
            ud: None,
            xrc_srqn: 0,
        };
        sim.ep(0).post_send(a.qpn, send).unwrap();
        let (mut wa, mut wb) = (Vec::new(), Vec::new());
        sim.run_until(Duration::from_secs(60), |s| {
            let now = s.now;
            a.cm.process(now, s.ep(0));
            b.cm.process(now, s.ep(1));
            for (n, cm) in [(&mut a.events, &mut a.cm), (&mut b.events, &mut b.cm)] {
                while let Some(e) = cm.poll_event() {
                    n.push(e);
                }
            }
            wa.extend(s.ep(0).poll_cq(a.cq, 8));
            wb.extend(s.ep(1).poll_cq(b.cq, 8));
            !wa.is_empty() && !wb.is_empty() && established(&b)
        });
        assert_eq!(wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(9, WcStatus::Success)], "seed {seed}");
        assert_eq!(wb.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), [(7, 9)], "seed {seed}");
        let mut got = [0u8; 9];
        b.mem.read(0, &mut got);
        assert_eq!(&got, format!("seed {seed:04}").as_bytes());
        // Duplicated and repeated REQs, REPs and RTUs made one connection.
        assert_eq!(count(&b.events, |e| matches!(e, CmEvent::ConnectRequest { .. })), 1, "seed {seed}: {:?}", b.events);
        assert_eq!(count(&a.events, |e| matches!(e, CmEvent::Established { .. })), 1, "seed {seed}");
        assert_eq!(count(&b.events, |e| matches!(e, CmEvent::Established { .. })), 1, "seed {seed}");
        assert_eq!((a.cm.connections(), b.cm.connections()), (1, 1), "seed {seed}");

        // Either side disconnects; both hear of it once.
        let (closer, cid) = if seed % 2 == 0 {
            (0, id)
        } else {
            let CmEvent::Established { id, .. } = b.events[b.events.len() - 1] else { panic!("{:?}", b.events) };
            (1, id)
        };
        if closer == 0 {
            a.cm.disconnect(sim.ep(0), cid).unwrap();
        } else {
            b.cm.disconnect(sim.ep(1), cid).unwrap();
        }
        let gone = |n: &Node| n.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }));
        run(&mut sim, &mut a, &mut b, Duration::from_secs(60), |a, b| gone(a) && gone(b));
        // The other side answers its DISCONNECTED as librdmacm's consumers do.
        let (other, ep) = if closer == 0 { (&mut b, 1) } else { (&mut a, 0) };
        other.cm.disconnect(sim.ep(ep), disconnected_id(other)).unwrap();
        for (who, n) in [("A", &a), ("B", &b)] {
            assert_eq!(
                count(&n.events, |e| matches!(e, CmEvent::Disconnected { .. })),
                1,
                "seed {seed} {who}: {:?}",
                n.events
            );
            assert!(
                !n.events.iter().any(|e| matches!(e, CmEvent::TimedOut { .. } | CmEvent::Rejected { .. })),
                "seed {seed} {who}"
            );
        }
        assert_eq!(sim.ep(0).query_qp(a.qpn).unwrap().0, QpState::Err);
        assert_eq!(sim.ep(1).query_qp(b.qpn).unwrap().0, QpState::Err);
        // Late duplicates still in flight are answered from the time-wait,
        // never taken for a new connection.
        run(&mut sim, &mut a, &mut b, Duration::from_secs(1), |_, _| false);
        assert_eq!(count(&b.events, |e| matches!(e, CmEvent::ConnectRequest { .. })), 1, "seed {seed}");
        end_time_waits(&mut sim, &mut a, &mut b, &format!("seed {seed}"));
        assert_eq!(count(&a.events, |e| matches!(e, CmEvent::TimewaitExit { .. })), 1, "seed {seed}: {:?}", a.events);
    }
    assert_faults_happened(40);
}

#[test]
fn rejects_and_unknown_services_survive_seeded_loss_and_duplication() {
    for seed in 0..150u64 {
        let (mut sim, mut a, mut b) = setup_on(seed, lossy(), patient(0x100), patient(0x5000));
        // Half the seeds reject in the consumer (REJ 28 with data), half
        // ask for a service nobody listens on (REJ 8 from the CM itself).
        let unknown = seed % 2 == 1;
        let service = if unknown { SERVICE + 1 } else { SERVICE };
        let id = a.cm.connect(sim.ep(0), a.qpn, B, service, b"ping", params(0x10)).unwrap();
        let mut requests = 0;
        sim.run_until(Duration::from_secs(60), |s| {
            let now = s.now;
            // The CMs' own timers too (the simulator steps only towards the
            // engines'): a rejected REQ is forgotten when its time is up.
            a.cm.handle_timeout(now);
            b.cm.handle_timeout(now);
            a.cm.process(now, s.ep(0));
            b.cm.process(now, s.ep(1));
            while let Some(e) = b.cm.poll_event() {
                if let CmEvent::ConnectRequest { id, .. } = e {
                    requests += 1;
                    b.cm.reject(s.ep(1), id, RejReason::CONSUMER_DEFINED, b"no room").unwrap();
                }
            }
            while let Some(e) = a.cm.poll_event() {
                a.events.push(e);
            }
            false
        });
        let [CmEvent::Rejected { id: rid, reason, ref private_data }] = a.events[..] else {
            panic!("seed {seed}: one REJ, whatever was duplicated: {:?}", a.events)
        };
        assert_eq!(rid, id, "seed {seed}");
        if unknown {
            assert_eq!((reason, requests), (RejReason::INVALID_SERVICE_ID, 0), "seed {seed}");
        } else {
            assert_eq!(
                (reason, requests),
                (RejReason::CONSUMER_DEFINED, 1),
                "seed {seed}: repeats are no new requests"
            );
            assert_eq!(&private_data[..7], b"no room");
        }
        assert_eq!(sim.ep(0).query_qp(a.qpn).unwrap().0, QpState::Err, "seed {seed}");
        end_time_waits(&mut sim, &mut a, &mut b, &format!("seed {seed}"));
    }
    assert_faults_happened(10);
}

#[test]
fn sidr_survives_seeded_loss_and_duplication() {
    for seed in 0..150u64 {
        let (mut sim, mut a, mut b) = setup_on(seed, lossy(), patient(0x100), patient(0x5000));
        let rid = a.cm.sidr_request(sim.ep(0), B, SERVICE, b"ud?").unwrap();
        let mut requests = 0;
        sim.run_until(Duration::from_secs(60), |s| {
            let now = s.now;
            a.cm.process(now, s.ep(0));
            b.cm.process(now, s.ep(1));
            while let Some(e) = b.cm.poll_event() {
                if let CmEvent::SidrRequest { id, .. } = e {
                    requests += 1;
                    b.cm.sidr_reply(s.ep(1), id, 0, 0x77, 0x0123_4567, b"here").unwrap();
                }
            }
            while let Some(e) = a.cm.poll_event() {
                a.events.push(e);
            }
            false
        });
        assert_eq!(requests, 1, "seed {seed}: a repeated SIDR_REQ is answered from the stored reply");
        let [CmEvent::SidrReply { id, status: 0, qpn: 0x77, qkey: 0x0123_4567, .. }] = a.events[..] else {
            panic!("seed {seed}: one reply, whatever was duplicated: {:?}", a.events)
        };
        assert_eq!(id, rid, "seed {seed}");
        end_time_waits(&mut sim, &mut a, &mut b, &format!("seed {seed}"));
    }
    assert_faults_happened(10);
}

/// On a device several processes share, each process's CM puts its slot
/// in the top bits of the communication IDs it allocates, and the host
/// steers the peer's replies by them: both sides' IDs carry their
/// prefix, even when the counter starts right below a wrap.
#[test]
fn a_comm_id_prefix_marks_every_local_id_of_both_sides() {
    use rdma_transport::cm::CommIdPrefix;
    let a_prefix = CommIdPrefix { value: 0x05, bits: 7 };
    let b_prefix = CommIdPrefix { value: 0x7f, bits: 7 };
    let a_config = CmConfig { first_comm_id: 0xffff_fffe, comm_id_prefix: Some(a_prefix), ..CmConfig::default() };
    let b_config = CmConfig { comm_id_prefix: Some(b_prefix), ..CmConfig::default() };
    let (mut sim, mut a, mut b) = setup_on(11, LinkConfig::default(), a_config, b_config);
    let id = connect(&mut sim, &mut a, &mut b);
    assert_eq!(id.0 >> 25, 0x05, "{:#x}", id.0);
    let CmEvent::ConnectRequest { id: bid, .. } = b.events[0] else { panic!("{:?}", b.events) };
    assert_eq!(bid.0 >> 25, 0x7f, "{:#x}", bid.0);
    // The prefix replaces the top bits and keeps the rest.
    assert_eq!(a_prefix.apply(0xffff_ffff), 0x0bff_ffff);
    assert_eq!(CommIdPrefix { value: 1, bits: 0 }.apply(0x1234), 0x1234);
}

fn send_wr(wr_id: u64, lkey: u32, len: u32) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send,
        sg_list: vec![Sge { addr: 0x1000, length: len, lkey }],
        signaled: true,
        solicited: false,
        inline_data: None,
        ud: None,
        xrc_srqn: 0,
    }
}

/// Takes `qpn` through INIT, RTR and RTS with the CM's attributes for
/// `id`, as an rdma_cm application does with `rdma_init_qp_attr`;
/// `rq_psn` is the PSN this side advertises (the RDMA CM's choice).
fn move_qp(cm: &Cm, ep: &mut Endpoint, id: ConnId, qpn: u32, rq_psn: u32) {
    for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
        let mut attr = cm.init_qp_attr(ep, id, state).unwrap_or_else(|e| panic!("{state:?} attributes: {e:?}"));
        assert_eq!(attr.qp_state, Some(state));
        if state == QpState::Rtr {
            attr.rq_psn = Some(rq_psn);
        }
        ep.modify_qp(qpn, &attr).unwrap_or_else(|e| panic!("to {state:?}: {e:?}"));
    }
}

#[test]
fn a_qp_the_consumer_moves_connects_with_the_cms_attributes_and_is_never_touched_by_the_cm() {
    let (mut sim, mut a, mut b) = setup(CmConfig::default());
    let external = |psn| ConnParams { consumer_moves_qp: true, ..params(psn) };
    let id = a.cm.connect(sim.ep(0), a.qpn, B, SERVICE, b"ping", external(0x10)).unwrap();
    assert_eq!(sim.ep(0).query_qp(a.qpn).unwrap().0, QpState::Reset, "connect left the QP alone");
    // Before the REP only INIT is known on the active side.
    assert!(a.cm.init_qp_attr(sim.ep(0), id, QpState::Init).is_ok());
    assert_eq!(a.cm.init_qp_attr(sim.ep(0), id, QpState::Rtr), Err(rdma_transport::cm::CmError::WrongState(id)));
    let mut b_id = None;
    sim.run_until(Duration::from_secs(5), |s| {
        let now = s.now;
        a.cm.process(now, s.ep(0));
        b.cm.process(now, s.ep(1));
        while let Some(e) = b.cm.poll_event() {
            if let CmEvent::ConnectRequest { id, .. } = e {
                // The passive application moves its QP before accepting.
                move_qp(&b.cm, s.ep(1), id, b.qpn, 0x20);
                b.cm.accept(s.ep(1), id, b.qpn, b"pong", external(0x20)).unwrap();
                b_id = Some(id);
            }
            b.events.push(e);
        }
        while let Some(e) = a.cm.poll_event() {
            if let CmEvent::ConnectResponse { id, .. } = e {
                assert_eq!(s.ep(0).query_qp(a.qpn).unwrap().0, QpState::Reset, "the REP left the QP alone");
                move_qp(&a.cm, s.ep(0), id, a.qpn, 0x10);
                a.cm.establish(s.ep(0), id).unwrap();
            }
            a.events.push(e);
        }
        established(&b)
    });
    assert_eq!(a.events, vec![CmEvent::ConnectResponse { id, remote_qpn: b.qpn }], "no ESTABLISHED on the active side");
    assert!(matches!(b.events[1], CmEvent::Established { qpn, remote_qpn, .. } if qpn == b.qpn && remote_qpn == a.qpn));
    assert_eq!(a.cm.establish(sim.ep(0), id), Err(rdma_transport::cm::CmError::WrongState(id)), "a second establish");

    // What the attributes carried: peers, depths (swapped and bounded), PSNs.
    let (_, pa) = sim.ep(0).query_qp(a.qpn).unwrap();
    let (_, pb) = sim.ep(1).query_qp(b.qpn).unwrap();
    assert_eq!((pa.dest_qp, pb.dest_qp), (b.qpn, a.qpn));
    assert_eq!((pa.max_rd_atomic, pa.max_dest_rd_atomic), (2, 2));
    // B moved its QP before it accepted: the REQ's offer as it stands
    // (A takes 4, issues 2), as Linux gives it in REQ_RCVD.
    assert_eq!((pb.max_rd_atomic, pb.max_dest_rd_atomic), (4, 2));
    assert_eq!(pb.av.map(|v| v.dest), Some(A));

    // Data both ways: the PSNs agree.
    for (from, to) in [(0, 1), (1, 0)] {
        let (sender, receiver) = if from == 0 { (&a, &b) } else { (&b, &a) };
        let recv = RecvWr { wr_id: 7, sg_list: vec![Sge { addr: 0x1000, length: 64, lkey: receiver.lkey }] };
        sim.ep(to).post_recv(receiver.qpn, recv).unwrap();
        sender.mem.write(0, b"external");
        sim.ep(from).post_send(sender.qpn, send_wr(9, sender.lkey, 8)).unwrap();
        let (mut ws, mut wr) = (Vec::new(), Vec::new());
        sim.run_until(Duration::from_secs(1), |s| {
            ws.extend(s.ep(from).poll_cq(sender.cq, 8));
            wr.extend(s.ep(to).poll_cq(receiver.cq, 8));
            !ws.is_empty() && !wr.is_empty()
        });
        assert_eq!((ws.len(), ws[0].status), (1, WcStatus::Success), "{from} -> {to}");
        assert_eq!((wr[0].status, wr[0].byte_len), (WcStatus::Success, 8), "{from} -> {to}");
    }

    // A disconnect leaves both QPs where their owners put them.
    a.cm.disconnect(sim.ep(0), id).unwrap();
    sim.run_until(Duration::from_secs(5), |s| {
        let now = s.now;
        a.cm.process(now, s.ep(0));
        b.cm.process(now, s.ep(1));
        a.events.extend(std::iter::from_fn(|| a.cm.poll_event()));
        b.events.extend(std::iter::from_fn(|| b.cm.poll_event()));
        a.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }))
            && b.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }))
    });
    assert!(b.events.contains(&CmEvent::Disconnected { id: b_id.unwrap() }));
    assert_eq!(sim.ep(0).query_qp(a.qpn).unwrap().0, QpState::Rts, "the CM moved A's QP");
    assert_eq!(sim.ep(1).query_qp(b.qpn).unwrap().0, QpState::Rts, "the CM moved B's QP");
}
