//! A hostile peer against the responder, on the simulated link: crafted
//! requests (with correct ICRCs, from the connected peer's address, so they
//! pass every framing check) go straight into a device, and the tests
//! assert what it sends back, what it writes and the states it ends in.
//! The live version over UDP sockets is `tests/hostile_peer.rs`.

mod common;

use common::hostile::*;
use common::*;
use core::net::IpAddr;
use core::time::Duration;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Side, Sim};
use rdma_transport::*;
use rdma_wire::{AtomicEthRepr, BthRepr, NakCode, Opcode, Psn, RethRepr, RoceV2Packet, Syndrome, TransportRepr};

const LIMIT: Duration = Duration::from_secs(10);

fn pair(cfg: PairConfig) -> (Sim, Side, Side) {
    let mut sim = Sim::new(7, LinkConfig::default());
    let (a, b) = connect(&mut sim, cfg);
    (sim, a, b)
}

fn read_request(b: &Side, psn: u32, offset: u64, len: u32) -> Vec<u8> {
    let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_READ_REQUEST, b.qpn, Psn::new(psn)));
    tr.reth = Some(RethRepr { va: b.va + offset, rkey: b.rkey, dma_len: len });
    craft(&tr, &[])
}

fn write_only(b: &Side, psn: u32, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, b.qpn, Psn::new(psn));
    bth.ack_req = true;
    let mut tr = TransportRepr::new(bth);
    tr.reth = Some(RethRepr { va: b.va + offset, rkey: b.rkey, dma_len: data.len() as u32 });
    craft(&tr, data)
}

/// What one device sent when drained: (packets, bytes on the wire, the packets).
fn drain(ep: &mut Endpoint, now: Instant, max_packets: usize) -> (usize, usize, Vec<Vec<u8>>) {
    let mut buf = vec![0u8; MAX_PACKET];
    let (mut n, mut bytes, mut kept) = (0, 0, Vec::new());
    while n < max_packets {
        let Some(t) = ep.poll_transmit(now, &mut buf) else { break };
        n += 1;
        bytes += t.wire_len();
        if kept.len() < 64 {
            kept.push(buf[..t.len].to_vec());
        }
    }
    (n, bytes, kept)
}

fn syndrome_of(p: &[u8]) -> Option<Syndrome> {
    let p = RoceV2Packet::new_checked(p).unwrap();
    let t = p.transport();
    t.aeth().map(|a| a.syndrome())
}

/// 250 copies of a READ of the whole 1 MiB region: the responder answers
/// the READ once, not 251 times (each duplicate takes the place of the
/// answer still queued for it).
#[test]
fn duplicate_reads_do_not_amplify() {
    let (mut sim, _a, b) = pair(PairConfig::default());
    let len = 1 << 20;
    let ep = sim.ep(b.ep);
    let read = read_request(&b, EPSN, 0, len);
    for _ in 0..251 {
        ep.handle_packet(Instant::ZERO, &read);
    }
    let (_, bytes, _) = drain(ep, Instant::ZERO, usize::MAX);
    let once = len as usize;
    assert!(bytes >= once && bytes < once + once / 10, "sent {bytes} bytes for one READ of {once}");
    assert_eq!(ep.stats().duplicates, 250);

    // Duplicates that arrive while the answer is half sent restart it
    // from the PSN asked for: each costs at most one READ's worth more.
    for _ in 0..3 {
        ep.handle_packet(Instant::ZERO, &read);
        drain(ep, Instant::ZERO, 300);
        for _ in 0..50 {
            ep.handle_packet(Instant::ZERO, &read);
        }
    }
    let (_, bytes, _) = drain(ep, Instant::ZERO, usize::MAX);
    assert!(bytes <= once + once / 10, "sent {bytes} bytes after the restarts");
}

/// A READ whose PSN was never sent (3,000,000 behind the expected PSN, so
/// in the duplicate half of the PSN space) matches no responder resource:
/// no region data goes out, and it is counted.
#[test]
fn a_read_with_a_never_sent_psn_gets_no_data() {
    let (mut sim, _a, b) = pair(PairConfig::default());
    fill(&b, 0, 4096, 3);
    let ep = sim.ep(b.ep);
    let ghost = Psn::new(EPSN).sub(3_000_000).value();
    ep.handle_packet(Instant::ZERO, &read_request(&b, ghost, 0, 4096));
    let (n, _, _) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(n, 0, "a READ never sent was answered");
    assert_eq!(ep.stats().drops_for(Drop::DuplicateUnknown), 1);

    // ... and an in-sequence WRITE right after it is executed and ACKed at once.
    ep.handle_packet(Instant::ZERO, &write_only(&b, EPSN, 8192, b"after the ghost"));
    let (n, _, pkts) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(n, 1);
    assert_eq!(syndrome_of(&pkts[0]), Some(Syndrome::ACK_UNLIMITED));
    assert_eq!(read(&b, 8192, 15), b"after the ghost");
}

