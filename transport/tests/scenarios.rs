//! Scenario tests: two endpoints on the simulated link, one behaviour
//! each, asserting the exact completions, data and counters.

mod common;

use common::*;
use core::time::Duration;
use rdma_transport::requester::MAX_UNACKED_PSNS;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Side, Sim, Verdict};
use rdma_transport::*;
use rdma_wire::{Opcode, RoceV2Packet};

fn recv(sim: &mut Sim, s: &Side, wr_id: u64, offset: u64, len: u32) {
    sim.ep(s.ep).post_recv(s.qpn, RecvWr { wr_id, sg_list: sge(s, offset, len) }).unwrap();
}

fn post(sim: &mut Sim, s: &Side, wr_id: u64, op: SendOp, offset: u64, len: u32) {
    sim.ep(s.ep).post_send(s.qpn, SendWr::new(wr_id, op, sge(s, offset, len))).unwrap();
}

fn completions(sim: &mut Sim, s: &Side, cq: CqId) -> Vec<WorkCompletion> {
    sim.ep(s.ep).poll_cq(cq, usize::MAX)
}

fn pair(seed: u64) -> (Sim, Side, Side) {
    pair_with(seed, LinkConfig::default(), PairConfig::default())
}

fn pair_with(seed: u64, link: LinkConfig, cfg: PairConfig) -> (Sim, Side, Side) {
    let mut sim = Sim::new(seed, link);
    let (a, b) = connect(&mut sim, cfg);
    (sim, a, b)
}

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn rc_send_of_several_packets_arrives_whole() {
    let (mut sim, a, b) = pair(1);
    let data = fill(&a, 0, 4000, 7);
    recv(&mut sim, &b, 100, 0, 8192);
    post(&mut sim, &a, 1, SendOp::Send, 0, 4000);
    sim.run_idle(LIMIT);
    let rwc = completions(&mut sim, &b, b.recv_cq);
    assert_eq!(rwc.len(), 1);
    assert_eq!(
        (rwc[0].wr_id, rwc[0].status, rwc[0].opcode, rwc[0].byte_len),
        (100, WcStatus::Success, WcOpcode::Recv, 4000)
    );
    assert_eq!(read(&b, 0, 4000), data);
    let swc = completions(&mut sim, &a, a.send_cq);
    assert_eq!(statuses(&swc), [(1, WcStatus::Success)]);
    assert_eq!(swc[0].opcode, WcOpcode::Send);
    // 4 packets and one coalesced ACK: nothing retransmitted.
    assert_eq!(sim.stats.sent, 5);
    assert_eq!(sim.ep(a.ep).stats().retransmits, 0);
}

#[test]
fn rc_write_with_immediate_and_read_and_atomics() {
    let (mut sim, a, b) = pair(2);
    let data = fill(&a, 0, 3000, 1);
    recv(&mut sim, &b, 200, 0, 16);
    post(&mut sim, &a, 1, SendOp::RdmaWriteWithImm { remote_addr: b.va + 100_000, rkey: b.rkey, imm: 0xabcd }, 0, 3000);
    let remote = fill(&b, 200_000, 2500, 9);
    post(&mut sim, &a, 2, SendOp::RdmaRead { remote_addr: b.va + 200_000, rkey: b.rkey }, 10_000, 2500);
    b.mem.write(300_000, &40u64.to_ne_bytes());
    post(&mut sim, &a, 3, SendOp::FetchAdd { remote_addr: b.va + 300_000, rkey: b.rkey, add: 2 }, 20_000, 8);
    post(
        &mut sim,
        &a,
        4,
        SendOp::CompareSwap { remote_addr: b.va + 300_000, rkey: b.rkey, compare: 42, swap: 7 },
        20_008,
        8,
    );
    sim.run_idle(LIMIT);
    assert_eq!(read(&b, 100_000, 3000), data);
    let rwc = completions(&mut sim, &b, b.recv_cq);
    assert_eq!(rwc.len(), 1);
    assert_eq!((rwc[0].opcode, rwc[0].byte_len, rwc[0].imm_data), (WcOpcode::RecvRdmaWithImm, 3000, Some(0xabcd)));
    assert_eq!(read(&a, 10_000, 2500), remote);
    assert_eq!(read(&a, 20_000, 8), 40u64.to_ne_bytes(), "fetch-add returns the original value");
    assert_eq!(read(&a, 20_008, 8), 42u64.to_ne_bytes(), "compare-swap returns the original value");
    assert_eq!(read(&b, 300_000, 8), 7u64.to_ne_bytes(), "42 matched, so 7 was swapped in");
    let swc = completions(&mut sim, &a, a.send_cq);
    assert_eq!(
        statuses(&swc),
        [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success), (4, WcStatus::Success)]
    );
    let ops: Vec<_> = swc.iter().map(|w| w.opcode).collect();
    assert_eq!(ops, [WcOpcode::RdmaWrite, WcOpcode::RdmaRead, WcOpcode::FetchAdd, WcOpcode::CompSwap]);
}

