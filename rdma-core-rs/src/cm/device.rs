//! One CM per soft device: the IB CM state machine beside the device's
//! first engine, the RDMA CM's tables on top (listeners by service ID,
//! connections by communication ID), the graveyard of dropped IDs, and the
//! service thread (the translation of events is in `dispatch.rs`).
//!
//! Lock order: the first engine's state, then [`Core`], then another
//! engine's state (for one call on a connection's QP there: `CmEngines`),
//! then an ID, then a channel. Nothing here takes the first engine's state
//! or [`Core`] while holding a later one; and nothing anywhere may call
//! into the CM (`with_cm`, a round of the first engine that serves MADs)
//! while holding another engine's state.

use super::engines::CmEngines;
use super::objects::{Buried, CmDevice, Core, IdShared, Listener};
use super::route;
use super::{CmError, Result};
use crate::context::{Context, MadService, State};
use crate::device::{devices, Device};
use rdma_link::share::fork::PerProcess;
use rdma_link::share::steer::SLOT_BITS;
use rdma_link::share::ShareError;
use rdma_transport::cm::{Cm, CmConfig, CommIdPrefix, ConnId};
use rdma_wire::cma::service_id_parts;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The CM's timers, for every device opened after [`set_options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmOptions {
    /// How long a REQ, REP or DREQ waits for its answer before it is sent
    /// again (Linux: about 4.6 s; the reference allows 1–6 s).
    pub response_timeout: Duration,
    /// Retries of those sends; then UNREACHABLE (Linux: 15).
    pub max_retries: u8,
    /// How long a closed connection is remembered to answer duplicates.
    pub timewait: Duration,
    /// How often the per-device thread handles CM messages that arrived
    /// while the application waited on something else.
    pub service_period: Duration,
}

impl Default for CmOptions {
    fn default() -> CmOptions {
        CmOptions {
            response_timeout: Duration::from_millis(1000),
            max_retries: 15,
            timewait: Duration::from_millis(1000),
            service_period: Duration::from_millis(5),
        }
    }
}

static OPTIONS: Mutex<Option<CmOptions>> = Mutex::new(None);
/// A forked child starts with none (the parent's have the parent's
/// engines and threads).
static REGISTRY: Mutex<PerProcess<Vec<Arc<CmDevice>>>> = Mutex::new(PerProcess::new(Vec::new()));

/// Sets the CM timers of devices opened from now on.
pub fn set_options(o: CmOptions) {
    *OPTIONS.lock().unwrap_or_else(|e| e.into_inner()) = Some(o);
}

fn options() -> CmOptions {
    OPTIONS.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or_default()
}

/// Makes `ctx` the device the RDMA CM uses for its address (instead of
/// opening one itself), so that CM IDs share the application's own
/// context, its configuration and its UDP socket.
pub fn attach_context(ctx: &Context) -> Result<()> {
    let addr = ctx.device().addr();
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let reg = reg.get();
    if let Some(d) = reg.iter().find(|d| d.addr == addr) {
        if Arc::ptr_eq(&d.ctx.inner, &ctx.inner) {
            return Ok(());
        }
        return Err(CmError::NoDevice(addr, "the RDMA CM already uses another context on this address".into()));
    }
    reg.push(CmDevice::start(ctx.clone()));
    Ok(())
}

/// The CA GUID of a device: the EUI-64 of a locally administered MAC made
/// from its address, stable across runs (rxe uses the netdev MAC's).
fn ca_guid(addr: IpAddr) -> u64 {
    let b = match addr {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    let mac = [0x02, 0x00, b[0], b[1], b[2], b[3]];
    u64::from_be_bytes([mac[0], mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]])
}

impl CmDevice {
    /// The CM device of local address `ip`: registered, or opened from the
    /// [`Device`] made for it, or from a new default device.
    pub(crate) fn for_ip(ip: IpAddr) -> Result<Arc<CmDevice>> {
        let ip = ip.to_canonical();
        let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let reg = reg.get();
        if let Some(d) = reg.iter().find(|d| d.addr == ip) {
            return Ok(d.clone());
        }
        let dev = match devices().into_iter().find(|d| d.addr() == ip) {
            Some(d) => d,
            None => Device::new(&format!("rxe_{ip}"), ip)?,
        };
        let ctx = dev.open().map_err(|e| CmError::NoDevice(ip, e.to_string()))?;
        let d = CmDevice::start(ctx);
        reg.push(d.clone());
        Ok(d)
    }

