//! Queue pairs, shared receive queues and address handles, and the posting
//! fast paths (`ops.post_send`, `ops.post_recv`, `ops.post_srq_recv`).

use crate::abi::*;
use crate::context::with_objects;
use crate::cq::{Cq, CQS};
use crate::ffi::{errno_of, guard, live, set_errno, Registry};
use crate::pd::{pd_of, Pd};
use libc::{c_int, c_void};
use rdma_core_rs::{
    Access, AddressHandle, AhAttr, Gid, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpType, QueuePair, RecvWr, SendOp,
    SendWr, Sge, SharedReceiveQueue,
};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

pub static QPS: Registry = Registry::new();
pub static SRQS: Registry = Registry::new();
pub static AHS: Registry = Registry::new();

/// The send queue as the application sees it. In libibverbs a send
/// request keeps its slot until the completion that retires it is polled
/// (a signaled request retires itself and the unsignaled ones before it),
/// which is what lets applications size a CQ by the send queue depth. The
/// engine frees a slot when the completion is made; this keeps the
/// libibverbs rule on top, so a poster that retries on ENOMEM can never
/// overrun a CQ that nobody has polled yet.
pub struct SendSlots {
    /// Per request posted and not retired: whether it is signaled.
    posted: VecDeque<bool>,
    max: usize,
}

impl SendSlots {
    /// Retires the requests a polled send completion accounts for.
    pub fn retire(&mut self, success: bool) {
        if !success {
            // A flushed or failed request completes on its own, signaled or not.
            self.posted.pop_front();
            return;
        }
        while let Some(signaled) = self.posted.pop_front() {
            if signaled {
                break;
            }
        }
    }
}

#[repr(C)]
pub struct Qp {
    pub c: ibv_qp,
    pub sq: Mutex<SendSlots>,
    verbs: QueuePair,
    pd: &'static Pd,
    send_cq: &'static Cq,
    recv_cq: &'static Cq,
    srq: Option<&'static Srq>,
    cap: ibv_qp_cap,
    sq_sig_all: c_int,
}

#[repr(C)]
pub struct Srq {
    pub c: ibv_srq,
    verbs: SharedReceiveQueue,
    pd: &'static Pd,
    attr: Mutex<ibv_srq_attr>,
    users: std::sync::atomic::AtomicUsize,
}

#[repr(C)]
pub struct Ah {
    pub c: ibv_ah,
    verbs: AddressHandle,
    pd: &'static Pd,
}

// SAFETY: the raw pointers in the C structs are the application's; this
// library reaches the objects they name only through the registries.
unsafe impl Send for Qp {}
unsafe impl Sync for Qp {}
unsafe impl Send for Srq {}
unsafe impl Sync for Srq {}
unsafe impl Send for Ah {}
unsafe impl Sync for Ah {}

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

/// The RoCE v2 address of an `ibv_ah_attr`: RoCE needs the GRH.
fn ah_of(a: &ibv_ah_attr) -> Result<AhAttr, c_int> {
    if a.is_global == 0 {
        tracing::warn!("address without a GRH (is_global = 0): RoCE needs the destination GID");
        return Err(libc::EINVAL);
    }
    // SAFETY: every bit pattern is a valid [u8; 16].
    let dgid = Gid(unsafe { a.grh.dgid.raw });
    Ok(AhAttr {
        dgid,
        sgid_index: a.grh.sgid_index.into(),
        hop_limit: if a.grh.hop_limit == 0 { 64 } else { a.grh.hop_limit },
        traffic_class: a.grh.traffic_class,
    })
}