/// What the wire carries for a mix of requests and a READ (one packet
/// lost), with payloads given by reference or copied into the packets.
fn wire_of_a_mix(by_ref: bool) -> (Vec<Vec<u8>>, u64) {
    let (mut sim, a, b) = pair(46);
    sim.ep(a.ep).set_payload_by_reference(by_ref);
    sim.ep(b.ep).set_payload_by_reference(by_ref);
    let wire = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = wire.clone();
    sim.set_filter(move |_, p| {
        seen.borrow_mut().push(p.to_vec());
        // The third packet (a middle one of the SEND) is lost: its retransmission reads the region again.
        if seen.borrow().len() == 3 {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    let sent = fill(&a, 0, 10_001, 5);
    let written = fill(&a, 20_000, 601, 6); // above BY_REF_MIN, with two bytes of pad
    let small = fill(&a, 30_000, 100, 7); // below it: always copied
    let remote = fill(&b, 200_000, 5_003, 8);
    recv(&mut sim, &b, 1, 0, 20_000);
    recv(&mut sim, &b, 2, 20_000, 200);
    post(&mut sim, &a, 1, SendOp::Send, 0, 10_001);
    post(&mut sim, &a, 2, SendOp::RdmaWrite { remote_addr: b.va + 100_000, rkey: b.rkey }, 20_000, 601);
    post(&mut sim, &a, 3, SendOp::RdmaRead { remote_addr: b.va + 200_000, rkey: b.rkey }, 50_000, 5_003);
    post(&mut sim, &a, 4, SendOp::Send, 30_000, 100);
    sim.run_idle(LIMIT);
    let ok = |n| (1..=n).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>();
    assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), ok(4));
    assert_eq!(statuses(&completions(&mut sim, &b, b.recv_cq)), ok(2));
    assert_eq!((read(&b, 0, 10_001), read(&b, 100_000, 601)), (sent, written));
    assert_eq!((read(&a, 50_000, 5_003), read(&b, 20_000, 100)), (remote, small));
    assert!(sim.ep(a.ep).stats().retransmits > 0);
    let packets = wire.borrow().clone();
    (packets, sim.stats.by_reference)
}

#[test]
fn payloads_given_by_reference_put_the_same_bytes_on_the_wire_as_copies() {
    let (copied, none) = wire_of_a_mix(false);
    let (by_ref, n) = wire_of_a_mix(true);
    assert_eq!(none, 0);
    // Every packet with a payload of BY_REF_MIN bytes or more, and no other.
    let big = copied
        .iter()
        .filter(|p| RoceV2Packet::new_checked(&p[..]).unwrap().transport().payload().len() >= framing::BY_REF_MIN)
        .count();
    assert!(big > 10);
    assert_eq!(n, big as u64, "packets given by reference");
    assert_eq!(copied.len(), by_ref.len());
    for (i, (c, r)) in copied.iter().zip(&by_ref).enumerate() {
        assert!(c == r, "packet {i} differs");
        assert!(RoceV2Packet::new_checked(&r[..]).unwrap().icrc_ok(), "packet {i}: ICRC");
    }
}

/// Drops the `nth` packet (0-based) from endpoint `from` whose opcode is `op`.
fn drop_nth(sim: &mut Sim, from: usize, op: Opcode, nth: usize) {
    let mut seen = 0;
    sim.set_filter(move |src, p| {
        if src == from && opcode_of(p) == op {
            seen += 1;
            if seen == nth + 1 {
                return Verdict::Drop;
            }
        }
        Verdict::Deliver
    });
}

#[test]
fn lost_first_middle_or_last_packet_is_recovered_by_go_back_n() {
    for (op, nth) in [(Opcode::RC_SEND_FIRST, 0), (Opcode::RC_SEND_MIDDLE, 1), (Opcode::RC_SEND_LAST, 0)] {
        let (mut sim, a, b) = pair(3);
        let data = fill(&a, 0, 5000, 3);
        recv(&mut sim, &b, 1, 0, 5000);
        drop_nth(&mut sim, a.ep, op, nth);
        post(&mut sim, &a, 1, SendOp::Send, 0, 5000);
        sim.run_idle(LIMIT);
        assert_eq!(read(&b, 0, 5000), data, "{op:?}");
        assert_eq!(statuses(&completions(&mut sim, &b, b.recv_cq)), [(1, WcStatus::Success)], "{op:?}");
        assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), [(1, WcStatus::Success)], "{op:?}");
        let s = sim.ep(a.ep).stats();
        assert!(s.retransmits >= 1, "{op:?}: {s:?}");
        if op == Opcode::RC_SEND_LAST {
            // Nothing after the last packet reveals the gap: the ACK timer does.
            assert_eq!(s.timeouts, 1, "{op:?}");
        } else {
            // The next packet arrives out of sequence: one NAK, no timeout.
            assert_eq!(sim.ep(b.ep).stats().naks_sent, 1, "{op:?}");
            assert_eq!(s.timeouts, 0, "{op:?}");
        }
    }
}

