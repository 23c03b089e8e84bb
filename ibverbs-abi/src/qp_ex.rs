//! The extended QP: `ibv_create_qp_ex` (verbs.h calls it through
//! `verbs_context.create_qp_ex` for any mask but a lone PD) and the
//! `ibv_wr_*` posting API of `struct ibv_qp_ex`.
//!
//! `ibv_wr_start` opens a batch; each `ibv_wr_<op>` starts a request with
//! the `wr_id` and `wr_flags` the application wrote into the `ibv_qp_ex`,
//! the setters (`ibv_wr_set_sge`, `_set_inline_data`, `_set_ud_addr`, ...)
//! complete the latest one, and `ibv_wr_complete` posts them all, or none:
//! a mistake in the batch (a setter without a request, too much inline data,
//! a bad AH, an operation the QP was not made for) is remembered and
//! returned by `ibv_wr_complete`, as rxe's provider does, and nothing of
//! the batch is posted. `ibv_wr_abort` drops the batch. The requests are
//! the engine's, as `ibv_post_send` makes them (`post.rs`), and are posted
//! the same way.
//!
//! The posting functions take the `ibv_qp_ex` the application got from
//! `ibv_qp_to_qp_ex`; `ibv_wr_start` and `ibv_wr_complete` check it in the
//! registry, the calls in between trust it (like the inline `ibv_post_send`,
//! which reads `qp->context->ops` before this library is reached).

use crate::abi::*;
use crate::ah::{Ah, AHS};
use crate::ffi::{guard, live, set_errno};
use crate::post::post_engine;
use crate::qp::{Qp, QPS};
use crate::wr_batch::Batch;
use libc::{c_int, c_void};
use rdma_core_rs::{SendOp, SendWr, Sge};

/// The operations each QP type may be made for (rxe's provider: RC all of
/// its verbs, FLUSH and ATOMIC_WRITE included, UC sends, writes and the
/// memory-window operations, UD sends).
fn allowed(qp_type: c_int) -> u64 {
    use send_ops as s;
    let uc = s::SEND | s::SEND_WITH_IMM | s::RDMA_WRITE | s::RDMA_WRITE_WITH_IMM | s::LOCAL_INV | s::BIND_MW;
    match qp_type {
        IBV_QPT_RC => {
            uc | s::SEND_WITH_INV
                | s::RDMA_READ
                | s::ATOMIC_CMP_AND_SWP
                | s::ATOMIC_FETCH_AND_ADD
                | s::FLUSH
                | s::ATOMIC_WRITE
        }
        IBV_QPT_UC => uc,
        // Annex A14: RC's operations, but not IBTA 1.5's FLUSH/ATOMIC WRITE.
        IBV_QPT_XRC_SEND => uc | s::SEND_WITH_INV | s::RDMA_READ | s::ATOMIC_CMP_AND_SWP | s::ATOMIC_FETCH_AND_ADD,
        IBV_QPT_UD => s::SEND | s::SEND_WITH_IMM,
        _ => 0,
    }
}

