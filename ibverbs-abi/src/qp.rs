//! Queue pairs: create, modify, query, destroy. Posting is in `post`.

use crate::abi::*;
use crate::context::with_objects;
use crate::cq::{Cq, CQS};
use crate::device::{MAX_INLINE_DATA, MAX_QP_WR, MAX_SGE};
use crate::ffi::{errno_of, guard, live, set_errno, Held, Registry};
use crate::pd::{pd_use, Pd};
use crate::srq::{Srq, SRQS};
use crate::xrc::xrcd_use;
use libc::c_int;
use rdma_core_rs::{Access, AddressVector, Gid, LinkKind, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpType, QueuePair};
use std::sync::atomic::Ordering;

pub static QPS: Registry = Registry::new();

/// The fewest send queue entries a QP gets, whatever is asked.
const MIN_SEND_WR: u32 = 16;

/// A QP. `c` then `ex` lay out as `struct ibv_qp_ex` (checked below), so
/// the application's `ibv_qp *` is also its `ibv_qp_ex *`
/// (`ibv_qp_to_qp_ex`), which has posting functions when the QP was made
/// by `ibv_create_qp_ex` with send_ops_flags (`qp_ex.rs`).
#[repr(C)]
pub struct Qp {
    pub c: ibv_qp,
    pub(crate) ex: ibv_qp_ex_ops,
    /// The requests `ibv_wr_start` .. `ibv_wr_complete` collect.
    pub(crate) batch: std::sync::Mutex<crate::wr_batch::Batch>,
    /// The `ibv_wr_*` operations it was made for (0: it has no `ibv_qp_ex`).
    pub(crate) send_ops: u64,
    pub(crate) verbs: QueuePair,
    /// None for an XRC_RECV QP (no PD, no CQs: it works through the XRC
    /// SRQs of its domain); an XRC_SEND QP has no receive CQ.
    pub(crate) pd: Option<&'static Pd>,
    send_cq: Option<&'static Cq>,
    recv_cq: Option<&'static Cq>,
    srq: Option<&'static Srq>,
    /// The XRC domain of an XRC_RECV QP (it holds a use of it).
    xrcd: Option<&'static crate::xrc::Xrcd>,
    /// A handle from `ibv_open_qp` to a QP created elsewhere.
    opened: bool,
    pub(crate) engine: std::sync::Arc<crate::context::Engine>,
    cap: ibv_qp_cap,
    pub(crate) sq_sig_all: c_int,
}

const _: () = assert!(std::mem::offset_of!(Qp, ex) == std::mem::offset_of!(ibv_qp_ex, ex));

impl Qp {
    /// The most bytes one inline send may carry, as created.
    pub(crate) fn max_inline_data(&self) -> u32 {
        self.cap.max_inline_data
    }

    /// The most SGEs one send request may carry, as created.
    pub(crate) fn max_send_sge(&self) -> u32 {
        self.cap.max_send_sge
    }
}

// SAFETY: the raw pointers in the C structs are the application's; this
// library reaches the objects they name only through the registries.
unsafe impl Send for Qp {}
unsafe impl Sync for Qp {}