#[export_name = "softroce_ibv_create_qp"]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard("ibv_create_qp", std::ptr::null_mut(), || {
        // SAFETY: pd_of checks the registry.
        let Some(p) = (unsafe { pd_of(pd) }) else { return std::ptr::null_mut() };
        if init.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes.
        let init = unsafe { &mut *init };
        let qp_type = match init.qp_type {
            IBV_QPT_RC => QpType::Rc,
            IBV_QPT_UC => QpType::Uc,
            IBV_QPT_UD => QpType::Ud,
            t => {
                tracing::warn!(qp_type = t, "QP type not supported (RC, UC and UD are)");
                set_errno(libc::EOPNOTSUPP);
                return std::ptr::null_mut();
            }
        };
        // SAFETY: `live` checks the registries.
        let (Some(scq), Some(rcq)) = (unsafe { live(&CQS, init.send_cq.cast::<Cq>(), "send CQ") }, unsafe {
            live(&CQS, init.recv_cq.cast::<Cq>(), "recv CQ")
        }) else {
            return std::ptr::null_mut();
        };
        let srq = if init.srq.is_null() {
            None
        } else {
            // SAFETY: `live` checks the registry.
            match unsafe { live(&SRQS, init.srq.cast::<Srq>(), "ibv_srq") } {
                Some(s) => Some(s),
                None => return std::ptr::null_mut(),
            }
        };
        // SAFETY: registered objects are leaked boxes: 'static until destroyed,
        // and destroying them while this QP uses them is refused (EBUSY).
        let (scq, rcq, srq): (&'static Cq, &'static Cq, Option<&'static Srq>) =
            unsafe { (&*(scq as *const Cq), &*(rcq as *const Cq), srq.map(|s| &*(s as *const Srq))) };
        let c = init.cap;
        let cap = QpCap {
            max_send_wr: c.max_send_wr.max(1),
            max_recv_wr: c.max_recv_wr.max(1),
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: c.max_recv_sge.max(1),
            max_inline_data: c.max_inline_data.max(QpCap::default().max_inline_data),
        };
        let attr = QpInitAttr {
            qp_type,
            send_cq: &scq.verbs,
            recv_cq: &rcq.verbs,
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
        for users in [&p.users, &scq.users, &rcq.users] {
            users.fetch_add(1, Ordering::AcqRel);
        }
        if let Some(s) = srq {
            s.users.fetch_add(1, Ordering::AcqRel);
        }
        let qp = Box::into_raw(Box::new(Qp {
            c: cq,
            sq: Mutex::new(SendSlots { posted: VecDeque::new(), max: out_cap.max_send_wr as usize }),
            verbs,
            pd: p,
            send_cq: scq,
            recv_cq: rcq,
            srq,
            cap: out_cap,
            sq_sig_all: init.sq_sig_all,
        }));
        with_objects(&p.engine, |o| {
            o.qps.insert(qpn, qp as usize);
        });
        // SAFETY: just made; registered below and freed only after removal.
        p.engine.send_queues.lock().unwrap_or_else(|e| e.into_inner()).insert(qpn, unsafe { &*qp });
        QPS.insert(qp);
        tracing::debug!(qpn, ?qp_type, "QP created");
        qp.cast()
    })
}

#[export_name = "softroce_ibv_destroy_qp"]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard("ibv_destroy_qp", libc::EIO, || {
        let p = qp.cast::<Qp>();
        // SAFETY: `live` checks the registry.
        if unsafe { live(&QPS, p, "ibv_qp") }.is_none() || !QPS.remove(p) {
            return libc::EINVAL;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let q = unsafe { Box::from_raw(p) };
        with_objects(&q.pd.engine, |o| {
            o.qps.remove(&q.c.qp_num);
        });
        q.pd.engine.send_queues.lock().unwrap_or_else(|e| e.into_inner()).remove(&q.c.qp_num);
        for users in [&q.pd.users, &q.send_cq.users, &q.recv_cq.users] {
            users.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(s) = q.srq {
            s.users.fetch_sub(1, Ordering::AcqRel);
        }
        0
    })
}