/// `verbs_context.create_qp_ex`, what the inline `ibv_create_qp_ex` calls.
pub unsafe extern "C" fn create_qp_ex(context: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    guard("ibv_create_qp_ex", std::ptr::null_mut(), || {
        use qp_init_attr_mask as m;
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        let refuse = |errno: c_int, why: &str| {
            tracing::warn!(errno, why, comp_mask = a.comp_mask, "ibv_create_qp_ex refused");
            set_errno(errno);
            std::ptr::null_mut()
        };
        // As rxe: a PD, create flags (none set) and send_ops_flags; and, as
        // mlx5, an XRC domain for XRC_RECV QPs. No TSO, RSS or work queue tables.
        if a.comp_mask & !(m::PD | m::XRCD | m::CREATE_FLAGS | m::SEND_OPS_FLAGS) != 0 {
            return refuse(libc::EOPNOTSUPP, "an attribute of the mask is not supported (TSO, RSS, WQ tables)");
        }
        if a.qp_type == IBV_QPT_XRC_RECV {
            // The receive side only, in a domain: no PD, CQ, SRQ or queues,
            // and nothing to post (ibv_create_qp_ex(3), mlx5).
            if a.comp_mask & m::XRCD == 0 {
                return refuse(libc::EINVAL, "an XRC_RECV QP needs an XRC domain (IBV_QP_INIT_ATTR_XRCD)");
            }
            if a.comp_mask & m::SEND_OPS_FLAGS != 0 && a.send_ops_flags != 0 {
                return refuse(libc::EINVAL, "an XRC_RECV QP has no send queue");
            }
            if a.comp_mask & m::CREATE_FLAGS != 0 && a.create_flags != 0 {
                return refuse(libc::EOPNOTSUPP, "create_flags are not supported");
            }
            // SAFETY: checked against the registry.
            let Some(x) = (unsafe { crate::xrc::xrcd_use(a.xrcd.cast()) }) else { return std::ptr::null_mut() };
            if !std::ptr::eq(x.c.context, context)
                && unsafe { crate::context::ctx_of(context) }
                    .is_none_or(|c| !std::sync::Arc::ptr_eq(&c.engine, &x.engine))
            {
                x.users.put();
                return refuse(libc::EINVAL, "the XRC domain is of another device");
            }
            return match crate::qp::create_xrc_recv(x, context, a.qp_context, None) {
                Ok(q) => {
                    a.cap = ibv_qp_cap {
                        max_send_wr: 0,
                        max_recv_wr: 0,
                        max_send_sge: 0,
                        max_recv_sge: 0,
                        max_inline_data: 0,
                    };
                    q
                }
                Err(e) => {
                    x.users.put();
                    refuse(e, "refused by the engine")
                }
            };
        }
        if a.comp_mask & m::XRCD != 0 && a.qp_type != IBV_QPT_XRC_SEND {
            return refuse(libc::EINVAL, "an XRC domain is for XRC_RECV QPs");
        }
        if a.comp_mask & m::PD == 0 {
            return refuse(libc::EINVAL, "no PD (IBV_QP_INIT_ATTR_PD)");
        }
        if a.comp_mask & m::CREATE_FLAGS != 0 && a.create_flags != 0 {
            return refuse(libc::EOPNOTSUPP, "create_flags are not supported");
        }
        let send_ops = if a.comp_mask & m::SEND_OPS_FLAGS != 0 {
            if a.send_ops_flags == 0 || a.send_ops_flags & !allowed(a.qp_type) != 0 {
                return refuse(libc::EOPNOTSUPP, "send_ops_flags this QP type does not support");
            }
            a.send_ops_flags
        } else {
            0
        };
        // `ibv_qp_init_attr_ex` begins with the fields of `ibv_qp_init_attr`,
        // as verbs.h's own cast assumes.
        // SAFETY: same layout for the leading fields (checked in tests/header.rs).
        let init = unsafe { &mut *attr.cast::<ibv_qp_init_attr>() };
        // SAFETY: create checks every object against its registry.
        unsafe { crate::qp::create(a.pd, init, (send_ops, ops(send_ops)), Some(context)) }
    })
}

/// The `ibv_qp_ex` function table of a QP made for `send_ops` (none: all
/// NULL, and `ibv_qp_to_qp_ex` refuses).
pub fn ops(send_ops: u64) -> ibv_qp_ex_ops {
    let on = send_ops != 0;
    ibv_qp_ex_ops {
        comp_mask: 0,
        wr_id: 0.into(),
        wr_flags: 0.into(),
        wr_atomic_cmp_swp: on.then_some(wr_atomic_cmp_swp),
        wr_atomic_fetch_add: on.then_some(wr_atomic_fetch_add),
        wr_bind_mw: on.then_some(wr_bind_mw),
        wr_local_inv: on.then_some(wr_local_inv),
        wr_rdma_read: on.then_some(wr_rdma_read),
        wr_rdma_write: on.then_some(wr_rdma_write),
        wr_rdma_write_imm: on.then_some(wr_rdma_write_imm),
        wr_send: on.then_some(wr_send),
        wr_send_imm: on.then_some(wr_send_imm),
        wr_send_inv: on.then_some(wr_send_inv),
        wr_send_tso: on.then_some(wr_send_tso),
        wr_set_ud_addr: on.then_some(wr_set_ud_addr),
        wr_set_xrc_srqn: on.then_some(wr_set_xrc_srqn),
        wr_set_inline_data: on.then_some(wr_set_inline_data),
        wr_set_inline_data_list: on.then_some(wr_set_inline_data_list),
        wr_set_sge: on.then_some(wr_set_sge),
        wr_set_sge_list: on.then_some(wr_set_sge_list),
        wr_start: on.then_some(wr_start),
        wr_complete: on.then_some(wr_complete),
        wr_abort: on.then_some(wr_abort),
        wr_atomic_write: on.then_some(wr_atomic_write),
        wr_flush: on.then_some(wr_flush),
    }
}

