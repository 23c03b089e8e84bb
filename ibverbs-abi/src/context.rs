//! Open devices (`ibv_context` inside its `verbs_context`) and their
//! asynchronous events.
//!
//! Progress: a C application does not call into the library while it
//! talks to its peer over TCP or spins on memory a peer writes, so
//! something else must answer the peer's packets, as a NIC would. But a
//! thread that wakes on every packet slows down an application that polls
//! its CQ in a loop (each packet is then fought over by two threads, on
//! machines with few cores). So the engine runs with manual progress (the
//! caller's polls drive it), and an idle-progress thread per device drives
//! it only when the application does not: it sleeps until a packet waits,
//! leaves it [`IDLE_LOOK`] to the application (none if the application is
//! asleep in `ibv_get_cq_event`), and takes it itself if the application
//! did not poll in that time. Only an application that polls steadily
//! (`polls.rs`) lets it rest without watching the device. A device of
//! several engines (`SOFTROCE_THREADS`) has a thread per engine that makes
//! its progress; there this thread only hands on the asynchronous events.

use crate::abi::*;
use crate::device::Dev;
use crate::ffi::{event_fd, guard, set_errno, signal_fd, wait_fd, Registry};
use crate::polls::{now_ns, PollClock, Polling};
use crate::spec::DeviceLink;
use rdma_core_rs::share::fork::{self, PerProcess};
use rdma_core_rs::{AsyncEvent, DeviceConfig, Progress};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub static CONTEXTS: Registry = Registry::new();

/// How long a waiting packet is left to the application before the
/// idle-progress thread takes it: about the most a packet waits when the
/// application is elsewhere (spinning on memory, sleeping, in TCP).
pub const IDLE_LOOK: Duration = Duration::from_micros(20);

/// How long the idle-progress thread rests while the application polls
/// steadily (`polls::Polling::Steady`), before it looks again: the longest
/// a packet waits for the application to come back from elsewhere (a TCP
/// exchange) once it stopped polling.
/// Each look is a wake-up that takes a core from a spinning application
/// on a small machine: at 200 µs, `ibv_rc_pingpong`'s round trip was
/// 19.3 µs against 16.1 µs at 2 ms (docs/ibverbs-abi.md, Speed).
pub const ACTIVE_LOOK: Duration = Duration::from_millis(2);

/// How long the idle-progress thread rests after the application polled
/// but not steadily (`polls::Polling::Now`): it is there, busy or
/// preempted (on a loaded machine a spinning application's polls have
/// gaps too), or it polls now and then from a timer, whose next poll may
/// be a millisecond away. Long enough not to wake on every packet of an
/// application that is about to poll again, short enough that a packet
/// of a peer waits little for an application that does not.
pub const SHORT_LOOK: Duration = Duration::from_micros(200);

/// How long the idle-progress thread keeps looking without sleeping after
/// it last took packets for an application that is away (a receiver that
/// only waits): about a window of packets at the sender's pace.
pub const AWAY_SPIN: Duration = Duration::from_micros(100);

/// The idle-progress thread's timer slack: its sleeps of [`IDLE_LOOK`] end
/// within a microsecond of it.
const TIMER_SLACK_NS: libc::c_ulong = 1_000;

/// How often the idle-progress thread looks at the engine's timers when
/// no packet comes (retransmissions, RNR waits).
pub const IDLE_DRIVE: Duration = Duration::from_millis(1);

/// The per-device tables the idle-progress thread reads to turn the engine's
/// numbers into the application's pointers (stored as addresses).
#[derive(Default)]
pub struct Objects {
    pub qps: HashMap<u32, usize>,
    pub cqs: HashMap<usize, usize>,
    pub srqs: HashMap<usize, usize>,
}

/// What the idle-progress thread shares with the contexts: the async events.
pub struct AsyncShared {
    pub fd: OwnedFd,
    pub queue: Mutex<VecDeque<ibv_async_event>>,
    pub objects: Mutex<Objects>,
    pub stop: AtomicBool,
}

// SAFETY: the queue holds pointers only as values handed back to the
// application; this library does not dereference them from that queue.
unsafe impl Send for AsyncShared {}
unsafe impl Sync for AsyncShared {}

/// A device's engine in this process, shared by every `ibv_open_device`
/// of it (the engine owns the device's UDP port, which can be bound once):
/// the verbs context and the idle-progress thread (which also moves the
/// asynchronous events).
pub struct Engine {
    pub verbs: rdma_core_rs::Context,
    pub shared: Arc<AsyncShared>,
    activity: Arc<Activity>,
    idle: Mutex<Option<JoinHandle<()>>>,
}

