//! An open device (`ibv_context`): the engine, its sockets, and how the
//! application's calls drive them.
//!
//! A device runs one engine (a [`Shard`]: the engine and its sockets
//! behind one mutex) or several (`DeviceConfig::threads`), and keeps its
//! CQs and completion channels above them, behind a mutex of their own
//! (`completions::Hub`): every call that may complete work moves the
//! engine's completions there and raises the channels' events
//! ([`Inner::announce_completions`]).
//!
//! With one engine, progress (receive what is waiting, fire due timers,
//! send what the engine has) runs inside the application's calls: every
//! post sends at once, every poll and wait receives (except a poll the
//! CQ's queued completions already satisfy: [`SATISFIED_POLLS`]). Blocking
//! waits sleep in `poll(2)` on the device's socket, one waiter at a time
//! (the leader); other waiters sleep on a condition variable and are woken
//! after each round of progress. With [`Progress::Thread`] a background
//! thread is the permanent leader. With several engines each has such a
//! thread; the application's polls take from the CQs (one that finds its
//! CQ empty makes a round on the CQ's engines that no thread holds), and
//! its waits sleep until an engine moved something
//! (docs/multi-core-device.md).

use crate::completions::Hub;
use crate::device::{Backend, Device, DeviceConfig, Gid, Progress};
use crate::error::Result;
use crate::frames::FrameIo;
use crate::io::Io;
use rdma_link::capture::CaptureLink;
use rdma_link::delay::DelayLink;
use rdma_link::faults::FaultLink;
use rdma_link::inproc::InProcessLink;
use rdma_link::io_stats::IoStats;
use rdma_link::raw::RawLink;
use rdma_link::udp::{UdpIo, BATCH};
pub use rdma_link::wait::poll_readable;
use rdma_link::Link;
use rdma_transport::{AsyncEvent, CqId, Endpoint, Instant, Stats};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// Receive batches per round of progress, so a flood cannot starve sends.
const RX_BATCHES_PER_ROUND: usize = 8;

/// Receive calls a drain before a QP's move to RTR makes at most: far more
/// datagrams than the socket buffer holds, and still a bound under a flood
/// (what arrives during the drain came after the call began anyway).
const MAX_DRAIN_CALLS: usize = 1024;

/// How many polls in a row a CQ answers from the completions it already
/// holds, without a round of progress (`CompletionQueue::poll`): a poll
/// that asks for no more than the CQ holds gets the same answer either way
/// (the oldest completions), so the receive call, the timers and the sends
/// a round makes can wait for the next poll that finds the CQ short. On
/// that round the packet that came in the meantime is taken. The bound
/// keeps a loop that posts a UD send before each poll (its completion is
/// always there) from leaving the socket unread.
pub const SATISFIED_POLLS: u32 = 8;

/// How often a wait on a device of several engines looks again without
/// being woken: completions, packets taken in (and the async events they
/// raise) and the CM's events wake it, so this is a safety net.
const ENGINE_LOOK: Duration = Duration::from_millis(10);

/// The longest a waiter sleeps without looking again.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// How often the ACK flusher looks for held ACKs (see [`spawn_ack_flusher`]):
/// the most a held ACK overstays its delay when the application stops calling.
const FLUSH_PERIOD: Duration = Duration::from_millis(1);

/// Looks without a held ACK after which the ACK flusher sleeps until woken.
const FLUSH_QUIET_LOOKS: u32 = 16;

pub(crate) struct State {
    /// Which of the device's shards this is (`Inner::shards`).
    shard: usize,
    pub(crate) ep: Endpoint,
    /// The engine's completion count when its completions last moved to
    /// the device's CQs ([`Inner::announce_completions`]).
    completions_seen: u64,
    /// Completions moved to the device's CQs since the last round of
    /// progress began.
    moved_since_round: bool,
    /// How many of the CQs in error (`DeviceCqs::errored_since`) this
    /// engine was told of.
    cq_errors_told: usize,
    pub(crate) io: Io,
    /// A waiter sleeping in poll(2) on the socket.
    leader: bool,
    /// Waiters sleeping on the condition variable.
    followers: usize,
    /// How long the device went without a round of progress.
    gaps: ProgressGaps,
    /// Polls answered from completions already queued, without a round of
    /// progress, since the last round (see [`SATISFIED_POLLS`]).
    pub(crate) polls_without_progress: u32,
    /// The CQ that the last poll emptied by taking completions already
    /// queued, without a round of progress (see [`CompletionQueue::poll`](crate::CompletionQueue::poll)).
    pub(crate) drained_without_progress: Option<CqId>,
}

/// The intervals between the starts of two rounds of progress on a device
/// (`Context::progress_gaps`). A requester's retransmission timer keeps
/// running in its peer while this device makes no round: a gap longer
/// than the peer's ACK timeout times its `retry_cnt + 1` ends the peer's
/// QPs with RetryExcErr. What makes a gap: time the application spends
/// outside the library, and time its thread waits for a core (a machine
/// with more busy processes than cores).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgressGaps {
    /// The longest interval.
    pub longest: Duration,
    /// Intervals of more than [`ProgressGaps::LONG`].
    pub long: u64,
    /// Rounds of progress made so far (whether or not they made a system
    /// call: an io_uring receive reaps what the kernel queued without one).
    pub rounds: u64,
    last: Option<Instant>,
}

impl ProgressGaps {
    /// An interval counted in [`ProgressGaps::long`].
    pub const LONG: Duration = Duration::from_millis(100);

    fn round_at(&mut self, now: Instant, device: &str) {
        self.rounds += 1;
        if let Some(last) = self.last {
            let gap = now.saturating_since(last);
            if gap > Self::LONG {
                self.long += 1;
                tracing::debug!(device, gap_ms = gap.as_millis() as u64, "no round of progress for a while");
            }
            self.longest = self.longest.max(gap);
        }
        self.last = Some(now);
    }
}

/// What handles the MADs a round of progress takes in (the device's RDMA
/// CM). It runs under the first engine's lock in whichever thread made the
/// round (and takes another engine's for a call on a QP there):
/// an application that polls without pause holds that lock nearly all the
/// time, and a mutex is not fair, so the CM's own service thread alone
/// could wait for it for seconds while the peer's REQs and DREQs go
/// unanswered (seen: perftest `-R` servers polling while their peers'
/// connects timed out).
pub(crate) trait MadService: Send + Sync {
    fn process(&self, st: &mut State);
}

