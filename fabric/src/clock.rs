//! The virtual clock and the event queue: events run in time order, ties in
//! the order they were scheduled, so a seed replays a run exactly.

use crate::calendar::Calendar;
use crate::lines::Lined;
use crate::packet::Packet;
use rdma_transport::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What can happen in the fabric besides an endpoint timer.
#[derive(Debug, Clone)]
pub enum Event {
    /// The last bit of a packet reaches port `port` of `node` (store and forward).
    Arrive { node: usize, port: usize, packet: Packet },
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

impl Event {
    /// A packet on its way is made whole ([`Packet::make_whole`]), for an
    /// event that leaves the thread whose host's region its payload is in.
    pub fn make_whole(&mut self) {
        if let Event::Arrive { packet, .. } = self {
            packet.make_whole();
        }
    }
}

/// The events in time order over a slab: the order ([`Calendar`]) moves
/// and compares 24-byte keys, never the events (which carry packets and
/// sit on lines of their own, [`Lined`]).
#[derive(Debug, Default)]
pub struct EventQueue {
    order: Calendar,
    slots: Vec<Lined<Option<Event>>>,
    free: Vec<usize>,
}

impl EventQueue {
    pub fn schedule(&mut self, at: Instant, event: Event) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Lined(Some(event));
                i
            }
            None => {
                self.slots.push(Lined(Some(event)));
                self.slots.len() - 1
            }
        };
        self.order.push(at, slot);
    }

    pub fn next_time(&mut self) -> Option<Instant> {
        self.order.peek().map(|(t, _)| t)
    }

    /// The earliest event if the calendar's current bucket holds it
    /// (a hint for prefetching: `None` says nothing about later buckets).
    pub fn peek(&self) -> Option<(Instant, &Event)> {
        let (t, slot) = self.order.peek_now()?;
        Some((t, self.slots[slot].0.as_ref()?))
    }

    /// The event that runs after that one, if it is as near (a hint).
    pub fn peek_second(&self) -> Option<&Event> {
        self.slots[self.order.second()?].0.as_ref()
    }

    /// The earliest event, taken out (its slot is freed).
    //
    // Inlined: a call returned the event through a stack slot that the
    // loop then read back, which waited for the store buffer to drain (the
    // cold stores of the events before); inlined, the event moves straight
    // from its slot.
    #[inline(always)]
    pub fn pop(&mut self) -> Option<(Instant, Event)> {
        let (t, slot) = self.order.pop()?;
        // The slot of the event two after the next one: cold by now (it
        // was written when scheduled, a link delay ago), and read as the
        // second event's hint (`peek_second`) after the next pop.
        if let Some(s) = self.order.ahead(2) {
            rdma_transport::prefetch::lines_of(&self.slots[s]);
        }
        self.free.push(slot);
        self.slots[slot].0.take().map(|e| (t, e))
    }
}

/// Each host's next engine deadline (`Endpoint::poll_timeout`), so that the
/// loop finds the earliest in O(log hosts) instead of asking every host at
/// every event. A heap with lazy deletion: an entry counts only while it is
/// still its host's deadline.
#[derive(Debug, Default)]
pub struct HostTimers {
    deadline: Vec<Option<Instant>>,
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
}

impl HostTimers {
    pub fn new(hosts: usize) -> HostTimers {
        HostTimers { deadline: vec![None; hosts], heap: BinaryHeap::new() }
    }

    /// Host `h`'s deadline is now `t`.
    pub fn set(&mut self, h: usize, t: Option<Instant>) {
        if self.deadline[h] != t {
            self.deadline[h] = t;
            if let Some(t) = t {
                self.heap.push(Reverse((t, h)));
            }
        }
    }

    /// The earliest deadline of any host.
    pub fn earliest(&mut self) -> Option<Instant> {
        while let Some(&Reverse((t, h))) = self.heap.peek() {
            if self.deadline[h] == Some(t) {
                return Some(t);
            }
            self.heap.pop();
        }
        None
    }

    /// The earliest entry, current or not (a hint for prefetching).
    pub fn peek_hint(&self) -> Option<(Instant, usize)> {
        self.heap.peek().map(|&Reverse(e)| e)
    }

    /// A host whose deadline is at or before `now` (lowest deadline, then
    /// lowest index first); its deadline is cleared until set again.
    pub fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let t = self.earliest()?;
        if t > now {
            return None;
        }
        let Reverse((_, h)) = self.heap.pop()?;
        self.deadline[h] = None;
        Some(h)
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
        assert!(matches!(q.pop(), Some((t, Event::Sample)) if t == Instant::from_nanos(1)));
        assert!(matches!(q.pop(), Some((t, Event::FlowStart { flow: 2 })) if t == Instant::from_nanos(5)));
        assert!(matches!(q.pop(), Some((t, Event::FlowStart { flow: 1 })) if t == Instant::from_nanos(5)));
    }

    #[test]
    fn host_timers_give_the_earliest_live_deadline_in_host_order() {
        let t = Instant::from_nanos;
        let mut h = HostTimers::new(3);
        h.set(2, Some(t(5)));
        h.set(0, Some(t(9)));
        h.set(1, Some(t(5)));
        h.set(0, Some(t(5))); // replaces 9: that entry is stale
        assert_eq!(h.earliest(), Some(t(5)));
        assert_eq!(h.pop_due(t(4)), None);
        assert_eq!([h.pop_due(t(5)), h.pop_due(t(5)), h.pop_due(t(5))], [Some(0), Some(1), Some(2)]);
        assert_eq!(h.pop_due(t(100)), None, "the stale 9 of host 0 is gone");
        h.set(1, Some(t(7)));
        h.set(1, None);
        assert_eq!(h.earliest(), None);
    }
}