#[test]
fn lost_ack_is_covered_by_a_timeout_and_a_duplicate_is_re_acked() {
    let (mut sim, a, b) = pair(4);
    fill(&a, 0, 100, 1);
    recv(&mut sim, &b, 1, 0, 100);
    drop_nth(&mut sim, b.ep, Opcode::RC_ACKNOWLEDGE, 0);
    post(&mut sim, &a, 1, SendOp::Send, 0, 100);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), [(1, WcStatus::Success)]);
    assert_eq!(statuses(&completions(&mut sim, &b, b.recv_cq)), [(1, WcStatus::Success)], "delivered once");
    assert_eq!(sim.ep(a.ep).stats().timeouts, 1);
    assert_eq!(sim.ep(b.ep).stats().duplicates, 1);
}

#[test]
fn lost_read_response_resumes_where_the_responses_stopped() {
    let (mut sim, a, b) = pair(5);
    let remote = fill(&b, 0, 5000, 5);
    post(&mut sim, &a, 1, SendOp::RdmaRead { remote_addr: b.va, rkey: b.rkey }, 0, 5000);
    let mut requests = Vec::new();
    let mut drops = 0;
    sim.set_filter(move |src, p| {
        let op = opcode_of(p);
        if src == 0 && op == Opcode::RC_RDMA_READ_REQUEST {
            let t = RoceV2Packet::new_checked(p).unwrap();
            let tp = t.transport();
            requests.push((psn_of(p), tp.reth().unwrap().dma_len()));
            assert!(requests.len() <= 2, "{requests:?}");
            if requests.len() == 2 {
                // Re-issued for the missing part only: from PSN 0x12, 3 KiB in.
                assert_eq!(requests[1], (0x12, 5000 - 2048), "{requests:?}");
            }
        }
        if src == 1 && op == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE && drops == 0 && psn_of(p) == 0x12 {
            drops += 1;
            return Verdict::Drop;
        }
        Verdict::Deliver
    });
    sim.run_idle(LIMIT);
    assert_eq!(read(&a, 0, 5000), remote);
    assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), [(1, WcStatus::Success)]);
    assert_eq!(sim.ep(a.ep).stats().implied_naks, 1, "the LAST response after the gap reveals it");
}