/// The engine's attributes for an `ibv_modify_qp` call.
fn attr_of(a: &ibv_qp_attr, mask: c_int) -> Result<QpAttr, c_int> {
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
        q.qp_access_flags = Some(Access(a.qp_access_flags & 0xf));
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
        q.av = Some(ah_of(&a.ah_attr)?.to_av());
        if a.ah_attr.grh.sgid_index != 0 {
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
        let qa = match attr_of(a, mask) {
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
        let (state, p) = match q.verbs.query() {
            Ok(x) => x,
            Err(e) => return errno_of(&e),
        };
        // SAFETY: plain data, zero is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = c_state(state);
        a.cur_qp_state = a.qp_state;
        a.path_mtu = p.mtu as c_int;
        a.qkey = p.qkey;
        a.dest_qp_num = p.dest_qp;
        a.qp_access_flags = p.access.0;
        a.cap = q.cap;
        if let Some(av) = p.av {
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = 1;
            a.ah_attr.grh.dgid = ibv_gid { raw: Gid::from_ip(av.dest).0 };
            a.ah_attr.grh.hop_limit = av.hop_limit;
            a.ah_attr.grh.traffic_class = av.traffic_class;
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

/// The scatter/gather list of a work request.
///
/// # Safety
/// `sg` must point to `n` entries when `n > 0` (checked for NULL).
unsafe fn sges(sg: *const ibv_sge, n: c_int) -> Result<Vec<Sge>, c_int> {
    if n < 0 || (n > 0 && sg.is_null()) {
        return Err(libc::EINVAL);
    }
    // SAFETY: as the function's contract.
    let s = unsafe {
        std::slice::from_raw_parts(if n == 0 { std::ptr::NonNull::dangling().as_ptr() } else { sg }, n as usize)
    };
    Ok(s.iter().map(|e| Sge { addr: e.addr, length: e.length, lkey: e.lkey }).collect())
}

/// One `ibv_send_wr` as the engine's request.
///
/// # Safety
/// `w` is the application's request, with valid `sg_list` for `num_sge`.
unsafe fn send_wr_of(w: &ibv_send_wr, ud: bool) -> Result<SendWr, c_int> {
    use crate::abi::wr_opcode as o;
    // SAFETY: the union member each opcode uses, as libibverbs defines it.
    let (rdma, atomic, udw) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let op = match w.opcode {
        o::SEND => SendOp::Send,
        o::SEND_WITH_IMM => SendOp::SendWithImm { imm: w.imm_data },
        o::SEND_WITH_INV => SendOp::SendWithInv { invalidate_rkey: w.imm_data },
        o::RDMA_WRITE => SendOp::RdmaWrite { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        o::RDMA_WRITE_WITH_IMM => {
            SendOp::RdmaWriteWithImm { remote_addr: rdma.remote_addr, rkey: rdma.rkey, imm: w.imm_data }
        }
        o::RDMA_READ => SendOp::RdmaRead { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        o::ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        o::ATOMIC_FETCH_AND_ADD => {
            SendOp::FetchAdd { remote_addr: atomic.remote_addr, rkey: atomic.rkey, add: atomic.compare_add }
        }
        other => {
            tracing::debug!(opcode = other, "work request opcode not supported");
            return Err(libc::EINVAL);
        }
    };
    // SAFETY: forwarded contract.
    let sg_list = unsafe { sges(w.sg_list, w.num_sge) }?;
    let mut wr = SendWr::new(w.wr_id, op, sg_list);
    wr.signaled = w.send_flags & IBV_SEND_SIGNALED != 0;
    wr.solicited = w.send_flags & IBV_SEND_SOLICITED != 0;
    if w.send_flags & IBV_SEND_INLINE != 0 && !op.writes_local() {
        // Inline: the bytes are taken now; the lkeys do not matter.
        let mut data = Vec::with_capacity(wr.length() as usize);
        for s in &wr.sg_list {
            if s.length > 0 {
                // SAFETY: the application's buffer, readable for `length` bytes by the verbs contract.
                data.extend_from_slice(unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) });
            }
        }
        wr.inline_data = Some(data);
        wr.sg_list.clear();
    }
    if ud {
        // SAFETY: `live` checks the registry.
        let Some(ah) = (unsafe { live(&AHS, udw.ah.cast::<Ah>(), "ibv_ah") }) else { return Err(libc::EINVAL) };
        wr.ud = Some(ah.verbs.ud_dest(udw.remote_qpn, udw.remote_qkey));
    }
    Ok(wr)
}

/// Walks a C list of work requests, converting each; stops at the first
/// that cannot be converted. Returns the requests and, if one failed, its
/// pointer and errno.
unsafe fn collect<C, W>(
    mut p: *mut C,
    next: impl Fn(&C) -> *mut C,
    conv: impl Fn(&C) -> Result<W, c_int>,
) -> (Vec<W>, Vec<*mut C>, Option<(*mut C, c_int)>) {
    let mut out = Vec::new();
    let mut ptrs = Vec::new();
    while !p.is_null() {
        // SAFETY: the application's list; each element is valid until `next` is NULL.
        let w = unsafe { &*p };
        match conv(w) {
            Ok(x) => {
                out.push(x);
                ptrs.push(p);
            }
            Err(e) => return (out, ptrs, Some((p, e))),
        }
        p = next(w);
    }
    (out, ptrs, None)
}

/// Posts what converted, then reports the first failure: the engine's
/// refusal of one request, or the request that did not convert.
fn finish<C>(
    posted: Result<(), rdma_core_rs::Error>,
    ptrs: &[*mut C],
    bad: Option<(*mut C, c_int)>,
    bad_out: *mut *mut C,
) -> c_int {
    let failure = match posted {
        Err(rdma_core_rs::Error::Post { index, ref source, .. }) => {
            tracing::debug!(error = %source, "post refused");
            Some((ptrs.get(index).copied().unwrap_or(std::ptr::null_mut()), errno_of(posted.as_ref().unwrap_err())))
        }
        Err(ref e) => Some((ptrs.first().copied().unwrap_or(std::ptr::null_mut()), errno_of(e))),
        Ok(()) => bad,
    };
    match failure {
        Some((p, e)) => {
            if !bad_out.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad_out = p };
            }
            e
        }
        None => 0,
    }
}

/// `ops.post_send`, what the inline `ibv_post_send` calls.
pub unsafe extern "C" fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> c_int {
    guard("ibv_post_send", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(q) = (unsafe { live(&QPS, qp.cast::<Qp>(), "ibv_qp") }) else {
            if !bad.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad = wr };
            }
            return libc::EINVAL;
        };
        let ud = q.c.qp_type == IBV_QPT_UD;
        // SAFETY: the application's list, per the verbs contract.
        let (mut wrs, ptrs, mut badwr) = unsafe { collect(wr, |w| w.next, |w| send_wr_of(w, ud)) };
        // Held across the post: slots are taken before the engine can
        // complete (and another thread poll) the requests.
        let mut sq = q.sq.lock().unwrap_or_else(|e| e.into_inner());
        let room = sq.max.saturating_sub(sq.posted.len());
        if wrs.len() > room {
            tracing::debug!(qpn = q.c.qp_num, depth = sq.max, "send queue full");
            wrs.truncate(room);
            badwr = Some((ptrs[room], libc::ENOMEM));
        }
        let all = q.sq_sig_all != 0;
        sq.posted.extend(wrs.iter().map(|w| all || w.signaled));
        let posted = if wrs.is_empty() { Ok(()) } else { q.verbs.post_send(&wrs) };
        if let Err(rdma_core_rs::Error::Post { index, .. }) = &posted {
            let keep = sq.posted.len() - (wrs.len() - index);
            sq.posted.truncate(keep);
        } else if posted.is_err() {
            let keep = sq.posted.len() - wrs.len();
            sq.posted.truncate(keep);
        }
        drop(sq);
        finish(posted, &ptrs, badwr, bad)
    })
}

