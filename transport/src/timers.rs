//! A QP's timers, in one table: the engine asks it for the QP's next
//! deadline ([`crate::Endpoint::poll_timeout`]) and fires what is due
//! ([`crate::Endpoint::handle_timeout`]), instead of finding loose
//! fields.
//!
//! Congestion control's deadlines are here too (a deferred CNP, the
//! controller's own timers, the end of a pacing wait): `cc::wired::QpCc`
//! re-arms them whenever it changes, so a QP's next deadline is this
//! table's earliest ([`crate::qp::Qp::next_deadline`]). (A controller's
//! rate-only timers are left out while the pacer is idle: they run at the
//! QP's next event; `cc::Controller::next_timer_on_time`.)

use crate::time::Instant;

/// What a QP waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// The local ACK timer (RC): a request is outstanding and no response
    /// came; the completer retransmits, or fails the QP when the retries
    /// are spent.
    Retransmit,
    /// An RNR NAK's wait: the requester sends nothing before it ends.
    RnrWait,
    /// A lone ACK held back for company (`Endpoint::set_ack_delay`): it
    /// leaves with the next packet, or by this time.
    HeldAck,
    /// The notification point's deferred CNP (marks arrived inside the
    /// CNP interval; it leaves when the interval ends).
    Cnp,
    /// The congestion controller's next timer that must run on time
    /// (DCQCN's decrease checks; its rate increases too while the pacer
    /// holds packets).
    RateControl,
    /// The pacer held a data packet until then.
    Paced,
}

impl Timer {
    pub const ALL: [Timer; 6] =
        [Timer::Retransmit, Timer::RnrWait, Timer::HeldAck, Timer::Cnp, Timer::RateControl, Timer::Paced];

    fn index(self) -> usize {
        self as usize
    }
}

/// One deadline per [`Timer`], each armed or not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timers {
    at: [Option<Instant>; Timer::ALL.len()],
}

impl Timers {
    /// Arms `t` for `at` (re-arming moves it).
    pub fn set(&mut self, t: Timer, at: Instant) {
        self.at[t.index()] = Some(at);
    }

    /// Arms `t` for `at`, or stops it for `None`.
    pub fn set_opt(&mut self, t: Timer, at: Option<Instant>) {
        self.at[t.index()] = at;
    }

    pub fn stop(&mut self, t: Timer) {
        self.at[t.index()] = None;
    }

    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.at[t.index()]
    }

    pub fn is_armed(&self, t: Timer) -> bool {
        self.get(t).is_some()
    }

    /// Whether `t` is armed and not yet due at `now`.
    pub fn is_running(&self, t: Timer, now: Instant) -> bool {
        self.get(t).is_some_and(|d| now < d)
    }

    /// Whether `t` is armed and due at `now`.
    pub fn is_due(&self, t: Timer, now: Instant) -> bool {
        self.get(t).is_some_and(|d| d <= now)
    }

    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_timer_is_armed_moved_and_stopped_on_its_own() {
        let at = Instant::from_nanos;
        let mut t = Timers::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Retransmit, at(500));
        t.set(Timer::HeldAck, at(200));
        assert_eq!(t.next(), Some(at(200)));
        assert!(t.is_running(Timer::HeldAck, at(199)) && t.is_due(Timer::HeldAck, at(200)));
        assert!(!t.is_due(Timer::RnrWait, at(1_000)) && !t.is_running(Timer::RnrWait, at(0)), "never armed");
        t.stop(Timer::HeldAck);
        assert_eq!(t.next(), Some(at(500)));
        t.set_opt(Timer::Retransmit, Some(at(900)));
        t.set(Timer::RnrWait, at(700));
        assert_eq!(t.next(), Some(at(700)));
        t.set_opt(Timer::RnrWait, None);
        assert_eq!((t.next(), t.is_armed(Timer::Retransmit)), (Some(at(900)), true));
    }
}