#[test]
fn rnr_retry_then_success_when_the_receive_is_posted_late() {
    let (mut sim, a, b) = pair(6);
    let data = fill(&a, 0, 64, 2);
    post(&mut sim, &a, 1, SendOp::Send, 0, 64);
    // Run until the first RNR NAK has come back, then post the receive.
    assert!(sim.run_until(LIMIT, |s| s.ep(0).stats().rnr_naks_received >= 1));
    recv(&mut sim, &b, 9, 0, 64);
    sim.run_idle(LIMIT);
    assert_eq!(read(&b, 0, 64), data);
    assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), [(1, WcStatus::Success)]);
    assert_eq!(statuses(&completions(&mut sim, &b, b.recv_cq)), [(9, WcStatus::Success)]);
    assert_eq!(sim.ep(b.ep).stats().rnr_naks_sent, 1);
    // The retry waited the advertised timer (code 1 = 10 us) at least.
    assert!(sim.now >= Instant::from_nanos(10_000));
}

#[test]
fn rnr_retry_exhaustion_fails_the_request_and_flushes_the_rest() {
    let cfg = PairConfig { rnr_retry: 2, ..PairConfig::default() };
    let (mut sim, a, b) = pair_with(7, LinkConfig::default(), cfg);
    post(&mut sim, &a, 1, SendOp::Send, 0, 8);
    post(&mut sim, &a, 2, SendOp::Send, 0, 8);
    sim.run_idle(LIMIT);
    let wcs = completions(&mut sim, &a, a.send_cq);
    assert_eq!(statuses(&wcs), [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(sim.ep(b.ep).stats().rnr_naks_sent, 3, "the first try and two retries");
    assert_eq!(sim.ep(a.ep).query_qp(a.qpn).unwrap().0, QpState::Err);
    assert_eq!(sim.ep(a.ep).poll_event(), Some(AsyncEvent::QpFatal(a.qpn)));
}

#[test]
fn retry_exhaustion_when_the_peer_is_gone() {
    let cfg = PairConfig { retry_cnt: 3, timeout: 8, ..PairConfig::default() };
    let (mut sim, a, b) = pair_with(8, LinkConfig::default(), cfg);
    sim.set_filter(|src, _| if src == 0 { Verdict::Drop } else { Verdict::Deliver });
    post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, 0, 100);
    post(&mut sim, &a, 2, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, 0, 100);
    sim.run_idle(LIMIT);
    assert_eq!(
        statuses(&completions(&mut sim, &a, a.send_cq)),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    let s = sim.ep(a.ep).stats();
    assert_eq!(s.timeouts, 4, "the first timeout and one per retry");
    // 4.096 us x 2^8 = 1.048 ms per timeout.
    assert!(sim.now >= Instant::from_nanos(4 * 1_048_576), "{:?}", sim.now);
}

#[test]
fn rkey_bounds_and_access_violations_answer_with_remote_access_errors() {
    type Case = (&'static str, fn(&Side) -> SendOp, u32);
    let cases: [Case; 4] = [
        ("bad rkey", |b| SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey ^ 0x300 }, 8),
        ("WRITE past the end", |b| SendOp::RdmaWrite { remote_addr: b.va + (1 << 20) - 4, rkey: b.rkey }, 8),
        ("READ before the start", |b| SendOp::RdmaRead { remote_addr: b.va - 1, rkey: b.rkey }, 8),
        ("misaligned atomic", |b| SendOp::FetchAdd { remote_addr: b.va + 4, rkey: b.rkey, add: 1 }, 8),
    ];
    for (name, op, len) in cases {
        let (mut sim, a, b) = pair(9);
        let before = read(&b, 0, 64);
        post(&mut sim, &a, 1, op(&b), 0, len);
        post(&mut sim, &a, 2, SendOp::Send, 0, 8);
        sim.run_idle(LIMIT);
        let want = if name == "misaligned atomic" { WcStatus::RemInvReqErr } else { WcStatus::RemAccessErr };
        assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), [(1, want), (2, WcStatus::WrFlushErr)], "{name}");
        assert_eq!(read(&b, 0, 64), before, "{name}: nothing written");
        let why = if name == "misaligned atomic" { Drop::MisalignedAtomic } else { Drop::RkeyViolation };
        assert_eq!(sim.ep(b.ep).stats().drops_for(why), 1, "{name}");
    }
}