fn recv_wr_of(w: &ibv_recv_wr) -> Result<RecvWr, c_int> {
    // SAFETY: the application's list of `num_sge` entries.
    Ok(RecvWr { wr_id: w.wr_id, sg_list: unsafe { sges(w.sg_list, w.num_sge) }? })
}

/// `ops.post_recv`, what the inline `ibv_post_recv` calls.
pub unsafe extern "C" fn post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int {
    guard("ibv_post_recv", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(q) = (unsafe { live(&QPS, qp.cast::<Qp>(), "ibv_qp") }) else {
            if !bad.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad = wr };
            }
            return libc::EINVAL;
        };
        // SAFETY: the application's list, per the verbs contract.
        let (wrs, ptrs, badwr) = unsafe { collect(wr, |w| w.next, recv_wr_of) };
        let posted = if wrs.is_empty() { Ok(()) } else { q.verbs.post_recv(&wrs) };
        finish(posted, &ptrs, badwr, bad)
    })
}

/// `ops.post_srq_recv`, what the inline `ibv_post_srq_recv` calls.
pub unsafe extern "C" fn post_srq_recv(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int {
    guard("ibv_post_srq_recv", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(s) = (unsafe { live(&SRQS, srq.cast::<Srq>(), "ibv_srq") }) else {
            if !bad.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad = wr };
            }
            return libc::EINVAL;
        };
        // SAFETY: the application's list, per the verbs contract.
        let (wrs, ptrs, badwr) = unsafe { collect(wr, |w| w.next, recv_wr_of) };
        let posted = if wrs.is_empty() { Ok(()) } else { s.verbs.post_recv(&wrs) };
        finish(posted, &ptrs, badwr, bad)
    })
}

