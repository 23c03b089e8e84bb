//! CM IDs (`rdma_cm_id`): the socket-like object of the RDMA CM.

use super::event::EventChannel;
use super::objects::{
    ChannelShared, CmDevice, CmEvent, CmId, ConnParam, EventParam, EventType, IdInner, IdShared, Phase, PortSpace,
};
use super::route;
use super::{CmError, Result, RDMA_UDP_QKEY};
use crate::context::Context;
use crate::pd::ProtectionDomain;
use crate::qp::{QpInitAttr, QueuePair};
use rdma_transport::cm::CmHost;
use rdma_transport::{Access, Mtu, QpAttr, QpState, QpType};
use rdma_wire::cma::{service_id, RdmaPs};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Outstanding RDMA READs and atomics a QP of this stack takes each way:
/// what 0xFF ("the device maximum") in a [`ConnParam`] stands for.
pub const MAX_RD_ATOMIC: u8 = 16;

/// The path MTU the CM offers: the largest IB MTU a 1500-byte Ethernet
/// MTU carries with RoCE v2's headers (`iboe_get_mtu`), as rxe offers.
pub(super) const PATH_MTU: Mtu = Mtu::Mtu1024;

/// Local ACK timeout exponent of the QPs the CM sets up (4.096 µs × 2^14,
/// about 67 ms), and what the REQ asks the peer to use.
pub(super) const ACK_TIMEOUT: u8 = 14;

impl PortSpace {
    pub fn ps(self) -> RdmaPs {
        match self {
            PortSpace::Tcp => RdmaPs::TCP,
            PortSpace::Udp => RdmaPs::UDP,
            PortSpace::Other(n) => RdmaPs(n),
        }
    }

    pub(crate) fn from_ps(ps: RdmaPs) -> PortSpace {
        match ps {
            RdmaPs::TCP => PortSpace::Tcp,
            RdmaPs::UDP => PortSpace::Udp,
            RdmaPs(n) => PortSpace::Other(n),
        }
    }
}

impl Default for ConnParam {
    /// What rping asks for: one READ each way, 7 retries of each kind.
    fn default() -> ConnParam {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            qp_num: None,
        }
    }
}

pub(super) fn depth(v: u8) -> u8 {
    if v == 0xff {
        MAX_RD_ATOMIC
    } else {
        v
    }
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::AddrResolved => "address-resolved",
            Phase::RouteResolved => "route-resolved",
            Phase::Bound => "bound",
            Phase::Listening => "listening",
            Phase::ConnectRequest => "a connect request",
            Phase::Connecting => "connecting",
            Phase::Connected => "connected",
            Phase::Disconnected => "disconnected",
        }
    }
}

impl IdInner {
    /// The QP the CM drives: made by [`CmId::create_qp`] or handed over.
    pub(crate) fn qpn(&self) -> Option<u32> {
        self.qp.as_ref().map(|q| q.qp_num()).or(self.ext_qpn)
    }
}