    fn start(ctx: Context) -> Arc<CmDevice> {
        let addr = ctx.device().addr();
        let o = options();
        let services = ctx.inner.lock().io.member().map(|m| m.services());
        let config = CmConfig {
            response_timeout: o.response_timeout,
            max_retries: o.max_retries,
            timewait: o.timewait,
            // Random, so that a restarted process does not look like a
            // duplicate of its former self to a peer still in time-wait.
            first_comm_id: route::random_u32() | 1,
            ca_guid: ca_guid(addr),
            // A shared port steers replies to this process by them.
            comm_id_prefix: services.as_ref().map(|s| CommIdPrefix { value: s.slot().into(), bits: SLOT_BITS }),
            ..CmConfig::default()
        };
        {
            // The backend sends each UDP source port from a socket of its
            // own: QP1's must exist before the first MAD.
            let mut st = ctx.inner.lock();
            let want = st.ep.gsi_src_port();
            match st.io.reserve_port(want) {
                Ok(p) => st.ep.set_gsi_src_port(p),
                Err(e) => tracing::warn!(error = %e, port = want, "no UDP socket for QP1: MADs cannot leave"),
            }
        }
        let d = Arc::new(CmDevice {
            ctx,
            addr,
            services,
            core: Mutex::new(Core {
                cm: Cm::new(config),
                conns: HashMap::new(),
                listeners: HashMap::new(),
                held: Vec::new(),
            }),
            graveyard: Mutex::new(Vec::new()),
        });
        let service: std::sync::Weak<dyn MadService> = Arc::downgrade(&d) as _;
        if d.ctx.inner.mad_service.set(service).is_err() {
            tracing::warn!(%addr, "the device already has a MAD service");
        }
        spawn_service(&d, o.service_period);
        tracing::info!(%addr, ca_guid = format_args!("{:#018x}", config.ca_guid), "RDMA CM on device");
        d
    }

    fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the engines and the CM, then handles what the CM has to
    /// say and sends what it queued.
    pub(crate) fn with_cm<T>(&self, f: impl FnOnce(&mut CmEngines<'_>, &mut Core) -> T) -> Result<T> {
        let inner = &self.ctx.inner;
        let mut st = inner.lock();
        let r = {
            let mut core = self.core();
            let mut engines = CmEngines::new(inner, &mut st);
            let r = f(&mut engines, &mut core);
            self.dispatch(&mut engines, &mut core);
            r
        };
        // A QP the CM moved to ERR flushed its work requests: the doorbell
        // moves their completions to the CQs and raises the armed CQs'
        // channel events (rping's CQ thread ends on them after
        // rdma_disconnect).
        inner.doorbell(&mut st)?;
        Ok(r)
    }

    /// Handles every MAD the engine received and every CM timer due, and
    /// sends the answers. Called with the engine state held (also from
    /// every round of progress that took MADs in, see [`MadService`]).
    pub(crate) fn process(&self, st: &mut State) {
        let now = self.ctx.inner.now();
        let mut core = self.core();
        let mut engines = CmEngines::new(&self.ctx.inner, st);
        core.cm.process(now, &mut engines);
        if core.cm.poll_timeout().is_some_and(|t| t <= now) {
            core.cm.handle_timeout(now);
        }
        self.dispatch(&mut engines, &mut core);
        drop(core);
        if let Err(e) = st.io.transmit(&mut st.ep, now) {
            tracing::debug!(error = %e, "could not send CM messages");
        }
        // Flushes of QPs the CM moved to ERR (a DREQ, a REJ, a timeout).
        self.ctx.inner.announce_completions(st);
    }

    /// Drives the device for up to `d`, handling CM messages, until `done`.
    pub(crate) fn wait(&self, d: Duration, mut done: impl FnMut() -> bool) -> Result<()> {
        self.ctx.inner.wait_until(Some(d), |st| {
            self.process(st);
            done().then_some(())
        })?;
        Ok(())
    }

    /// `rdma_bind_addr`: the port is the ID's from now on. A REQ for it
    /// that arrives before the ID listens is held, not refused (REJ 8),
    /// and reported when it does: qperf 0.4.11 (Debian's) sends its client
    /// the port between `rdma_bind_addr` and `rdma_listen`, and the REQ
    /// often won that race here (the kernel's CM would refuse it too, but
    /// there the client's address and route resolution take longer).
    pub(crate) fn bind(&self, id: &Arc<IdShared>, service_id: u64, addr: IpAddr) -> Result<()> {
        self.with_cm(|_, core| {
            let list = core.listeners.entry(service_id).or_default();
            list.retain(|l| l.id.strong_count() > 0);
            list.push(Listener { id: Arc::downgrade(id), addr, listening: false });
            core.cm.listen(service_id);
        })
    }

    /// Claims `service_id` for this process on a shared port: REQs for it
    /// come here. Refused (EADDRINUSE) if another process has it.
    pub(crate) fn claim_service(&self, service_id: u64, addr: IpAddr) -> Result<()> {
        let Some(s) = &self.services else { return Ok(()) };
        s.claim(service_id as u32).map_err(|e| match e {
            ShareError::ServiceTaken { .. } => CmError::AddrInUse { addr, port: service_id_parts(service_id).1 },
            e => CmError::Verbs(crate::Error::Io(e.into())),
        })
    }

    /// Gives back a claim of [`CmDevice::claim_service`].
    pub(crate) fn release_service(&self, service_id: u64) {
        if let Some(s) = &self.services {
            s.release(service_id as u32);
        }
    }

    pub(crate) fn listen(&self, id: &Arc<IdShared>, service_id: u64, addr: IpAddr, backlog: u32) -> Result<()> {
        self.with_cm(|engines, core| {
            let list = core.listeners.entry(service_id).or_default();
            list.retain(|l| l.id.strong_count() > 0);
            let me = Arc::as_ptr(id);
            if list.iter().any(|l| {
                l.listening
                    && !std::ptr::eq(l.id.as_ptr(), me)
                    && (l.addr == addr || l.addr.is_unspecified() || addr.is_unspecified())
            }) {
                let (_, port) = service_id_parts(service_id);
                return Err(CmError::AddrInUse { addr, port });
            }
            match list.iter_mut().find(|l| std::ptr::eq(l.id.as_ptr(), me)) {
                Some(l) => (l.addr, l.listening) = (addr, true),
                None => list.push(Listener { id: Arc::downgrade(id), addr, listening: true }),
            }
            core.cm.listen_with_backlog(service_id, backlog);
            // The requests that came while the port was only bound.
            let (now, later): (Vec<_>, Vec<_>) =
                std::mem::take(&mut core.held).into_iter().partition(|h| h.service_id == service_id);
            core.held = later;
            for h in now {
                self.on_request(engines, core, h.conn, h.from, h.service_id, h.remote_qpn, &h.private_data);
            }
            Ok(())
        })?
    }

    /// Notes the connection of a dropped ID: the next round disconnects it
    /// (or rejects the request, or forgets the attempt).
    pub(crate) fn bury(&self, conn: ConnId, connected: bool, requested: bool, ud: bool) {
        self.graveyard.lock().unwrap_or_else(|e| e.into_inner()).push(Buried { conn, connected, requested, ud });
    }
}

impl MadService for CmDevice {
    fn process(&self, st: &mut State) {
        CmDevice::process(self, st);
    }
}

/// The device's CM service thread: every `period`, one round of progress
/// (what arrived is received, as the application's waits would) and the
/// CM messages handled, so that peers get their answers (a REJ, a DREP, a
/// repeated REP) while the application waits on something else or on
/// nothing, as the kernel's CM answers whatever the process does. A waiter
/// asleep on the socket is woken if this round moved anything for it.
fn spawn_service(d: &Arc<CmDevice>, period: Duration) {
    let weak = Arc::downgrade(d);
    let name = format!("rdma-cm-{}", d.addr);
    let spawned = std::thread::Builder::new().name(name).spawn(move || loop {
        std::thread::sleep(period);
        let Some(d) = weak.upgrade() else { return };
        let inner = &d.ctx.inner;
        let mut st = inner.lock();
        let moved = match inner.progress_locked(&mut st) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "CM service: progress failed");
                false
            }
        };
        d.process(&mut st);
        if moved {
            if let Err(e) = inner.doorbell(&mut st) {
                tracing::debug!(error = %e, "CM service: could not send");
            }
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no CM service thread: CM messages wait for the application's calls");
    }
}