/// A duplicate READ must ask for (part of) what the remembered READ read:
/// more bytes, another address or another key are dropped.
#[test]
fn a_duplicate_read_that_reaches_further_is_dropped() {
    let (mut sim, _a, b) = pair(PairConfig::default());
    let ep = sim.ep(b.ep);
    ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN, 0, 2048));
    drain(ep, Instant::ZERO, usize::MAX);
    for (offset, len) in [(0, 4096), (1024, 2048), (4096, 1024)] {
        ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN, offset, len));
    }
    let (n, _, _) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(n, 0);
    assert_eq!(ep.stats().drops_for(Drop::DuplicateUnknown), 3);
    // The READ itself, and its second half (a retry from its second PSN), are answered.
    ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN + 1, 1024, 1024));
    let (n, bytes, _) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(n, 1);
    assert!(bytes > 1024 && bytes < 1200);
}

/// A requester that keeps more READs in flight than the responder
/// advertised (`max_dest_rd_atomic`, 16 here) gets NAK Invalid Request,
/// and the connection ends: the answers one QP can queue are bounded.
#[test]
fn reads_past_max_dest_rd_atomic_are_refused() {
    let (mut sim, _a, b) = pair(PairConfig::default());
    let ep = sim.ep(b.ep);
    for i in 0..17 {
        ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN + i, 0, 64));
    }
    assert_eq!(ep.stats().drops_for(Drop::TooManyReads), 1);
    let (_, _, pkts) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(syndrome_of(pkts.last().unwrap()), Some(Syndrome::Nak(NakCode::InvalidRequest)));
    assert_eq!(ep.query_qp(b.qpn).unwrap().0, QpState::Err);
    assert_eq!(ep.poll_event(), Some(AsyncEvent::QpFatal(b.qpn)));
}

/// A stale copy of a READ the requester already completed (delayed on the
/// way, then repeated to the responder) is answered again, but takes no
/// responder resource from the READs really outstanding: an honest
/// requester with all of `max_dest_rd_atomic` in flight meanwhile is not
/// refused. (The one-hour soak under loss and reordering ended a READ run
/// with NAK Invalid Request this way.)
#[test]
fn a_stale_duplicate_read_takes_no_resource_from_the_reads_in_flight() {
    let cfg = PairConfig { max_rd_atomic: 2, ..PairConfig::default() };
    let (mut sim, _a, b) = pair(cfg);
    let ep = sim.ep(b.ep);
    // READ 0 is answered and (at the requester) completed.
    ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN, 0, 64));
    drain(ep, Instant::ZERO, usize::MAX);
    // Its delayed copy arrives; then READs 1 and 2, the two in flight.
    ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN, 0, 64));
    ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN + 1, 0, 64));
    ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN + 2, 0, 64));
    assert_eq!(ep.stats().drops_for(Drop::TooManyReads), 0, "an honest requester was refused");
    let (n, _, pkts) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(n, 3, "READ 0 again, READ 1 and READ 2");
    assert!(pkts.iter().all(|p| syndrome_of(p).is_some_and(|s| s.is_ack())));
    assert_eq!(ep.query_qp(b.qpn).unwrap().0, QpState::Rts);
    // A third READ in flight is still one too many.
    for psn in [EPSN + 3, EPSN + 4, EPSN + 5] {
        ep.handle_packet(Instant::ZERO, &read_request(&b, psn, 0, 64));
    }
    assert_eq!(ep.stats().drops_for(Drop::TooManyReads), 1);
}

fn fetch_add(b: &Side, psn: u32, offset: u64) -> Vec<u8> {
    let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_FETCH_ADD, b.qpn, Psn::new(psn)));
    tr.atomic_eth = Some(AtomicEthRepr { va: b.va + offset, rkey: b.rkey, swap_add: 1, compare: 0 });
    craft(&tr, &[])
}