#[export_name = "softroce_ibv_create_srq"]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard("ibv_create_srq", std::ptr::null_mut(), || {
        // SAFETY: pd_of checks the registry.
        let Some(p) = (unsafe { pd_of(pd) }) else { return std::ptr::null_mut() };
        if init.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes.
        let init = unsafe { &mut *init };
        if init.attr.max_wr == 0 {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // ibv_create_srq(3): srq_limit is ignored at creation (arm it with ibv_modify_srq).
        init.attr.srq_limit = 0;
        let verbs = match p.verbs.create_srq(init.attr.max_wr, 0) {
            Ok(v) => v,
            Err(e) => {
                set_errno(errno_of(&e));
                return std::ptr::null_mut();
            }
        };
        init.attr.max_sge = init.attr.max_sge.max(1);
        let id = verbs.id();
        let c = ibv_srq {
            context: p.c.context,
            srq_context: init.srq_context,
            pd,
            handle: id as u32,
            mutex: mutex_init(),
            cond: cond_init(),
            events_completed: 0,
        };
        p.users.fetch_add(1, Ordering::AcqRel);
        let s =
            Box::into_raw(Box::new(Srq { c, verbs, pd: p, attr: Mutex::new(init.attr), users: Default::default() }));
        with_objects(&p.engine, |o| {
            o.srqs.insert(id, s as usize);
        });
        SRQS.insert(s);
        s.cast()
    })
}

#[export_name = "softroce_ibv_modify_srq"]
pub unsafe extern "C" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    guard("ibv_modify_srq", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(s) = (unsafe { live(&SRQS, srq.cast::<Srq>(), "ibv_srq") }) else { return libc::EINVAL };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { *attr };
        if mask & IBV_SRQ_MAX_WR != 0 {
            return libc::EOPNOTSUPP; // the engine's SRQs do not resize
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            if let Err(e) = s.verbs.arm_limit(a.srq_limit) {
                return errno_of(&e);
            }
            s.attr.lock().unwrap_or_else(|e| e.into_inner()).srq_limit = a.srq_limit;
        }
        0
    })
}

#[export_name = "softroce_ibv_query_srq"]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard("ibv_query_srq", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(s) = (unsafe { live(&SRQS, srq.cast::<Srq>(), "ibv_srq") }) else { return libc::EINVAL };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's out-parameter.
        unsafe { attr.write(*s.attr.lock().unwrap_or_else(|e| e.into_inner())) };
        0
    })
}