#[test]
fn access_flags_and_protection_domains_are_enforced() {
    for case in ["region without REMOTE_WRITE", "region of another PD"] {
        let (mut sim, a, b) = pair(10);
        let target = RegionMemory::zeroed(64);
        let ep = sim.ep(b.ep);
        let (pd, access) = match case {
            "region without REMOTE_WRITE" => (b.pd, Access::REMOTE_READ | Access::LOCAL_WRITE),
            _ => (ep.alloc_pd(), Access::ALL),
        };
        let (_, rkey) = ep.reg_mr(pd, 0x1000, target.clone(), access);
        fill(&a, 0, 16, 1);
        post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: 0x1000, rkey }, 0, 16);
        sim.run_idle(LIMIT);
        assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), [(1, WcStatus::RemAccessErr)], "{case}");
        assert_eq!(target.to_vec(), vec![0u8; 64], "{case}: nothing written");
        assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::RkeyViolation), 1, "{case}");
    }
}

#[test]
fn an_rc_sender_keeps_at_most_128_unacknowledged_psns_in_flight() {
    // Found against kernel Soft-RoCE in the lab: without a window, a slow
    // receiver that drops one packet gets the whole send queue again.
    let cfg = PairConfig { retry_cnt: 1, timeout: 8, ..PairConfig::default() };
    let (mut sim, a, b) = pair_with(21, LinkConfig::default(), cfg);
    let psns = std::rc::Rc::new(std::cell::RefCell::new(std::collections::BTreeSet::new()));
    let seen = psns.clone();
    sim.set_filter(move |src, p| {
        if src == 0 {
            seen.borrow_mut().insert(psn_of(p));
            Verdict::Deliver
        } else {
            Verdict::Drop // no ACK ever comes back
        }
    });
    // 300 packets of 1024 bytes
    post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, 0, 300 * 1024);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), [(1, WcStatus::RetryExcErr)]);
    assert_eq!(psns.borrow().len(), MAX_UNACKED_PSNS as usize, "distinct PSNs sent without an ACK");

    // With ACKs the window moves and the whole message lands.
    let (mut sim, a, b) = pair(22);
    let data = fill(&a, 0, 300 * 1024, 5);
    post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, 0, 300 * 1024);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), [(1, WcStatus::Success)]);
    assert_eq!(read(&b, 0, 300 * 1024), data);
    assert_eq!(sim.ep(a.ep).stats().retransmits, 0);
}

/// `from` sends `to` one message and both sides drain their completions,
/// so that `from`'s QP has sent a request lately (it is conversing).
fn converse(sim: &mut Sim, from: &Side, to: &Side) {
    recv(sim, to, 900, 512, 64);
    post(sim, from, 901, SendOp::Send, 512, 8);
    assert!(sim.run_until(LIMIT, |s| s.ep(from.ep).cq_len(from.send_cq) > 0));
    completions(sim, from, from.send_cq);
    completions(sim, to, to.recv_cq);
}

/// A pair where `b`, conversing and with an ACK delay, has just taken a
/// SEND from `a` and holds its ACK back.
fn holding_an_ack(seed: u64, delay: Duration) -> (Sim, Side, Side) {
    let (mut sim, a, b) = pair(seed);
    sim.ep(b.ep).set_ack_delay(delay);
    converse(&mut sim, &b, &a);
    recv(&mut sim, &b, 100, 0, 64);
    post(&mut sim, &a, 1, SendOp::Send, 0, 8);
    assert!(sim.run_until(LIMIT, |s| s.ep(b.ep).cq_len(b.recv_cq) > 0));
    assert!(sim.ep(b.ep).holds_acks(), "the ACK is held");
    (sim, a, b)
}

