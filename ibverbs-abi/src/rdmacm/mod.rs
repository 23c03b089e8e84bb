//! librdmacm's calls (rdma-core 44's `librdmacm.so.1`) over this crate's
//! objects and `rdma_core_rs::cm`.
//!
//! They live here, in libibverbs.so.1, because the objects librdmacm hands
//! out (`id->verbs`, `id->qp`, the PD and CQs made on them) are this
//! library's: the application posts on `id->qp` with this library's
//! `ibv_post_send`. One copy of the stack in the process (one engine per
//! device, one UDP socket, one table of live objects) is what makes that
//! work. Each call is exported as `softroce_rdma_NAME` in the private
//! version node `SOFTROCE_PRIVATE_1`; the rdmacm-abi crate's
//! `librdmacm.so.1` holds only `rdma_NAME@@RDMACM_1.x` trampolines to them
//! (see docs/ibverbs-abi.md).
//!
//! - A CM ID is a box whose first field is the C `rdma_cm_id`, holding the
//!   Rust [`CmId`]; events name Rust IDs, [`BY_KEY`] maps them back.
//! - `id->verbs` is an `ibv_context` of this library, opened once per
//!   device (as librdmacm opens every device) and handed to the CM with
//!   `cm::attach_context`, so the CM's MADs and the application's QPs
//!   share the device's engine.
//! - `rdma_create_qp` makes the QP with `ibv_create_qp`, moves it to INIT
//!   (a UD QP to RTS) and hands its number to the CM, which takes an RC QP
//!   through RTR and RTS as the connection comes up.
//! - The event channel's fd is an eventfd that counts queued events: the
//!   CM's service thread queues them while the application sleeps in
//!   `poll`, so rping's `poll` on `channel->fd` wakes.
//! - Synchronous IDs (`rdma_create_id` with no channel), as librdmacm's
//!   cma.c has them: the ID gets a channel of its own (`id->channel`,
//!   destroyed with it) and each call that raises an event
//!   (`rdma_resolve_addr`, `rdma_resolve_route`, `rdma_connect`,
//!   `rdma_accept`, `rdma_disconnect`) waits for it, leaves it in
//!   `id->event` (acked by the next such call or `rdma_destroy_id`) and
//!   fails with its status (REJECTED: ECONNREFUSED). A synchronous
//!   listener's requests come from `rdma_get_request`, each new ID
//!   synchronous on a channel of its own. libfabric's verbs provider
//!   works this way.

pub mod abi;
mod addr;
mod errno;
mod id;

use self::abi::*;
use self::errno::{cm_errno, fail, fail_cm};
use self::id::{id_of, Id, IDS};
use crate::abi::*;
use crate::context::ctx_of;
use crate::ffi::{guard, live, set_errno, Registry};
use libc::{c_char, c_int, c_void};
use rdma_core_rs::cm::{self, CmError, CmEvent, CmId, ConnParam, EventChannel, EventType, PortSpace};
use rdma_core_rs::share::fork::PerProcess;
use rdma_core_rs::Gid;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

static CHANNELS: Registry = Registry::new();
static EVENTS: Registry = Registry::new();

/// Rust CM IDs (by [`CmId::key`]) to the C IDs that hold them.
static BY_KEY: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// The devices the CM uses: the address, its `ibv_context` (open for the
/// process's lifetime, as librdmacm keeps its devices open) and the PD
/// `rdma_create_qp(id, NULL, ...)` uses.
struct Open {
    addr: IpAddr,
    ctx: usize,
    pd: usize,
}

static OPEN: Mutex<PerProcess<Vec<Open>>> = Mutex::new(PerProcess::new(Vec::new()));

#[repr(C)]
struct Channel {
    c: rdma_event_channel,
    ch: EventChannel,
}

/// Reads a field of an ID's C struct.
macro_rules! get {
    ($id:expr, $($f:ident).+) => {
        // SAFETY: a live ID (see `Id`): a plain read of its C struct.
        unsafe { (*$id.c()).$($f).+ }
    };
}

/// Writes a field of an ID's C struct.
macro_rules! set {
    ($id:expr, $($f:ident).+, $v:expr) => {{
        let v = $v;
        // SAFETY: a live ID (see `Id`): calls on one ID are not concurrent.
        unsafe { (*$id.c()).$($f).+ = v }
    }};
}

// After the macros, which it uses.
mod mcast;

#[repr(C)]
struct Event {
    c: rdma_cm_event,
    data: Vec<u8>,
}

// SAFETY: the raw pointers in the C structs are the application's or this
// library's registered objects, reached only through the registries.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

/// The device of local address `ip`: its context, opened on first use and
/// handed to the CM.
fn open_device(ip: IpAddr) -> Result<(*mut ibv_context, *mut ibv_pd), c_int> {
    let ip = ip.to_canonical();
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let open = open.get();
    if let Some(o) = open.iter().find(|o| o.addr == ip) {
        return Ok((o.ctx as *mut ibv_context, o.pd as *mut ibv_pd));
    }
    let devs = crate::device::devices().map_err(|_| libc::ENODEV)?;
    // Native IB devices (ib:IFNAME) have no IP address here: the CM of this
    // library does not reach them.
    let Some(dev) = devs.iter().find(|d| d.spec.ip().map(|a| a.to_canonical()) == Some(ip)) else {
        tracing::info!(%ip, "no RoCE v2 device has this address (SOFTROCE_DEVICES)");
        return Err(libc::ENODEV);
    };
    // SAFETY: a device of the list.
    let ctx = unsafe { crate::open::ibv_open_device(&dev.c as *const ibv_device as *mut ibv_device) };
    if ctx.is_null() {
        // Its errno: EADDRINUSE when another process has the address.
        return Err(std::io::Error::last_os_error().raw_os_error().filter(|&e| e != 0).unwrap_or(libc::ENODEV));
    }
    // SAFETY: just opened.
    let c = unsafe { ctx_of(ctx) }.ok_or(libc::ENODEV)?;
    cm::attach_context(&c.engine.verbs).map_err(|e| cm_errno(&e))?;
    // SAFETY: a live context.
    let pd = unsafe { crate::pd::ibv_alloc_pd(ctx) };
    open.push(Open { addr: ip, ctx: ctx as usize, pd: pd as usize });
    Ok((ctx, pd))
}