/// Replays do not count against `max_dest_rd_atomic`: a requester whose
/// ACK timer fired resends its 16 atomics (each answered again from its
/// saved result, and queued behind a slow sender), then the first answers,
/// already on their way, arrive, and it posts 16 new atomics, within its
/// limit. Those must be executed, not refused as a 17th and more: the
/// queued replays answer requests the requester has since completed.
/// (qperf's `rc_fetch_add_mr` and `rc_compare_swap_mr` on two busy native
/// IB devices: "Remote invalid request" after a local ACK timeout.)
#[test]
fn replayed_atomics_do_not_use_up_the_responder_resources() {
    let (mut sim, _a, b) = pair(PairConfig::default());
    let ep = sim.ep(b.ep);
    for i in 0..16 {
        ep.handle_packet(Instant::ZERO, &fetch_add(&b, EPSN + i, 8 * u64::from(i)));
    }
    let (n, _, _) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(n, 16, "the 16 atomics answered");
    // The timeout's go-back-N: all 16 again, answered again (not run again), not yet sent.
    for i in 0..16 {
        ep.handle_packet(Instant::ZERO, &fetch_add(&b, EPSN + i, 8 * u64::from(i)));
    }
    assert_eq!(ep.stats().duplicates, 16);
    // 16 new ones, as the requester completed the first 16.
    for i in 16..32 {
        ep.handle_packet(Instant::ZERO, &fetch_add(&b, EPSN + i, 8 * u64::from(i)));
    }
    assert_eq!(ep.stats().drops_for(Drop::TooManyReads), 0, "no new atomic refused");
    let (n, _, pkts) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(n, 32, "16 replays and 16 new answers");
    assert!(pkts.iter().all(|p| syndrome_of(p) == Some(Syndrome::ACK_UNLIMITED)), "no NAK");
    assert_eq!(ep.query_qp(b.qpn).unwrap().0, QpState::Rts);
    // Each atomic ran once: every counter is 1.
    for i in 0..32 {
        assert_eq!(read(&b, 8 * i, 8), 1u64.to_ne_bytes(), "counter {i}");
    }
    // A requester past the limit is still refused: 16 new ones queued, one more.
    for i in 32..49 {
        ep.handle_packet(Instant::ZERO, &fetch_add(&b, EPSN + i, 8 * u64::from(i)));
    }
    assert_eq!(ep.stats().drops_for(Drop::TooManyReads), 1);
}

/// The limit is no limit for a requester that honours it: 1,000 READs
/// through a responder that takes 4 at a time all complete.
#[test]
fn a_requester_within_the_limit_reads_on() {
    let cfg = PairConfig { max_rd_atomic: 4, ..PairConfig::default() };
    let (mut sim, a, b) = pair(cfg);
    let data = fill(&b, 0, 4096, 9);
    for i in 0..1000u64 {
        let sg = sge(&a, (i % 16) * 4096, 4096);
        let wr = SendWr::new(i, SendOp::RdmaRead { remote_addr: b.va, rkey: b.rkey }, sg);
        sim.ep(a.ep).post_send(a.qpn, wr).unwrap();
        if i % 64 == 63 {
            sim.run_idle(LIMIT);
        }
    }
    sim.run_idle(LIMIT);
    let wcs = sim.ep(a.ep).poll_cq(a.send_cq, usize::MAX);
    assert_eq!(wcs.len(), 1000);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(read(&a, 15 * 4096, 4096), data);
    assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::TooManyReads), 0);
}

/// An RNR NAK on an RDMA WRITE with immediate (one packet) leaves no
/// half-message behind: the retry succeeds once a receive is posted.
#[test]
fn a_write_with_immediate_succeeds_after_an_rnr_nak() {
    let (mut sim, a, b) = pair(PairConfig::default());
    let data = fill(&a, 0, 512, 5);
    let op = SendOp::RdmaWriteWithImm { remote_addr: b.va + 4096, rkey: b.rkey, imm: 0x1234 };
    sim.ep(a.ep).post_send(a.qpn, SendWr::new(1, op, sge(&a, 0, 512))).unwrap();
    sim.run_until(LIMIT, |s| s.ep(a.ep).stats().rnr_naks_received > 0);
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 9, sg_list: Vec::new() }).unwrap();
    sim.run_idle(LIMIT);
    let wcs = sim.ep(a.ep).poll_cq(a.send_cq, usize::MAX);
    assert_eq!(statuses(&wcs), [(1, WcStatus::Success)]);
    let rwc = sim.ep(b.ep).poll_cq(b.recv_cq, usize::MAX);
    assert_eq!(rwc.len(), 1);
    assert_eq!((rwc[0].status, rwc[0].imm_data), (WcStatus::Success, Some(0x1234)));
    assert_eq!(read(&b, 4096, 512), data);
    assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Rts);
}

