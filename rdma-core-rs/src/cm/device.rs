//! One CM per soft device: the IB CM state machine of the device's engine,
//! the RDMA CM's tables on top (listeners by service ID, connections by
//! communication ID), and what turns the CM's events into RDMA CM events.
//!
//! Lock order: the device's engine state, then [`Core`], then an ID, then
//! a channel. Nothing here takes the engine state while holding a later one.

use super::event::{CmEvent, EventParam, EventType};
use super::id::{IdShared, Phase};
use super::route;
use super::{CmError, Result, REQ_USER_DATA_LEN};
use crate::context::{Context, State};
use crate::device::{devices, Device};
use rdma_transport::cm::{Cm, CmConfig, CmEvent as IbEvent, ConnId};
use rdma_transport::Endpoint;
use rdma_wire::cm::{sidr_status, RejReason};
use rdma_wire::cma::{service_id_parts, CmaHdr, CmaHdrRepr, CMA_HDR_LEN};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
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
static REGISTRY: Mutex<Vec<Arc<CmDevice>>> = Mutex::new(Vec::new());

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
    if let Some(d) = reg.iter().find(|d| d.addr == addr) {
        if Arc::ptr_eq(&d.ctx.inner, &ctx.inner) {
            return Ok(());
        }
        return Err(CmError::NoDevice(addr, "the RDMA CM already uses another context on this address".into()));
    }
    reg.push(CmDevice::start(ctx.clone()));
    Ok(())
}

/// A listening ID and where it listens.
struct Listener {
    id: Weak<IdShared>,
    addr: IpAddr,
}

pub(crate) struct Core {
    pub(crate) cm: Cm,
    /// Connections by the CM's communication ID.
    pub(crate) conns: HashMap<u32, Weak<IdShared>>,
    listeners: HashMap<u64, Vec<Listener>>,
}

/// A connection whose ID the application dropped.
struct Buried {
    conn: ConnId,
    connected: bool,
    /// A request reported and never answered.
    requested: bool,
    ud: bool,
}