/// The default PD of an opened device's context (NULL if not one of them):
/// librdmacm's `cma_dev->pd`, which it puts in `id->pd` with `id->verbs`
/// and `rdma_create_qp` takes when given none.
fn default_pd(verbs: *mut ibv_context) -> *mut ibv_pd {
    let mut o = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    o.get().iter().find(|o| o.ctx == verbs as usize).map_or(std::ptr::null_mut(), |o| o.pd as *mut ibv_pd)
}

/// Gives the ID its device: `id->verbs`, and `id->pd` the device's default
/// PD unless it has one (librdmacm's `ucma_get_device` sets both; pyverbs'
/// `CMID.pd` and applications that make their own QP on the ID's PD read
/// it before any `rdma_create_qp`).
fn attach(i: &Id, ctx: *mut ibv_context, pd: *mut ibv_pd) {
    set!(i, verbs, ctx);
    if get!(i, pd).is_null() {
        set!(i, pd, pd);
    }
}

/// The device addresses of this process.
fn device_addrs() -> Vec<IpAddr> {
    crate::device::devices()
        .map(|d| d.iter().filter_map(|d| d.spec.ip()).map(|a| a.to_canonical()).collect())
        .unwrap_or_default()
}

/// The source for `dst` when none is given: the one the kernel routes
/// from if a device has it, else the first device of the family (the
/// devices here are often loopback addresses the kernel never picks).
fn source_for(dst: IpAddr) -> Result<IpAddr, c_int> {
    let devs = device_addrs();
    let any: IpAddr =
        if dst.is_ipv4() { std::net::Ipv4Addr::UNSPECIFIED.into() } else { std::net::Ipv6Addr::UNSPECIFIED.into() };
    let kernel = std::net::UdpSocket::bind(SocketAddr::new(any, 0))
        .and_then(|s| s.connect(SocketAddr::new(dst, 4791)).map(|_| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip().to_canonical());
    if let Ok(k) = kernel {
        if devs.contains(&k) {
            return Ok(k);
        }
    }
    devs.into_iter().find(|d| d.is_ipv4() == dst.is_ipv4()).ok_or(libc::ENODEV)
}

/// # Safety
/// As for [`id_of`].
unsafe fn channel_of<'a>(p: *mut rdma_event_channel) -> Option<&'a Channel> {
    // SAFETY: registered channels are leaked boxes, freed only after removal.
    unsafe { live(&CHANNELS, p.cast::<Channel>(), "rdma_event_channel") }
}

fn new_id(channel: *mut rdma_event_channel, context: *mut c_void, ps: c_int, qp_type: c_int, cm: CmId) -> *mut Id {
    // SAFETY: plain data (pointers, numbers, sockaddrs): zero is valid.
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = channel;
    c.context = context;
    c.ps = ps;
    c.qp_type = qp_type;
    let key = cm.key();
    let p = Box::into_raw(Box::new(Id {
        c: UnsafeCell::new(c),
        cm,
        bound: Mutex::new(None),
        req_depths: Mutex::new((1, 1)),
        own_cqs: Mutex::new(Vec::new()),
        sync: AtomicBool::new(false),
        ep_qp_attr: Mutex::new(None),
        mcast: Mutex::new(Vec::new()),
    }));
    IDS.insert(p);
    BY_KEY.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(key, p as usize);
    p
}

fn lookup(cm: &CmId) -> Option<*mut Id> {
    let g = BY_KEY.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()?.get(&cm.key()).map(|&p| p as *mut Id)
}

/// Fills the ID's address and route fields from the CM ID.
fn fill_route(id: &Id) {
    let local = id.cm.local_addr().or(id.bound());
    let remote = id.cm.peer_addr();
    if let Some(l) = local {
        set!(id, route.addr.src, addr::to_c(l).0);
        set!(id, route.addr.ibaddr.sgid, ibv_gid { raw: Gid::from_ip(l.ip()).0 });
    }
    if let Some(r) = remote {
        set!(id, route.addr.dst, addr::to_c(r).0);
        set!(id, route.addr.ibaddr.dgid, ibv_gid { raw: Gid::from_ip(r.ip()).0 });
    }
    set!(id, route.addr.ibaddr.pkey, 0xffffu16.to_be());
    set!(id, port_num, 1);
}

fn port_space(ps: c_int) -> Option<PortSpace> {
    match ps {
        RDMA_PS_TCP => Some(PortSpace::Tcp),
        RDMA_PS_UDP => Some(PortSpace::Udp),
        RDMA_PS_IB | RDMA_PS_IPOIB => Some(PortSpace::Other(ps as u16)),
        _ => None,
    }
}

#[export_name = "softroce_rdma_create_event_channel_impl"]
pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    guard("rdma_create_event_channel", std::ptr::null_mut(), || {
        crate::init_tracing();
        match EventChannel::with_fd() {
            Ok(ch) => {
                let fd = ch.fd().unwrap_or(-1);
                let p = Box::into_raw(Box::new(Channel { c: rdma_event_channel { fd }, ch }));
                CHANNELS.insert(p);
                p.cast()
            }
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
                std::ptr::null_mut()
            }
        }
    })
}

#[export_name = "softroce_rdma_destroy_event_channel_impl"]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    guard("rdma_destroy_event_channel", (), || {
        let p = channel.cast::<Channel>();
        if CHANNELS.remove(p) {
            // SAFETY: removed from the registry; made by Box::into_raw.
            drop(unsafe { Box::from_raw(p) });
        } else {
            set_errno(libc::EINVAL);
        }
    })
}

#[export_name = "softroce_rdma_create_id_impl"]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    guard("rdma_create_id", -1, || {
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        let Some(space) = port_space(ps) else { return fail(libc::EINVAL) };
        // No channel: a synchronous ID, on a channel of its own (librdmacm's
        // ucma_alloc_id).
        let sync = channel.is_null();
        let channel = if sync {
            // SAFETY: no arguments.
            let c = unsafe { rdma_create_event_channel() };
            if c.is_null() {
                return -1;
            }
            c
        } else {
            channel
        };
        // SAFETY: channel_of checks the registry.
        let Some(ch) = (unsafe { channel_of(channel) }) else { return -1 };
        let qp_type = if matches!(space, PortSpace::Udp) || ps == RDMA_PS_IPOIB { IBV_QPT_UD } else { IBV_QPT_RC };
        let p = new_id(channel, context, ps, qp_type, ch.ch.create_id(space));
        // SAFETY: just made.
        unsafe { &*p }.sync.store(sync, Ordering::Relaxed);
        // SAFETY: the caller's out-parameter.
        unsafe { *id = p.cast() };
        0
    })
}