/// The QP behind an `ibv_qp_ex` the application got from this library.
///
/// # Safety
/// `qp` is a live QP's (see the module's comment).
unsafe fn qp_of<'a>(qp: WrQp) -> &'a Qp {
    // SAFETY: the caller's contract; a Qp begins with its ibv_qp_ex.
    unsafe { &*qp.cast::<Qp>() }
}

/// Runs `f` on the open batch of `qp` (a call outside a batch is a mistake
/// the next `ibv_wr_complete` reports).
fn with_batch(name: &'static str, qp: WrQp, f: impl FnOnce(&Qp, &mut Batch)) {
    guard(name, (), || {
        // SAFETY: the module's contract.
        let q = unsafe { qp_of(qp) };
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        if !b.open {
            b.fail(libc::EINVAL, "ibv_wr_* outside ibv_wr_start .. ibv_wr_complete");
            return;
        }
        f(q, &mut b);
    })
}

/// Starts a request of `op` with the QP's `wr_id` and `wr_flags`.
fn start_request(name: &'static str, qp: WrQp, need: u64, op: SendOp) {
    with_batch(name, qp, |q, b| {
        if q.send_ops & need == 0 {
            b.fail(libc::EOPNOTSUPP, "an operation the QP was not made for (send_ops_flags)");
            return;
        }
        // SAFETY: the application writes these before the call, on this thread.
        let (wr_id, flags) = unsafe { (*q.ex.wr_id.get(), *q.ex.wr_flags.get()) };
        let mut wr = SendWr::new(wr_id, op, Vec::new());
        wr.signaled = flags & IBV_SEND_SIGNALED != 0;
        wr.solicited = flags & IBV_SEND_SOLICITED != 0;
        b.wrs.push(wr);
    })
}

/// Applies `f` to the latest request of the batch.
fn set_latest(name: &'static str, qp: WrQp, f: impl FnOnce(&Qp, &mut SendWr) -> Result<(), (c_int, &'static str)>) {
    with_batch(name, qp, |q, b| {
        let Some(wr) = b.wrs.last_mut() else {
            b.fail(libc::EINVAL, "a setter before any ibv_wr_<operation>");
            return;
        };
        if let Err((errno, why)) = f(q, wr) {
            b.fail(errno, why);
        }
    })
}

/// An operation this device does not have yet: the batch fails with EOPNOTSUPP.
fn unsupported(name: &'static str, qp: WrQp) {
    with_batch(name, qp, |_, b| b.fail(libc::EOPNOTSUPP, name));
}

unsafe extern "C" fn wr_start(qp: WrQp) {
    guard("ibv_wr_start", (), || {
        // SAFETY: `live` checks the registry.
        let Some(q) = (unsafe { live(&QPS, qp.cast::<Qp>(), "ibv_qp_ex") }) else { return };
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        b.open = true;
        b.wrs.clear();
        b.error = None;
    })
}

unsafe extern "C" fn wr_complete(qp: WrQp) -> c_int {
    guard("ibv_wr_complete", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(q) = (unsafe { live(&QPS, qp.cast::<Qp>(), "ibv_qp_ex") }) else { return libc::EINVAL };
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        if !b.open {
            return libc::EINVAL;
        }
        b.open = false;
        let wrs = std::mem::take(&mut b.wrs);
        if let Some(e) = b.error.take() {
            return e;
        }
        if q.c.qp_type == IBV_QPT_UD && wrs.iter().any(|w| w.ud.is_none()) {
            return libc::EINVAL; // ibv_wr_set_ud_addr is required on UD
        }
        if wrs.is_empty() {
            return 0;
        }
        match post_engine(q, &wrs) {
            Ok(()) => 0,
            Err((_, errno)) => errno,
        }
    })
}

unsafe extern "C" fn wr_abort(qp: WrQp) {
    guard("ibv_wr_abort", (), || {
        // SAFETY: the module's contract.
        let q = unsafe { qp_of(qp) };
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        *b = Batch::default();
    })
}

unsafe extern "C" fn wr_send(qp: WrQp) {
    start_request("ibv_wr_send", qp, send_ops::SEND, SendOp::Send);
}

unsafe extern "C" fn wr_send_imm(qp: WrQp, imm_data: u32) {
    // imm_data is __be32, as in ibv_send_wr (see post.rs).
    start_request("ibv_wr_send_imm", qp, send_ops::SEND_WITH_IMM, SendOp::SendWithImm { imm: u32::from_be(imm_data) });
}