/// A request answered with NAK Remote Access Error ends the connection on
/// the responder too (a peer cannot probe keys for free): the QP goes to
/// ERR, raises QpFatal, and takes no later WRITE.
#[test]
fn a_remote_access_error_moves_the_responder_to_error() {
    let (mut sim, _a, b) = pair(PairConfig::default());
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 5, sg_list: sge(&b, 0, 64) }).unwrap();
    let ep = sim.ep(b.ep);
    let mut bad = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, b.qpn, Psn::new(EPSN)));
    bad.reth = Some(RethRepr { va: b.va, rkey: b.rkey ^ 0x55, dma_len: 4 });
    ep.handle_packet(Instant::ZERO, &craft(&bad, b"evil"));
    let (_, _, pkts) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(syndrome_of(&pkts[0]), Some(Syndrome::Nak(NakCode::RemoteAccessError)));
    assert_eq!(ep.query_qp(b.qpn).unwrap().0, QpState::Err);
    assert_eq!(ep.poll_event(), Some(AsyncEvent::QpFatal(b.qpn)));
    // The posted receive is flushed, not lost.
    let rwc = ep.poll_cq(b.recv_cq, usize::MAX);
    assert_eq!(statuses(&rwc), [(5, WcStatus::WrFlushErr)]);
    ep.handle_packet(Instant::ZERO, &write_only(&b, EPSN, 0, b"late"));
    assert_eq!(read(&b, 0, 4), [0; 4]);
}

/// A NAK that ends the connection goes out alone, after the flush: the
/// ACK still queued for the request before it goes with the rest (the
/// NAK's PSN acknowledges that request anyway), a send not yet started
/// never leaves, and both queues are flushed.
#[test]
fn a_fatal_nak_follows_the_flush_and_replaces_the_queued_ack() {
    let (mut sim, _a, b) = pair(PairConfig::default());
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 5, sg_list: sge(&b, 0, 64) }).unwrap();
    sim.ep(b.ep).post_send(b.qpn, SendWr::new(6, SendOp::Send, sge(&b, 64, 8))).unwrap();
    let ep = sim.ep(b.ep);
    ep.handle_packet(Instant::ZERO, &write_only(&b, EPSN, 128, b"good"));
    let mut bad = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, b.qpn, Psn::new(EPSN + 1)));
    bad.reth = Some(RethRepr { va: b.va, rkey: b.rkey ^ 0x55, dma_len: 4 });
    ep.handle_packet(Instant::ZERO, &craft(&bad, b"evil"));
    let (n, _, pkts) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(n, 1, "the NAK alone: no ACK before it, no SEND after it");
    assert_eq!(psn_of(&pkts[0]), EPSN + 1);
    assert_eq!(syndrome_of(&pkts[0]), Some(Syndrome::Nak(NakCode::RemoteAccessError)));
    assert_eq!(read(&b, 128, 4), b"good");
    assert_eq!(ep.query_qp(b.qpn).unwrap().0, QpState::Err);
    assert_eq!(statuses(&ep.poll_cq(b.send_cq, usize::MAX)), [(6, WcStatus::WrFlushErr)]);
    assert_eq!(statuses(&ep.poll_cq(b.recv_cq, usize::MAX)), [(5, WcStatus::WrFlushErr)]);
}

/// A RETH may not ask for more than 2^31 bytes (IBTA's largest message).
#[test]
fn a_dma_length_over_2_pow_31_is_an_invalid_request() {
    let (mut sim, _a, b) = pair(PairConfig { mem_len: 4096, ..PairConfig::default() });
    let ep = sim.ep(b.ep);
    ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN, 0, (1 << 31) + 1));
    let (_, _, pkts) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(syndrome_of(&pkts[0]), Some(Syndrome::Nak(NakCode::InvalidRequest)));
    assert_eq!(ep.stats().drops_for(Drop::BadLength), 1);
}