#[export_name = "softroce_rdma_destroy_id_impl"]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_destroy_id", -1, || {
        let p = id.cast::<Id>();
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        let key = i.cm.key();
        if !IDS.remove(p) {
            return fail(libc::EINVAL);
        }
        if let Some(m) = BY_KEY.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            m.remove(&key);
        }
        // SAFETY: removed from the registry; made by Box::into_raw. Dropping
        // the CM ID disconnects or rejects what it still has open.
        let b = unsafe { Box::from_raw(p) };
        // librdmacm: the event a synchronous call left is acked, and a
        // synchronous ID's own channel goes with it.
        let (event, channel) = (get!(b, event), get!(b, channel));
        let sync = b.sync.load(Ordering::Relaxed);
        drop(b);
        if !event.is_null() {
            // SAFETY: an event of this library (checked by the registry).
            unsafe { rdma_ack_cm_event(event) };
        }
        if sync {
            // SAFETY: the ID's own channel, made by rdma_create_id.
            unsafe { rdma_destroy_event_channel(channel) };
        }
        0
    })
}

#[export_name = "softroce_rdma_bind_addr_impl"]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, a: *mut libc::sockaddr) -> c_int {
    guard("rdma_bind_addr", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        // SAFETY: the caller's sockaddr.
        let Some(sa) = (unsafe { addr::from_c(a) }) else { return fail(libc::EAFNOSUPPORT) };
        bind(i, sa)
    })
}

/// `rdma_bind_addr` of `sa` on `i` (also `rdma_listen` on an ID never
/// bound, which binds it to the IPv4 wildcard first, as the kernel does).
fn bind(i: &Id, mut sa: SocketAddr) -> c_int {
    if i.bound().is_some() {
        return fail(libc::EINVAL);
    }
    // A loopback address no device has (libfabric's verbs provider
    // binds "localhost" to probe, then takes the devices' own
    // addresses when the ID has no device): bound as the wildcard,
    // without a device in `id->verbs`.
    let loopback = sa.ip().is_loopback() && !device_addrs().contains(&sa.ip().to_canonical());
    if sa.ip().is_unspecified() || loopback {
        // No wildcard device here: the first device of the family listens.
        let fam = sa.is_ipv4();
        let Some(d) = device_addrs().into_iter().find(|d| d.is_ipv4() == fam || !fam) else {
            return fail(libc::ENODEV);
        };
        sa.set_ip(d);
    }
    match open_device(sa.ip()) {
        Ok((ctx, pd)) if !loopback => attach(i, ctx, pd),
        Ok(_) => {}
        Err(e) => return fail(e),
    }
    // Bound now, port 0 picked now (as the kernel does): qperf reads
    // rdma_get_src_port between rdma_bind_addr and rdma_listen and
    // sends it to its client; it used to be 0 until rdma_listen.
    if let Err(e) = i.cm.bind_addr(SocketAddr::new(sa.ip().to_canonical(), sa.port())) {
        return fail_cm("rdma_bind_addr", &e);
    }
    *i.bound.lock().unwrap_or_else(|e| e.into_inner()) = i.cm.local_addr();
    fill_route(i);
    0
}

#[export_name = "softroce_rdma_resolve_addr_impl"]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    guard("rdma_resolve_addr", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        // SAFETY: the caller's sockaddrs.
        let (src, dst) = unsafe { (addr::from_c(src), addr::from_c(dst)) };
        let Some(dst) = dst else { return fail(libc::EINVAL) };
        let dst = SocketAddr::new(dst.ip().to_canonical(), dst.port());
        let src = match src.filter(|s| !s.ip().is_unspecified()).or(i.bound()).map(|s| s.ip().to_canonical()) {
            Some(s) => s,
            None => match source_for(dst.ip()) {
                Ok(s) => s,
                Err(e) => return fail(e),
            },
        };
        match open_device(src) {
            Ok((ctx, pd)) => attach(i, ctx, pd),
            Err(e) => return fail(e),
        }
        let t = Duration::from_millis(timeout_ms.max(0) as u64);
        if let Err(e) = i.cm.resolve_addr(Some(src), dst, t) {
            return fail_cm("rdma_resolve_addr", &e);
        }
        fill_route(i);
        complete(i)
    })
}

#[export_name = "softroce_rdma_resolve_route_impl"]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    guard("rdma_resolve_route", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        match i.cm.resolve_route(Duration::from_millis(timeout_ms.max(0) as u64)) {
            Ok(()) => {
                fill_route(i);
                complete(i)
            }
            Err(e) => fail_cm("rdma_resolve_route", &e),
        }
    })
}

#[export_name = "softroce_rdma_listen_impl"]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    guard("rdma_listen", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        // An idle ID (never bound nor resolved) is bound to the IPv4
        // wildcard, port 0, first, as the kernel's rdma_listen does: here
        // the process's first IPv4 device, a port picked now. Any other
        // ID that is not bound (resolved) is refused by the CM with
        // EINVAL, as by the kernel.
        if i.bound().is_none() && i.cm.local_addr().is_none() {
            let r = bind(i, SocketAddr::from(([0, 0, 0, 0], 0)));
            if r != 0 {
                return r;
            }
        }
        if let Err(e) = i.cm.listen(backlog.max(0) as u32) {
            return fail_cm("rdma_listen", &e);
        }
        fill_route(i);
        0
    })
}

