//! The virtual clock and the event queue: events run in time order, ties in
//! the order they were scheduled, so a seed replays a run exactly.

use rdma_transport::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What can happen in the fabric besides an endpoint timer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Event {
    /// The last bit of a packet reaches port `port` of `node` (store and forward).
    Arrive { node: usize, port: usize, packet: Vec<u8> },
    /// A PFC frame (its bytes) reaches port `port` of `node`.
    Pfc { node: usize, port: usize, frame: Vec<u8> },
    /// A pause on port `port` of `node` may have run out: try to send.
    Unpause { node: usize, port: usize },
    /// Switch `node` re-sends XOFF on ingress `port` if still above XON
    /// and still in the XOFF episode `generation`.
    PfcRefresh { node: usize, port: usize, generation: u64 },
    /// Port `port` of `node` finished serialising and may send again.
    PortFree { node: usize, port: usize },
    /// A flow posts its first work requests.
    FlowStart { flow: usize },
    /// Record the monitored queue and the per-flow byte counters.
    Sample,
    /// An IB flow-control packet (its six bytes) reaches port `port` of `node`.
    FlowControl { node: usize, port: usize, frame: [u8; 6] },
    /// Port `port` of `node` owes every data VL a flow-control packet (IB).
    FcPeriod { node: usize, port: usize },
    /// The SMA behind port `port` of `node` takes its next VL15 packet.
    Sma { node: usize, port: usize },
}

/// A min-heap of (time, sequence, event).
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Reverse<(Instant, u64, Event)>>,
    seq: u64,
}

impl EventQueue {
    pub fn schedule(&mut self, at: Instant, event: Event) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, event)));
    }

    pub fn next_time(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, ..))| *t)
    }

    pub fn pop(&mut self) -> Option<(Instant, Event)> {
        self.heap.pop().map(|Reverse((t, _, e))| (t, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_schedule_order() {
        let mut q = EventQueue::default();
        q.schedule(Instant::from_nanos(5), Event::FlowStart { flow: 2 });
        q.schedule(Instant::from_nanos(1), Event::Sample);
        q.schedule(Instant::from_nanos(5), Event::FlowStart { flow: 1 });
        assert_eq!(q.pop(), Some((Instant::from_nanos(1), Event::Sample)));
        assert_eq!(q.pop(), Some((Instant::from_nanos(5), Event::FlowStart { flow: 2 })));
        assert_eq!(q.pop(), Some((Instant::from_nanos(5), Event::FlowStart { flow: 1 })));
    }
}