pub(crate) struct CmDevice {
    pub(crate) ctx: Context,
    pub(crate) addr: IpAddr,
    core: Mutex<Core>,
    /// Dropped IDs' connections, for the next round (innermost lock: it is
    /// taken from `Drop`, which may run anywhere).
    graveyard: Mutex<Vec<Buried>>,
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
        let config = CmConfig {
            response_timeout: o.response_timeout,
            max_retries: o.max_retries,
            timewait: o.timewait,
            // Random, so that a restarted process does not look like a
            // duplicate of its former self to a peer still in time-wait.
            first_comm_id: route::random_u32() | 1,
            ca_guid: ca_guid(addr),
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
            core: Mutex::new(Core { cm: Cm::new(config), conns: HashMap::new(), listeners: HashMap::new() }),
            graveyard: Mutex::new(Vec::new()),
        });
        spawn_service(&d, o.service_period);
        tracing::info!(%addr, ca_guid = format_args!("{:#018x}", config.ca_guid), "RDMA CM on device");
        d
    }

    fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the engine and the CM, then handles what the CM has to
    /// say and sends what it queued.
    pub(crate) fn with_cm<T>(&self, f: impl FnOnce(&mut Endpoint, &mut Core) -> T) -> Result<T> {
        let inner = &self.ctx.inner;
        let mut st = inner.lock();
        let r = {
            let mut core = self.core();
            let r = f(&mut st.ep, &mut core);
            self.dispatch(&mut st.ep, &mut core);
            r
        };
        inner.doorbell(&mut st)?;
        Ok(r)
    }

    /// Handles every MAD the engine received and every CM timer due, and
    /// sends the answers. Called with the engine state held.
    pub(crate) fn process(&self, st: &mut State) {
        let now = self.ctx.inner.now();
        let mut core = self.core();
        core.cm.process(now, &mut st.ep);
        if core.cm.poll_timeout().is_some_and(|t| t <= now) {
            core.cm.handle_timeout(now);
        }
        self.dispatch(&mut st.ep, &mut core);
        drop(core);
        if let Err(e) = st.io.transmit(&mut st.ep, now) {
            tracing::debug!(error = %e, "could not send CM messages");
        }
    }

    /// Drives the device for up to `d`, handling CM messages, until `done`.
    pub(crate) fn wait(&self, d: Duration, mut done: impl FnMut() -> bool) -> Result<()> {
        self.ctx.inner.wait_until(Some(d), |st| {
            self.process(st);
            done().then_some(())
        })?;
        Ok(())
    }

    pub(crate) fn listen(&self, id: &Arc<IdShared>, service_id: u64, addr: IpAddr) -> Result<()> {
        self.with_cm(|_, core| {
            let list = core.listeners.entry(service_id).or_default();
            list.retain(|l| l.id.strong_count() > 0);
            if list.iter().any(|l| l.addr == addr || l.addr.is_unspecified() || addr.is_unspecified()) {
                let (_, port) = service_id_parts(service_id);
                return Err(CmError::AddrInUse { addr, port });
            }
            list.push(Listener { id: Arc::downgrade(id), addr });
            core.cm.listen(service_id);
            Ok(())
        })?
    }

    /// Notes the connection of a dropped ID: the next round disconnects it
    /// (or rejects the request, or forgets the attempt).
    pub(crate) fn bury(&self, conn: ConnId, connected: bool, requested: bool, ud: bool) {
        self.graveyard.lock().unwrap_or_else(|e| e.into_inner()).push(Buried { conn, connected, requested, ud });
    }

    fn lay_to_rest(&self, ep: &mut Endpoint, core: &mut Core) {
        let dead = std::mem::take(&mut *self.graveyard.lock().unwrap_or_else(|e| e.into_inner()));
        for b in dead {
            core.conns.remove(&b.conn.0);
            let r = match (b.connected, b.requested, b.ud) {
                (true, ..) => core.cm.disconnect(ep, b.conn),
                (_, true, false) => core.cm.reject(ep, b.conn, RejReason::CONSUMER_DEFINED, &[]),
                (_, true, true) => core.cm.sidr_reply(ep, b.conn, sidr_status::REJECT, 0, 0, &[]),
                _ => {
                    core.cm.forget(b.conn);
                    Ok(())
                }
            };
            tracing::debug!(conn = b.conn.0, result = ?r, "the ID was dropped: its connection is closed");
        }
    }

    /// Turns the IB CM's events into RDMA CM events on the IDs' channels.
    fn dispatch(&self, ep: &mut Endpoint, core: &mut Core) {
        self.lay_to_rest(ep, core);
        while let Some(e) = core.cm.poll_event() {
            match e {
                IbEvent::ConnectRequest { id, from, service_id, remote_qpn, private_data } => {
                    self.on_request(ep, core, id, from, service_id, Some(remote_qpn), &private_data)
                }
                IbEvent::SidrRequest { id, from, service_id, private_data } => {
                    self.on_request(ep, core, id, from, service_id, None, &private_data[..])
                }
                IbEvent::SidrReply { id, status, qpn, qkey, private_data } => {
                    if status == sidr_status::SUCCESS {
                        let param = EventParam {
                            private_data: private_data.to_vec(),
                            qp_num: qpn,
                            qkey,
                            ..EventParam::default()
                        };
                        self.emit(core, id, Phase::Connected, EventType::Established, 0, param, true);
                    } else {
                        // librdmacm reports a refused resolution as
                        // UNREACHABLE with the SIDR status.
                        let param = EventParam { private_data: private_data.to_vec(), ..EventParam::default() };
                        self.emit(core, id, Phase::Idle, EventType::Unreachable, i32::from(status), param, true);
                    }
                }
                IbEvent::Established { id, remote_qpn, .. } => {
                    let mut param = EventParam { qp_num: remote_qpn, ..EventParam::default() };
                    if let Some(pd) = core.cm.rep_private_data(id) {
                        param.private_data = pd.to_vec();
                    }
                    if let Some((init, resp)) = core.cm.negotiated_depths(id) {
                        (param.initiator_depth, param.responder_resources) = (init, resp);
                    }
                    self.emit(core, id, Phase::Connected, EventType::Established, 0, param, false);
                }
                IbEvent::Rejected { id, reason, private_data } => {
                    let param = EventParam { private_data: private_data.to_vec(), ..EventParam::default() };
                    self.emit(core, id, Phase::Idle, EventType::Rejected, i32::from(reason.0), param, true);
                }
                IbEvent::TimedOut { id } => {
                    let p = EventParam::default();
                    self.emit(core, id, Phase::Idle, EventType::Unreachable, -libc::ETIMEDOUT, p, true);
                }
                IbEvent::QpError { id } => {
                    let p = EventParam::default();
                    self.emit(core, id, Phase::Idle, EventType::ConnectError, -libc::EINVAL, p, true);
                }
                IbEvent::Disconnected { id } => {
                    let p = EventParam::default();
                    self.emit(core, id, Phase::Disconnected, EventType::Disconnected, 0, p, false);
                }
                IbEvent::TimewaitExit { id } => {
                    let p = EventParam::default();
                    self.emit(core, id, Phase::Disconnected, EventType::TimewaitExit, 0, p, true);
                }
            }
        }
    }

    /// Reports `e` on the ID of connection `conn` (if it still exists) and
    /// moves it to `phase`; `last` forgets the connection.
    #[allow(clippy::too_many_arguments)]
    fn emit(&self, core: &mut Core, conn: ConnId, phase: Phase, e: EventType, status: i32, p: EventParam, last: bool) {
        let id = if last { core.conns.remove(&conn.0) } else { core.conns.get(&conn.0).cloned() };
        let Some(id) = id.and_then(|w| w.upgrade()) else {
            tracing::debug!(conn = conn.0, event = %e, "CM event for an ID that is gone");
            return;
        };
        let channel = {
            let mut g = id.lock();
            g.phase = phase;
            if last {
                g.conn = None;
            }
            g.channel.clone()
        };
        channel.push(CmEvent { event: e, id: super::id::CmId::from_shared(id), listen_id: None, status, param: p });
    }

    /// A REQ for a service somebody listens on: find the listener by the
    /// `cma_hdr`'s destination address, make the new ID, report it.
    #[allow(clippy::too_many_arguments)]
    fn on_request(
        &self,
        ep: &mut Endpoint,
        core: &mut Core,
        conn: ConnId,
        from: IpAddr,
        service_id: u64,
        // `None`: a SIDR_REQ (UD), which has no QP yet.
        remote_qpn: Option<u32>,
        private_data: &[u8],
    ) {
        let refuse = |core: &mut Core, ep: &mut Endpoint, reason: RejReason| {
            if remote_qpn.is_some() {
                let _ = core.cm.reject(ep, conn, reason, &[]);
            } else {
                let status = if reason == RejReason::INVALID_SERVICE_ID {
                    sidr_status::UNSUPPORTED_SERVICE_ID
                } else {
                    sidr_status::REJECT
                };
                let _ = core.cm.sidr_reply(ep, conn, status, 0, 0, &[]);
            }
        };
        let live: Vec<(Arc<IdShared>, IpAddr)> = core
            .listeners
            .get(&service_id)
            .map(|l| l.iter().filter_map(|l| Some((l.id.upgrade()?, l.addr))).collect())
            .unwrap_or_default();
        if live.is_empty() {
            // Nobody listens any more: as if nobody ever had.
            core.cm.unlisten(service_id);
            refuse(core, ep, RejReason::INVALID_SERVICE_ID);
            return;
        }
        let hdr = CmaHdr::new_checked(&private_data[..CMA_HDR_LEN.min(private_data.len())])
            .and_then(|h| CmaHdrRepr::parse(&h));
        let listener = hdr.as_ref().ok().and_then(|h| {
            live.iter().find(|(_, a)| {
                *a == h.dst || (a.is_unspecified() && (a.is_ipv6() || h.dst.is_ipv4()) && h.dst == self.addr)
            })
        });
        let (Ok(hdr), Some((listener, _))) = (&hdr, listener) else {
            // What Linux does for a bad cma_hdr or an address nobody
            // listens on: REJ 28, indistinguishable from a consumer reject.
            tracing::info!(peer = %from, ?hdr, "request matches no listener's address: refused");
            refuse(core, ep, RejReason::CONSUMER_DEFINED);
            return;
        };
        let (ps, port) = service_id_parts(service_id);
        let ps = super::id::PortSpace::from_ps(ps);
        if (ps == super::id::PortSpace::Udp) != remote_qpn.is_none() {
            // A REQ for a UD service or a SIDR_REQ for a connected one.
            tracing::info!(peer = %from, ?ps, "request of the wrong kind for the port space: refused");
            refuse(core, ep, RejReason::CONSUMER_DEFINED);
            return;
        }
        let channel = listener.lock().channel.clone();
        let new = IdShared::new(channel.clone(), ps);
        {
            let mut g = new.lock();
            g.dev = listener.lock().dev.clone();
            g.local = Some(SocketAddr::new(hdr.dst, port));
            g.remote = Some(SocketAddr::new(hdr.src, hdr.src_port));
            g.phase = Phase::ConnectRequest;
            g.conn = Some(conn);
        }
        core.conns.insert(conn.0, Arc::downgrade(&new));
        let user = &private_data[CMA_HDR_LEN.min(private_data.len())..];
        let param = match (remote_qpn, core.cm.request(conn)) {
            (Some(qpn), Some(req)) => EventParam {
                private_data: user[..REQ_USER_DATA_LEN.min(user.len())].to_vec(),
                // Swapped: what the peer issues is what we must take.
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                srq: req.srq,
                qp_num: qpn,
                qkey: 0,
            },
            // SIDR: 216 - 36 = 180 bytes of user data.
            _ => EventParam { private_data: user.to_vec(), ..EventParam::default() },
        };
        tracing::debug!(peer = %from, port, ?remote_qpn, "connect request");
        channel.push(CmEvent {
            event: EventType::ConnectRequest,
            id: super::id::CmId::from_shared(new),
            listen_id: Some(super::id::CmId::from_shared(listener.clone())),
            status: 0,
            param,
        });
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