impl IdShared {
    pub(crate) fn new(channel: Arc<ChannelShared>, ps: PortSpace) -> Arc<IdShared> {
        Arc::new(IdShared {
            inner: Mutex::new(IdInner {
                ps,
                channel,
                dev: None,
                local: None,
                remote: None,
                phase: Phase::Idle,
                conn: None,
                qp: None,
                ext_qpn: None,
                tos: 0,
                ack_timeout: None,
                claimed: None,
                seq_num: route::random_u32() & 0xff_ffff,
                own_qpn: None,
                local_ece: (0, 0),
            }),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, IdInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `rdma_destroy_id` when the last handle goes: a connection still up is
/// disconnected (DREQ), a request not yet answered is rejected. The CM
/// does it on its next round (see `CmDevice::bury`): this may run where
/// the engine is locked.
impl Drop for IdShared {
    fn drop(&mut self) {
        let g = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        if let (Some(dev), Some(conn)) = (&g.dev, g.conn) {
            dev.bury(conn, g.phase == Phase::Connected, g.phase == Phase::ConnectRequest, g.ps == PortSpace::Udp);
        }
        if let (Some(dev), Some(service)) = (&g.dev, g.claimed) {
            dev.release_service(service);
        }
    }
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.shared.lock();
        f.debug_struct("CmId")
            .field("ps", &g.ps)
            .field("local", &g.local)
            .field("remote", &g.remote)
            .field("state", &g.phase.name())
            .finish_non_exhaustive()
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &CmId) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Eq for CmId {}

impl CmId {
    pub(crate) fn new(channel: Arc<ChannelShared>, ps: PortSpace) -> CmId {
        CmId { shared: IdShared::new(channel, ps) }
    }

    pub(crate) fn from_shared(shared: Arc<IdShared>) -> CmId {
        CmId { shared }
    }

    pub fn port_space(&self) -> PortSpace {
        self.shared.lock().ps
    }

    /// `rdma_get_local_addr`.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.shared.lock().local
    }

    /// `rdma_get_peer_addr`.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.shared.lock().remote
    }

    /// `id->verbs`: the device the ID is bound to (after `resolve_addr`,
    /// `bind_addr`, or in a CONNECT_REQUEST).
    pub fn context(&self) -> Option<Context> {
        self.shared.lock().dev.as_ref().map(|d| d.ctx.clone())
    }

    /// `id->qp`: the QP made by [`CmId::create_qp`].
    pub fn qp(&self) -> Option<Arc<QueuePair>> {
        self.shared.lock().qp.clone()
    }

    /// A number naming this ID among the live ones (its clones share it),
    /// for tables that map IDs to objects of their own (the C library's).
    pub fn key(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    /// Hands the CM a QP made elsewhere on this ID's device (as
    /// `rdma_create_qp` in the C library makes it through libibverbs): the
    /// caller has moved it to INIT (and a UD QP to RTS); the CM takes an RC
    /// QP through RTR and RTS and to ERR as for [`CmId::create_qp`]'s.
    /// `None` forgets it (`rdma_destroy_qp`).
    pub fn set_qp_num(&self, qpn: Option<u32>) -> Result<()> {
        let mut g = self.shared.lock();
        if qpn.is_some() && g.qpn().is_some() {
            drop(g);
            return Err(self.wrong("set_qp_num", "without a QP"));
        }
        if g.dev.is_none() {
            drop(g);
            return Err(self.wrong("set_qp_num", "bound to a device"));
        }
        g.ext_qpn = qpn;
        Ok(())
    }

    /// `rdma_migrate_id`: the ID's events from now on arrive on `channel`,
    /// and those already queued for it on the old one move there too, in
    /// order (the kernel's `ucma_migrate_id` moves them: an application
    /// that migrates and then destroys the old channel, as ucmatose -m
    /// does, must not lose a DISCONNECTED that came before the move). A
    /// server hands a connection to a thread of its own this way.
    pub fn migrate(&self, channel: &EventChannel) {
        let dev = self.shared.lock().dev.clone();
        let swap = || {
            let old = std::mem::replace(&mut self.shared.lock().channel, channel.shared.clone());
            if !Arc::ptr_eq(&old, &channel.shared) {
                for e in old.take_events_of(&self.shared) {
                    channel.shared.push(e);
                }
            }
        };
        match &dev {
            Some(d) => {
                channel.shared.add_device(d);
                // Under the device's CM lock: no event of this ID is
                // being queued on the old channel meanwhile. (An error is
                // from sending afterwards; the move itself was made.)
                let _ = d.with_cm(|_, _| swap());
            }
            None => swap(),
        }
    }

    /// `rdma_set_option(RDMA_OPTION_ID_TOS)`: the traffic class of the path.
    pub fn set_tos(&self, tos: u8) {
        self.shared.lock().tos = tos;
    }

    /// `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`: the local ACK timeout
    /// exponent (0..=31, 4.096 us x 2^t) the QP gets at RTS when this ID
    /// connects or accepts, as the kernel's `rdma_set_ack_timeout`.
    pub fn set_ack_timeout(&self, timeout: u8) {
        self.shared.lock().ack_timeout = Some(timeout.min(31));
    }

    /// `rdma_init_qp_attr`: the attributes that take a QP of this ID's
    /// connection to `state` (INIT, RTR or RTS), for an application that
    /// moves its own QP ([`ConnParam::qp_num`]). Before a connection
    /// exists only INIT is known (no remote access for RC, the RDMA CM's
    /// Q_Key for UD); RTR and RTS once the request (passive) or the reply
    /// (active, CONNECT_RESPONSE) is in. As the kernel's: RTR receives
    /// from this ID's PSN, RTS takes `set_ack_timeout`'s timeout.
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttr> {
        let (dev, conn, ps, seq_num, ack_timeout) = {
            let g = self.shared.lock();
            (g.dev.clone(), g.conn, g.ps, g.seq_num, g.ack_timeout)
        };
        let dev = dev.ok_or_else(|| self.wrong("init_qp_attr", "bound to a device"))?;
        let mut attr = match (conn, ps) {
            (Some(conn), PortSpace::Tcp | PortSpace::Other(_)) => {
                let r = dev.with_cm(|engines, core| core.cm.init_qp_attr(engines.gsi(), conn, state))?;
                r.map_err(|_| self.wrong("init_qp_attr", "past the request (passive) or the reply (active)"))?
            }
            _ => {
                let mut a = QpAttr { qp_state: Some(state), ..QpAttr::default() };
                match (state, ps) {
                    (QpState::Init, PortSpace::Udp) => {
                        (a.pkey_index, a.port_num, a.qkey) = (Some(0), Some(1), Some(RDMA_UDP_QKEY))
                    }
                    (QpState::Init, _) => {
                        (a.pkey_index, a.port_num, a.qp_access_flags) = (Some(0), Some(1), Some(Access::NONE))
                    }
                    (QpState::Rtr, PortSpace::Udp) => {}
                    (QpState::Rts, PortSpace::Udp) => a.sq_psn = Some(seq_num),
                    _ => return Err(self.wrong("init_qp_attr", "connecting (RTR and RTS follow the peer's answer)")),
                }
                a
            }
        };
        if state == QpState::Rtr && attr.rq_psn.is_some() {
            attr.rq_psn = Some(seq_num);
        }
        if let (QpState::Rts, Some(t), Some(_)) = (state, ack_timeout, attr.timeout) {
            attr.timeout = Some(t);
        }
        Ok(attr)
    }

    /// `rdma_establish`: after CONNECT_RESPONSE, with the application's own
    /// QP in RTS, sends the RTU. The connection is up; no event follows.
    pub fn establish(&self) -> Result<()> {
        let (dev, conn) = {
            let g = self.shared.lock();
            match (&g.dev, g.conn, g.qp.is_some() || g.ext_qpn.is_some()) {
                (Some(d), Some(c), false) => (d.clone(), c),
                _ => {
                    drop(g);
                    return Err(self.wrong("establish", "with its own QP after CONNECT_RESPONSE"));
                }
            }
        };
        let r = dev.with_cm(|engines, core| {
            let r = core.cm.establish(engines, conn);
            if r.is_ok() {
                self.shared.lock().phase = Phase::Connected;
            }
            r
        })?;
        r.map_err(|_| self.wrong("establish", "after CONNECT_RESPONSE"))
    }

    /// `rdma_set_local_ece`: the ECE (vendor ID, options) this ID offers;
    /// the vendor ID travels in the REQ or REP (options are not sent).
    pub fn set_local_ece(&self, vendor_id: u32, options: u32) {
        self.shared.lock().local_ece = (vendor_id, options);
    }

    /// `rdma_get_remote_ece`: the peer's ECE from its REQ or REP: (vendor
    /// ID, 0); (0, 0) before one arrived or from a peer that sends none.
    pub fn remote_ece(&self) -> (u32, u32) {
        let (dev, conn) = {
            let g = self.shared.lock();
            (g.dev.clone(), g.conn)
        };
        let (Some(dev), Some(conn)) = (dev, conn) else { return (0, 0) };
        let vendor = dev.with_cm(|_, core| core.cm.remote_vendor_id(conn)).ok().flatten();
        (vendor.unwrap_or(0), 0)
    }

    pub(super) fn wrong(&self, call: &'static str, needs: &'static str) -> CmError {
        CmError::WrongState { call, needs, state: self.shared.lock().phase.name() }
    }

    fn event(&self, e: EventType) {
        let ch = self.shared.lock().channel.clone();
        ch.push(CmEvent { event: e, id: self.clone(), listen_id: None, status: 0, param: EventParam::default() });
    }

    pub(super) fn device(&self) -> Option<Arc<CmDevice>> {
        self.shared.lock().dev.clone()
    }

    fn attach(&self, ip: IpAddr) -> Result<Arc<CmDevice>> {
        let dev = CmDevice::for_ip(ip)?;
        let mut g = self.shared.lock();
        g.dev = Some(dev.clone());
        g.channel.add_device(&dev);
        Ok(dev)
    }

    /// `rdma_resolve_addr`: picks the local address (`src`, or the one the
    /// kernel routes `dst` from) and its device. ADDR_RESOLVED follows on
    /// the channel; `_timeout` is accepted for librdmacm's signature (the
    /// resolution is local and immediate).
    ///
    /// An ID bound with [`CmId::bind_addr`] resolves from its bound address
    /// and port (librdmacm allows `rdma_bind_addr` then
    /// `rdma_resolve_addr`); `src`, if given, must be that address.
    pub fn resolve_addr(&self, src: Option<IpAddr>, dst: SocketAddr, _timeout: Duration) -> Result<()> {
        let bound = {
            let g = self.shared.lock();
            match (g.phase, g.local) {
                (Phase::Idle, _) => None,
                (Phase::Bound, Some(l)) if src.is_none_or(|s| s.to_canonical() == l.ip()) => Some(l),
                _ => {
                    drop(g);
                    return Err(self.wrong("resolve_addr", "that is idle (or bound to its source)"));
                }
            }
        };
        let dst = SocketAddr::new(dst.ip().to_canonical(), dst.port());
        let src = match (bound, src) {
            (Some(l), _) => l.ip(),
            (None, Some(s)) => s.to_canonical(),
            (None, None) => {
                rdma_link::route::source_for(dst.ip()).map_err(|e| CmError::NoDevice(dst.ip(), e.to_string()))?
            }
        };
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(CmError::FamilyMismatch { src, dst: dst.ip() });
        }
        self.attach(src)?;
        {
            let mut g = self.shared.lock();
            g.local = Some(bound.unwrap_or_else(|| SocketAddr::new(src, route::ephemeral_port())));
            g.remote = Some(dst);
            g.phase = Phase::AddrResolved;
        }
        tracing::debug!(%src, %dst, "address resolved");
        self.event(EventType::AddrResolved);
        Ok(())
    }

    /// `rdma_resolve_route`: on RoCE the path follows from the addresses
    /// (GIDs, hop limit 64, P_Key 0xFFFF, MTU 1024); on native IB the
    /// peer's LID is the one its GID is known at, else the LID plan's
    /// ([`rdma_link::default_lid`] of the MAC in its EUI-64 GID).
    /// ROUTE_RESOLVED follows.
    pub fn resolve_route(&self, _timeout: Duration) -> Result<()> {
        let (dev, remote) = {
            let g = self.shared.lock();
            match (g.phase, &g.dev, g.remote) {
                (Phase::AddrResolved, Some(d), Some(r)) => (d.clone(), r.ip()),
                _ => {
                    drop(g);
                    return Err(self.wrong("resolve_route", "with a resolved address"));
                }
            }
        };
        // Native IB only, and only the engine: RoCE needs nothing, and a
        // round of the CM here (with_cm) took locks in an order the
        // library's callers do not expect (perftest -R hung one run in two).
        if dev.ctx.link_kind() == rdma_transport::LinkKind::Ib {
            route::resolve_lid(&mut dev.ctx.inner.lock().ep, remote)?;
        }
        {
            let mut g = self.shared.lock();
            if g.phase != Phase::AddrResolved {
                drop(g);
                return Err(self.wrong("resolve_route", "with a resolved address"));
            }
            g.phase = Phase::RouteResolved;
        }
        self.event(EventType::RouteResolved);
        Ok(())
    }

    /// `rdma_bind_addr`: the address and port to listen on. The address
    /// must be a device address (this stack has no wildcard device).
    ///
    /// Port 0 picks a free port here, at bind time, as the kernel's
    /// `rdma_bind_addr` does (`cma_alloc_any_port`): applications read it
    /// with `rdma_get_src_port` before `rdma_listen` and hand it to their
    /// peer (qperf `-cm1` does; picked at `listen`, it was 0 and every
    /// connection was rejected). The port is one no other live ID of the
    /// process has bound on that address and port space.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        if self.shared.lock().phase != Phase::Idle {
            return Err(self.wrong("bind_addr", "that is idle"));
        }
        if addr.ip().is_unspecified() {
            return Err(CmError::NoDevice(
                addr.ip(),
                "bind to the address of a device (this stack has no wildcard listener)".into(),
            ));
        }
        let ip = addr.ip().to_canonical();
        self.attach(ip)?;
        let ps = self.shared.lock().ps;
        let dev = self.device().ok_or_else(|| self.wrong("bind_addr", "bound to a device"))?;
        // Another process of the host may have the port (a shared device):
        // a port of our choosing is drawn again, a port asked for is refused.
        let mut tries = if addr.port() == 0 { 64 } else { 1 };
        let (port, service) = loop {
            let port = bound_ports::reserve(&self.shared, ps, ip, addr.port())?;
            let service = service_id(ps.ps(), port);
            match dev.claim_service(service, ip) {
                Ok(()) => break (port, service),
                Err(e) => {
                    bound_ports::unreserve(&self.shared);
                    tries -= 1;
                    if tries == 0 {
                        return Err(e);
                    }
                }
            }
        };
        {
            let mut g = self.shared.lock();
            g.local = Some(SocketAddr::new(ip, port));
            g.phase = Phase::Bound;
            g.claimed = Some(service);
        }
        dev.bind(&self.shared, service, ip)
    }

