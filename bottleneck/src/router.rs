//! The router: three threads around one [`Bottleneck`]. Left to right, the
//! senders' RoCE packets go through the rate-limited, marking queue (other
//! traffic passes it by); right to left (ACKs, CNPs) goes straight back, so
//! the only congestion is the one under study.

use crate::meter::{LiveReport, Meter, RunInfo};
use crate::netns::{configure, NetnsError, Prefix};
use crate::queue::Bottleneck;
use crate::tun::{Tun, TunError};
use rdma_fabric::report::Series;
use rdma_fabric::switch::Red;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error(transparent)]
    Tun(#[from] TunError),
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error("{side} side, reading {dev}: {err}")]
    Read { side: &'static str, dev: String, err: std::io::Error },
    #[error("a router thread panicked")]
    Panicked,
}

/// One side of the router: a namespace, the TUN device made in it, and the
/// addresses the device carries there.
#[derive(Debug, Clone)]
pub struct Side {
    pub netns: String,
    pub dev: String,
    pub addrs: Vec<Prefix>,
}

#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// The senders' side: its packets go through the bottleneck.
    pub left: Side,
    pub right: Side,
    pub rate_bps: u64,
    pub buffer_bytes: u64,
    /// `None`: drop-tail only.
    pub red: Option<Red>,
    pub seed: u64,
    /// Width of a rate sample.
    pub window: Duration,
    pub mtu: u32,
}

/// The queue and the meter share one lock: every event touches both.
struct State {
    queue: Bottleneck,
    meter: Meter,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a packet joins an empty queue.
    arrived: Condvar,
    start: Instant,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking thread stops the run anyway; its counters are still good.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How often blocked threads look at the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// Waits shorter than this spin (yielding) instead of sleeping: a sleep
/// overshoots by tens of microseconds, which at 1 Gb/s is several packets.
const SPIN_BELOW: Duration = Duration::from_micros(200);
/// Largest packet read from a TUN device.
const MAX_PACKET: usize = 65_536;

/// A configured router, ready to run.
pub struct Router {
    cfg: RouterConfig,
    left: Arc<Tun>,
    right: Arc<Tun>,
}

impl Router {
    /// Makes both TUN devices in their namespaces, with addresses, and
    /// routes to the other side through them.
    pub fn new(cfg: RouterConfig) -> Result<Router, RouterError> {
        let left = Tun::create_in(&cfg.left.netns, &cfg.left.dev)?;
        let right = Tun::create_in(&cfg.right.netns, &cfg.right.dev)?;
        configure(&cfg.left.netns, left.name(), &cfg.left.addrs, &cfg.right.addrs, cfg.mtu)?;
        configure(&cfg.right.netns, right.name(), &cfg.right.addrs, &cfg.left.addrs, cfg.mtu)?;
        tracing::info!(left = %cfg.left.netns, right = %cfg.right.netns, rate_bps = cfg.rate_bps, "router up");
        Ok(Router { cfg, left: Arc::new(left), right: Arc::new(right) })
    }

    /// Forwards until `stop` is set or `deadline` passes, calling
    /// `progress` about once a second with the elapsed time and a summary.
    /// Returns the report (measured from `warmup` after the first RoCE
    /// packet to the last) and the plotted series.
    pub fn run(
        self,
        stop: &AtomicBool,
        deadline: Option<Duration>,
        warmup: Duration,
        mut progress: impl FnMut(Duration, String),
    ) -> Result<(LiveReport, Series), RouterError> {
        let cfg = &self.cfg;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: Bottleneck::new(cfg.rate_bps, cfg.buffer_bytes, cfg.red, cfg.seed),
                meter: Meter::new(cfg.window),
            }),
            arrived: Condvar::new(),
            start: Instant::now(),
        });
        let done = Arc::new(AtomicBool::new(false));
        let threads = [
            spawn_forward(shared.clone(), self.left.clone(), self.right.clone(), done.clone()),
            spawn_schedule(shared.clone(), self.right.clone(), done.clone()),
            spawn_reverse(shared.clone(), self.right.clone(), self.left.clone(), done.clone()),
        ];
        let mut next_progress = Duration::from_secs(1);
        loop {
            let t = shared.start.elapsed();
            if stop.load(Ordering::Relaxed) || done.load(Ordering::Relaxed) || deadline.is_some_and(|d| t >= d) {
                break;
            }
            if t >= next_progress {
                let s = shared.lock();
                progress(
                    t,
                    format!(
                        "queue {} B, ECN marks {}, drops {}, CNPs {}",
                        s.queue.queued_bytes(),
                        s.queue.marks,
                        s.queue.drops,
                        s.meter.cnps
                    ),
                );
                next_progress += Duration::from_secs(1);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let duration = shared.start.elapsed();
        done.store(true, Ordering::Relaxed);
        shared.arrived.notify_all();
        let mut first_error = None;
        for t in threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => first_error = first_error.or(Some(e)),
                Err(_) => first_error = first_error.or(Some(RouterError::Panicked)),
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let s = shared.lock();
        let info = RunInfo {
            seed: cfg.seed,
            rate_bps: cfg.rate_bps,
            buffer_bytes: cfg.buffer_bytes,
            red: cfg.red,
            marks: s.queue.marks,
            drops: s.queue.drops,
        };
        Ok((s.meter.report(&info, duration, warmup), s.meter.series()))
    }
}

