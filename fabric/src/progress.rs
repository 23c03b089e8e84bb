//! The progress line of a long run, on stderr: simulated time against the
//! run's limit, events per second of wall time, and the time left if the
//! run goes to its limit (runs that stop when their work is done end
//! sooner). `rdma-fabric` shows it only on a terminal and without
//! `--quiet`, so that a pipe or a script never sees it.

use core::time::Duration;
use rdma_transport::Instant;

/// The fabric tells its progress callback the time every this many events.
pub const EVENTS_PER_CALL: u64 = 8192;

/// Turns the fabric's progress calls into a line at most every `every`,
/// none in the first `quiet_for` (short runs print nothing).
#[derive(Debug)]
pub struct Meter {
    started: std::time::Instant,
    last: Option<std::time::Instant>,
    calls: u64,
    quiet_for: Duration,
    every: Duration,
}

impl Meter {
    pub fn new(started: std::time::Instant) -> Meter {
        Meter { started, last: None, calls: 0, quiet_for: Duration::from_secs(1), every: Duration::from_secs(1) }
    }

    /// One progress call at wall time `wall`, simulated time `sim` of a
    /// run limited to `limit`: the line to print, when one is due.
    pub fn tick(&mut self, wall: std::time::Instant, sim: Instant, limit: Duration) -> Option<String> {
        self.calls += 1;
        let elapsed = wall.saturating_duration_since(self.started);
        let due = self.last.map_or(elapsed >= self.quiet_for, |l| wall.saturating_duration_since(l) >= self.every);
        if !due {
            return None;
        }
        self.last = Some(wall);
        Some(line(sim, limit, self.calls * EVENTS_PER_CALL, elapsed))
    }
}

/// "1.250 ms of 20.000 ms simulated (6.2 %), 1.52 M events/s, 0:42 left at this pace".
pub fn line(sim: Instant, limit: Duration, events: u64, wall: Duration) -> String {
    let sim_ns = sim.as_nanos() as f64;
    let limit_ns = limit.as_nanos() as f64;
    let secs = wall.as_secs_f64().max(1e-9);
    let rate = events as f64 / secs;
    let left = if sim_ns > 0.0 {
        let s = (secs * (limit_ns - sim_ns).max(0.0) / sim_ns).round() as u64;
        format!("{}:{:02} left at this pace", s / 60, s % 60)
    } else {
        "time left unknown".to_string()
    };
    format!(
        "rdma-fabric: {:.3} ms of {:.3} ms simulated ({:.1} %), {:.2} M events/s, {left}",
        sim_ns / 1e6,
        limit_ns / 1e6,
        100.0 * sim_ns / limit_ns.max(1.0),
        rate / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_gives_time_rate_and_what_is_left() {
        let l = line(Instant::from_nanos(1_000_000), Duration::from_millis(5), 3_000_000, Duration::from_secs(2));
        assert_eq!(l, "rdma-fabric: 1.000 ms of 5.000 ms simulated (20.0 %), 1.50 M events/s, 0:08 left at this pace");
        let l = line(Instant::ZERO, Duration::from_millis(5), 0, Duration::ZERO);
        assert!(l.ends_with("time left unknown"), "{l}");
    }

    #[test]
    fn the_meter_is_quiet_at_first_then_speaks_once_a_second() {
        let t0 = std::time::Instant::now();
        let mut m = Meter::new(t0);
        let sim = Instant::from_nanos(1000);
        let limit = Duration::from_micros(10);
        assert_eq!(m.tick(t0 + Duration::from_millis(500), sim, limit), None);
        let first = m.tick(t0 + Duration::from_millis(1000), sim, limit).expect("due after 1 s");
        // Two calls so far: 2 · 8192 events in one second.
        assert!(first.contains("0.02 M events/s"), "{first}");
        assert_eq!(m.tick(t0 + Duration::from_millis(1500), sim, limit), None);
        assert!(m.tick(t0 + Duration::from_millis(2000), sim, limit).is_some());
    }
}
