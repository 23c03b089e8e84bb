//! A controller's window in the engine (HPCC's `Controller::window_bytes`):
//! a QP never has more than a window's worth of request packets sent and
//! unacknowledged, asks for an ACK on every packet while a window is in
//! force (so that the window slides), and a go-back-N pass after a loss is
//! never held by it. Checked on the simulated link, from the packets on it.

mod common;

use common::*;
use core::any::Any;
use core::time::Duration;
use rdma_transport::cc::{Controller, ControllerFactory, Event};
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Sim, Verdict};
use rdma_transport::*;
use rdma_wire::{Bth, Opcode, Psn};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// A fixed window at line rate: the window is all there is to see.
#[derive(Debug, Clone, Copy)]
struct FixedWindow(u64);

impl Controller for FixedWindow {
    fn on_event(&mut self, _: Instant, _: Event<'_>) {}
    fn on_timer(&mut self, _: Instant) {}
    fn next_timer(&self) -> Option<Instant> {
        None
    }
    fn rate_bps(&self) -> u64 {
        100_000_000_000
    }
    fn rate_cuts(&self) -> u64 {
        0
    }
    fn window_bytes(&self) -> Option<u64> {
        Some(self.0)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl ControllerFactory for FixedWindow {
    fn build(&self) -> Box<dyn Controller> {
        Box::new(*self)
    }
    fn name(&self) -> &'static str {
        "fixed-window"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The BTH of a RoCE v2 packet over IPv4 as the simulated link carries it.
fn bth(p: &[u8]) -> Bth<&[u8]> {
    let ihl = usize::from(p[0] & 0xf) * 4;
    Bth::new_checked(&p[ihl + 8..]).expect("a BTH")
}

#[derive(Default, Debug)]
struct Seen {
    /// The most request PSNs ever past the last acknowledged one, at a send.
    most_unacked: u32,
    requests: u32,
    without_ack_req: u32,
    /// The next PSN after the highest one acknowledged so far.
    acked: Option<Psn>,
}

/// A writes `writes` WRITEs of 64 KiB to B under a window of `window`
/// bytes (MTU 4096, so window / 4096 packets), losing packets with
/// probability `loss`. Returns what the link saw and A's completions.
fn run(window: u64, writes: u64, loss: f64) -> (Seen, Vec<(u64, WcStatus)>) {
    let link = LinkConfig { latency: Duration::from_micros(2), loss, ..LinkConfig::default() };
    let mut sim = Sim::new(7, link);
    let (a, b) = connect(&mut sim, PairConfig { mem_len: 1 << 20, mtu: Mtu::Mtu4096, ..PairConfig::default() });
    sim.ep(a.ep).set_controller(Some(Arc::new(FixedWindow(window))));
    let seen = Rc::new(RefCell::new(Seen::default()));
    let s = seen.clone();
    sim.set_tap(move |_, from, p| {
        let t = bth(p);
        let mut s = s.borrow_mut();
        if from == a.ep && t.opcode() != Opcode::RC_ACKNOWLEDGE {
            s.requests += 1;
            s.without_ack_req += u32::from(!t.ack_req());
            if let Some(acked) = s.acked {
                let ahead = t.psn().distance_from(acked) + 1;
                s.most_unacked = s.most_unacked.max(ahead);
            }
        } else if from != a.ep && t.opcode() == Opcode::RC_ACKNOWLEDGE {
            let next = t.psn().next();
            if s.acked.is_none_or(|a| next > a) {
                s.acked = Some(next);
            }
        }
        Verdict::Deliver
    });
    for k in 0..writes {
        let wr = SendWr::new(k, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, sge(&a, (k % 8) * 65536, 65536));
        sim.ep(a.ep).post_send(a.qpn, wr).unwrap();
    }
    let end = sim.now + Duration::from_secs(5);
    let mut done = Vec::new();
    while sim.now < end && done.len() < writes as usize && sim.step() {
        done.extend(statuses(&sim.ep(a.ep).poll_cq(a.send_cq, 64)));
    }
    let seen = std::mem::take(&mut *seen.borrow_mut());
    (seen, done)
}

#[test]
fn a_window_of_three_packets_is_never_exceeded_and_slides_on_per_packet_acks() {
    let (seen, done) = run(3 * 4096, 8, 0.0);
    assert_eq!(done, (0..8).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>());
    assert_eq!(seen.requests, 8 * 16, "no retransmission: {seen:?}");
    assert!(seen.most_unacked <= 3, "at most 3 packets unacknowledged at a send: {seen:?}");
    assert_eq!(seen.most_unacked, 3, "and the window was used: {seen:?}");
    assert_eq!(seen.without_ack_req, 0, "every packet asked for an ACK: {seen:?}");
}

/// A window smaller than a packet still lets one packet go at a time.
#[test]
fn a_window_below_one_packet_sends_one_at_a_time() {
    let (seen, done) = run(1024, 2, 0.0);
    assert_eq!(done.len(), 2);
    assert_eq!(seen.most_unacked, 1, "{seen:?}");
}

/// With 2 % loss the window fills with unacknowledged packets; the go-back-N
/// pass after a timeout or NAK starts from the oldest one and must not be
/// held by the window those very packets fill. Every WRITE completes.
#[test]
fn go_back_n_is_not_held_by_the_window_it_fills() {
    let (seen, done) = run(4 * 4096, 16, 0.02);
    assert_eq!(done, (0..16).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>(), "{seen:?}");
    assert!(seen.requests > 16 * 16, "some packets were sent again: {seen:?}");
}

/// Without a window, the requester asks for an ACK every 16 packets and on
/// the last of a message, and sends ahead freely (the default unchanged).
#[test]
fn without_a_window_acks_are_asked_for_as_before() {
    let link = LinkConfig { latency: Duration::from_micros(2), ..LinkConfig::default() };
    let mut sim = Sim::new(7, link);
    let (a, b) = connect(&mut sim, PairConfig { mem_len: 1 << 20, mtu: Mtu::Mtu4096, ..PairConfig::default() });
    let asked = Rc::new(RefCell::new((0u32, 0u32)));
    let s = asked.clone();
    sim.set_tap(move |_, from, p| {
        let t = bth(p);
        if from == a.ep && t.opcode() != Opcode::RC_ACKNOWLEDGE {
            let mut s = s.borrow_mut();
            s.0 += 1;
            s.1 += u32::from(t.ack_req());
        }
        Verdict::Deliver
    });
    let wr = SendWr::new(1, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, sge(&a, 0, 65536));
    sim.ep(a.ep).post_send(a.qpn, wr).unwrap();
    sim.run_idle(Duration::from_millis(10));
    assert_eq!(*asked.borrow(), (16, 1), "16 packets, the last asking for the ACK");
}