/// A region deregistered while its READ response is being sent: the rest
/// is not sent as zeros under a success status, but ends with NAK Remote
/// Access Error for the PSN the response had reached, and the QP goes to ERR.
#[test]
fn a_region_deregistered_mid_read_ends_the_read_with_a_nak() {
    let (mut sim, _a, b) = pair(PairConfig::default());
    fill(&b, 0, 64 * 1024, 1);
    let ep = sim.ep(b.ep);
    ep.handle_packet(Instant::ZERO, &read_request(&b, EPSN, 0, 64 * 1024));
    let (n, _, pkts) = drain(ep, Instant::ZERO, 8);
    assert_eq!(n, 8);
    assert!(pkts.iter().all(|p| opcode_of(p) != Opcode::RC_ACKNOWLEDGE));
    assert!(ep.dereg_mr(b.rkey));
    let (n, _, pkts) = drain(ep, Instant::ZERO, usize::MAX);
    assert_eq!(n, 1, "only the NAK follows");
    assert_eq!(opcode_of(&pkts[0]), Opcode::RC_ACKNOWLEDGE);
    assert_eq!(psn_of(&pkts[0]), EPSN + 8);
    assert_eq!(syndrome_of(&pkts[0]), Some(Syndrome::Nak(NakCode::RemoteAccessError)));
    assert_eq!(ep.query_qp(b.qpn).unwrap().0, QpState::Err);
    assert_eq!(ep.poll_event(), Some(AsyncEvent::QpFatal(b.qpn)));
}

/// Two limited members of a partition (P_Key bit 15 clear) may not talk.
#[test]
fn limited_members_of_a_partition_do_not_talk() {
    let (mut sim, _a, b) = pair(PairConfig::default());
    let ep = sim.ep(b.ep);
    ep.set_pkey_table(&[0x7fff]).unwrap();
    ep.modify_qp(b.qpn, &QpAttr { pkey_index: Some(0), ..QpAttr::default() }).unwrap();
    let mut bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, b.qpn, Psn::new(EPSN));
    bth.pkey = 0x7fff;
    let mut tr = TransportRepr::new(bth);
    tr.reth = Some(RethRepr { va: b.va, rkey: b.rkey, dma_len: 4 });
    ep.handle_packet(Instant::ZERO, &craft(&tr, b"ltd!"));
    assert_eq!(ep.stats().drops_for(Drop::PkeyLimitedMembers), 1);
    assert_eq!(read(&b, 0, 4), [0; 4]);
    // A full member (bit 15 set) may talk to the limited one.
    tr.bth.pkey = 0xffff;
    ep.handle_packet(Instant::ZERO, &craft(&tr, b"full"));
    assert_eq!(read(&b, 0, 4), b"full");
}

/// A second RC QP of `b`, completing into `cq`, brought up against `a`'s
/// QP, with `receives` receives posted; then three SENDs for it: three
/// receive completions for `cq`. Returns its QPN.
fn receiving_qp_on(sim: &mut Sim, a: &Side, b: &Side, cq: CqId, receives: u64) -> u32 {
    let qpn = sim.ep(b.ep).create_qp(QpInitAttr::new(QpType::Rc, b.pd, cq)).unwrap();
    let cfg = PairConfig::default();
    rdma_transport::sim::bring_up(sim.ep(b.ep), qpn, IpAddr::from(A), a.qpn, EPSN, 0x20, &cfg);
    let ep = sim.ep(b.ep);
    for i in 0..receives {
        ep.post_recv(qpn, RecvWr { wr_id: i, sg_list: sge(b, i * 64, 64) }).unwrap();
    }
    for i in 0..3 {
        let mut t = TransportRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, qpn, Psn::new(EPSN + i as u32)));
        t.bth.ack_req = true;
        ep.handle_packet(Instant::ZERO, &craft(&t, b"hi"));
    }
    qpn
}

/// A CQ that overflows is in error: the event says so, and the QPs that
/// complete into it go to the error state (libibverbs' IBV_EVENT_CQ_ERR),
/// rather than losing completions silently.
#[test]
fn a_full_cq_raises_a_cq_error_and_fails_its_qps() {
    let (mut sim, a, b) = pair(PairConfig::default());
    let small = sim.ep(b.ep).create_cq(2);
    let qpn = receiving_qp_on(&mut sim, &a, &b, small, 3);
    let ep = sim.ep(b.ep);
    assert_eq!(ep.cq_len(small), 2);
    assert_eq!(ep.stats().cq_overruns, 1);
    assert_eq!(ep.poll_event(), Some(AsyncEvent::CqError(small)));
    assert_eq!(ep.poll_event(), Some(AsyncEvent::QpFatal(qpn)));
    assert_eq!(ep.query_qp(qpn).unwrap().0, QpState::Err);
    // The first QP, on other CQs, is untouched.
    assert_eq!(ep.query_qp(b.qpn).unwrap().0, QpState::Rts);
}