fn state_of(s: c_int) -> Option<QpState> {
    Some(match s {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

fn c_state(s: QpState) -> c_int {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

fn mtu_of(m: c_int) -> Option<Mtu> {
    Some(match m {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => return None,
    })
}

/// The first of a QP's asked capabilities that exceeds the device's limit
/// (EINVAL for `ibv_create_qp`, as rxe's `rxe_qp_chk_cap`): its name, what
/// was asked and the limit.
fn check_cap(c: &ibv_qp_cap) -> Result<(), (&'static str, u32, u32)> {
    for (name, asked, max) in [
        ("max_send_wr", c.max_send_wr, MAX_QP_WR),
        ("max_recv_wr", c.max_recv_wr, MAX_QP_WR),
        ("max_send_sge", c.max_send_sge, MAX_SGE),
        ("max_recv_sge", c.max_recv_sge, MAX_SGE),
        ("max_inline_data", c.max_inline_data, MAX_INLINE_DATA),
    ] {
        if asked > max {
            return Err((name, asked, max));
        }
    }
    Ok(())
}

#[export_name = "softroce_ibv_create_qp"]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard("ibv_create_qp", std::ptr::null_mut(), || {
        if init.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes.
        unsafe { create(pd, &mut *init, (0, ibv_qp_ex_ops::default()), None) }
    })
}

/// `ibv_create_qp`, and `ibv_create_qp_ex` once its extended attributes are
/// checked: a QP on `pd` as `init` asks (its `cap` rewritten with what was
/// made), with the `ibv_wr_*` posting functions `ex` for the operations
/// `send_ops` (0 and the default table: none; `qp_ex::ops` makes the
/// table, so that this module need not know the posting functions); the
/// PD must be of `context` when one is given (`ibv_create_qp_ex`).
///
/// # Safety
/// `init`'s pointers are the application's, checked against the registries.
pub(crate) unsafe fn create(
    pd: *mut ibv_pd,
    init: &mut ibv_qp_init_attr,
    (send_ops, ex): (u64, ibv_qp_ex_ops),
    context: Option<*mut ibv_context>,
) -> *mut ibv_qp {
    // The uses of the PD, CQs and SRQ are taken with their lookups, so
    // none of them can be destroyed from here on (EBUSY); given back if
    // this call fails.
    let mut held = Held::new();
    // SAFETY: pd_use checks the registry.
    let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return std::ptr::null_mut() };
    if context.is_some_and(|c| !p.of_device(c)) {
        tracing::warn!("ibv_create_qp_ex: the PD is of another context");
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let qp_type = match init.qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        IBV_QPT_UD => QpType::Ud,
        // ibv_create_qp_ex with only a PD comes here through ibv_create_qp.
        IBV_QPT_XRC_SEND => QpType::XrcSend,
        IBV_QPT_XRC_RECV => {
            tracing::warn!("an XRC_RECV QP needs an XRC domain (ibv_create_qp_ex, IBV_QP_INIT_ATTR_XRCD)");
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        t => {
            tracing::warn!(
                qp_type = t,
                "QP type not supported (RC, UC, UD; XRC_SEND and XRC_RECV by ibv_create_qp_ex)"
            );
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
    };
    // SAFETY: acquire checks the registries.
    let Some(scq) = (unsafe { CQS.acquire(init.send_cq.cast::<Cq>(), "send CQ") }) else {
        return std::ptr::null_mut();
    };
    held.push(&scq.users);
    let xrc_send = qp_type == QpType::XrcSend;
    // An XRC_SEND QP has no receive side: no receive CQ (ignored if given) and no SRQ.
    if xrc_send {
        if !init.srq.is_null() {
            tracing::warn!("ibv_create_qp_ex: an XRC_SEND QP takes no SRQ");
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        init.recv_cq = std::ptr::null_mut();
    }
    let rcq = if xrc_send {
        None
    } else {
        // SAFETY: as above.
        let Some(rcq) = (unsafe { CQS.acquire(init.recv_cq.cast::<Cq>(), "recv CQ") }) else {
            return std::ptr::null_mut();
        };
        held.push(&rcq.users);
        Some(rcq)
    };
    let srq = if init.srq.is_null() {
        None
    } else {
        // SAFETY: as above.
        let Some(s) = (unsafe { SRQS.acquire(init.srq.cast::<Srq>(), "ibv_srq") }) else {
            return std::ptr::null_mut();
        };
        held.push(&s.users);
        Some(s)
    };
    // SAFETY: registered objects are leaked boxes: 'static until destroyed,
    // and destroying them while this QP uses them is refused (EBUSY).
    let (scq, rcq, srq): (&'static Cq, Option<&'static Cq>, Option<&'static Srq>) =
        unsafe { (&*(scq as *const Cq), rcq.map(|c| &*(c as *const Cq)), srq.map(|s| &*(s as *const Srq))) };
    if srq.is_some_and(|s| s.xrc.is_some()) {
        tracing::warn!("ibv_create_qp: an XRC SRQ serves XRC_RECV QPs only");
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let c = init.cap;
    if let Err(what) = check_cap(&c) {
        tracing::warn!(?what, "ibv_create_qp: capability above the device's limit");
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let cap = QpCap {
        // At least asked for, rounded up as providers do (mlx5 to a power
        // of two, with a floor): perftest's latency tests ask for one
        // and, with -e, may post the next request before the last one
        // is acknowledged. The QP reports what it got, as libibverbs does.
        max_send_wr: c.max_send_wr.max(MIN_SEND_WR).next_power_of_two(),
        max_recv_wr: c.max_recv_wr.max(1),
        max_send_sge: c.max_send_sge.max(1),
        max_recv_sge: c.max_recv_sge.max(1),
        max_inline_data: c.max_inline_data.max(QpCap::default().max_inline_data),
    };
    let attr = QpInitAttr {
        qp_type,
        send_cq: &scq.verbs,
        recv_cq: &rcq.unwrap_or(scq).verbs,
        srq: srq.map(|s| &s.verbs),
        cap,
        sq_sig_all: init.sq_sig_all != 0,
    };
    let verbs = match p.verbs.create_qp(&attr) {
        Ok(q) => q,
        Err(e) => {
            tracing::warn!(error = %e, "ibv_create_qp refused");
            set_errno(errno_of(&e));
            return std::ptr::null_mut();
        }
    };
    let out_cap = ibv_qp_cap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
    };
    init.cap = out_cap;
    let qpn = verbs.qp_num();
    let cq = ibv_qp {
        context: p.c.context,
        qp_context: init.qp_context,
        pd,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        srq: init.srq,
        handle: qpn,
        qp_num: qpn,
        state: 0.into(),
        qp_type: init.qp_type,
        mutex: mutex_init(),
        cond: cond_init(),
        events_completed: 0,
    };
    held.keep();
    register(Qp {
        c: cq,
        ex,
        batch: Default::default(),
        send_ops,
        verbs,
        pd: Some(p),
        send_cq: Some(scq),
        recv_cq: rcq,
        srq,
        xrcd: None,
        opened: false,
        engine: p.engine.clone(),
        cap: out_cap,
        sq_sig_all: init.sq_sig_all,
    })
}

/// Registers a QP made by a create or open call.
fn register(q: Qp) -> *mut ibv_qp {
    let (qpn, qp_type, send_ops, opened) = (q.c.qp_num, q.c.qp_type, q.send_ops, q.opened);
    let engine = q.engine.clone();
    let qp = Box::into_raw(Box::new(q));
    if !opened {
        with_objects(&engine, |o| {
            o.qps.insert(qpn, qp as usize);
        });
    }
    QPS.insert(qp);
    tracing::debug!(qpn, qp_type, send_ops, opened, "QP created");
    qp.cast()
}

/// `ibv_create_qp_ex` of an `IBV_QPT_XRC_RECV` QP in `xrcd` (which the
/// caller took a use of), or `ibv_open_qp` of the XRC_RECV QP `open` of
/// it: no PD, no CQs, no queues; requests land in the XRC SRQ they name.
pub(crate) fn create_xrc_recv(
    xrcd: &'static crate::xrc::Xrcd,
    context: *mut ibv_context,
    qp_context: *mut libc::c_void,
    open: Option<u32>,
) -> Result<*mut ibv_qp, c_int> {
    let verbs = match open {
        Some(qpn) => xrcd.verbs.open_qp(qpn),
        None => xrcd.verbs.create_recv_qp(),
    }
    .map_err(|e| {
        tracing::warn!(error = %e, "XRC_RECV QP refused");
        errno_of(&e)
    })?;
    let qpn = verbs.qp_num();
    let state = verbs.query().map(|(s, _)| c_state(s)).unwrap_or(0);
    let c = ibv_qp {
        context,
        qp_context,
        pd: std::ptr::null_mut(),
        send_cq: std::ptr::null_mut(),
        recv_cq: std::ptr::null_mut(),
        srq: std::ptr::null_mut(),
        handle: qpn,
        qp_num: qpn,
        state: state.into(),
        qp_type: IBV_QPT_XRC_RECV,
        mutex: mutex_init(),
        cond: cond_init(),
        events_completed: 0,
    };
    let cap = ibv_qp_cap { max_send_wr: 0, max_recv_wr: 0, max_send_sge: 0, max_recv_sge: 0, max_inline_data: 0 };
    Ok(register(Qp {
        c,
        ex: ibv_qp_ex_ops::default(),
        batch: Default::default(),
        send_ops: 0,
        verbs,
        pd: None,
        send_cq: None,
        recv_cq: None,
        srq: None,
        xrcd: Some(xrcd),
        opened: open.is_some(),
        engine: xrcd.engine.clone(),
        cap,
        sq_sig_all: 0,
    }))
}

#[export_name = "softroce_ibv_destroy_qp"]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard("ibv_destroy_qp", libc::EIO, || {
        let p = qp.cast::<Qp>();
        // SAFETY: `live` checks the registry.
        let Some(live_qp) = (unsafe { live(&QPS, p, "ibv_qp") }) else { return libc::EINVAL };
        // As uverbs: a QP still attached to multicast groups is not
        // destroyed (the application detaches first).
        if !live_qp.verbs.mcast_groups().is_empty() {
            tracing::debug!(qpn = live_qp.c.qp_num, "ibv_destroy_qp: still attached to multicast groups");
            return libc::EBUSY;
        }
        if !QPS.remove(p) {
            return libc::EINVAL;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let q = unsafe { Box::from_raw(p) };
        if !q.opened {
            with_objects(&q.engine, |o| {
                o.qps.remove(&q.c.qp_num);
            });
        }
        let uses: Vec<&'static crate::ffi::Users> = [
            q.pd.map(|p| &p.users),
            q.send_cq.map(|c| &c.users),
            q.recv_cq.map(|c| &c.users),
            q.srq.map(|s| &s.users),
            q.xrcd.map(|x| &x.users),
        ]
        .into_iter()
        .flatten()
        .collect();
        // The engine's QP (or this handle of it) goes first, then the uses.
        drop(q);
        for users in uses {
            users.put();
        }
        0
    })
}

/// The engine's attributes for an `ibv_modify_qp` call on a device
/// whose link is `link`.
fn attr_of(link: LinkKind, a: &ibv_qp_attr, mask: c_int) -> Result<QpAttr, c_int> {
    use crate::abi::qp_mask as m;
    let has = |bit: c_int| mask & bit != 0;
    let unsupported = m::ALT_PATH | m::PATH_MIG_STATE | m::RATE_LIMIT;
    if mask & unsupported != 0 {
        tracing::warn!(mask, "alternate paths, path migration and rate limits are not supported");
        return Err(libc::EOPNOTSUPP);
    }
    let mut q = QpAttr::default();
    if has(m::STATE) {
        q.qp_state = Some(state_of(a.qp_state).ok_or(libc::EINVAL)?);
    }
    if has(m::PKEY_INDEX) {
        q.pkey_index = Some(a.pkey_index);
    }
    if has(m::PORT) {
        if a.port_num != 1 {
            return Err(libc::EINVAL);
        }
        q.port_num = Some(a.port_num);
    }
    if has(m::ACCESS_FLAGS) {
        // REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC (and LOCAL_WRITE), and the
        // FLUSH placements a peer may ask for (FLUSH_GLOBAL, FLUSH_PERSISTENT).
        q.qp_access_flags = Some(Access(a.qp_access_flags & (0xf | 1 << 8 | 1 << 9)));
    }
    if has(m::QKEY) {
        q.qkey = Some(a.qkey);
    }
    if has(m::PATH_MTU) {
        q.path_mtu = Some(mtu_of(a.path_mtu).ok_or(libc::EINVAL)?);
    }
    if has(m::DEST_QPN) {
        q.dest_qp_num = Some(a.dest_qp_num);
    }
    if has(m::RQ_PSN) {
        q.rq_psn = Some(a.rq_psn);
    }
    if has(m::SQ_PSN) {
        q.sq_psn = Some(a.sq_psn);
    }
    if has(m::AV) {
        // Native IB: a LID route needs no GRH (qperf without -cm1,
        // perftest without -g); its GRH fields mean nothing then.
        if link == LinkKind::Ib && a.ah_attr.dlid == 0 {
            tracing::warn!("ibv_modify_qp: a native IB address vector needs a DLID");
            return Err(libc::EINVAL);
        }
        q.av = Some(crate::ah::av_of(link, &a.ah_attr)?);
        if a.ah_attr.is_global != 0 && a.ah_attr.grh.sgid_index != 0 {
            return Err(libc::EINVAL);
        }
    }
    if has(m::TIMEOUT) {
        q.timeout = Some(a.timeout);
    }
    if has(m::RETRY_CNT) {
        q.retry_cnt = Some(a.retry_cnt);
    }
    if has(m::RNR_RETRY) {
        q.rnr_retry = Some(a.rnr_retry);
    }
    if has(m::MIN_RNR_TIMER) {
        q.min_rnr_timer = Some(a.min_rnr_timer);
    }
    if has(m::MAX_QP_RD_ATOMIC) {
        q.max_rd_atomic = Some(a.max_rd_atomic);
    }
    if has(m::MAX_DEST_RD_ATOMIC) {
        q.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
    }
    // CUR_STATE, EN_SQD_ASYNC_NOTIFY and CAP are accepted and need nothing.
    Ok(q)
}

/// The C form of an address vector (`ah_attr`): a GRH with the GID
/// where the route is global (RoCE always), the LID and SL.
fn ah_attr_of(av: &AddressVector) -> ibv_ah_attr {
    // SAFETY: plain data, zero is valid.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.port_num = 1;
    a.dlid = av.dlid;
    a.sl = av.sl;
    if av.is_global() {
        a.is_global = 1;
        a.grh.dgid = ibv_gid { raw: Gid::from_ip(av.dest).0 };
        a.grh.hop_limit = av.hop_limit;
        a.grh.traffic_class = av.traffic_class;
    }
    a
}

/// The C attributes and mask of the engine's attributes (the inverse of
/// `attr_of`): what `rdma_init_qp_attr` hands the application.
pub(crate) fn c_attr_of(q: &QpAttr) -> (ibv_qp_attr, c_int) {
    use crate::abi::qp_mask as m;
    // SAFETY: plain data, zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    let mut mask = 0;
    let mut set = |bit: c_int, present: bool| {
        if present {
            mask |= bit;
        }
    };
    set(m::STATE, q.qp_state.is_some());
    set(m::PKEY_INDEX, q.pkey_index.is_some());
    set(m::PORT, q.port_num.is_some());
    set(m::ACCESS_FLAGS, q.qp_access_flags.is_some());
    set(m::QKEY, q.qkey.is_some());
    set(m::PATH_MTU, q.path_mtu.is_some());
    set(m::DEST_QPN, q.dest_qp_num.is_some());
    set(m::RQ_PSN, q.rq_psn.is_some());
    set(m::SQ_PSN, q.sq_psn.is_some());
    set(m::AV, q.av.is_some());
    set(m::TIMEOUT, q.timeout.is_some());
    set(m::RETRY_CNT, q.retry_cnt.is_some());
    set(m::RNR_RETRY, q.rnr_retry.is_some());
    set(m::MIN_RNR_TIMER, q.min_rnr_timer.is_some());
    set(m::MAX_QP_RD_ATOMIC, q.max_rd_atomic.is_some());
    set(m::MAX_DEST_RD_ATOMIC, q.max_dest_rd_atomic.is_some());
    a.qp_state = q.qp_state.map_or(0, c_state);
    a.pkey_index = q.pkey_index.unwrap_or(0);
    a.port_num = q.port_num.unwrap_or(0);
    a.qp_access_flags = q.qp_access_flags.map_or(0, |x| x.0);
    a.qkey = q.qkey.unwrap_or(0);
    a.path_mtu = q.path_mtu.map_or(0, |x| x as c_int);
    a.dest_qp_num = q.dest_qp_num.unwrap_or(0);
    a.rq_psn = q.rq_psn.unwrap_or(0);
    a.sq_psn = q.sq_psn.unwrap_or(0);
    if let Some(av) = &q.av {
        a.ah_attr = ah_attr_of(av);
    }
    a.timeout = q.timeout.unwrap_or(0);
    a.retry_cnt = q.retry_cnt.unwrap_or(0);
    a.rnr_retry = q.rnr_retry.unwrap_or(0);
    a.min_rnr_timer = q.min_rnr_timer.unwrap_or(0);
    a.max_rd_atomic = q.max_rd_atomic.unwrap_or(0);
    a.max_dest_rd_atomic = q.max_dest_rd_atomic.unwrap_or(0);
    (a, mask)
}

#[export_name = "softroce_ibv_modify_qp"]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    guard("ibv_modify_qp", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(q) = (unsafe { live(&QPS, qp.cast::<Qp>(), "ibv_qp") }) else { return libc::EINVAL };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &*attr };
        let qa = match attr_of(q.engine.verbs.link_kind(), a, mask) {
            Ok(x) => x,
            Err(e) => return e,
        };
        match q.verbs.modify(&qa) {
            Ok(()) => {
                if let Some(s) = qa.qp_state {
                    q.c.state.store(c_state(s), Ordering::Release);
                }
                0
            }
            Err(e) => {
                tracing::debug!(qpn = q.c.qp_num, error = %e, "ibv_modify_qp refused");
                errno_of(&e)
            }
        }
    })
}