#[export_name = "softroce_rdma_create_qp_impl"]
pub unsafe extern "C" fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> c_int {
    guard("rdma_create_qp", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        let verbs = get!(i, verbs);
        if verbs.is_null() || attr.is_null() || !get!(i, qp).is_null() {
            return fail(libc::EINVAL);
        }
        let pd = if pd.is_null() { default_pd(verbs) } else { pd };
        // A use of the PD for the whole call (see `Registry::acquire`).
        let mut held = crate::ffi::Held::new();
        // SAFETY: pd_use checks the registry.
        let Some(p) = (unsafe { crate::pd::pd_use(pd, &mut held) }) else { return -1 };
        if p.c.context != verbs {
            tracing::debug!("rdma_create_qp: the PD is of another device than the ID");
            return fail(libc::EINVAL);
        }
        // librdmacm makes the CQs the application leaves out (cmtime, the
        // rdma_create_ep users): each with a completion channel, as deep as
        // the queue it serves.
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        for send in [true, false] {
            let (cq, depth) =
                if send { (&mut a.send_cq, a.cap.max_send_wr) } else { (&mut a.recv_cq, a.cap.max_recv_wr) };
            if !cq.is_null() {
                continue;
            }
            match own_cq(verbs, depth) {
                Ok(made) => {
                    *cq = made.1;
                    i.own_cqs.lock().unwrap_or_else(|e| e.into_inner()).push(made);
                }
                Err(e) => {
                    destroy_own_cqs(i, Some(a));
                    return fail(e);
                }
            }
        }
        // SAFETY: the caller's attributes, checked by ibv_create_qp.
        let qp = unsafe { crate::qp::ibv_create_qp(pd, attr) };
        if qp.is_null() {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
            // SAFETY: the caller's attributes, as above.
            destroy_own_cqs(i, Some(unsafe { &mut *attr }));
            return fail(e);
        }
        // SAFETY: the caller's attributes (read after ibv_create_qp checked them).
        let ud = unsafe { (*attr).qp_type } == IBV_QPT_UD;
        let r = init_qp(qp, ud).and_then(|_| {
            // SAFETY: a live QP.
            let qpn = unsafe { (*qp).qp_num };
            i.cm.set_qp_num(Some(qpn)).map_err(|e| cm_errno(&e))
        });
        if let Err(e) = r {
            // SAFETY: the QP just made.
            unsafe { crate::qp::ibv_destroy_qp(qp) };
            // SAFETY: the caller's attributes, as above.
            destroy_own_cqs(i, Some(unsafe { &mut *attr }));
            return fail(e);
        }
        set!(i, qp, qp);
        set!(i, pd, pd);
        // SAFETY: the caller's attributes.
        let (scq, rcq) = unsafe { ((*attr).send_cq, (*attr).recv_cq) };
        set!(i, send_cq, scq);
        set!(i, recv_cq, rcq);
        for &(ch, cq) in i.own_cqs.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if cq == scq {
                set!(i, send_cq_channel, ch.cast());
            }
            if cq == rcq {
                set!(i, recv_cq_channel, ch.cast());
            }
        }
        0
    })
}

/// What librdmacm does to a new QP: INIT (P_Key index 0, port 1, remote
/// access for RC, the RDMA CM's Q_Key for UD), and RTR and RTS for UD.
fn init_qp(qp: *mut ibv_qp, ud: bool) -> Result<(), c_int> {
    use crate::abi::qp_mask as m;
    // SAFETY: plain data, zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = 1; // INIT
    a.pkey_index = 0;
    a.port_num = 1;
    let mut mask = m::STATE | m::PKEY_INDEX | m::PORT;
    if ud {
        a.qkey = cm::RDMA_UDP_QKEY;
        mask |= m::QKEY;
    } else {
        a.qp_access_flags = 0xf; // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC
        mask |= m::ACCESS_FLAGS;
    }
    let modify = |a: &mut ibv_qp_attr, mask| {
        // SAFETY: a live QP and our attributes.
        match unsafe { crate::qp::ibv_modify_qp(qp, a, mask) } {
            0 => Ok(()),
            e => Err(e),
        }
    };
    modify(&mut a, mask)?;
    if ud {
        a.qp_state = 2; // RTR
        modify(&mut a, m::STATE)?;
        a.qp_state = 3; // RTS
        a.sq_psn = 0;
        modify(&mut a, m::STATE | m::SQ_PSN)?;
    }
    Ok(())
}

#[export_name = "softroce_rdma_destroy_qp_impl"]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    guard("rdma_destroy_qp", (), || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return };
        let qp = get!(i, qp);
        if qp.is_null() {
            return;
        }
        let _ = i.cm.set_qp_num(None);
        // SAFETY: the QP rdma_create_qp made (checked by the registry).
        unsafe { crate::qp::ibv_destroy_qp(qp) };
        set!(i, qp, std::ptr::null_mut());
        destroy_own_cqs(i, None);
    })
}

/// A completion channel and a CQ of at least `depth` entries on `verbs`.
fn own_cq(verbs: *mut ibv_context, depth: u32) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOMEM);
    // SAFETY: verbs is the ID's live context; the calls check it.
    let ch = unsafe { crate::cq::ibv_create_comp_channel(verbs) };
    if ch.is_null() {
        return Err(errno());
    }
    let cqe = depth.clamp(1, i32::MAX as u32) as c_int;
    // SAFETY: as above; `ch` was just made on the same context.
    let cq = unsafe { crate::cq::ibv_create_cq(verbs, cqe, std::ptr::null_mut(), ch, 0) };
    if cq.is_null() {
        let e = errno();
        // SAFETY: the channel just made, used by nothing.
        unsafe { crate::cq::ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok((ch, cq))
}

/// Destroys the CQs and channels `rdma_create_qp` made for `i`, and clears
/// the ID's fields (and, on a failed create, the caller's attributes) that
/// named them. One still in use (the application made another QP on it) is
/// kept, and said.
fn destroy_own_cqs(i: &Id, attr: Option<&mut ibv_qp_init_attr>) {
    let made = std::mem::take(&mut *i.own_cqs.lock().unwrap_or_else(|e| e.into_inner()));
    let mut kept = Vec::new();
    let mut attr = attr;
    for (ch, cq) in made {
        if let Some(a) = attr.as_deref_mut() {
            for f in [&mut a.send_cq, &mut a.recv_cq] {
                if *f == cq {
                    *f = std::ptr::null_mut();
                }
            }
        }
        // SAFETY: made by own_cq; the QP that used it is gone (or was never made).
        if unsafe { crate::cq::ibv_destroy_cq(cq) } != 0 {
            tracing::warn!("rdma_destroy_qp: a CQ librdmacm made for the ID is still in use; it stays");
            kept.push((ch, cq));
            continue;
        }
        if get!(i, send_cq) == cq {
            set!(i, send_cq, std::ptr::null_mut());
            set!(i, send_cq_channel, std::ptr::null_mut());
        }
        if get!(i, recv_cq) == cq {
            set!(i, recv_cq, std::ptr::null_mut());
            set!(i, recv_cq_channel, std::ptr::null_mut());
        }
        // SAFETY: its only CQ is gone.
        unsafe { crate::cq::ibv_destroy_comp_channel(ch) };
    }
    i.own_cqs.lock().unwrap_or_else(|e| e.into_inner()).extend(kept);
}

/// The Rust parameters of a C `rdma_conn_param` (NULL: `default`).
///
/// # Safety
/// `p` is NULL or the caller's parameters.
unsafe fn conn_param(p: *const rdma_conn_param, default: ConnParam) -> Result<ConnParam, c_int> {
    // SAFETY: see the contract.
    let Some(p) = (unsafe { p.as_ref() }) else { return Ok(default) };
    let data = if p.private_data.is_null() || p.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's buffer of private_data_len bytes.
        unsafe { std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into()) }.to_vec()
    };
    Ok(ConnParam {
        private_data: data,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: p.flow_control != 0,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq != 0,
        // The application's own QP, on an ID without one (the CM ignores
        // it on an ID with a QP, as librdmacm does).
        qp_num: (p.qp_num != 0).then_some(p.qp_num & 0xff_ffff),
    })
}