/// What the application is doing, for the idle-progress thread.
struct Activity {
    /// The application's polls: a new one means it took the packets that
    /// waited; steady ones, that it will take the next ones too.
    polls: PollClock,
    /// Threads asleep in `ibv_get_cq_event`/`ibv_get_async_event`: a
    /// packet is theirs at once, no grace period.
    blocked: AtomicUsize,
    /// Wakes the idle-progress thread when a thread starts to block (it
    /// may be resting while the application polled).
    kick: OwnedFd,
}

impl Engine {
    /// Notes that the application polls: it takes the waiting packets itself.
    pub fn called(&self) {
        self.activity.polls.record(now_ns());
    }

    /// Runs `f` (a sleep on an event fd) counted as blocked, so that the
    /// idle-progress thread makes the progress that wakes it at once.
    pub fn blocked<R>(&self, f: impl FnOnce() -> R) -> R {
        self.activity.blocked.fetch_add(1, Ordering::SeqCst);
        signal_fd(self.activity.kick.as_raw_fd());
        let r = f();
        self.activity.blocked.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

/// The engines of the devices open now, by name, with their open counts.
/// A forked child starts with none: the parent's are the parent's.
static ENGINES: Mutex<PerProcess<Vec<OpenEngine>>> = Mutex::new(PerProcess::new(Vec::new()));

/// A device's name, its engine and how many opens share it.
type OpenEngine = (String, Arc<Engine>, usize);

/// An open device. `v.context` is the `ibv_context *` the application holds.
#[repr(C)]
pub struct Ctx {
    pub v: verbs_context,
    pub dev: &'static Dev,
    pub engine: Arc<Engine>,
    /// `context->cmd_fd`: a real descriptor (a memfd of its own, so that its
    /// inode names the device), which applications dup and hand to
    /// `ibv_import_device` to open the same device again.
    cmd: OwnedFd,
}

const CONTEXT_OFFSET: usize = std::mem::offset_of!(Ctx, v) + std::mem::offset_of!(verbs_context, context);

/// The open device behind `p`, if it is a live one.
///
/// # Safety
/// `p` may be anything; it is dereferenced only if it is a live context.
pub unsafe fn ctx_of<'a>(p: *const ibv_context) -> Option<&'a Ctx> {
    if !CONTEXTS.contains(p) {
        tracing::debug!(ptr = ?p, "not a live ibv_context");
        set_errno(libc::EINVAL);
        return None;
    }
    // SAFETY: registered contexts are the `context` field of a leaked Ctx.
    Some(unsafe { &*(p.cast::<u8>().sub(CONTEXT_OFFSET).cast::<Ctx>()) })
}

/// The engine of `dev`: the one already open, or a new one.
fn engine(dev: &'static Dev) -> Result<Arc<Engine>, i32> {
    let mut engines = ENGINES.lock().unwrap_or_else(|e| e.into_inner());
    let engines = engines.get();
    if let Some(e) = engines.iter_mut().find(|e| e.0 == dev.spec.name) {
        e.2 += 1;
        return Ok(e.1.clone());
    }
    // ACKs ahead of the next request, as a NIC sends them: applications
    // written for hardware count on that order (see DeviceConfig).
    // A child forked from here on opens devices of its own.
    fork::watch_forks();
    let cfg = DeviceConfig { progress: Progress::Manual, ack_before_requests: true, ..DeviceConfig::default() };
    let made = match &dev.spec.link {
        DeviceLink::RoceV2 { addr, scope_id } => rdma_core_rs::Device::with_config(
            &dev.spec.name,
            *addr,
            DeviceConfig { scope_id: *scope_id, shared: shared_ports(), ..cfg },
        ),
        // Raw frames on the interface: every process that opens it hears
        // every frame and keeps those for its own QPs (QPNs are drawn at
        // random), as processes share an HCA.
        DeviceLink::Ib { netdev, lid } => rdma_core_rs::Device::on_netdev(
            &dev.spec.name,
            netdev,
            DeviceConfig { link: rdma_core_rs::LinkKind::Ib, lid: lid.unwrap_or(0), ..cfg },
        ),
    };
    let verbs = made.and_then(|d| d.open()).map_err(|e| {
        let entry = crate::spec::to_entry(&dev.spec);
        tracing::warn!(device = %entry, error = %e, "cannot open the device");
        if dev.spec.is_ib() {
            // Said once per open, as the RoCE devices' bind errors are not:
            // a missing interface or capability is the user's to fix.
            eprintln!("libibverbs (softroce): cannot open {entry}: {e}");
        }
        crate::ffi::errno_of(&e)
    })?;
    let fd = event_fd().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    let shared = Arc::new(AsyncShared {
        fd,
        queue: Mutex::new(VecDeque::new()),
        objects: Mutex::new(Objects::default()),
        stop: AtomicBool::new(false),
    });
    let kick = event_fd().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    // Drained after a wait that may have failed (EINTR): it must not block.
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(kick.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    let activity = Arc::new(Activity { polls: PollClock::new(), blocked: AtomicUsize::new(0), kick });
    let idle = spawn_idle_progress(verbs.clone(), shared.clone(), activity.clone()).map_err(|e| {
        tracing::warn!(error = %e, "cannot start the idle-progress thread");
        libc::EAGAIN
    })?;
    let e = Arc::new(Engine { verbs, shared, activity, idle: Mutex::new(Some(idle)) });
    engines.push((dev.spec.name.clone(), e.clone(), 1));
    tracing::info!(device = %crate::spec::to_entry(&dev.spec), "device engine started");
    Ok(e)
}

/// Whether devices share their port with the host's other processes, as
/// a NIC is shared (`SOFTROCE_SHARED`: on unless `0`, `off` or `no`).
fn shared_ports() -> bool {
    !matches!(std::env::var("SOFTROCE_SHARED").as_deref(), Ok("0" | "off" | "no"))
}

/// Drops one open of the engine of `name`; the last stops its thread.
fn release(name: &str) {
    let last = {
        let mut engines = ENGINES.lock().unwrap_or_else(|e| e.into_inner());
        let engines = engines.get();
        let Some(i) = engines.iter().position(|e| e.0 == name) else { return };
        engines[i].2 -= 1;
        (engines[i].2 == 0).then(|| engines.swap_remove(i).1)
    };
    if let Some(e) = last {
        e.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = e.idle.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
        let (s, io) = (e.verbs.stats(), e.verbs.io_stats());
        tracing::info!(
            device = name,
            packets_sent = s.packets_sent,
            packets_received = s.packets_received,
            retransmits = s.retransmits,
            timeouts = s.timeouts,
            naks_sent = s.naks_sent,
            duplicates = s.duplicates,
            drops = ?s.drops,
            send_syscalls = io.send_syscalls,
            recv_syscalls = io.recv_syscalls,
            "device engine released"
        );
        // Objects still open keep the engine itself alive through their handles.
    }
}

/// The identity of a context's command descriptor (its file's device and
/// inode), and the device it opens: `ibv_import_device` looks the
/// descriptor it is given up here. Each entry counts the open contexts
/// that share the file (an import takes over a dup of the original's).
static CMD_FILES: Mutex<Vec<CmdFile>> = Mutex::new(Vec::new());

/// (the file's device and inode, the device it opens, contexts sharing it).
type CmdFile = ((u64, u64), &'static Dev, usize);

fn file_id(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: fstat fills the struct or fails; zero is a valid start.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-parameter; a bad fd is an error return.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// A fresh command descriptor: a memfd (whose inode no other file has).
pub(crate) fn cmd_file() -> Result<OwnedFd, i32> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscall with a constant name; the fd is owned from here on.
    let fd = unsafe { libc::memfd_create(c"softroce-context".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The device whose context's command descriptor `fd` is (or a dup of).
pub(crate) fn device_of_cmd_fd(fd: RawFd) -> Option<&'static Dev> {
    let id = file_id(fd)?;
    let files = CMD_FILES.lock().unwrap_or_else(|e| e.into_inner());
    files.iter().find(|f| f.0 == id).map(|f| f.1)
}

/// Opens `dev` with `cmd` as its command descriptor (a new one, or the one
/// `ibv_import_device` was given, which the context then owns and closes),
/// and `v` and `ops` as its verbs (`ops.rs` has them; `open.rs` passes them).
pub(crate) fn open_with(
    dev: &'static Dev,
    cmd: OwnedFd,
    mut v: verbs_context,
    ops: ibv_context_ops,
) -> Result<*mut ibv_context, i32> {
    let engine = engine(dev)?;
    v.context = ibv_context {
        device: &dev.c as *const ibv_device as *mut ibv_device,
        ops,
        cmd_fd: cmd.as_raw_fd(),
        async_fd: engine.shared.fd.as_raw_fd(),
        num_comp_vectors: 1,
        mutex: mutex_init(),
        abi_compat: VERBS_ABI_IS_EXTENDED,
    };
    if let Some(id) = file_id(cmd.as_raw_fd()) {
        let mut files = CMD_FILES.lock().unwrap_or_else(|e| e.into_inner());
        match files.iter_mut().find(|f| f.0 == id) {
            Some(f) => f.2 += 1,
            None => files.push((id, dev, 1)),
        }
    }
    let ctx = Box::leak(Box::new(Ctx { v, dev, engine, cmd }));
    let p = &mut ctx.v.context as *mut ibv_context;
    CONTEXTS.insert(p);
    tracing::info!(device = %crate::spec::to_entry(&dev.spec), "device opened");
    Ok(p)
}

/// Drives the engine while the application does not (see the module
/// documentation): sleeps until a packet waits (or [`IDLE_DRIVE`] passes,
/// for the engine's timers), gives the application [`IDLE_LOOK`] to take
/// it unless it is asleep in a blocking call, and makes one round of
/// progress if it did not poll meanwhile. It also moves the engine's
/// asynchronous events to the context's queue and fd.
///
/// While the application polls steadily, it rests [`ACTIVE_LOOK`] at a
/// time without watching the device (waking on every packet would take a
/// core from a spinning application on a small machine); a thread that
/// starts to block wakes it at once. Polls now and then (as
/// `ucx_perftest`'s TCP barrier makes every millisecond, or a spinning
/// application preempted on a loaded machine) take what waits at that
/// moment and let it rest only [`SHORT_LOOK`]; no poll at all, and it
/// watches the device again.
///
/// It never waits for the device lock: a held lock means a thread of the
/// application is making progress. (Waiting for it made the application's
/// next poll wait in turn for this thread's round and a wake-up: perftest's
/// ib_write_bw sender spent half its time in futex waits.) Once it has
/// taken packets itself and the application still does not poll (a
/// receiver that only waits, as ib_write_bw's server does), packets get no
/// grace period until the application polls again, and it looks again at
/// once for [`AWAY_SPIN`] after each round that took some: the sender's
/// window (128 packets, as rxe's) moves only with our ACKs.
fn spawn_idle_progress(
    verbs: rdma_core_rs::Context,
    shared: Arc<AsyncShared>,
    activity: Arc<Activity>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("ibv-progress".into()).spawn(move || {
        if verbs.engines() > 1 {
            // A device of several engines: their threads make the progress
            // (and the application's empty polls); this one only hands the
            // engines' asynchronous events on to `ibv_get_async_event`,
            // looking every IDLE_DRIVE without taking a lock another thread
            // holds. (Woken by every packet an engine takes, as a blocking
            // wait is, it cost a busy ping-pong a fifth of its speed.)
            while !shared.stop.load(Ordering::Relaxed) {
                wait_readable(&[activity.kick.as_raw_fd()], IDLE_DRIVE);
                while let Some(ev) = verbs.try_async_event() {
                    deliver(&shared, ev);
                }
            }
            return;
        }
        // Sleeps of IDLE_LOOK as asked, not the default 50 us later.
        // SAFETY: prctl with PR_SET_TIMERSLACK changes only this thread's slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0) };
        let [rx, ring] = verbs.wait_fds();
        let kick = activity.kick.as_raw_fd();
        // How long to rest without watching the device: the application
        // polled (steadily: long) until the last look.
        let mut rest: Option<Duration> = None;
        // When the last look was (`polls::now_ns`).
        let mut looked_at = now_ns();
        // This thread took packets and the application has not polled
        // since: it is elsewhere, so packets get no grace period.
        let mut away = false;
        // When a round of this thread's last moved packets.
        let mut moved_at: Option<std::time::Instant> = None;
        while !shared.stop.load(Ordering::Relaxed) {
            let blocked = activity.blocked.load(Ordering::SeqCst) > 0;
            if let Some(rest) = rest.filter(|_| !blocked) {
                wait_readable(&[kick], rest);
            } else {
                // Traffic flowing without the application: look again at
                // once for a while (a sender waiting for our ACKs resumes
                // sooner than a wake-up from poll would let it), then sleep.
                let spin = away && moved_at.is_some_and(|t| t.elapsed() < AWAY_SPIN);
                let [r, q, _] = wait_readable(&[rx, ring, kick], if spin { Duration::ZERO } else { IDLE_DRIVE });
                if (r || q) && !away && !blocked {
                    std::thread::sleep(IDLE_LOOK);
                }
            }
            // The engine's asynchronous events, whoever made the progress
            // that raised them (a polling application's `ibv_poll_cq` leaves
            // them in the engine for a thread blocked in `ibv_get_async_event`).
            let deliver_all = || {
                while let Some(ev) = verbs.try_async_event() {
                    deliver(&shared, ev);
                }
            };
            deliver_all();
            let now = now_ns();
            let polling = activity.polls.look(now.saturating_sub(looked_at));
            looked_at = now;
            rest = match polling {
                Polling::Steady => Some(ACTIVE_LOOK),
                Polling::Now => Some(SHORT_LOOK),
                Polling::None => None,
            };
            if polling != Polling::None {
                // The application polls: its polls took the packets (and
                // woke its threads that block), and fired the timers.
                away = false;
                continue;
            }
            match verbs.try_progress() {
                Ok(true) => {
                    away = true;
                    moved_at = Some(std::time::Instant::now());
                    deliver_all();
                }
                Ok(false) => deliver_all(),
                Err(e) => {
                    tracing::warn!(error = %e, "idle-progress thread stops");
                    return;
                }
            }
        }
    })
}

/// Which of `fds` may be read (a negative fd is skipped) after waiting up
/// to `wait` ([`rdma_core_rs::poll_readable`]). The last is the kick
/// eventfd (non-blocking): drained if readable.
fn wait_readable<const N: usize>(fds: &[RawFd; N], wait: Duration) -> [bool; N] {
    let out = rdma_core_rs::poll_readable(fds, wait);
    if N > 0 && out[N - 1] {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v`; the kick fd is non-blocking (EAGAIN is fine).
        unsafe { libc::read(fds[N - 1], (&mut v as *mut u64).cast(), 8) };
    }
    out
}

/// Queues an engine event for `ibv_get_async_event`, with the pointer of
/// the object it is about, and counts it on the context's fd.
fn deliver(shared: &AsyncShared, ev: AsyncEvent) {
    let objs = shared.objects.lock().unwrap_or_else(|e| e.into_inner());
    let c = match ev {
        AsyncEvent::QpFatal(qpn) => objs.qps.get(&qpn).map(|&p| ibv_async_event {
            element: ibv_async_element { qp: p as *mut ibv_qp },
            event_type: IBV_EVENT_QP_FATAL,
        }),
        AsyncEvent::CqError(cq) => objs.cqs.get(&cq.0).map(|&p| ibv_async_event {
            element: ibv_async_element { cq: p as *mut ibv_cq },
            event_type: IBV_EVENT_CQ_ERR,
        }),
        AsyncEvent::SrqLimitReached(srq) => objs.srqs.get(&srq.0).map(|&p| ibv_async_event {
            element: ibv_async_element { srq: p as *mut ibv_srq },
            event_type: IBV_EVENT_SRQ_LIMIT_REACHED,
        }),
    };
    drop(objs);
    tracing::debug!(event = ?ev, delivered = c.is_some(), "async event");
    if let Some(c) = c {
        shared.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(c);
        signal_fd(shared.fd.as_raw_fd());
    }
}

#[export_name = "softroce_ibv_close_device"]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> libc::c_int {
    guard("ibv_close_device", -1, || {
        // SAFETY: ctx_of checks the registry.
        if unsafe { ctx_of(context) }.is_none() || !CONTEXTS.remove(context) {
            return -1;
        }
        // SAFETY: removed from the registry: no other call can reach it now.
        let ctx = unsafe { Box::from_raw(context.cast::<u8>().sub(CONTEXT_OFFSET).cast::<Ctx>()) };
        if let Some(id) = file_id(ctx.cmd.as_raw_fd()) {
            let mut files = CMD_FILES.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = files.iter().position(|f| f.0 == id) {
                files[i].2 -= 1;
                if files[i].2 == 0 {
                    files.swap_remove(i);
                }
            }
        }
        release(&ctx.dev.spec.name);
        tracing::info!(device = %ctx.dev.spec.name, "device closed");
        0
    })
}

#[export_name = "softroce_ibv_get_async_event"]
pub unsafe extern "C" fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> libc::c_int {
    guard("ibv_get_async_event", -1, || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return -1 };
        if event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // Owned handles only from here on: the wait may outlast the context
        // if another thread closes it (as in rdma-core, that is the
        // application's error, but it must not touch freed memory here).
        let engine = ctx.engine.clone();
        let shared = engine.shared.clone();
        loop {
            if let Err(e) = engine.blocked(|| wait_fd(shared.fd.as_raw_fd())) {
                set_errno(e);
                return -1;
            }
            if let Some(ev) = shared.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front() {
                // SAFETY: the caller's out-parameter.
                unsafe { event.write(ev) };
                return 0;
            }
        }
    })
}

#[export_name = "softroce_ibv_ack_async_event"]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {
    // Objects are destroyed without waiting for acknowledgements here.
}

/// Registers a live object of a context for the async-event thread.
pub fn with_objects(engine: &Engine, f: impl FnOnce(&mut Objects)) {
    f(&mut engine.shared.objects.lock().unwrap_or_else(|e| e.into_inner()));
}