#[export_name = "softroce_ibv_query_qp"]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    guard("ibv_query_qp", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(q) = (unsafe { live(&QPS, qp.cast::<Qp>(), "ibv_qp") }) else { return libc::EINVAL };
        if attr.is_null() || init.is_null() {
            return libc::EINVAL;
        }
        let ((state, p), (sq_psn, rq_psn)) = match q.verbs.query().and_then(|x| Ok((x, q.verbs.psns()?))) {
            Ok(x) => x,
            Err(e) => return errno_of(&e),
        };
        // SAFETY: plain data, zero is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = c_state(state);
        a.cur_qp_state = a.qp_state;
        a.path_mtu = p.mtu as c_int;
        a.qkey = p.qkey;
        a.sq_psn = sq_psn;
        a.rq_psn = rq_psn;
        a.dest_qp_num = p.dest_qp;
        a.qp_access_flags = p.access.0;
        a.cap = q.cap;
        if let Some(av) = p.av {
            a.ah_attr = ah_attr_of(&av);
        }
        a.pkey_index = 0;
        a.max_rd_atomic = p.max_rd_atomic;
        a.max_dest_rd_atomic = p.max_dest_rd_atomic;
        a.min_rnr_timer = p.min_rnr_timer;
        a.port_num = 1;
        a.timeout = p.timeout;
        a.retry_cnt = p.retry_cnt;
        a.rnr_retry = p.rnr_retry;
        // SAFETY: the caller's out-parameters.
        unsafe {
            attr.write(a);
            init.write(ibv_qp_init_attr {
                qp_context: q.c.qp_context,
                send_cq: q.c.send_cq,
                recv_cq: q.c.recv_cq,
                srq: q.c.srq,
                cap: q.cap,
                qp_type: q.c.qp_type,
                sq_sig_all: q.sq_sig_all,
            });
        }
        0
    })
}