/// One engine of the device: its state and sockets behind its lock, and
/// what wakes the threads that wait on it. A device has one, or several
/// (`DeviceConfig::threads`, docs/multi-core-device.md), each with its QPs
/// in a QPN range of its own ([`Inner::shard_of`]).
pub(crate) struct Shard {
    state: Mutex<State>,
    /// The shared port's slot of its socket: the top bits of its QPNs.
    slot: Option<u8>,
    /// What a blocking wait sleeps on (see `UdpIo::wait_fds`).
    wait_fds: [RawFd; 2],
    /// Wakes the leader: a post that armed a timer, or shutdown.
    kick: OwnedFd,
    /// A kick is written and not yet taken: the next kicks write nothing
    /// (the thread they would wake is awake, or about to be).
    kicked: AtomicBool,
    progressed: Condvar,
    /// A progress thread drives this shard ([`Progress::Thread`]).
    thread: AtomicBool,
    /// The ACK flusher thread, if the shard has one.
    flusher: std::sync::OnceLock<std::thread::Thread>,
    /// The progress thread, if the shard has one: the device's drop waits
    /// for it to end (see `Inner`'s `Drop`).
    progress: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The ACK flusher sleeps until woken (see [`Inner::wake_flusher`]).
    flusher_parked: AtomicBool,
    /// When the progress thread's sleep ends (`Inner::now`, ns), as it
    /// planned under the lock (0 during its own round): another thread's
    /// round that leaves an earlier deadline kicks it
    /// (`Inner::kick_if_due_sooner`).
    wakes_at: std::sync::atomic::AtomicU64,
}