#[export_name = "softroce_rdma_connect_impl"]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard("rdma_connect", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        // SAFETY: the caller's parameters, or NULL.
        let own = unsafe { param.as_ref() }.map_or(0, |p| p.qp_num);
        if get!(i, qp).is_null() && get!(i, qp_type) != IBV_QPT_UD && own == 0 {
            // Neither rdma_create_qp's QP nor the application's own in
            // conn_param->qp_num (which CONNECT_RESPONSE, rdma_init_qp_attr
            // and rdma_establish then serve).
            tracing::debug!("rdma_connect: no QP on the ID and none in conn_param->qp_num");
            return fail(libc::EINVAL);
        }
        // NULL: the device maximum of each depth, 7 retries of each kind.
        let dflt = ConnParam { responder_resources: 0xff, initiator_depth: 0xff, ..ConnParam::default() };
        // SAFETY: the caller's parameters.
        let p = match unsafe { conn_param(param, dflt) } {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        match i.cm.connect(&p) {
            Ok(()) => complete(i),
            Err(e) => fail_cm("rdma_connect", &e),
        }
    })
}

#[export_name = "softroce_rdma_accept_impl"]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard("rdma_accept", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        if get!(i, qp).is_null() {
            // A UD accept may name the QP by number only (udaddy does both).
            // SAFETY: the caller's parameters, or NULL.
            let qpn = unsafe { param.as_ref() }.map_or(0, |p| p.qp_num);
            if qpn == 0 {
                tracing::debug!("rdma_accept: no QP on the ID and none in conn_param->qp_num");
                return fail(libc::EINVAL);
            }
            // An RC QP of the application's own is named in the REP and
            // moved by the application (rdma_init_qp_attr); a UD one is the
            // SIDR reply's.
            if get!(i, qp_type) == IBV_QPT_UD {
                if let Err(e) = i.cm.set_qp_num(Some(qpn)) {
                    return fail_cm("rdma_accept", &e);
                }
            }
        }
        let (resp, init) = *i.req_depths.lock().unwrap_or_else(|e| e.into_inner());
        let dflt = ConnParam { responder_resources: resp, initiator_depth: init, ..ConnParam::default() };
        // SAFETY: the caller's parameters.
        let p = match unsafe { conn_param(param, dflt) } {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        match i.cm.accept(&p) {
            // UD: no ESTABLISHED follows here; librdmacm only acks the
            // request a synchronous ID still holds.
            Ok(()) if get!(i, qp_type) == IBV_QPT_UD => {
                if i.sync.load(Ordering::Relaxed) {
                    ack_held(i);
                }
                0
            }
            Ok(()) => complete(i),
            Err(e) => fail_cm("rdma_accept", &e),
        }
    })
}

#[export_name = "softroce_rdma_reject_impl"]
pub unsafe extern "C" fn rdma_reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    guard("rdma_reject", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        let d = if data.is_null() || len == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's buffer of `len` bytes.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len.into()) }
        };
        match i.cm.reject(d) {
            Ok(()) => 0,
            Err(e) => fail_cm("rdma_reject", &e),
        }
    })
}

#[export_name = "softroce_rdma_disconnect_impl"]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_disconnect", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        match i.cm.disconnect() {
            // Synchronous: waits for DISCONNECTED (the DREP, or the peer's
            // DREQ that came first and is still queued), as librdmacm does.
            Ok(()) => complete(i),
            Err(e) => fail_cm("rdma_disconnect", &e),
        }
    })
}