    /// `rdma_listen`: REQs for the bound port (service ID = port space <<
    /// 16 | port) and address raise CONNECT_REQUEST with a new ID. At most
    /// `backlog` requests wait for `accept`/`reject` at once (0: 1024, and
    /// no more than that, as the kernel's ucma); the CM drops more
    /// unanswered and the peer retries.
    pub fn listen(&self, backlog: u32) -> Result<()> {
        let (dev, local, ps) = {
            let g = self.shared.lock();
            match (g.phase, &g.dev, g.local) {
                (Phase::Bound, Some(d), Some(l)) => (d.clone(), l, g.ps),
                _ => {
                    drop(g);
                    return Err(self.wrong("listen", "bound with bind_addr"));
                }
            }
        };
        dev.listen(&self.shared, service_id(ps.ps(), local.port()), local.ip(), backlog)?;
        self.shared.lock().phase = Phase::Listening;
        tracing::info!(%local, ?ps, "listening");
        Ok(())
    }

    /// `rdma_create_qp`: a QP on `pd` (of this ID's device), moved to INIT
    /// at once so that receives can be posted before the connection is up.
    /// The CM takes it through RTR and RTS.
    pub fn create_qp(&self, pd: &ProtectionDomain, attr: &QpInitAttr<'_>) -> Result<Arc<QueuePair>> {
        let dev = self.device().ok_or_else(|| self.wrong("create_qp", "bound to a device"))?;
        if !Arc::ptr_eq(&pd.context().inner, &dev.ctx.inner) {
            return Err(crate::Error::WrongDevice("the protection domain").into());
        }
        if self.shared.lock().qpn().is_some() {
            return Err(self.wrong("create_qp", "without a QP"));
        }
        let qp = pd.create_qp(attr)?;
        let mut init =
            QpAttr { qp_state: Some(QpState::Init), pkey_index: Some(0), port_num: Some(1), ..QpAttr::default() };
        if attr.qp_type == QpType::Ud {
            init.qkey = Some(RDMA_UDP_QKEY);
        } else {
            init.qp_access_flags = Some(Access::ALL);
        }
        qp.modify(&init)?;
        if attr.qp_type == QpType::Ud {
            // A UD QP needs no peer: librdmacm takes it to RTS at once.
            qp.modify(&QpAttr { qp_state: Some(QpState::Rtr), ..QpAttr::default() })?;
            let psn = route::random_u32() & 0xff_ffff;
            qp.modify(&QpAttr { qp_state: Some(QpState::Rts), sq_psn: Some(psn), ..QpAttr::default() })?;
        }
        let qp = Arc::new(qp);
        self.shared.lock().qp = Some(qp.clone());
        Ok(qp)
    }
}

