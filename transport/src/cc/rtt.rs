//! RTT samples for delay-based controllers, from the engine's own clock:
//! the requester notes when each packet that asks for a response left
//! (AckReq set: the last of a message and every 16th), and the first
//! response that covers it closes the sample. Responses coalesce (an ACK
//! names the newest PSN received when it left), so a response closes
//! every timed packet up to its PSN and the newest of them is the sample:
//! at most the few packets between the two late, never early.
//!
//! Retransmitted packets are never timed (Karn's rule): an ACK for a PSN
//! sent twice cannot say which copy it answers. A PSN is a retransmission
//! when it is not past the highest PSN sent so far; going back forgets
//! every open sample.

use core::time::Duration;
use rdma_wire::Psn;
use std::collections::VecDeque;

use crate::Instant;

/// Timed packets kept; with one in 16 timed, 1024 packets in flight.
const MAX_OPEN: usize = 64;

/// The send times of the timed packets in flight, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RttSampler {
    open: VecDeque<(Psn, Instant)>,
    highest: Option<Psn>,
}

impl RttSampler {
    /// A data packet with `psn` left at `now`; `timed`: it asks for a
    /// response (AckReq), so one will cover its PSN.
    pub fn on_sent(&mut self, psn: Psn, timed: bool, now: Instant) {
        if self.highest.is_some_and(|h| psn.diff(h) <= 0) {
            // Sent again: whatever answers from here on is ambiguous.
            self.open.clear();
            return;
        }
        self.highest = Some(psn);
        if timed {
            if self.open.len() == MAX_OPEN {
                self.open.pop_front();
            }
            self.open.push_back((psn, now));
        }
    }

    /// A response covering PSNs up to `psn` arrived at `now`: the RTT of
    /// the newest timed packet it covers, if any.
    pub fn on_response(&mut self, psn: Psn, now: Instant) -> Option<Duration> {
        let mut newest = None;
        while let Some(&(p, sent)) = self.open.front() {
            if p.diff(psn) > 0 {
                break;
            }
            newest = Some(sent);
            self.open.pop_front();
        }
        newest.map(|sent| Duration::from_nanos(now.as_nanos().saturating_sub(sent.as_nanos())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn a_response_closes_the_timed_packets_it_covers_and_samples_the_newest() {
        let mut s = RttSampler::default();
        s.on_sent(Psn::new(10), false, at(100));
        assert_eq!(s.on_response(Psn::new(10), at(900)), None, "not timed");
        s.on_sent(Psn::new(11), true, at(200));
        s.on_sent(Psn::new(12), false, at(300));
        s.on_sent(Psn::new(13), true, at(400));
        s.on_sent(Psn::new(14), false, at(500));
        // A coalesced ACK for 14 covers 11 and 13: 13 is the sample.
        assert_eq!(s.on_response(Psn::new(14), at(1_450)), Some(Duration::from_nanos(1_050)));
        assert_eq!(s.on_response(Psn::new(14), at(2_000)), None, "a duplicate ACK is no second sample");
        s.on_sent(Psn::new(15), true, at(2_100));
        assert_eq!(s.on_response(Psn::new(14), at(2_200)), None, "15 is not covered yet");
        assert_eq!(s.on_response(Psn::new(15), at(2_600)), Some(Duration::from_nanos(500)));
    }

    #[test]
    fn a_retransmitted_psn_is_never_sampled() {
        let mut s = RttSampler::default();
        s.on_sent(Psn::new(5), true, at(0));
        s.on_sent(Psn::new(6), true, at(10));
        // Go-back-N from 5: both leave again.
        s.on_sent(Psn::new(5), true, at(5_000));
        s.on_sent(Psn::new(6), true, at(5_010));
        assert_eq!(s.on_response(Psn::new(6), at(5_110)), None);
        // New PSNs past the highest are timed again.
        s.on_sent(Psn::new(7), true, at(6_000));
        assert_eq!(s.on_response(Psn::new(7), at(6_700)), Some(Duration::from_nanos(700)));
    }

    #[test]
    fn psns_wrap_and_the_oldest_open_sample_gives_way() {
        let mut s = RttSampler::default();
        let top = Psn::new(Psn::MASK);
        s.on_sent(top, true, at(0));
        s.on_sent(top.next(), true, at(1));
        assert_eq!(s.on_response(Psn::new(0), at(11)), Some(Duration::from_nanos(10)), "past the wrap");
        for k in 1..=(MAX_OPEN as u32 + 1) {
            s.on_sent(Psn::new(k), true, at(u64::from(k) * 100));
        }
        assert_eq!(s.open.len(), MAX_OPEN);
        assert_eq!(s.open.front().map(|o| o.0), Some(Psn::new(2)), "PSN 1 gave way");
        assert_eq!(s.on_response(Psn::new(1), at(10_000)), None);
    }
}
