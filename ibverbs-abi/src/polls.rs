//! How the application polls its CQs, as the idle-progress thread
//! (`context.rs`) needs to know it: whether it polled since the thread
//! last looked (then it took the packets that waited), and whether it
//! polls *steadily*, often enough to take the next packets about as soon
//! as the thread would. Only a steady poller lets the thread rest long
//! (2 ms) without watching the device; other polls, a short while.
//!
//! Counting polls is not enough: `ucx_perftest`'s server, in the TCP
//! barrier that ends a one-sided test, polls its socket for 1 ms and then
//! calls `ucp_worker_progress`, which polls the device's CQs: a burst of a
//! few polls every millisecond, from an application that is elsewhere.
//! Taken for a steadily polling application, it kept the thread resting
//! 2 ms at a time, so a peer's RDMA READ waited for the next such poll: `ucp_get` took 1.1 ms instead of 9 µs, and 64 KiB RDMA
//! WRITEs their ACKs for milliseconds (`ucx_perftest put_bw` stalls).
//! So each poll records its time and the gap since the one before; the
//! thread reads how many polls came since its last look and the largest
//! gap between two of them. A periodic poller's polls come a few at a
//! time with long gaps; a loop's, many with short gaps, and many still
//! for the time it ran when it is preempted (two spinning processes on two
//! cores, a machine loaded by other work).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The longest gap between two polls of a steady poller: a packet then
/// waits at most about this long for the application, not much more than
/// the idle-progress thread's own grace period (`IDLE_LOOK`, 20 µs) plus
/// its wake-up.
pub const STEADY_GAP: Duration = Duration::from_micros(50);

/// A poll at least this often on average since the last look, and at
/// least [`STEADY_POLLS`] of them, make a steady poller whatever the gaps:
/// a loop that was preempted for a while. A loop polls every few
/// microseconds; a periodic poller a few CQs a millisecond
/// (`ucx_perftest`'s barrier: each UCX interface's send and receive CQs).
pub const STEADY_RATE: Duration = Duration::from_micros(30);

/// The fewest polls that make a steady poller by their rate alone: more
/// than a periodic poller's burst (4 to 8 CQs polled at once).
pub const STEADY_POLLS: u64 = 16;

/// What the idle-progress thread saw at a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polling {
    /// No poll since the last look.
    None,
    /// Polls since the last look, but not steady ones.
    Now,
    /// Polls since the last look: at least two, each within [`STEADY_GAP`]
    /// of the one before (the first included: the gap from the one before
    /// it); or at least [`STEADY_POLLS`], one per [`STEADY_RATE`] or more
    /// often on average.
    Steady,
}

/// The application's polls since the idle-progress thread last looked:
/// how many, when the last was, and the largest gap between two
/// consecutive ones. Times are nanoseconds of `CLOCK_MONOTONIC`
/// ([`now_ns`]).
#[derive(Debug, Default)]
pub struct PollClock {
    count: AtomicU64,
    last: AtomicU64,
    max_gap: AtomicU64,
}

impl PollClock {
    pub const fn new() -> PollClock {
        PollClock { count: AtomicU64::new(0), last: AtomicU64::new(0), max_gap: AtomicU64::new(0) }
    }

    /// A poll at `now`. Three relaxed atomics: the poll itself makes a
    /// system call.
    pub fn record(&self, now: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let prev = self.last.swap(now, Ordering::Relaxed);
        self.max_gap.fetch_max(now.saturating_sub(prev), Ordering::Relaxed);
    }

    /// What happened in the `elapsed` nanoseconds since the last look;
    /// starts a new count.
    pub fn look(&self, elapsed: u64) -> Polling {
        let count = self.count.swap(0, Ordering::Relaxed);
        let gap = self.max_gap.swap(0, Ordering::Relaxed);
        let tight = count >= 2 && gap <= STEADY_GAP.as_nanos() as u64;
        let frequent = count >= STEADY_POLLS && count.saturating_mul(STEADY_RATE.as_nanos() as u64) >= elapsed;
        if count == 0 {
            Polling::None
        } else if tight || frequent {
            Polling::Steady
        } else {
            Polling::Now
        }
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC` (through the vDSO: no system call);
/// 0 if the clock cannot be read, which it always can.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    #[test]
    fn a_loop_of_polls_is_steady() {
        let c = PollClock::new();
        let t0 = 1_000_000 * US;
        c.record(t0);
        // One poll after a long nothing: not steady yet.
        assert_eq!(c.look(20 * US), Polling::Now);
        // A few, close together (the 20 µs after a packet).
        for i in 1..5 {
            c.record(t0 + i * 3 * US);
        }
        assert_eq!(c.look(20 * US), Polling::Steady);
        assert_eq!(c.look(20 * US), Polling::None, "nothing since");
    }

    #[test]
    fn a_preempted_loop_is_steady() {
        let c = PollClock::new();
        let t0 = 1_000_000 * US;
        // 2 ms: 300 µs of polls every 2 µs, a 1.5 ms preemption, 200 µs more.
        for i in 0..150 {
            c.record(t0 + i * 2 * US);
        }
        for i in 0..100 {
            c.record(t0 + 1_800 * US + i * 2 * US);
        }
        assert_eq!(c.look(2_000 * US), Polling::Steady);
        // 200 µs: 40 µs of polls every 2 µs, preempted for the rest.
        for i in 0..20 {
            c.record(t0 + 3_000 * US + i * 2 * US);
        }
        assert_eq!(c.look(200 * US), Polling::Steady);
    }

    #[test]
    fn a_timer_burst_every_millisecond_is_not_steady() {
        let c = PollClock::new();
        let mut t = 1_000_000 * US;
        for round in 0..6 {
            // ucx_perftest's barrier: a few CQs polled at once, every ~1 ms.
            for k in 0..4 {
                c.record(t + k * US);
            }
            // Looks after a burst (the 20 µs after a packet, a 200 µs
            // rest), or after two of them (a 2 ms rest).
            let elapsed = [20, 0, 2_000, 200, 0, 2_000][round] * US;
            if round % 3 != 1 {
                assert_eq!(c.look(elapsed), Polling::Now, "round {round}");
            }
            t += 1_000 * US;
        }
    }

    #[test]
    fn the_clock_moves() {
        let a = now_ns();
        std::thread::sleep(Duration::from_millis(1));
        assert!(now_ns() >= a + 1_000_000);
    }
}