#[export_name = "softroce_ibv_destroy_srq"]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard("ibv_destroy_srq", libc::EIO, || {
        let p = srq.cast::<Srq>();
        // SAFETY: `live` checks the registry.
        let Some(s) = (unsafe { live(&SRQS, p, "ibv_srq") }) else { return libc::EINVAL };
        if s.users.load(Ordering::Acquire) > 0 {
            return libc::EBUSY;
        }
        if !SRQS.remove(p) {
            return libc::EINVAL;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let s = unsafe { Box::from_raw(p) };
        with_objects(&s.pd.engine, |o| {
            o.srqs.remove(&s.verbs.id());
        });
        s.pd.users.fetch_sub(1, Ordering::AcqRel);
        0
    })
}

fn make_ah(pd: *mut ibv_pd, attr: &ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: pd_of checks the registry.
    let Some(p) = (unsafe { pd_of(pd) }) else { return std::ptr::null_mut() };
    let a = match ah_of(attr) {
        Ok(a) => a,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    let verbs = match p.verbs.create_ah(&a) {
        Ok(v) => v,
        Err(e) => {
            set_errno(errno_of(&e));
            return std::ptr::null_mut();
        }
    };
    p.users.fetch_add(1, Ordering::AcqRel);
    let ah = Box::into_raw(Box::new(Ah { c: ibv_ah { context: p.c.context, pd, handle: 0 }, verbs, pd: p }));
    AHS.insert(ah);
    ah.cast()
}

#[export_name = "softroce_ibv_create_ah"]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard("ibv_create_ah", std::ptr::null_mut(), || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes.
        make_ah(pd, unsafe { &*attr })
    })
}

#[export_name = "softroce_ibv_destroy_ah"]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard("ibv_destroy_ah", libc::EIO, || {
        let p = ah.cast::<Ah>();
        // SAFETY: `live` checks the registry.
        if unsafe { live(&AHS, p, "ibv_ah") }.is_none() || !AHS.remove(p) {
            return libc::EINVAL;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let a = unsafe { Box::from_raw(p) };
        a.pd.users.fetch_sub(1, Ordering::AcqRel);
        0
    })
}

/// The address of the sender of a UD receive: its GID is the source GID
/// of the GRH the engine wrote at the start of the receive buffer.
#[export_name = "softroce_ibv_init_ah_from_wc"]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    guard("ibv_init_ah_from_wc", -1, || {
        // SAFETY: ctx_of checks the registry.
        if unsafe { crate::context::ctx_of(context) }.is_none() {
            return -1;
        }
        // SAFETY: NULL-checked; the caller's structures.
        if wc.is_null() || grh.is_null() || ah_attr.is_null() || unsafe { (*wc).wc_flags } & 1 == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: as above.
        let (g, a) = unsafe { (&*grh, &mut *ah_attr) };
        // SAFETY: plain data, zero is valid.
        *a = unsafe { std::mem::zeroed() };
        a.is_global = 1;
        a.port_num = port;
        a.grh.dgid = g.sgid;
        a.grh.hop_limit = 0xff;
        a.grh.traffic_class = ((u32::from_be(g.version_tclass_flow) >> 20) & 0xff) as u8;
        0
    })
}

#[export_name = "softroce_ibv_create_ah_from_wc"]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    guard("ibv_create_ah_from_wc", std::ptr::null_mut(), || {
        // SAFETY: pd_of checks the registry.
        let Some(p) = (unsafe { pd_of(pd) }) else { return std::ptr::null_mut() };
        // SAFETY: plain data, zero is valid.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: forwarded; it checks its pointers.
        if unsafe { ibv_init_ah_from_wc(p.c.context, port, wc, grh, &mut a) } != 0 {
            return std::ptr::null_mut();
        }
        make_ah(pd, &a)
    })
}

#[export_name = "softroce_ibv_qp_to_qp_ex"]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut c_void {
    // Only QPs made by ibv_create_qp_ex with send_ops_flags have one, and
    // that call is not supported: the new posting API is not available.
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}
