//! A simulated link over any link: the latency and the rate of a longer,
//! slower one, in real time (the host kernel's netem qdisc is what a
//! person would reach for; it is not always there, and needs root).
//!
//! Each frame sent leaves, in order, when a line of `rate_bps` would have
//! finished serialising it behind the frames before it, and is handed to
//! the link under it `latency` later. Until then it waits in a queue of at
//! most `queue_bytes` (a full queue drops the frame, counted as a loss, as
//! a switch's tail drop). Any call into the link sends what is due, and
//! the link's fd is an epoll set of the inner link's fd and a timer armed
//! for the next frame due, so a driver asleep on it wakes to send it.

use crate::wait::EpollSet;
use crate::{FaultCounts, FrameMeta, Link, LinkCaps, Mac};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// The latency and rate a [`DelayLink`] adds; all zero: none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DelayConfig {
    /// One-way propagation delay added to every frame.
    pub latency: Duration,
    /// The line rate frames are serialised at, bits per second (0: no limit).
    pub rate_bps: u64,
    /// The most bytes waiting to leave (0: 4 MiB).
    pub queue_bytes: usize,
}

impl DelayConfig {
    /// The queue's size when none is given.
    pub const DEFAULT_QUEUE_BYTES: usize = 4 << 20;

    /// Whether it changes anything.
    pub fn is_active(&self) -> bool {
        !self.latency.is_zero() || self.rate_bps > 0
    }