/// The opcodes a side sends, in the order they leave.
type Sent = std::rc::Rc<std::cell::RefCell<Vec<Opcode>>>;

/// A conversing pair where `b`, with an ACK delay (and ACKs ahead of
/// requests if `ack_first`), has taken a SEND from `a` while holding its
/// ACK, and then posts a reply; returns what `b` sent and when the SEND
/// arrived.
fn replying(seed: u64, delay: Duration, ack_first: bool) -> (Sim, Side, Side, Sent, Instant) {
    let (mut sim, a, b) = pair(seed);
    sim.ep(b.ep).set_ack_delay(delay);
    sim.ep(b.ep).set_ack_before_requests(ack_first);
    converse(&mut sim, &b, &a);
    let from_b: Sent = Default::default();
    let seen = from_b.clone();
    let b_index = b.ep;
    sim.set_filter(move |src, p| {
        if src == b_index {
            seen.borrow_mut().push(opcode_of(p));
        }
        Verdict::Deliver
    });
    recv(&mut sim, &a, 200, 0, 64);
    recv(&mut sim, &b, 100, 0, 64);
    post(&mut sim, &a, 1, SendOp::Send, 0, 8);
    assert!(sim.run_until(LIMIT, |s| s.ep(b.ep).cq_len(b.recv_cq) > 0));
    let arrived = sim.now;
    assert!(from_b.borrow().is_empty(), "the ACK is held until there is something to send");
    post(&mut sim, &b, 2, SendOp::Send, 100, 8);
    (sim, a, b, from_b, arrived)
}