/// The ports bound by the live IDs of this process (per address and port
/// space), so that binding to port 0 picks one nobody holds.
mod bound_ports {
    use super::{route, IdShared, PortSpace};
    use crate::cm::{CmError, Result};
    use rdma_link::share::fork::PerProcess;
    use std::net::IpAddr;
    use std::sync::{Arc, Mutex, Weak};

    struct Bound {
        ps: PortSpace,
        ip: IpAddr,
        port: u16,
        id: Weak<IdShared>,
    }

    static BOUND: Mutex<PerProcess<Vec<Bound>>> = Mutex::new(PerProcess::new(Vec::new()));

    /// Records `id` as holding `port` (0: a free ephemeral port, picked
    /// now) on `ip` in `ps`, and returns the port. An explicit port is
    /// taken as given: two IDs may bind one port, only one may listen on
    /// it (`CmDevice::listen` refuses the second, EADDRINUSE).
    pub(super) fn reserve(id: &Arc<IdShared>, ps: PortSpace, ip: IpAddr, port: u16) -> Result<u16> {
        let mut b = BOUND.lock().unwrap_or_else(|e| e.into_inner());
        let b = b.get();
        b.retain(|e| e.id.strong_count() > 0);
        let taken = |p: u16| b.iter().any(|e| e.ps == ps && e.port == p && (e.ip == ip || e.ip.is_unspecified()));
        let port = if port != 0 {
            port
        } else {
            // Random within Linux's ephemeral range; with at most a few
            // thousand IDs bound, a free one is found in a few draws.
            (0..4096)
                .map(|_| route::ephemeral_port())
                .find(|&p| !taken(p))
                .ok_or(CmError::AddrInUse { addr: ip, port: 0 })?
        };
        b.push(Bound { ps, ip, port, id: Arc::downgrade(id) });
        Ok(port)
    }

    /// Forgets what `id` reserved (its bind failed).
    pub(super) fn unreserve(id: &Arc<IdShared>) {
        let mut b = BOUND.lock().unwrap_or_else(|e| e.into_inner());
        let b = b.get();
        b.retain(|e| !std::ptr::eq(e.id.as_ptr(), Arc::as_ptr(id)));
    }
}