    fn queue_limit(&self) -> usize {
        if self.queue_bytes == 0 {
            Self::DEFAULT_QUEUE_BYTES
        } else {
            self.queue_bytes
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct DelayLink<L> {
    inner: L,
    cfg: DelayConfig,
    /// Frames waiting, each with when it is due, in order.
    queue: VecDeque<(Instant, Vec<u8>)>,
    queued_bytes: usize,
    /// When the simulated line has serialised everything queued.
    line_free: Instant,
    /// Frames a full queue dropped.
    dropped: u64,
    /// When the timer fires (the head's due time), if armed.
    armed: Option<Instant>,
    timer: OwnedFd,
    epoll: EpollSet,
}

impl<L: Link> DelayLink<L> {
    pub fn new(inner: L, cfg: DelayConfig) -> io::Result<DelayLink<L>> {
        // SAFETY: a plain system call; the fd is owned from here on.
        let timer = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if timer < 0 {
            return Err(io::Error::last_os_error());
        }
        let timer = unsafe { OwnedFd::from_raw_fd(timer) };
        let epoll = EpollSet::new(&[inner.fd(), timer.as_raw_fd()])?;
        let now = Instant::now();
        Ok(DelayLink {
            inner,
            cfg,
            queue: VecDeque::new(),
            queued_bytes: 0,
            line_free: now,
            dropped: 0,
            armed: None,
            timer,
            epoll,
        })
    }

    /// How long a frame of `len` bytes takes to serialise.
    fn serialisation(&self, len: usize) -> Duration {
        if self.cfg.rate_bps == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos((len as u64 * 8).saturating_mul(1_000_000_000) / self.cfg.rate_bps)
    }

    /// Hands the link under it every frame that is due, then arms the
    /// timer for the next (or disarms it).
    fn release_due(&mut self) -> io::Result<()> {
        let now = Instant::now();
        while self.queue.front().is_some_and(|(due, _)| *due <= now) {
            let (_, frame) = self.queue.pop_front().expect("a frame is there");
            self.queued_bytes -= frame.len();
            if let Err(e) = self.inner.send(&frame) {
                // Lost like a frame the link under it refused: the transport retransmits.
                tracing::debug!(error = %e, "a delayed frame was not sent");
            }
        }
        // The timer stands for the head of the queue: set anew (which also
        // clears an expiration that fired) only when the head changed, so a
        // call that leaves it makes no system call for it.
        let next = self.queue.front().map(|(due, _)| *due);
        if next == self.armed {
            return Ok(());
        }
        self.armed = next;
        let wait = next.map(|due| due.saturating_duration_since(now).max(Duration::from_nanos(1)));
        let value = wait.unwrap_or(Duration::ZERO); // zero disarms
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: value.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(value.subsec_nanos() as i32),
            },
        };
        // SAFETY: a timerfd of ours and a valid itimerspec.
        if unsafe { libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl<L: Link> Link for DelayLink<L> {
    fn caps(&self) -> LinkCaps {
        self.inner.caps()
    }
    fn mac(&self) -> Mac {
        self.inner.mac()
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.queued_bytes + frame.len() > self.cfg.queue_limit() {
            self.dropped += 1;
            tracing::trace!(len = frame.len(), "delay queue full: frame dropped");
            return Ok(());
        }
        let now = Instant::now();
        let start = self.line_free.max(now);
        self.line_free = start + self.serialisation(frame.len());
        self.queue.push_back((self.line_free + self.cfg.latency, frame.to_vec()));
        self.queued_bytes += frame.len();
        self.release_due()
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<FrameMeta>> {
        self.release_due()?;
        self.inner.recv(buf)
    }
    /// Readable when the link under it has frames, or a delayed frame is due.
    fn fd(&self) -> RawFd {
        self.epoll.fd()
    }
    fn flush(&mut self) -> io::Result<()> {
        self.release_due()?;
        self.inner.flush()
    }
    /// The link under it's, with the frames a full delay queue dropped as losses.
    fn fault_counts(&self) -> FaultCounts {
        let mut c = self.inner.fault_counts();
        c.losses += self.dropped;
        c
    }
    fn join_group(&mut self, mgid: std::net::IpAddr) -> io::Result<()> {
        self.inner.join_group(mgid)
    }
    fn leave_group(&mut self, mgid: std::net::IpAddr) {
        self.inner.leave_group(mgid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inproc::InProcessLink;
    use rdma_transport::LinkKind;

    fn frame(dst: Mac, src: Mac, tag: u8, len: usize) -> Vec<u8> {
        crate::test_frame(dst, src, 0x8915, tag, len)
    }

    /// Two in-process links on a fabric of their own (`n` tells the
    /// tests' fabrics and MACs apart), and their MACs.
    fn two_links(n: u8) -> (InProcessLink, InProcessLink, Mac, Mac) {
        let (ma, mb) = ([2, 0, 0, 0, n, 1], [2, 0, 0, 0, n, 2]);
        let fabric = format!("delay-test-{n}-{}", std::process::id());
        let a = InProcessLink::join(&fabric, ma, LinkKind::RoceV1).unwrap();
        let b = InProcessLink::join(&fabric, mb, LinkKind::RoceV1).unwrap();
        (a, b, ma, mb)
    }

    /// Frames arrive in order, none before its latency, and the fd wakes
    /// a sleeper when the first is due.
    #[test]
    fn frames_arrive_in_order_after_the_latency_and_the_fd_says_when() {
        let (a, mut b, ma, mb) = two_links(7);
        let latency = Duration::from_millis(20);
        let mut a = DelayLink::new(a, DelayConfig { latency, ..DelayConfig::default() }).unwrap();
        let sent = Instant::now();
        for tag in 1..=3 {
            a.send(&frame(mb, ma, tag, 60)).unwrap();
        }
        let mut buf = [0u8; 128];
        assert!(b.recv(&mut buf).unwrap().is_none(), "nothing before the latency");
        // A driver asleep on the delay link's fd wakes when the frames are due.
        let woke = crate::wait::poll_readable(&[a.fd()], Duration::from_secs(5))[0];
        assert!(woke && sent.elapsed() >= latency, "woke after {:?}", sent.elapsed());
        a.flush().unwrap();
        for tag in 1..=3 {
            let m = b.recv(&mut buf).unwrap().expect("the frame, once due");
            assert_eq!(buf[m.len - 1], tag, "in order");
        }
        assert!(sent.elapsed() >= latency);
    }

    /// The rate spaces frames out; a full queue drops, counted as losses.
    #[test]
    fn the_rate_spaces_frames_and_a_full_queue_drops() {
        let (a, mut b, ma, mb) = two_links(8);
        // 1,000 bytes at 1 Mb/s: 8 ms each; a queue of three.
        let cfg = DelayConfig { rate_bps: 1_000_000, queue_bytes: 3_000, ..DelayConfig::default() };
        let mut a = DelayLink::new(a, cfg).unwrap();
        let sent = Instant::now();
        for tag in 1..=5 {
            a.send(&frame(mb, ma, tag, 1000)).unwrap();
        }
        assert_eq!(a.fault_counts().losses, 2, "two frames past a queue of three");
        let mut buf = [0u8; 2048];
        let mut got = Vec::new();
        while got.len() < 3 && sent.elapsed() < Duration::from_secs(5) {
            crate::wait::poll_readable(&[a.fd()], Duration::from_millis(50));
            a.flush().unwrap();
            while let Some(m) = b.recv(&mut buf).unwrap() {
                got.push(buf[m.len - 1]);
            }
        }
        assert_eq!(got, [1, 2, 3]);
        assert!(sent.elapsed() >= Duration::from_millis(24), "three frames of 8 ms: {:?}", sent.elapsed());
    }
}