#[export_name = "softroce_rdma_get_cm_event_impl"]
pub unsafe extern "C" fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int {
    guard("rdma_get_cm_event", -1, || {
        // SAFETY: channel_of checks the registry.
        let Some(ch) = (unsafe { channel_of(channel) }) else { return -1 };
        if event.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: fcntl on the channel's own fd.
        let nonblock = unsafe { libc::fcntl(ch.c.fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
        let ch = ch.ch.clone();
        loop {
            let e = match ch.get_cm_event(if nonblock { Some(Duration::ZERO) } else { None }) {
                Ok(e) => e,
                Err(CmError::Timeout(_)) => return fail(libc::EAGAIN),
                Err(e) => return fail_cm("rdma_get_cm_event", &e),
            };
            if let Some(ev) = to_c_event(channel, e) {
                // SAFETY: the caller's out-parameter.
                unsafe { *event = ev.cast() };
                return 0;
            }
            // An event of an ID already destroyed: nobody to give it to.
        }
    })
}

/// The C event of `e`, or None if its ID is gone. A CONNECT_REQUEST makes
/// the new C ID, inheriting the listener's context, as librdmacm does.
fn to_c_event(channel: *mut rdma_event_channel, e: CmEvent) -> Option<*mut Event> {
    let (idp, listenp) = if e.event == EventType::ConnectRequest {
        let lp = lookup(e.listen_id.as_ref()?)?;
        // SAFETY: a registered ID (BY_KEY holds live ones only).
        let l = unsafe { &*lp };
        // A synchronous listener's requests are synchronous IDs, each on a
        // channel of its own (librdmacm's ucma_process_conn_req migrates
        // them to NULL).
        let sync = l.sync.load(Ordering::Relaxed);
        let channel = if sync { own_channel_for(&e.id)? } else { channel };
        let np = new_id(channel, get!(l, context), get!(l, ps), get!(l, qp_type), e.id.clone());
        // SAFETY: just made, not yet known to the application.
        let n = unsafe { &*np };
        n.sync.store(sync, Ordering::Relaxed);
        // the device's default PD, not the listener's (librdmacm's
        // ucma_process_conn_req: ucma_get_device on the new ID)
        let verbs = get!(l, verbs);
        attach(n, verbs, default_pd(verbs));
        *n.req_depths.lock().unwrap_or_else(|e| e.into_inner()) =
            (e.param.responder_resources, e.param.initiator_depth);
        fill_route(n);
        (np, lp)
    } else {
        (lookup(&e.id)?, std::ptr::null_mut())
    };
    // SAFETY: a registered ID.
    let id = unsafe { &*idp };
    let data = e.param.private_data.clone();
    // SAFETY: plain data, zero is valid.
    let mut c: rdma_cm_event = unsafe { std::mem::zeroed() };
    c.id = idp.cast();
    c.listen_id = listenp.cast();
    c.event = e.event as c_int;
    c.status = e.status;
    let mut ev = Box::new(Event { c, data });
    let (ptr, len) = if ev.data.is_empty() {
        (std::ptr::null(), 0)
    } else {
        (ev.data.as_ptr().cast::<c_void>(), ev.data.len().min(255) as u8)
    };
    if get!(id, qp_type) == IBV_QPT_UD {
        // SAFETY: plain data, zero is valid.
        let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
        if let Some(peer) = id.cm.peer_addr() {
            ah.grh.dgid = ibv_gid { raw: Gid::from_ip(peer.ip()).0 };
            ah.grh.hop_limit = 64;
            ah.is_global = 1;
            ah.port_num = 1;
        }
        ev.c.param.ud = rdma_ud_param {
            private_data: ptr,
            private_data_len: len,
            ah_attr: ah,
            qp_num: e.param.qp_num,
            qkey: e.param.qkey,
        };
    } else if e.event != EventType::MulticastJoin {
        ev.c.param.conn = rdma_conn_param {
            private_data: ptr,
            private_data_len: len,
            responder_resources: e.param.responder_resources,
            initiator_depth: e.param.initiator_depth,
            flow_control: 0,
            retry_count: e.param.retry_count,
            rnr_retry_count: e.param.rnr_retry_count,
            srq: e.param.srq.into(),
            qp_num: e.param.qp_num,
        };
    }
    if let (EventType::MulticastJoin, Some(mgid)) = (e.event, e.param.mgid) {
        mcast::deliver_join(id, &mut ev.c, mgid, e.param.qkey);
    }
    let p = Box::into_raw(ev);
    EVENTS.insert(p);
    Some(p)
}

#[export_name = "softroce_rdma_ack_cm_event_impl"]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard("rdma_ack_cm_event", -1, || {
        let p = event.cast::<Event>();
        if !EVENTS.remove(p) {
            return fail(libc::EINVAL);
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        drop(unsafe { Box::from_raw(p) });
        0
    })
}

fn port_of(st: &libc::sockaddr_storage) -> u16 {
    // SAFETY: a sockaddr_storage this library filled (or zero).
    unsafe { addr::from_c((st as *const libc::sockaddr_storage).cast()) }.map_or(0, |a| a.port().to_be())
}

/// Acks and forgets the event a synchronous call left in `id->event`.
fn ack_held(i: &Id) {
    let ev = get!(i, event);
    if !ev.is_null() {
        set!(i, event, std::ptr::null_mut());
        // SAFETY: an event of this library (checked by the registry).
        unsafe { rdma_ack_cm_event(ev) };
    }
}

/// librdmacm's `ucma_complete`: for a synchronous ID, waits for the event
/// the call raised and leaves it in `id->event` (the previous one acked);
/// a non-zero status fails the call (REJECTED: ECONNREFUSED, a negative
/// status: its errno). An asynchronous ID returns 0 at once.
fn complete(i: &Id) -> c_int {
    if !i.sync.load(Ordering::Relaxed) {
        return 0;
    }
    ack_held(i);
    let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
    let channel = get!(i, channel);
    // SAFETY: the ID's own channel; `ev` is ours.
    if unsafe { rdma_get_cm_event(channel, &mut ev) } != 0 {
        return -1;
    }
    set!(i, event, ev);
    // SAFETY: just returned by rdma_get_cm_event.
    let (event, status) = unsafe { ((*ev).event, (*ev).status) };
    match status {
        0 => 0,
        _ if event == EventType::Rejected as c_int => fail(libc::ECONNREFUSED),
        s => fail(s.abs()),
    }
}

/// A channel of its own for the new ID `id` of a synchronous listener,
/// with the ID's events moved there.
fn own_channel_for(id: &CmId) -> Option<*mut rdma_event_channel> {
    // SAFETY: no arguments.
    let c = unsafe { rdma_create_event_channel() };
    // SAFETY: just made (registered) or NULL.
    let ch = unsafe { channel_of(c) }?;
    id.migrate(&ch.ch);
    Some(c)
}

#[export_name = "softroce_rdma_get_request_impl"]
pub unsafe extern "C" fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
    guard("rdma_get_request", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(l) = (unsafe { id_of(listen) }) else { return -1 };
        // Only a synchronous listener's requests are taken this way.
        if id.is_null() || !l.sync.load(Ordering::Relaxed) {
            return fail(libc::EINVAL);
        }
        ack_held(l);
        let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
        let channel = get!(l, channel);
        // SAFETY: the listener's own channel; `ev` is ours.
        if unsafe { rdma_get_cm_event(channel, &mut ev) } != 0 {
            return -1;
        }
        // SAFETY: just returned by rdma_get_cm_event.
        let (event, status, new) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
        let err = if event == EventType::Rejected as c_int {
            libc::ECONNREFUSED
        } else if status != 0 {
            status.abs()
        } else if event != EventType::ConnectRequest as c_int {
            libc::EINVAL
        } else if let Some(e) = ep_qp(l, new) {
            e
        } else {
            // The request's event stays with the new ID (acked by its
            // rdma_accept, rdma_reject's successor call or destroy).
            // SAFETY: the new ID the event names (live: just made).
            if let Some(n) = unsafe { id_of(new) } {
                set!(n, event, ev);
            }
            // SAFETY: the caller's out-parameter.
            unsafe { *id = new };
            return 0;
        };
        // As librdmacm: a failed request's event stays with the listener.
        set!(l, event, ev);
        fail(err)
    })
}

