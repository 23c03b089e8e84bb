//! The posting fast paths the inline `ibv_post_send`, `ibv_post_recv` and
//! `ibv_post_srq_recv` of verbs.h call through `context->ops`: C work
//! request lists to the engine's requests, with libibverbs' `bad_wr`
//! semantics. A send request's slot is free again once its completion is
//! made (ENOMEM while the queue is full), as in rxe.

use crate::abi::*;
use crate::ah::{Ah, AHS};
use crate::ffi::{errno_of, guard, live};
use crate::qp::{Qp, QPS};
use crate::srq::{Srq, SRQS};
use libc::c_int;
use rdma_core_rs::{MwType, RecvWr, SendOp, SendWr, Sge, VerbsError};
use std::sync::atomic::Ordering;

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
unsafe fn send_wr_of(w: &ibv_send_wr, ud: bool, max_inline: u32) -> Result<SendWr, c_int> {
    use crate::abi::wr_opcode as o;
    // SAFETY: the union member each opcode uses, as libibverbs defines it.
    let (rdma, atomic, udw) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let op = match w.opcode {
        o::SEND => SendOp::Send,
        // imm_data is __be32: its bytes are the wire's; the engine's value is
        // the number those bytes spell in network order.
        o::SEND_WITH_IMM => SendOp::SendWithImm { imm: u32::from_be(w.imm_data) },
        o::SEND_WITH_INV => SendOp::SendWithInv { invalidate_rkey: w.imm_data },
        o::RDMA_WRITE => SendOp::RdmaWrite { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        o::RDMA_WRITE_WITH_IMM => {
            SendOp::RdmaWriteWithImm { remote_addr: rdma.remote_addr, rkey: rdma.rkey, imm: u32::from_be(w.imm_data) }
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
        o::LOCAL_INV => SendOp::LocalInv { invalidate_rkey: w.imm_data },
        o::BIND_MW => {
            // SAFETY: the union member IBV_WR_BIND_MW uses.
            let b = unsafe { w.ext.bind_mw };
            // SAFETY: mw_of checks the registry.
            let Some(mw) = (unsafe { crate::mw::mw_of(b.mw) }) else { return Err(libc::EINVAL) };
            crate::mw::bind_op(mw, b.rkey, &b.bind_info)?
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
        // Inline: the bytes are taken now; the lkeys do not matter. Checked
        // before any byte is read, as providers answer: more than the QP's
        // max_inline_data is EINVAL, a NULL buffer EFAULT.
        let total: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(max_inline) {
            return Err(libc::EINVAL);
        }
        if wr.sg_list.iter().any(|s| s.length > 0 && s.addr == 0) {
            return Err(libc::EFAULT);
        }
        let mut data = Vec::with_capacity(total as usize);
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

/// Posts `wrs` to the engine. If the send queue is full, the ACK that frees
/// a slot may be waiting in the socket, behind the reply that made the
/// application post again (a NIC would have handled it): take it, and try
/// the rest once.
fn post_with_retry(q: &Qp, wrs: &[SendWr]) -> Result<(), rdma_core_rs::Error> {
    let mut posted = q.verbs.post_send(wrs);
    if let Err(rdma_core_rs::Error::Post { index, source: VerbsError::QueueFull { .. }, .. }) = posted {
        if q.engine.verbs.progress().is_ok() {
            posted = q.verbs.post_send(&wrs[index..]).map_err(|e| match e {
                rdma_core_rs::Error::Post { index: i, wr_id, source } => {
                    rdma_core_rs::Error::Post { index: index + i, wr_id, source }
                }
                other => other,
            });
        }
    }
    posted
}

/// Posts requests made by the `ibv_wr_*` API (`qp_ex.rs`): the index of
/// the first one refused and its errno.
pub(crate) fn post_engine(q: &Qp, wrs: &[SendWr]) -> Result<(), (usize, c_int)> {
    post_with_retry(q, wrs).map_err(|e| match e {
        rdma_core_rs::Error::Post { index, ref source, .. } => {
            tracing::debug!(error = %source, "ibv_wr_complete: post refused");
            (index, errno_of(&e))
        }
        other => (0, errno_of(&other)),
    })
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
        let xrc = q.c.qp_type == IBV_QPT_XRC_SEND;
        // SAFETY: the application's list, per the verbs contract.
        let max_inline = q.max_inline_data();
        let (wrs, ptrs, badwr) = unsafe {
            collect(
                wr,
                |w| w.next,
                |w| {
                    // `qp_type.xrc.remote_srqn`: the XRC SRQ the request is for.
                    send_wr_of(w, ud, max_inline).map(|s| if xrc { SendWr { xrc_srqn: w.remote_srqn, ..s } } else { s })
                },
            )
        };
        let posted = if wrs.is_empty() { Ok(()) } else { post_with_retry(q, &wrs) };
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

/// `ops.bind_mw`, what the inline `ibv_bind_mw` calls once it checked the
/// window's type and PD: posts the bind on `qp` with the next key
/// (`ibv_inc_rkey`), which `mw->rkey` takes now, as rxe's provider sets it.
pub unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, bind: *mut ibv_mw_bind) -> c_int {
    guard("ibv_bind_mw", libc::EIO, || {
        // SAFETY: `live` checks the registries.
        let (Some(q), Some(m)) =
            (unsafe { live(&QPS, qp.cast::<Qp>(), "ibv_qp") }, unsafe { crate::mw::mw_of(mw.cast()) })
        else {
            return libc::EINVAL;
        };
        if bind.is_null() || m.verbs.mw_type() != MwType::Type1 {
            return libc::EINVAL;
        }
        // SAFETY: the caller's request.
        let b = unsafe { &*bind };
        let new = rdma_core_rs::inc_rkey(m.c.rkey.load(Ordering::Relaxed));
        let op = match crate::mw::bind_op(m, new, &b.bind_info) {
            Ok(op) => op,
            Err(e) => return e,
        };
        let mut wr = SendWr::new(b.wr_id, op, Vec::new());
        wr.signaled = b.send_flags & IBV_SEND_SIGNALED != 0;
        match q.verbs.post_send(&[wr]) {
            Ok(()) => {
                m.c.rkey.store(new, Ordering::Relaxed);
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}