unsafe extern "C" fn wr_send_inv(qp: WrQp, invalidate_rkey: u32) {
    start_request("ibv_wr_send_inv", qp, send_ops::SEND_WITH_INV, SendOp::SendWithInv { invalidate_rkey });
}

unsafe extern "C" fn wr_rdma_write(qp: WrQp, rkey: u32, remote_addr: u64) {
    start_request("ibv_wr_rdma_write", qp, send_ops::RDMA_WRITE, SendOp::RdmaWrite { remote_addr, rkey });
}

unsafe extern "C" fn wr_rdma_write_imm(qp: WrQp, rkey: u32, remote_addr: u64, imm_data: u32) {
    let op = SendOp::RdmaWriteWithImm { remote_addr, rkey, imm: u32::from_be(imm_data) };
    start_request("ibv_wr_rdma_write_imm", qp, send_ops::RDMA_WRITE_WITH_IMM, op);
}

unsafe extern "C" fn wr_rdma_read(qp: WrQp, rkey: u32, remote_addr: u64) {
    start_request("ibv_wr_rdma_read", qp, send_ops::RDMA_READ, SendOp::RdmaRead { remote_addr, rkey });
}

unsafe extern "C" fn wr_atomic_cmp_swp(qp: WrQp, rkey: u32, remote_addr: u64, compare: u64, swap: u64) {
    let op = SendOp::CompareSwap { remote_addr, rkey, compare, swap };
    start_request("ibv_wr_atomic_cmp_swp", qp, send_ops::ATOMIC_CMP_AND_SWP, op);
}

unsafe extern "C" fn wr_atomic_fetch_add(qp: WrQp, rkey: u32, remote_addr: u64, add: u64) {
    let op = SendOp::FetchAdd { remote_addr, rkey, add };
    start_request("ibv_wr_atomic_fetch_add", qp, send_ops::ATOMIC_FETCH_AND_ADD, op);
}

/// `ibv_wr_bind_mw`: binds `mw` (a type 2 window, or a type 1 one) with
/// the key `rkey` (its low byte taken).
unsafe extern "C" fn wr_bind_mw(qp: WrQp, mw: *mut c_void, rkey: u32, info: *const ibv_mw_bind_info) {
    // SAFETY: mw_of checks the registry; the caller's bind information.
    let op = match (unsafe { crate::mw::mw_of(mw) }, unsafe { info.as_ref() }) {
        (Some(m), Some(i)) => crate::mw::bind_op(m, rkey, i),
        _ => Err(libc::EINVAL),
    };
    match op {
        Ok(op) => start_request("ibv_wr_bind_mw", qp, send_ops::BIND_MW, op),
        Err(e) => with_batch("ibv_wr_bind_mw", qp, |_, b| b.fail(e, "ibv_wr_bind_mw: a bad window or region")),
    }
}

unsafe extern "C" fn wr_local_inv(qp: WrQp, invalidate_rkey: u32) {
    start_request("ibv_wr_local_inv", qp, send_ops::LOCAL_INV, SendOp::LocalInv { invalidate_rkey });
}

unsafe extern "C" fn wr_send_tso(qp: WrQp, _hdr: *mut c_void, _hdr_sz: u16, _mss: u16) {
    unsupported("ibv_wr_send_tso (raw packet QPs)", qp);
}

/// `ibv_wr_set_xrc_srqn`: the remote XRC SRQ of the latest request.
unsafe extern "C" fn wr_set_xrc_srqn(qp: WrQp, srqn: u32) {
    set_latest("ibv_wr_set_xrc_srqn", qp, |q, wr| {
        if q.c.qp_type != IBV_QPT_XRC_SEND {
            return Err((libc::EINVAL, "an XRC SRQ number on a QP that is not XRC_SEND"));
        }
        wr.xrc_srqn = srqn;
        Ok(())
    });
}

/// `ibv_wr_atomic_write`: the 8 bytes at `data` are copied now, as rxe's
/// provider copies them into the WQE, and land at the remote address as
/// they are (no byte swap).
unsafe extern "C" fn wr_atomic_write(qp: WrQp, rkey: u32, remote_addr: u64, data: *const c_void) {
    if data.is_null() {
        with_batch("ibv_wr_atomic_write", qp, |_, b| b.fail(libc::EINVAL, "a NULL atomic_wr"));
        return;
    }
    // SAFETY: verbs.h: `atomic_wr` points to 8 bytes.
    let value = unsafe { data.cast::<[u8; 8]>().read_unaligned() };
    start_request("ibv_wr_atomic_write", qp, send_ops::ATOMIC_WRITE, SendOp::AtomicWrite { remote_addr, rkey, value });
}