/// The QP a passive endpoint's new ID gets (`rdma_create_ep` with QP
/// attributes), on the listener's PD: None when made or not wanted, else
/// the errno.
fn ep_qp(listen: &Id, new: *mut rdma_cm_id) -> Option<c_int> {
    let mut attr = (*listen.ep_qp_attr.lock().unwrap_or_else(|e| e.into_inner()))?;
    let pd = get!(listen, pd);
    // SAFETY: the new ID of the request (checked by the registry) and a copy of the attributes.
    match unsafe { rdma_create_qp(new, pd, &mut attr) } {
        0 => None,
        _ => Some(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL)),
    }
}

/// librdmacm's endpoint: a synchronous ID made from `rdma_getaddrinfo`'s
/// answer. Passive (`RAI_PASSIVE`): bound to the source, the QP attributes
/// kept for each request `rdma_get_request` returns. Active: the address
/// and route resolved (2 s each, as librdmacm), and the QP made if asked.
#[export_name = "softroce_rdma_create_ep_impl"]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard("rdma_create_ep", -1, || {
        if id.is_null() || res.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: the caller's rdma_addrinfo (rdma_getaddrinfo's, or filled alike).
        let r = unsafe { &*res };
        let mut new: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: our out-parameter; no channel: a synchronous ID.
        if unsafe { rdma_create_id(std::ptr::null_mut(), &mut new, std::ptr::null_mut(), r.ai_port_space) } != 0 {
            return -1;
        }
        // SAFETY: just made.
        let Some(i) = (unsafe { id_of(new) }) else { return -1 };
        set!(i, qp_type, r.ai_qp_type);
        let made = if r.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: the caller's source address (or NULL: refused there).
            let bound = unsafe { rdma_bind_addr(new, r.ai_src_addr) };
            if bound == 0 {
                // the caller's PD if any (librdmacm's ucma_passive_ep);
                // else the device's, which rdma_bind_addr put there
                if !pd.is_null() {
                    set!(i, pd, pd);
                }
                if !qp_init_attr.is_null() {
                    // SAFETY: the caller's attributes, copied.
                    let mut a = unsafe { *qp_init_attr };
                    a.qp_type = r.ai_qp_type;
                    *i.ep_qp_attr.lock().unwrap_or_else(|e| e.into_inner()) = Some(a);
                }
            }
            bound
        } else {
            // SAFETY: the caller's addresses; our live ID.
            let mut rc = unsafe { rdma_resolve_addr(new, r.ai_src_addr, r.ai_dst_addr, 2000) };
            if rc == 0 {
                // SAFETY: our live ID.
                rc = unsafe { rdma_resolve_route(new, 2000) };
            }
            if rc == 0 && !qp_init_attr.is_null() {
                // SAFETY: the caller's attributes.
                unsafe { (*qp_init_attr).qp_type = r.ai_qp_type };
                // SAFETY: our live ID, the caller's PD and attributes.
                rc = unsafe { rdma_create_qp(new, pd, qp_init_attr) };
            }
            rc
        };
        if made != 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
            // SAFETY: our ID, destroyed once.
            unsafe { rdma_destroy_ep(new) };
            return fail(e);
        }
        // SAFETY: the caller's out-parameter.
        unsafe { *id = new };
        0
    })
}

#[export_name = "softroce_rdma_get_src_port_impl"]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: id_of checks the registry.
    guard("rdma_get_src_port", 0, || unsafe { id_of(id) }.map_or(0, |i| port_of(&get!(i, route.addr.src))))
}

#[export_name = "softroce_rdma_get_dst_port_impl"]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: id_of checks the registry.
    guard("rdma_get_dst_port", 0, || unsafe { id_of(id) }.map_or(0, |i| port_of(&get!(i, route.addr.dst))))
}

#[export_name = "softroce_rdma_migrate_id_impl"]
pub unsafe extern "C" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    guard("rdma_migrate_id", -1, || {
        // SAFETY: id_of and channel_of check the registries.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        let was_sync = i.sync.load(Ordering::Relaxed);
        // NULL: the ID becomes synchronous, on a channel of its own
        // (librdmacm; EINVAL if it already is).
        let sync = channel.is_null();
        if sync && was_sync {
            return fail(libc::EINVAL);
        }
        let channel = if sync {
            // SAFETY: no arguments.
            let c = unsafe { rdma_create_event_channel() };
            if c.is_null() {
                return -1;
            }
            c
        } else {
            channel
        };
        // SAFETY: as above.
        let Some(ch) = (unsafe { channel_of(channel) }) else { return -1 };
        i.cm.migrate(&ch.ch);
        let old = get!(i, channel);
        set!(i, channel, channel);
        i.sync.store(sync, Ordering::Relaxed);
        if was_sync {
            // Its own channel goes, and the event a call left with it.
            ack_held(i);
            // SAFETY: the ID's own channel, made for it.
            unsafe { rdma_destroy_event_channel(old) };
        }
        0
    })
}

#[export_name = "softroce_rdma_set_option_impl"]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    guard("rdma_set_option", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        if optval.is_null() || level != RDMA_OPTION_ID {
            return fail(libc::EINVAL);
        }
        match optname {
            RDMA_OPTION_ID_TOS if optlen == 1 => {
                // SAFETY: the caller's one byte.
                i.cm.set_tos(unsafe { *optval.cast::<u8>() });
                0
            }
            // Accepted: a port is claimed per ID anyway, and IPv6 IDs
            // take IPv6 only.
            RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY if optlen == std::mem::size_of::<c_int>() => 0,
            RDMA_OPTION_ID_ACK_TIMEOUT if optlen == 1 => {
                // SAFETY: the caller's one byte.
                i.cm.set_ack_timeout(unsafe { *optval.cast::<u8>() });
                0
            }
            _ => fail(libc::EINVAL),
        }
    })
}