impl Shard {
    fn new(index: usize, slot: Option<u8>, ep: Endpoint, io: Io) -> Result<Shard> {
        Ok(Shard {
            wait_fds: io.wait_fds(),
            state: Mutex::new(State {
                shard: index,
                ep,
                completions_seen: 0,
                moved_since_round: false,
                cq_errors_told: 0,
                io,
                leader: false,
                followers: 0,
                gaps: ProgressGaps::default(),
                polls_without_progress: 0,
                drained_without_progress: None,
            }),
            slot,
            kick: eventfd()?,
            kicked: AtomicBool::new(false),
            progressed: Condvar::new(),
            thread: AtomicBool::new(false),
            flusher: std::sync::OnceLock::new(),
            progress: Mutex::new(None),
            flusher_parked: AtomicBool::new(false),
            wakes_at: std::sync::atomic::AtomicU64::new(u64::MAX),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the kicks written, after a wake that found the eventfd
    /// readable; the caller then makes a round, which sees whatever a
    /// kick that came meanwhile (and wrote nothing) was for.
    fn take_kick(&self) {
        drain_eventfd(self.kick.as_raw_fd());
        self.kicked.store(false, Ordering::Release);
    }

    /// Wakes the waiter sleeping in poll(2) (or the progress thread).
    fn kick(&self) {
        if self.kicked.swap(true, Ordering::AcqRel) {
            return;
        }
        let one = 1u64;
        // SAFETY: writes 8 bytes to our eventfd.
        unsafe { libc::write(self.kick.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

pub(crate) struct Inner {
    pub(crate) device: Device,
    /// The device's MAD consumer, once the RDMA CM uses the device.
    pub(crate) mad_service: std::sync::OnceLock<Weak<dyn MadService>>,
    /// The device's engines; the first also serves what is the device's
    /// alone (QP1 and the CM, and the waits of the application).
    shards: Vec<Shard>,
    /// The device's CQs and completion channels (lock order: the shards'
    /// states in their order, then this): where the engines' completions go.
    hub: Mutex<Hub>,
    /// With several engines: a count of the rounds that moved something,
    /// and what the application's waits sleep on until it changes.
    moved: Mutex<u64>,
    moved_cv: Condvar,
    /// MADs another engine received, for the first engine's GSI (innermost
    /// lock: taken with a shard's state held).
    mads: Mutex<Vec<rdma_transport::gsi::ReceivedMad>>,
    /// How many CQs are in error (`DeviceCqs::errored_since`): an engine
    /// told of fewer looks at the hub, the others skip it.
    cq_errors: std::sync::atomic::AtomicUsize,
    /// Where the next QP goes (round robin over the engines).
    next_shard: std::sync::atomic::AtomicUsize,
    epoch: std::time::Instant,
    #[cfg(feature = "tokio")]
    pub(crate) notify: tokio::sync::Notify,
}

/// An open device. Cheap to clone; every object made from it keeps it open.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("device", &self.inner.device.name()).finish_non_exhaustive()
    }
}

fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned from here on.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn drain_eventfd(fd: RawFd) {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into `v`; EAGAIN is fine.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

impl State {
    /// Whether the engine queued completions that have not moved to the
    /// device's CQs yet ([`Inner::announce_completions`] moves them).
    pub(crate) fn completions_pending(&self) -> bool {
        self.ep.completions_delivered() != self.completions_seen
    }

    /// Whether completions moved to the device's CQs since the last round
    /// of progress began.
    pub(crate) fn completions_moved(&self) -> bool {
        self.moved_since_round
    }

    /// The index of this state's engine in the device.
    pub(crate) fn engine(&self) -> usize {
        self.shard
    }
}

impl Inner {
    pub(crate) fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The first shard's state: what lives on the first engine alone (QP1
    /// and the CM), the handles of the tables the engines share (SRQs and
    /// XRC domains, memory windows: each has its own lock, which SRQ posts
    /// and limit arming take without an engine's), and the application's
    /// waits; with one engine, everything.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.shards[0].lock()
    }

    /// The shard of QP `qpn`, which holds its state for life: the one whose
    /// slot its QPN is in (the first, for a QPN of none).
    pub(crate) fn shard_of(&self, qpn: u32) -> &Shard {
        if self.shards.len() > 1 {
            let slot = rdma_link::share::steer::slot_of_qpn(qpn);
            if let Some(s) = self.shards.iter().find(|s| s.slot == Some(slot)) {
                return s;
            }
        }
        &self.shards[0]
    }

    /// Whether QP `qpn` is on the device's first engine (where the RDMA CM
    /// runs): always, with one.
    pub(crate) fn on_first_engine(&self, qpn: u32) -> bool {
        std::ptr::eq(self.shard_of(qpn), &self.shards[0])
    }

    /// How many engines the device runs.
    pub(crate) fn engines(&self) -> usize {
        self.shards.len()
    }

    /// The shard a new QP goes to: the next in turn. Every kind spreads: the
    /// engines share the SRQs and XRC domains (`Endpoint::share_srqs`) and
    /// the memory windows, and the RDMA CM drives a QP on its own engine.
    pub(crate) fn place_qp(&self) -> &Shard {
        if self.shards.len() == 1 {
            return &self.shards[0];
        }
        let i = self.next_shard.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        &self.shards[i]
    }

    /// Runs `f` on every engine, the shards' locks all held (so that the
    /// engines see these calls in the same order, and draw the same PD
    /// numbers and memory keys): for the device's own objects, which every
    /// engine must know. Returns the first engine's answer; another engine
    /// answering otherwise is a defect, logged.
    pub(crate) fn mirror<T: PartialEq + std::fmt::Debug>(&self, what: &str, mut f: impl FnMut(&mut State) -> T) -> T {
        if self.shards.len() == 1 {
            return f(&mut self.lock());
        }
        let mut all = self.lock_all();
        let mut states = all.iter_mut();
        let first = f(states.next().expect("a device has an engine"));
        for st in states {
            let other = f(st);
            if other != first {
                tracing::error!(what, ?first, ?other, engine = st.shard, "the device's engines disagree");
                debug_assert_eq!(other, first, "{what}: the device's engines disagree");
            }
        }
        first
    }

    /// A CQ of `depth` completions: created unbounded in every engine and
    /// added to the hub while they are all held, so that CQs made at once
    /// by two threads get the same number in every engine and the hub.
    pub(crate) fn create_cq(&self, depth: usize) -> CqId {
        self.mirror("create_cq", |st| {
            let id = st.ep.create_cq(usize::MAX);
            if st.shard == 0 {
                self.hub().cqs.add(id, depth);
            }
            id
        })
    }

    /// Every shard's state, locked in their order (the order every caller
    /// that holds more than one takes them in): for what the device
    /// mirrors in each engine (PDs, MRs, CQs), done in the same order in
    /// all of them, and for checks that must see every engine at once (an
    /// XRC domain's close).
    pub(crate) fn lock_all(&self) -> Vec<MutexGuard<'_, State>> {
        self.shards.iter().map(Shard::lock).collect()
    }

    /// The state of the shard of QP `qpn`.
    pub(crate) fn lock_qp(&self, qpn: u32) -> MutexGuard<'_, State> {
        self.shard_of(qpn).lock()
    }

    /// A CQ that overflowed with one engine's completions fails every
    /// engine's QPs on it (IBTA 11.4.2.1): each engine is told, in its own
    /// rounds, of the CQs that went in error since it last looked.
    fn spread_cq_errors(&self, st: &mut State) {
        if self.cq_errors.load(Ordering::Acquire) == st.cq_errors_told {
            return;
        }
        let errored: Vec<CqId> = self.hub().cqs.errored_since(st.cq_errors_told).to_vec();
        st.cq_errors_told += errored.len();
        for cq in errored {
            st.ep.cq_overrun(cq, 0);
        }
    }

    /// The next async event of the engine of `st` that the application
    /// should see: a CQ's error event once, though every engine with QPs
    /// on it raises one.
    fn next_event(&self, st: &mut State) -> Option<AsyncEvent> {
        loop {
            let ev = st.ep.poll_event()?;
            match ev {
                AsyncEvent::CqError(cq) if self.shards.len() > 1 && !self.hub().cqs.first_error_report(cq) => {}
                ev => return Some(ev),
            }
        }
    }

    /// QP1 on a device of several engines: the host steers a MAD no
    /// process claimed (a REQ for a port no one listens on, a class the CM
    /// does not steer) to any of the device's sockets, but the GSI and the
    /// CM are the first engine's. Another engine hands what it got to the
    /// first (`mads`), which takes them in as its own.
    fn forward_mads(&self, st: &mut State) {
        if st.shard == 0 {
            let forwarded = std::mem::take(&mut *self.mads.lock().unwrap_or_else(|e| e.into_inner()));
            for m in forwarded {
                st.ep.gsi_forwarded(m);
            }
        } else if st.ep.mads_waiting() {
            let mut mads = self.mads.lock().unwrap_or_else(|e| e.into_inner());
            // Bounded: what the first engine has not taken yet waits in this
            // engine's GSI queue, which drops (and counts) past its limit.
            while mads.len() < rdma_transport::gsi::agent::RECV_QUEUE_MAX {
                let Some(m) = st.ep.poll_mad_to_forward() else { break };
                tracing::debug!(engine = st.shard, from = %m.from, "a MAD for the first engine's GSI");
                mads.push(m);
            }
            // This engine sends no MAD, so it has no timeout to report.
            while st.ep.poll_mad_timeout().is_some() {}
            drop(mads);
            self.shards[0].kick();
        }
    }

    /// Wakes the application's waits on a device of several engines (they
    /// sleep on `moved`, not on an engine).
    fn note_moved(&self) {
        let mut n = self.moved.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        self.moved_cv.notify_all();
    }

    /// The shard whose state `st` is.
    fn shard(&self, st: &State) -> &Shard {
        &self.shards[st.shard]
    }

    /// The device's CQs and channels. With the engine's state held too,
    /// take that first.
    pub(crate) fn hub(&self) -> MutexGuard<'_, Hub> {
        self.hub.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the completions the engine queued into the device's CQs
    /// (nothing to do but a comparison when it queued none), and returns
    /// the CQs. Only through [`Inner::announce_completions`], which raises
    /// the channels' events for what moved.
    fn collect<'a>(&'a self, st: &mut State) -> MutexGuard<'a, Hub> {
        let mut hub = self.hub();
        st.moved_since_round |= hub.cqs.collect(&mut st.ep, &mut st.completions_seen);
        hub
    }

    /// One round of progress: receive, fire timers, send, notify channels.
    /// Returns whether any packet came or went.
    pub(crate) fn progress_locked(&self, st: &mut State) -> Result<bool> {
        st.polls_without_progress = 0;
        st.drained_without_progress = None;
        st.moved_since_round = false;
        let now = self.now();
        st.gaps.round_at(now, self.device.name());
        let mut moved = 0;
        for _ in 0..RX_BATCHES_PER_ROUND {
            let n = st.io.receive(&mut st.ep, now)?;
            moved += n;
            if n < BATCH {
                break;
            }
        }
        if st.ep.poll_timeout().is_some_and(|t| t <= now) {
            st.ep.handle_timeout(now);
        }
        if self.shards.len() > 1 {
            self.forward_mads(st);
        }
        // The CM and the MAD service are the first engine's; another
        // engine's QP1 only relays (what `forward_mads` left there waits).
        if st.shard == 0 && st.ep.mads_waiting() {
            if let Some(service) = self.mad_service.get().and_then(Weak::upgrade) {
                service.process(st);
            }
        }
        // What the packets and timers completed reaches the CQs before
        // more is sent: a CQ that overflowed fails its QPs now, before
        // they ACK more (the ACKs go out in this transmit).
        self.announce_completions(st);
        moved += st.io.transmit(&mut st.ep, now)?;
        self.wake_flusher(st);
        if st.io.receives_pending() {
            // io_uring: receives reaped while sending wait for no readiness event
            moved += st.io.receive(&mut st.ep, now)?;
            moved += st.io.transmit(&mut st.ep, now)?;
        }
        self.announce_completions(st);
        self.kick_if_due_sooner(st);
        if moved > 0 && self.shards.len() > 1 {
            // A packet may have raised an async event or a CM event: the
            // waits of a device of several engines look again.
            self.note_moved();
        }
        Ok(moved > 0)
    }

    /// After a round that another thread than the engine's progress thread
    /// made (a poll, a wait, the CM's service): kicks the progress thread
    /// if the round left work due before its planned wake (a held ACK, a
    /// timer, sends the budget left), which it would otherwise sleep past
    /// (up to [`MAX_SLEEP`]). The thread's own rounds find `wakes_at` 0.
    fn kick_if_due_sooner(&self, st: &mut State) {
        let shard = self.shard(st);
        if !shard.thread.load(Ordering::Relaxed) {
            return;
        }
        let due = if st.io.has_pending() || st.io.sends_left() { Some(self.now()) } else { st.ep.poll_timeout() };
        if due.is_some_and(|t| t.as_nanos() < shard.wakes_at.load(Ordering::Relaxed)) {
            shard.kick();
        }
    }

    /// A poll that found CQ `cq` empty on a device of several engines: a
    /// round of progress on each engine that has QPs on the CQ and that no
    /// other thread holds, as every poll of a device of one engine makes.
    /// Without it a packet waits for its engine's thread to wake, tens of
    /// microseconds when the cores are busy (docs/multi-core-device.md).
    /// Returns whether any round moved completions.
    pub(crate) fn progress_engines_of(&self, cq: rdma_transport::CqId) -> Result<bool> {
        let engines = self.hub().cqs.engines_of(cq);
        let mut moved = false;
        for (i, shard) in self.shards.iter().enumerate() {
            if engines & (1u32 << i) == 0 {
                continue;
            }
            let mut st = match shard.state.try_lock() {
                Ok(st) => st,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => continue,
            };
            self.progress_locked(&mut st)?;
            moved |= st.completions_moved();
        }
        Ok(moved)
    }

    /// If the engine queued completions since they last moved: moves them
    /// to the device's CQs, raises the armed CQs' channel events and wakes
    /// the waiters. Progress rounds call it, and so does every call that
    /// may complete requests by itself (a post: a UD send, a flush in ERR;
    /// a move to ERR): without it the completion would reach neither the
    /// CQ nor an armed channel until some later round.
    pub(crate) fn announce_completions(&self, st: &mut State) {
        let several = self.shards.len() > 1;
        let mut moved = false;
        loop {
            if several {
                // A CQ another engine found overflowing fails this
                // engine's QPs on it: their flushes move with the rest.
                self.spread_cq_errors(st);
            }
            if !st.completions_pending() {
                break;
            }
            moved = true;
            let errored = {
                let mut hub = self.collect(st);
                hub.fire_channels();
                hub.cqs.errored_count()
            };
            if several && self.cq_errors.fetch_max(errored, Ordering::AcqRel) < errored {
                // A CQ went in error here: the other engines' QPs on it
                // fail in their next round, which starts now.
                for (i, shard) in self.shards.iter().enumerate() {
                    if i != st.shard {
                        shard.kick();
                    }
                }
            }
        }
        if !moved {
            return;
        }
        if several {
            self.note_moved();
        }
        if st.followers > 0 {
            self.shard(st).progressed.notify_all();
        }
        #[cfg(feature = "tokio")]
        self.notify.notify_waiters();
    }

    /// Hands the engine every datagram waiting in the receive socket (and,
    /// with io_uring, in the ring), judged in the QP states of now: run
    /// before a transition that lets a QP receive, so that a packet that
    /// arrived before it is dropped as the old state demands (counted as
    /// `QpNotReady`) instead of executed after it. Completions the other
    /// QPs get from these packets are announced. Returns the datagrams.
    pub(crate) fn drain_receive(&self, st: &mut State) -> Result<usize> {
        let now = self.now();
        let mut total = 0;
        for _ in 0..MAX_DRAIN_CALLS {
            let n = st.io.receive(&mut st.ep, now)?;
            total += n;
            if n == 0 && !st.io.receives_pending() {
                break;
            }
        }
        if total > 0 {
            tracing::debug!(datagrams = total, "receive queue drained before a QP state change");
        }
        self.announce_completions(st);
        Ok(total)
    }

    /// Before the transition `attr` asks for on a QP of the engine of `st`:
    /// to RTR, what waits in the socket from before is handled (and
    /// dropped) first, under the same lock as the transition, since a
    /// packet is judged in the state its QP had when it arrived.
    pub(crate) fn before_transition(&self, st: &mut State, attr: &rdma_transport::QpAttr) -> Result<()> {
        if attr.qp_state == Some(rdma_transport::QpState::Rtr) {
            self.drain_receive(st)?;
        }
        Ok(())
    }

    /// Sends what a post queued, and makes the leader look at its timers again.
    /// On a frame link, hands the engine the frames waiting (up to a
    /// progress round's worth) before a post's packets go out. A post
    /// sends without receiving, and an application that keeps posting
    /// (qperf's `uc_bi_bw` reposts every send as it completes) would
    /// otherwise send far more per round than it receives: on a veth pair
    /// both ends' packet sockets stayed full and dropped nearly every UC
    /// message. Receiving first keeps each end's receiving paced with its
    /// sending, as an HCA does both at once. The UDP backend keeps its post
    /// path as it is (its latency is measured per system call).
    pub(crate) fn receive_before_send(&self, st: &mut State) -> Result<()> {
        if !st.io.is_frames() {
            return Ok(());
        }
        let now = self.now();
        for _ in 0..RX_BATCHES_PER_ROUND {
            if st.io.receive(&mut st.ep, now)? < BATCH {
                break;
            }
        }
        Ok(())
    }

    /// Sends what a call queued, moves the completions it made (a UD or UC
    /// send completes as it leaves, a flush at once) to the CQs, and wakes
    /// whoever drives the engine.
    pub(crate) fn doorbell(&self, st: &mut State) -> Result<()> {
        let sent = st.io.transmit(&mut st.ep, self.now());
        self.announce_completions(st);
        sent?;
        self.wake_flusher(st);
        let shard = self.shard(st);
        if st.leader || shard.thread.load(Ordering::Relaxed) {
            shard.kick();
        }
        Ok(())
    }

    /// Wakes every thread waiting on this device (the one in poll(2) and
    /// those on the condition variable), so that each looks again at what
    /// it waits for: an event that came from elsewhere (the RDMA CM's
    /// queue) is seen at once, not at the end of the wait's slice.
    pub(crate) fn wake_waiters(&self) {
        for shard in &self.shards {
            shard.kick();
            shard.progressed.notify_all();
        }
        if self.shards.len() > 1 {
            self.note_moved();
        }
    }

    /// Wakes the sleeping ACK flusher if an ACK is now held back, or the
    /// transmit budget left packets: one atomic load while it is awake,
    /// which is all the time in steady traffic.
    fn wake_flusher(&self, st: &State) {
        let shard = self.shard(st);
        if shard.flusher_parked.load(Ordering::Relaxed) && (st.io.sends_left() || st.ep.holds_acks()) {
            shard.flusher_parked.store(false, Ordering::Relaxed);
            if let Some(t) = shard.flusher.get() {
                t.unpark();
            }
        }
    }

    /// Sends held ACKs now (before a QP goes away: its peer still waits for them).
    pub(crate) fn release_acks(&self, st: &mut State) {
        st.ep.release_acks();
        if let Err(e) = st.io.transmit(&mut st.ep, self.now()) {
            tracing::debug!(error = %e, "could not send the held ACKs");
        }
        self.announce_completions(st);
    }

    /// Drives progress until `check` returns a value or `timeout` passes
    /// (`None` waits as long as it takes).
    pub(crate) fn wait_until<T>(
        &self,
        timeout: Option<Duration>,
        mut check: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<Option<T>> {
        let start = std::time::Instant::now();
        let deadline = timeout.map(|t| start + t);
        if self.shards.len() > 1 {
            return self.wait_for_engines(deadline, check);
        }
        // Adaptive polling: spin while packets keep moving, sleep once
        // `spin` has passed without any.
        let spin = self.device.config().spin;
        let mut spin_until = start + spin;
        let shard = &self.shards[0];
        let mut st = shard.lock();
        loop {
            let moved = self.progress_locked(&mut st)?;
            if let Some(v) = check(&mut st) {
                return Ok(Some(v));
            }
            let now = std::time::Instant::now();
            if moved {
                spin_until = now + spin;
            }
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            if now < spin_until || st.io.has_pending() {
                drop(st);
                std::hint::spin_loop();
                st = shard.lock();
                continue;
            }
            let engine = st.ep.poll_timeout().map(|t| t.saturating_since(self.now()));
            let mut sleep = MAX_SLEEP;
            for d in [engine, deadline.map(|d| d.saturating_duration_since(now))].into_iter().flatten() {
                sleep = sleep.min(d);
            }
            if st.leader || shard.thread.load(Ordering::Relaxed) {
                st.followers += 1;
                st = match shard.progressed.wait_timeout(st, sleep) {
                    Ok((g, _)) => g,
                    Err(e) => e.into_inner().0,
                };
                st.followers -= 1;
            } else {
                st.leader = true;
                drop(st);
                let [.., kicked] =
                    poll_readable(&[shard.wait_fds[0], shard.wait_fds[1], shard.kick.as_raw_fd()], sleep);
                if kicked {
                    shard.take_kick(); // a read less per wake-up by a packet
                }
                st = shard.lock();
                st.leader = false;
                if st.followers > 0 {
                    shard.progressed.notify_all(); // one of them takes over polling
                }
            }
        }
    }
}

impl Inner {
    /// [`Inner::wait_until`] on a device of several engines: their threads
    /// make progress; this looks at `check` (with the first engine's state)
    /// each time one of them moved something, or an engine's async event
    /// may be due (every [`ENGINE_LOOK`]), until it answers or `deadline`.
    fn wait_for_engines<T>(
        &self,
        deadline: Option<std::time::Instant>,
        mut check: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<Option<T>> {
        loop {
            let seen = *self.moved.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(v) = check(&mut self.shards[0].lock()) {
                return Ok(Some(v));
            }
            let now = std::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let sleep = deadline.map_or(ENGINE_LOOK, |d| d.saturating_duration_since(now).min(ENGINE_LOOK));
            let n = self.moved.lock().unwrap_or_else(|e| e.into_inner());
            if *n == seen {
                let _ = self.moved_cv.wait_timeout(n, sleep);
            }
        }
    }
}

// Here, not in device.rs: a device names no context (the context names
// its device), so the two modules do not import each other.
impl Device {
    /// `ibv_open_device`: binds the device's UDP socket, or opens its link.
    pub fn open(&self) -> Result<Context> {
        Context::open(self)
    }
}

/// One engine of `device` and its socket or link: the device's only one,
/// or (with `seed`) one of several, whose memory tables all draw the same
/// keys from the seed (they register the same regions in the same order)
/// and whose sockets share the device's port.
fn open_engine(device: &Device, seed: Option<u64>) -> Result<(Endpoint, Io)> {
    let cfg = device.config();
    let mut ep = match seed {
        Some(seed) => Endpoint::with_seed(device.addr(), seed),
        None => Endpoint::new(device.addr()),
    };
    ep.set_ack_delay(cfg.ack_delay);
    ep.set_ack_before_requests(cfg.ack_before_requests);
    ep.set_ecn_capable(cfg.ecn_capable);
    match &cfg.controller {
        Some(f) => ep.set_controller(Some(f.clone())),
        None => ep.set_congestion_control(cfg.congestion_control),
    }
    let io = match &cfg.backend {
        Backend::Udp if cfg.udp_as_link || cfg.delay.is_active() => {
            // The Identification a socket hides (see rdma_link::udp);
            // faults and capture are the link wrappers' (wrap_link).
            ep.set_ipv4_ident_unknown(true);
            let udp = rdma_link::udp::UdpConfig { faults: Default::default(), pcap: None, as_link: true, ..cfg.udp() };
            let link = wrap_link(Box::new(UdpIo::bind(device.addr(), &udp)?), cfg)?;
            // What the link takes: whole packets.
            ep.set_payload_by_reference(link.caps().by_reference);
            Io::Frames(FrameIo::new(link)?)
        }
        Backend::Udp => {
            ep.set_ipv4_ident_unknown(true); // see rdma_link::udp
            let several = seed.is_some();
            // Several engines share the port, steered by QPN like
            // processes, and take no GRO: a member alone takes it, and the
            // first engine is alone until the second joins, when it would
            // turn GRO off with merged datagrams perhaps still queued (read
            // without their segment size: ICRC mismatches).
            let udp =
                rdma_link::udp::UdpConfig { shared: cfg.udp().shared || several, plain_receive: several, ..cfg.udp() };
            let io = UdpIo::bind(device.addr(), &udp)?;
            ep.set_payload_by_reference(io.sends_by_reference());
            if let Some(m) = io.member() {
                // The host steers packets to this process by its QPNs.
                ep.set_qpn_range(rdma_link::share::steer::qpn_range(m.slot()))?;
            }
            Io::Udp(io)
        }
        backend => {
            ep.set_link(cfg.link, device.lid());
            if let Some(r) = device.ib_port().filter(|r| !r.pkeys.is_empty()) {
                // The partitions the subnet manager put the port in: a
                // QP's pkey_index picks one, and packets of others are
                // dropped, as the HCA's P_Key table does.
                ep.set_pkey_table(&r.pkeys).map_err(|e| {
                    crate::Error::InvalidArgument(format!(
                        "device {}: the P_Key table its port agent published ({:04x?}) is unusable: {e}",
                        device.name(),
                        r.pkeys
                    ))
                })?;
            }
            Io::Frames(FrameIo::new(open_link(device, backend)?)?)
        }
    };
    Ok((ep, io))
}

impl Context {
    fn open(device: &Device) -> Result<Context> {
        let cfg = device.config();
        // One seed for all the engines of a device of several.
        let engines = cfg.engines();
        let seed = (engines > 1).then(|| {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(std::process::id())
        });
        let mut shards: Vec<Shard> = Vec::with_capacity(engines);
        for index in 0..engines {
            let (mut ep, io) = open_engine(device, seed)?;
            if let Some(first) = shards.first() {
                // The first engine's GSI sends the device's MADs; the others
                // hand it what they take in.
                ep.relay_mads();
                // One table of memory windows (a window bound through one
                // engine's QP is reached through any QP of its PD) and one
                // of SRQs (the QPs on an SRQ spread over the engines).
                let first = first.lock();
                ep.share_windows(first.ep.window_table());
                ep.share_srqs(first.ep.srq_table());
            }
            let slot = io.slot();
            shards.push(Shard::new(index, slot, ep, io)?);
        }
        let inner = Arc::new(Inner {
            device: device.clone(),
            mad_service: std::sync::OnceLock::new(),
            shards,
            hub: Mutex::new(Hub::default()),
            moved: Mutex::new(0),
            moved_cv: Condvar::new(),
            mads: Mutex::new(Vec::new()),
            next_shard: std::sync::atomic::AtomicUsize::new(0),
            cq_errors: std::sync::atomic::AtomicUsize::new(0),
            epoch: std::time::Instant::now(),
            #[cfg(feature = "tokio")]
            notify: tokio::sync::Notify::new(),
        });
        tracing::info!(device = device.name(), addr = %device.addr(), link = cfg.link.name(), lid = device.lid(), engines, "device open");
        for index in 0..inner.shards.len() {
            // Several engines: each has its thread (the application's posts
            // and empty polls make rounds too, but a wait only sleeps).
            if cfg.progress == Progress::Thread || inner.shards.len() > 1 {
                spawn_progress_thread(&inner, index)?;
            } else if !cfg.ack_delay.is_zero() {
                spawn_ack_flusher(&inner, index)?;
            }
        }
        Ok(Context { inner })
    }

    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The extended capability bits of `ibv_query_device_ex`'s
    /// `device_cap_flags_ex` beyond the 32-bit `device_cap_flags`
    /// ([`crate::device_cap_ex`]): FLUSH (global and persistent placement)
    /// and ATOMIC WRITE, on every backend (the engine implements them).
    pub fn device_cap_flags_ex(&self) -> u64 {
        crate::device_cap_ex::ALL
    }

    /// The `device_cap_flags` bits of what the engine implements beyond
    /// the basics ([`crate::device_cap`]): memory windows of type 1 and 2B.
    pub fn device_cap_flags(&self) -> u32 {
        crate::device_cap::ALL
    }

    /// `max_mw` of `ibv_query_device`: how many memory windows a device holds.
    pub fn max_mw(&self) -> u32 {
        rdma_transport::window::MAX_WINDOWS as u32
    }

    /// `ibv_query_device_ex`'s `odp_caps` (and `xrc_odp_caps`): explicit
    /// and implicit ODP, every RC, UC, UD and XRC operation on on-demand memory
    /// (docs/odp.md); all zero where the fault-safe copies cannot work in
    /// this process (a seccomp policy forbidding `process_vm_readv`).
    pub fn odp_caps(&self) -> crate::OdpCaps {
        if !rdma_transport::odp::supported() {
            return crate::OdpCaps::default();
        }
        use crate::device::odp;
        crate::OdpCaps {
            general_caps: odp::SUPPORT | odp::SUPPORT_IMPLICIT,
            rc_odp_caps: odp::RC,
            uc_odp_caps: odp::UC,
            ud_odp_caps: odp::UD,
            xrc_odp_caps: odp::XRC,
        }
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, index: u32) -> Result<Gid> {
        self.inner.device.gid(index)
    }

    /// One round of progress without blocking: what a passive peer (the
    /// target of WRITEs and READs) calls in its loops in manual mode.
    pub fn progress(&self) -> Result<()> {
        for shard in &self.inner.shards {
            self.inner.progress_locked(&mut shard.lock())?;
        }
        Ok(())
    }

    /// One round of progress, unless another thread holds the device now
    /// (it is making progress itself): then nothing. Returns whether a
    /// packet came or went. For a helper thread that must never make the
    /// application wait for the device (the drop-in libibverbs' idle
    /// progress): blocking on the lock would put the helper's round, and a
    /// wake-up, in the middle of the application's.
    pub fn try_progress(&self) -> Result<bool> {
        let mut st = match self.inner.shards[0].state.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        };
        self.inner.progress_locked(&mut st)
    }

    /// The next asynchronous event if one is queued, without progress and
    /// without waiting for the device (None while another thread holds it).
    pub fn try_async_event(&self) -> Option<AsyncEvent> {
        self.inner.shards.iter().find_map(|s| match s.state.try_lock() {
            Ok(mut g) => self.inner.next_event(&mut g),
            Err(std::sync::TryLockError::WouldBlock) => None,
            Err(std::sync::TryLockError::Poisoned(e)) => self.inner.next_event(&mut e.into_inner()),
        })
    }

    /// Drives progress for `d`, sleeping on the socket in between.
    pub fn progress_for(&self, d: Duration) -> Result<()> {
        self.inner.wait_until(Some(d), |_| None::<()>)?;
        Ok(())
    }

    /// `ibv_get_async_event`: the next asynchronous event, waiting up to
    /// `timeout` (`None`: as long as it takes).
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        let others = &self.inner.shards[1..];
        self.inner.wait_until(timeout, |st| {
            // The first engine's, then the others' (locked after it, in order).
            let inner = &self.inner;
            inner.next_event(st).or_else(|| others.iter().find_map(|s| inner.next_event(&mut s.lock())))
        })
    }

    /// What a blocking wait sleeps on in `poll(2)`: readable when packets
    /// wait for this device (UDP: the receive socket, and an epoll set of
    /// its multicast group sockets and, with io_uring, the ring; a frame
    /// link: its fd and -1). For a caller that watches the device from its
    /// own thread and drives progress only when nobody else does.
    pub fn wait_fds(&self) -> [RawFd; 2] {
        self.inner.shards[0].wait_fds
    }

    /// How many engines the device runs (`DeviceConfig::threads`).
    pub fn engines(&self) -> usize {
        self.inner.engines()
    }

    /// The engine's counters (packets, retransmits, NAKs, drops by reason).
    pub fn stats(&self) -> Stats {
        let mut all = self.inner.shards.iter();
        let mut stats = all.next().expect("a device has an engine").lock().ep.stats();
        for shard in all {
            stats.add(&shard.lock().ep.stats());
        }
        stats
    }

    /// The lowest current DCQCN rate over this device's QPs, in bits per
    /// second, if congestion control is on and the device has RC/UC QPs.
    /// Each as of its QP's last send, CNP or timer: an idle QP with no
    /// pacer burst takes the increases due since when it next acts.
    pub fn min_qp_rate(&self) -> Option<u64> {
        self.inner.shards.iter().filter_map(|s| s.lock().ep.min_qp_rate()).min()
    }

    /// How long this device went without a round of progress ([`ProgressGaps`]):
    /// its first engine's (the one the application drives, with one).
    pub fn progress_gaps(&self) -> ProgressGaps {
        self.inner.lock().gaps
    }

    /// The socket layer's counters (datagrams, system calls, injected faults).
    pub fn io_stats(&self) -> IoStats {
        let mut all = self.inner.shards.iter();
        let mut stats = all.next().expect("a device has an engine").lock().io.stats();
        for shard in all {
            stats.add(&shard.lock().io.stats());
        }
        stats
    }

    /// The largest path MTU the device's link carries whole (what
    /// [`crate::QueuePair::modify`] accepts): None on the UDP backend, where
    /// the kernel fragments what does not fit.
    pub fn max_path_mtu(&self) -> Option<rdma_transport::qp::Mtu> {
        self.inner.lock().io.max_frame().map(rdma_link::max_mtu_for_frame)
    }

    /// The framing of the device's packets.
    pub fn link_kind(&self) -> rdma_transport::LinkKind {
        self.inner.device.config().link
    }

    /// `ibv_query_port`'s LID: the port's LID on native IB, 0 on RoCE.
    pub fn lid(&self) -> u16 {
        self.inner.device.lid()
    }

    /// `ibv_query_port`: LID, SM LID, state and active MTU (see
    /// [`crate::Device::query_port`]).
    pub fn query_port(&self) -> crate::PortAttr {
        self.inner.device.query_port()
    }

    /// `ibv_query_pkey`: the P_Key at `index` of the port's table (None
    /// past its end). A port a subnet manager configured has the keys it
    /// set (native IB on a managed port); any other, the default
    /// partition's 0xFFFF alone.
    pub fn query_pkey(&self, index: u16) -> Option<u16> {
        self.inner.lock().ep.query_pkey(index)
    }

    /// The UDP offloads the device uses (GSO, GRO).
    pub fn offloads(&self) -> rdma_link::udp::Offloads {
        self.inner.lock().io.offloads()
    }

    /// The I/O driver in use: [`rdma_link::udp::IoDriver::IoUring`] or [`rdma_link::udp::IoDriver::Sockets`].
    pub fn io_driver(&self) -> rdma_link::udp::IoDriver {
        self.inner.lock().io.driver()
    }
}

/// The frame link of a device of a frame backend, with its capture and
/// fault-injection wrappers as configured.
fn open_link(device: &Device, backend: &Backend) -> Result<Box<dyn Link>> {
    let cfg = device.config();
    let link: Box<dyn Link> = match backend {
        Backend::Netdev(netdev) => Box::new(RawLink::open(netdev, cfg.link)?),
        Backend::InProcess(fabric) => {
            let mac = rdma_link::mac_of_gid(device.addr()).ok_or_else(|| {
                crate::Error::InvalidArgument(format!("device {}: its GID is not made from a MAC", device.name()))
            })?;
            Box::new(InProcessLink::join(fabric, mac, cfg.link)?)
        }
        Backend::Udp => unreachable!("the UDP backend is opened by itself"),
    };
    wrap_link(link, cfg)
}

/// A link in the delay, fault-injection and capture wrappers `cfg` asks
/// for (the capture outermost: it records what the device sent and got).
fn wrap_link(mut link: Box<dyn Link>, cfg: &DeviceConfig) -> Result<Box<dyn Link>> {
    if cfg.delay.is_active() {
        link = Box::new(DelayLink::new(link, cfg.delay)?);
    }
    if cfg.faults.is_active() {
        link = Box::new(FaultLink::new(link, cfg.faults));
    }
    if let Some(path) = &cfg.pcap {
        link = Box::new(CaptureLink::new(link, path)?);
    }
    Ok(link)
}

impl Drop for Inner {
    fn drop(&mut self) {
        for shard in &self.shards {
            if let Some(t) = shard.flusher.get() {
                t.unpark(); // it finds the device gone and ends
            }
            shard.kick(); // a progress thread in poll(2) wakes, finds it gone and ends
        }
        // A thread asleep in poll(2) holds a reference to the sockets it
        // watches: a shared port's socket would stay in the kernel's group
        // after its member left (the record says it moved the last socket
        // into its place), and datagrams steered there would be lost until
        // the poll ended. The sockets close after the threads are gone.
        for shard in &self.shards {
            let handle = shard.progress.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(h) = handle.filter(|h| h.thread().id() != std::thread::current().id()) {
                let _ = h.join();
            }
        }
    }
}

/// The ACK flusher of a device with manual progress and an ACK delay.
///
/// A held ACK leaves with the next packet sent, or when its delay is up,
/// but only while something drives the device. An application that stops
/// calling (it computes, or blocks on something else) would strand it, and
/// its peer would wait for the completion or retransmit. This thread
/// looks every [`FLUSH_PERIOD`] and sends ACKs whose delay is up; it skips
/// a look while the application is inside a call (that call sends them),
/// and after [`FLUSH_QUIET_LOOKS`] looks without a held ACK it sleeps
/// until one is held again. It never receives: progress stays manual.
fn spawn_ack_flusher(inner: &Arc<Inner>, index: usize) -> Result<()> {
    let weak: Weak<Inner> = Arc::downgrade(inner);
    let name = format!("rdma-acks-{}", inner.device.name());
    let handle = std::thread::Builder::new().name(name).spawn(move || {
        let mut quiet = 0;
        let mut busy = false;
        loop {
            if busy {
                // Sends left by the transmit budget: back at once, after
                // letting the application have the lock.
                std::thread::yield_now();
            } else if quiet >= FLUSH_QUIET_LOOKS {
                std::thread::park();
                quiet = 0;
            } else {
                std::thread::park_timeout(FLUSH_PERIOD);
            }
            busy = false;
            let Some(inner) = weak.upgrade() else { return };
            let shard = &inner.shards[index];
            let mut guard = match shard.state.try_lock() {
                Ok(st) => st,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => continue,
            };
            let st = &mut *guard;
            if st.io.sends_left() {
                quiet = 0;
                if let Err(e) = st.io.transmit(&mut st.ep, inner.now()) {
                    tracing::debug!(error = %e, "ACK flusher could not send");
                }
                inner.announce_completions(st);
                busy = st.io.sends_left();
                if st.leader && st.io.receives_pending() {
                    shard.kick();
                }
                continue;
            }
            if !st.ep.holds_acks() {
                quiet += 1;
                if quiet >= FLUSH_QUIET_LOOKS {
                    // Under the lock: a call that holds an ACK after this sees the flag.
                    shard.flusher_parked.store(true, Ordering::Relaxed);
                }
                continue;
            }
            quiet = 0;
            let now = inner.now();
            if st.ep.poll_timeout().is_some_and(|t| t <= now) {
                if let Err(e) = st.io.transmit(&mut st.ep, now) {
                    tracing::debug!(error = %e, "ACK flusher could not send");
                }
                inner.announce_completions(st);
                busy = st.io.sends_left();
                if st.leader && st.io.receives_pending() {
                    // io_uring reaped packets while sending: no readiness
                    // event will wake the waiter for them.
                    shard.kick();
                }
            }
        }
    })?;
    let _ = inner.shards[index].flusher.set(handle.thread().clone());
    Ok(())
}

/// The background progress thread: sleeps on the socket and the engine's
/// next timer, makes progress, wakes waiters. It holds only a weak
/// reference, so it ends soon after the last handle to the device goes.
fn spawn_progress_thread(inner: &Arc<Inner>, index: usize) -> Result<()> {
    inner.shards[index].thread.store(true, Ordering::Relaxed);
    let weak: Weak<Inner> = Arc::downgrade(inner);
    let name = format!("rdma-progress-{}-{index}", inner.device.name());
    let handle = std::thread::Builder::new().name(name).spawn(move || loop {
        let Some(inner) = weak.upgrade() else { return };
        let shard = &inner.shards[index];
        let sleep = {
            let mut st = shard.lock();
            shard.wakes_at.store(0, Ordering::Relaxed); // this round: none to kick
            if let Err(e) = inner.progress_locked(&mut st) {
                tracing::error!(error = %e, "progress thread stops");
                shard.thread.store(false, Ordering::Relaxed);
                return;
            }
            if st.followers > 0 {
                shard.progressed.notify_all();
            }
            let now = inner.now();
            let engine = st.ep.poll_timeout().map(|t| t.saturating_since(now));
            let sleep =
                if st.io.has_pending() { Duration::ZERO } else { engine.map_or(MAX_SLEEP, |e| e.min(MAX_SLEEP)) };
            // Under the lock: a round another thread makes after this one
            // compares its deadline with this (kick_if_due_sooner).
            shard.wakes_at.store(now.as_nanos().saturating_add(sleep.as_nanos() as u64), Ordering::Relaxed);
            sleep
        };
        let fds = [shard.wait_fds[0], shard.wait_fds[1], shard.kick.as_raw_fd()];
        drop(inner);
        if weak.strong_count() == 0 {
            // That was the last handle: the device closed its sockets (on
            // this thread), whose numbers may be another's by now.
            return;
        }
        let [.., kicked] = poll_readable(&fds, sleep);
        if let Some(i) = weak.upgrade().filter(|_| kicked) {
            i.shards[index].take_kick();
        }
    })?;
    *inner.shards[index].progress.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
    Ok(())
}