#[test]
fn a_held_ack_leaves_after_the_next_packet_sent_or_alone_when_its_delay_passes() {
    let delay = Duration::from_micros(20);
    // Alone: nothing else to send, so the ACK leaves when the delay has
    // passed; a QP that has not sent anything itself ACKs at once.
    for (d, conversing, seed) in [(Duration::ZERO, true, 40), (delay, true, 41), (delay, false, 43)] {
        let (mut sim, a, b) = pair(seed);
        sim.ep(b.ep).set_ack_delay(d);
        if conversing {
            converse(&mut sim, &b, &a);
        }
        let sent_before = sim.stats.sent;
        recv(&mut sim, &b, 100, 0, 64);
        post(&mut sim, &a, 1, SendOp::Send, 0, 8);
        assert!(sim.run_until(LIMIT, |s| s.ep(b.ep).cq_len(b.recv_cq) > 0));
        let arrived = sim.now;
        let held = !d.is_zero() && conversing;
        if held {
            assert!(sim.ep(b.ep).poll_timeout().is_some_and(|t| t <= arrived + d), "the held ACK has a deadline");
        }
        assert!(sim.run_until(LIMIT, |s| s.ep(a.ep).cq_len(a.send_cq) > 0));
        let acked_after = sim.now - arrived;
        if held {
            assert!(acked_after >= d && acked_after < d + delay / 2, "a held ACK took {acked_after:?}");
        } else {
            assert!(acked_after < delay / 2, "an immediate ACK took {acked_after:?} (conversing: {conversing})");
        }
        assert_eq!(statuses(&completions(&mut sim, &a, a.send_cq)), [(1, WcStatus::Success)]);
        assert_eq!(sim.stats.sent - sent_before, 2, "one SEND, one ACK");
    }

    // A reply: the ACK leaves right after it, in the same round, long before the delay.
    let (mut sim, a, _, from_b, arrived) = replying(42, delay, false);
    assert!(sim.run_until(LIMIT, |s| s.ep(a.ep).cq_len(a.send_cq) > 0));
    assert!(sim.now - arrived < delay / 2, "the ACK left with the reply, not after the delay");
    assert_eq!(from_b.borrow()[..2], [Opcode::RC_SEND_ONLY, Opcode::RC_ACKNOWLEDGE]);

    // Driven by hand: `poll_transmit_fresh` gives the reply and stops short
    // of the ACK it releases (not even built), which `poll_transmit` gives next.
    let (mut sim, _, b) = holding_an_ack(45, delay);
    post(&mut sim, &b, 2, SendOp::Send, 100, 8);
    let (now, mut buf) = (sim.now, vec![0u8; MAX_PACKET]);
    let ep = sim.ep(b.ep);
    let reply = ep.poll_transmit_fresh(now, &mut buf).expect("the reply");
    assert_eq!((opcode_of(&buf[..reply.len]), reply.released_ack), (Opcode::RC_SEND_ONLY, false));
    assert!(ep.poll_transmit_fresh(now, &mut buf).is_none(), "only the released ACK is left");
    assert!(ep.holds_acks(), "and it is not built yet");
    let ack = ep.poll_transmit(now, &mut buf).expect("the released ACK");
    assert_eq!((opcode_of(&buf[..ack.len]), ack.released_ack), (Opcode::RC_ACKNOWLEDGE, true));
    assert!(ep.poll_transmit(now, &mut buf).is_none(), "the round is over");
    assert!(!ep.holds_acks());

    // Asked to (the drop-in libibverbs, as hardware orders them), the held
    // ACK leaves ahead of the reply instead, still without its delay: the
    // peer completes its send before it sees the reply.
    let (mut sim, a, _, from_b, arrived) = replying(46, delay, true);
    assert!(sim.run_until(LIMIT, |s| s.ep(a.ep).cq_len(a.recv_cq) > 0));
    assert!(sim.now - arrived < delay / 2, "the ACK did not wait for its delay");
    assert_eq!(from_b.borrow()[..2], [Opcode::RC_ACKNOWLEDGE, Opcode::RC_SEND_ONLY]);
    assert_eq!(sim.ep(a.ep).cq_len(a.send_cq), 1, "A's send completed before its reply arrived");

    // Released: a driver about to destroy the QP sends the held ACK at once.
    let (mut sim, a, b) = holding_an_ack(44, delay);
    let arrived = sim.now;
    sim.ep(b.ep).release_acks();
    assert!(sim.run_until(LIMIT, |s| s.ep(a.ep).cq_len(a.send_cq) > 0));
    assert!(sim.now - arrived < delay / 2, "the released ACK did not wait for its delay");
    assert!(!sim.ep(b.ep).holds_acks());
}

#[test]
fn rnr_naks_with_packets_in_flight_behind_them_spend_no_transport_retries() {
    // A receiver that is slow to post its receives (qperf's rc_bw server
    // on a busy host): each SEND behind the one RNR NAKed arrives ahead of
    // the expected PSN. They must be dropped silently until the RNR NAKed
    // PSN is retried; a PSN sequence error NAK for each RNR episode spent a
    // transport retry every time, and after retry_cnt episodes at the same
    // PSN the requester failed with RetryExcErr.
    let cfg = PairConfig { retry_cnt: 2, rnr_retry: 7, ..PairConfig::default() };
    let (mut sim, a, b) = pair_with(21, LinkConfig::default(), cfg);
    for i in 0..16 {
        post(&mut sim, &a, i, SendOp::Send, 0, 8);
    }
    let waited = sim.run_until(LIMIT, |s| s.ep(1).stats().rnr_naks_sent >= 6);
    assert!(waited, "{:?}", statuses(&completions(&mut sim, &a, a.send_cq)));
    for i in 0..16 {
        recv(&mut sim, &b, 100 + i, 0, 64);
    }
    sim.run_idle(LIMIT);
    let wcs = completions(&mut sim, &a, a.send_cq);
    assert_eq!(wcs.len(), 16);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{:?}", statuses(&wcs));
    assert_eq!(completions(&mut sim, &b, b.recv_cq).len(), 16);
}