type Worker = std::thread::JoinHandle<Result<(), RouterError>>;

/// Reads `tun` until `done`, handing each packet to `each`.
fn read_loop(tun: &Tun, side: &'static str, done: &AtomicBool, mut each: impl FnMut(&[u8])) -> Result<(), RouterError> {
    let mut buf = vec![0u8; MAX_PACKET];
    let err = |e| RouterError::Read { side, dev: tun.name().into(), err: e };
    while !done.load(Ordering::Relaxed) {
        if !tun.wait_readable(POLL).map_err(err)? {
            continue;
        }
        match tun.read(&mut buf) {
            Ok(n) => each(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(())
}

/// Left side in: RoCE into the bottleneck; anything else (the tools'
/// out-of-band TCP, ICMP) straight through, as a strict-priority class
/// would carry it: it is not under study, and a control connection stuck
/// behind a full drop-tail queue would end a run that is otherwise fine.
fn spawn_forward(shared: Arc<Shared>, left: Arc<Tun>, right: Arc<Tun>, done: Arc<AtomicBool>) -> Worker {
    std::thread::spawn(move || {
        read_loop(&left, "left", &done, |packet| {
            if crate::meter::roce(packet).is_none() {
                let ok = right.write(packet).is_ok();
                let mut s = shared.lock();
                s.meter.bypassed(packet.len(), ok);
                return;
            }
            let now = shared.start.elapsed();
            let mut s = shared.lock();
            let was_empty = s.queue.next_departure().is_none();
            let q = s.queue.queued_bytes();
            s.meter.arrival(now, q);
            s.queue.admit(now, packet.to_vec());
            drop(s);
            if was_empty {
                shared.arrived.notify_one();
            }
        })
    })
}

/// The bottleneck out: to the right side, at the link's rate.
fn spawn_schedule(shared: Arc<Shared>, right: Arc<Tun>, done: Arc<AtomicBool>) -> Worker {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            let mut s = shared.lock();
            let Some(at) = s.queue.next_departure() else {
                drop(shared.arrived.wait_timeout(s, POLL).unwrap_or_else(|p| p.into_inner()));
                continue;
            };
            let now = shared.start.elapsed();
            if now < at {
                drop(s);
                let wait = at - now;
                if wait > SPIN_BELOW {
                    std::thread::sleep(wait - SPIN_BELOW / 2);
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            let packet = s.queue.pop(now).expect("the head is due");
            drop(s);
            let ok = right.write(&packet).is_ok();
            let mut s = shared.lock();
            if ok {
                s.meter.departure(now, &packet);
            } else {
                s.meter.write_errors += 1;
            }
        }
        Ok(())
    })
}

/// Right side in: straight back to the left.
fn spawn_reverse(shared: Arc<Shared>, right: Arc<Tun>, left: Arc<Tun>, done: Arc<AtomicBool>) -> Worker {
    std::thread::spawn(move || {
        read_loop(&right, "right", &done, |packet| {
            let ok = left.write(packet).is_ok();
            let mut s = shared.lock();
            s.meter.reverse(packet);
            if !ok {
                s.meter.write_errors += 1;
            }
        })
    })
}