/// A layer above that keeps a CQ's completions (the verbs device) drains
/// the engine's CQ and reports what found no room there: the engine then
/// treats the CQ as overflowed, the same event and the same QP
/// transition as an overflow of its own, and the flushes that follow into
/// the CQ are lost with it and counted.
#[test]
fn an_overrun_reported_from_above_fails_the_cq_and_its_qps_like_one_here() {
    let (mut sim, a, b) = pair(PairConfig::default());
    let above = sim.ep(b.ep).create_cq(usize::MAX);
    let qpn = receiving_qp_on(&mut sim, &a, &b, above, 5);
    let ep = sim.ep(b.ep);
    // Unbounded here: all three are queued, and none was lost yet.
    let before = ep.completions_delivered();
    let drained: Vec<u64> = ep.drain_cq(above).map(|wc| wc.wr_id).collect();
    assert_eq!(drained, [0, 1, 2], "oldest first");
    assert_eq!(ep.cq_len(above), 0);
    assert_eq!(ep.stats().cq_overruns, 0);
    assert_eq!(ep.poll_event(), None);
    // The layer above had room for two: the third is reported lost.
    ep.cq_overrun(above, 1);
    assert_eq!(
        ep.stats().cq_overruns,
        1 + 2,
        "the lost one, then the two receives still posted, flushed into the errored CQ"
    );
    assert_eq!(ep.stats().completions, 2, "only what was kept counts as delivered");
    assert_eq!(ep.completions_delivered(), before, "the flushes were lost here, not queued");
    assert_eq!(ep.poll_event(), Some(AsyncEvent::CqError(above)));
    assert_eq!(ep.poll_event(), Some(AsyncEvent::QpFatal(qpn)));
    assert_eq!(ep.poll_event(), None);
    assert_eq!(ep.query_qp(qpn).unwrap().0, QpState::Err);
    assert_eq!(ep.cq_len(above), 0);
    // Reported again (completions drained later): counted, no second event.
    ep.cq_overrun(above, 2);
    assert_eq!(ep.stats().cq_overruns, 5);
    assert_eq!(ep.poll_event(), None);
    assert_eq!(ep.query_qp(b.qpn).unwrap().0, QpState::Rts, "a QP on other CQs is untouched");
}

/// QP numbers and keys are not the same in every process, and a seed
/// reproduces them.
#[test]
fn identifiers_are_drawn_at_random_and_seeds_reproduce_them() {
    let ids = |mut ep: Endpoint| {
        let pd = ep.alloc_pd();
        let cq = ep.create_cq(4);
        let init = QpInitAttr::new(QpType::Rc, pd, cq);
        let qpn = ep.create_qp(init).unwrap();
        let (_, rkey) = ep.reg_mr(pd, 0x1000, RegionMemory::zeroed(64), Access::ALL);
        assert!((0x11..=0xff_ffff).contains(&qpn));
        (qpn, rkey)
    };
    let local = IpAddr::from(A);
    let drawn: Vec<_> = (0..8).map(|_| ids(Endpoint::new(local))).collect();
    let distinct = |f: fn(&(u32, u32)) -> u32| {
        let mut v: Vec<u32> = drawn.iter().map(f).collect();
        v.sort();
        v.dedup();
        v.len()
    };
    assert!(distinct(|d| d.0) > 1, "every device numbered its first QP alike: {drawn:x?}");
    assert!(distinct(|d| d.1 & 0xff) > 1, "every device drew the same key byte: {drawn:x?}");
    assert_eq!(ids(Endpoint::with_seed(local, 3)), ids(Endpoint::with_seed(local, 3)));
}

/// A key deregistered and registered again in the same slot never comes back.
#[test]
fn a_stale_key_never_matches_the_slots_next_region() {
    let mut ep = Endpoint::with_seed(IpAddr::from(A), 11);
    let pd = ep.alloc_pd();
    let mut last = 0;
    for _ in 0..600 {
        let (_, rkey) = ep.reg_mr(pd, 0x1000, RegionMemory::zeroed(8), Access::ALL);
        assert_ne!(rkey, last);
        assert!(ep.dereg_mr(rkey));
        assert!(ep.mr(rkey).is_none());
        last = rkey;
    }
}