/// `ibv_wr_flush` (rdma-core 45's, at the end of `ibv_qp_ex`): `type` is
/// the placement (`IBV_FLUSH_GLOBAL`/`_PERSISTENT`), `level` the
/// selectivity (`IBV_FLUSH_RANGE`/`_MR`); the engine refuses bad values at
/// `ibv_wr_complete` (EINVAL).
unsafe extern "C" fn wr_flush(qp: WrQp, rkey: u32, remote_addr: u64, len: usize, type_: u8, level: u8) {
    let op = SendOp::Flush { remote_addr, rkey, len: len as u64, placement: type_, selectivity: level };
    start_request("ibv_wr_flush", qp, send_ops::FLUSH, op);
}

unsafe extern "C" fn wr_set_sge(qp: WrQp, lkey: u32, addr: u64, length: u32) {
    set_latest("ibv_wr_set_sge", qp, |_, wr| {
        wr.sg_list = vec![Sge { addr, length, lkey }];
        wr.inline_data = None;
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge_list(qp: WrQp, num_sge: usize, sg_list: *const ibv_sge) {
    set_latest("ibv_wr_set_sge_list", qp, |q, wr| {
        if num_sge > q.max_send_sge() as usize {
            return Err((libc::EINVAL, "more SGEs than the QP's max_send_sge"));
        }
        if num_sge > 0 && sg_list.is_null() {
            return Err((libc::EINVAL, "a NULL SGE list"));
        }
        // SAFETY: the application's `num_sge` entries (checked for NULL).
        let list = if num_sge == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(sg_list, num_sge) } };
        wr.sg_list = list.iter().map(|e| Sge { addr: e.addr, length: e.length, lkey: e.lkey }).collect();
        wr.inline_data = None;
        Ok(())
    });
}

/// Copies the application's buffers as the request's inline data.
fn set_inline(q: &Qp, wr: &mut SendWr, bufs: &[(*const u8, usize)]) -> Result<(), (c_int, &'static str)> {
    if wr.op.writes_local() {
        return Err((libc::EINVAL, "inline data on a READ or an atomic"));
    }
    let total: usize = bufs.iter().map(|b| b.1).sum();
    if total > q.max_inline_data() as usize {
        return Err((libc::EINVAL, "more inline data than the QP's max_inline_data"));
    }
    if bufs.iter().any(|b| b.1 > 0 && b.0.is_null()) {
        return Err((libc::EFAULT, "a NULL inline buffer"));
    }
    let mut data = Vec::with_capacity(total);
    for &(p, n) in bufs.iter().filter(|b| b.1 > 0) {
        // SAFETY: the application's buffer, readable for `n` bytes by the verbs contract.
        data.extend_from_slice(unsafe { std::slice::from_raw_parts(p, n) });
    }
    wr.inline_data = Some(data);
    wr.sg_list.clear();
    Ok(())
}

unsafe extern "C" fn wr_set_inline_data(qp: WrQp, addr: *mut c_void, length: usize) {
    set_latest("ibv_wr_set_inline_data", qp, |q, wr| set_inline(q, wr, &[(addr as *const u8, length)]));
}

unsafe extern "C" fn wr_set_inline_data_list(qp: WrQp, num_buf: usize, list: *const ibv_data_buf) {
    set_latest("ibv_wr_set_inline_data_list", qp, |q, wr| {
        if num_buf > 0 && list.is_null() {
            return Err((libc::EINVAL, "a NULL buffer list"));
        }
        // SAFETY: the application's `num_buf` entries (checked for NULL).
        let l = if num_buf == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(list, num_buf) } };
        let bufs: Vec<(*const u8, usize)> = l.iter().map(|b| (b.addr as *const u8, b.length)).collect();
        set_inline(q, wr, &bufs)
    });
}

unsafe extern "C" fn wr_set_ud_addr(qp: WrQp, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) {
    set_latest("ibv_wr_set_ud_addr", qp, |q, wr| {
        if q.c.qp_type != IBV_QPT_UD {
            return Err((libc::EINVAL, "a UD address on a connected QP"));
        }
        // SAFETY: `live` checks the registry.
        let Some(a) = (unsafe { live(&AHS, ah.cast::<Ah>(), "ibv_ah") }) else {
            return Err((libc::EINVAL, "not an address handle of this library"));
        };
        wr.ud = Some(a.verbs.ud_dest(remote_qpn, remote_qkey));
        Ok(())
    });
}