#[export_name = "softroce_ibv_qp_to_qp_ex"]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard("ibv_qp_to_qp_ex", std::ptr::null_mut(), || {
        // SAFETY: `live` checks the registry.
        let Some(q) = (unsafe { live(&QPS, qp.cast::<Qp>(), "ibv_qp") }) else { return std::ptr::null_mut() };
        // As libibverbs: only a QP made by ibv_create_qp_ex with
        // send_ops_flags has the posting functions.
        if q.send_ops == 0 {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        qp.cast()
    })
}

/// `verbs_context.open_qp`: another handle to an XRC_RECV QP of a domain.
pub unsafe extern "C" fn open_qp(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp {
    guard("ibv_open_qp", std::ptr::null_mut(), || {
        use qp_open_attr_mask as m;
        // SAFETY: the caller's attributes.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let need = m::NUM | m::XRCD | m::TYPE;
        if a.comp_mask & need != need || a.comp_mask & !(need | m::CONTEXT) != 0 || a.qp_type != IBV_QPT_XRC_RECV {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: checked against the registry.
        let Some(x) = (unsafe { xrcd_use(a.xrcd) }) else { return std::ptr::null_mut() };
        let qp_context = if a.comp_mask & m::CONTEXT != 0 { a.qp_context } else { std::ptr::null_mut() };
        match crate::qp::create_xrc_recv(x, context, qp_context, Some(a.qp_num)) {
            Ok(q) => q,
            Err(e) => {
                x.users.put();
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    })
}