#[export_name = "softroce_rdma_event_str_impl"]
pub unsafe extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const NAMES: [&std::ffi::CStr; 20] = [
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        c"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
        c"RDMA_CM_EVENT_ADDRINFO_ERROR",
        c"RDMA_CM_EVENT_USER",
        c"RDMA_CM_EVENT_INTERNAL",
    ];
    guard("rdma_event_str", c"UNKNOWN EVENT".as_ptr(), || {
        usize::try_from(event).ok().and_then(|i| NAMES.get(i)).map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr())
    })
}

#[export_name = "softroce_rdma_get_devices_impl"]
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    guard("rdma_get_devices", std::ptr::null_mut(), || {
        let ctxs: Vec<*mut ibv_context> =
            device_addrs().into_iter().filter_map(|a| open_device(a).ok()).map(|c| c.0).collect();
        // SAFETY: a fresh NULL-terminated array, filled below; rdma_free_devices frees it.
        let arr =
            unsafe { libc::calloc(ctxs.len() + 1, std::mem::size_of::<*mut ibv_context>()) }.cast::<*mut ibv_context>();
        if arr.is_null() {
            set_errno(libc::ENOMEM);
            return arr;
        }
        for (k, c) in ctxs.iter().enumerate() {
            // SAFETY: k < len + 1.
            unsafe { *arr.add(k) = *c };
        }
        if !num.is_null() {
            // SAFETY: the caller's out-parameter.
            unsafe { *num = ctxs.len() as c_int };
        }
        arr
    })
}

#[export_name = "softroce_rdma_free_devices_impl"]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: the array rdma_get_devices calloc'd (or NULL); the contexts stay open.
    guard("rdma_free_devices", (), || unsafe { libc::free(list.cast()) })
}

#[export_name = "softroce_rdma_notify_impl"]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, _event: c_int) -> c_int {
    // The CM sees the RTU itself; nothing to force.
    // SAFETY: id_of checks the registry.
    guard("rdma_notify", -1, || if unsafe { id_of(id) }.is_some() { 0 } else { -1 })
}

/// Calls this library does not provide: -1 with errno ENOSYS (SRQs on
/// IDs, rsockets).
macro_rules! not_supported {
    ($($name:ident => $export:literal),* $(,)?) => {$(
        #[export_name = $export]
        pub extern "C" fn $name() -> c_int {
            guard(stringify!($name), -1, || {
                tracing::warn!(call = stringify!($name), "not supported by this librdmacm");
                fail(libc::ENOSYS)
            })
        }
    )*};
}

not_supported!(
    rdma_create_srq => "softroce_rdma_create_srq_impl",
    rdma_destroy_srq => "softroce_rdma_destroy_srq_impl",
    rdma_create_qp_ex => "softroce_rdma_create_qp_ex_impl",
    rdma_create_srq_ex => "softroce_rdma_create_srq_ex_impl",
    rpoll => "softroce_rpoll_impl",
    rselect => "softroce_rselect_impl",
    rsocket => "softroce_rsocket_impl",
);

/// `rdma_init_qp_attr`: the attributes (and mask) that take the
/// application's own QP to `qp_attr->qp_state` for this ID's connection.
#[export_name = "softroce_rdma_init_qp_attr_impl"]
pub unsafe extern "C" fn rdma_init_qp_attr(id: *mut rdma_cm_id, attr: *mut ibv_qp_attr, mask: *mut c_int) -> c_int {
    guard("rdma_init_qp_attr", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        if attr.is_null() || mask.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: the caller's attributes: the state asked for is in them.
        let asked = unsafe { (*attr).qp_state };
        let state = match asked {
            1 => rdma_core_rs::QpState::Init,
            2 => rdma_core_rs::QpState::Rtr,
            3 => rdma_core_rs::QpState::Rts,
            _ => return fail(libc::EINVAL),
        };
        match i.cm.init_qp_attr(state) {
            Ok(q) => {
                let (a, m) = crate::qp::c_attr_of(&q);
                // SAFETY: the caller's out-parameters (checked non-NULL).
                unsafe {
                    attr.write(a);
                    mask.write(m);
                }
                0
            }
            Err(e) => fail_cm("rdma_init_qp_attr", &e),
        }
    })
}

/// `rdma_establish`: the RTU for a connection of the application's own QP,
/// after CONNECT_RESPONSE (EINVAL on an ID with a QP, as librdmacm).
#[export_name = "softroce_rdma_establish_impl"]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_establish", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        if !get!(i, qp).is_null() {
            return fail(libc::EINVAL);
        }
        match i.cm.establish() {
            Ok(()) => 0,
            Err(e) => fail_cm("rdma_establish", &e),
        }
    })
}

/// `struct ibv_ece`.
#[repr(C)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `rdma_set_local_ece`: for an ID without a QP (EINVAL otherwise, as
/// librdmacm); the vendor ID goes in the REQ or REP.
#[export_name = "softroce_rdma_set_local_ece_impl"]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard("rdma_set_local_ece", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        // SAFETY: the caller's ECE, or NULL.
        let Some(e) = (unsafe { ece.as_ref() }) else { return fail(libc::EINVAL) };
        if !get!(i, qp).is_null() {
            return fail(libc::EINVAL);
        }
        i.cm.set_local_ece(e.vendor_id, e.options);
        0
    })
}

/// `rdma_get_remote_ece`: the peer's ECE from its REQ or REP (its vendor
/// ID; options are not carried): for an ID without a QP, as librdmacm.
#[export_name = "softroce_rdma_get_remote_ece_impl"]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard("rdma_get_remote_ece", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        if ece.is_null() || !get!(i, qp).is_null() {
            return fail(libc::EINVAL);
        }
        let (vendor_id, options) = i.cm.remote_ece();
        // SAFETY: the caller's out-parameter (checked non-NULL).
        unsafe { ece.write(ibv_ece { vendor_id, options, comp_mask: 0 }) };
        0
    })
}

#[export_name = "softroce_rdma_reject_ece_impl"]
pub unsafe extern "C" fn rdma_reject_ece(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    // No ECE here: a plain reject.
    // SAFETY: forwarded.
    unsafe { rdma_reject(id, data, len) }
}

/// As librdmacm: the ID's QP (and the CQs made for it) go, then the ID.
#[export_name = "softroce_rdma_destroy_ep_impl"]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    // SAFETY: forwarded; both check the registry.
    unsafe {
        rdma_destroy_qp(id);
        rdma_destroy_id(id);
    }
}

pub use addr::{rdma_freeaddrinfo, rdma_getaddrinfo};
