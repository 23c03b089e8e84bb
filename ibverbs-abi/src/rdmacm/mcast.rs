//! `rdma_join_multicast`, `rdma_join_multicast_ex` and
//! `rdma_leave_multicast`, as librdmacm (cma.c) and the kernel's RDMA CM
//! do them on RoCE v2: the join records the group on the ID and the CM
//! raises MULTICAST_JOIN (`rdma_core_rs::cm::CmId::join_multicast`); when
//! the application reads that event, its `param.ud` is the group's address
//! (MGID, QPN 0xFFFFFF, RDMA_UDP_QKEY) with `private_data` the join's
//! context, and the ID's QP is attached to the group, unless the join was
//! send-only (librdmacm's `ucma_process_join`); a failed attach turns the
//! event into MULTICAST_ERROR. Leaving detaches the QP.

use super::errno::{fail, fail_cm};
use super::id::{id_of, Id, Joined};
use crate::abi::*;
use crate::rdmacm::abi::*;
use libc::{c_int, c_void};
use rdma_core_rs::cm::CmError;
use rdma_core_rs::Gid;

/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS`, `_JOIN_FLAGS`, `_RESERVED` (rdma_cma.h).
const ATTR_ADDRESS: u32 = 1;
const ATTR_JOIN_FLAGS: u32 = 2;
const ATTR_RESERVED: u32 = 4;
/// `RDMA_MC_JOIN_FLAG_FULLMEMBER`, `_SENDONLY_FULLMEMBER`, `_RESERVED`.
const FULLMEMBER: u32 = 0;
const SENDONLY_FULLMEMBER: u32 = 1;
const JOIN_FLAG_RESERVED: u32 = 2;
/// The kernel's ENOTSUPP (not in libc): what its RDMA CM answers an IPv6
/// join on RoCE v2, and what librdmacm passes on as errno.
const ENOTSUPP: c_int = 524;

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}

fn join(i: &Id, addr: *const libc::sockaddr, flags: u32, context: *mut c_void) -> c_int {
    // SAFETY: the caller's sockaddr.
    let Some(addr) = (unsafe { super::addr::from_c(addr) }) else { return fail(libc::EINVAL) };
    let mgid = match i.cm.join_multicast(addr.ip()) {
        Ok(g) => g,
        Err(e @ CmError::Ipv6Multicast(_)) => {
            tracing::debug!(error = %e, "rdma_join_multicast refused");
            return fail(ENOTSUPP);
        }
        Err(e @ CmError::NotMulticast(_)) => {
            tracing::debug!(error = %e, "rdma_join_multicast refused");
            return fail(libc::EINVAL);
        }
        Err(e) => return fail_cm("rdma_join_multicast", &e),
    };
    let j = Joined { addr, mgid, context, send_only: flags == SENDONLY_FULLMEMBER };
    i.mcast.lock().unwrap_or_else(|e| e.into_inner()).push(j);
    0
}

#[export_name = "softroce_rdma_join_multicast_impl"]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    crate::ffi::guard("rdma_join_multicast", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        join(i, addr, FULLMEMBER, context)
    })
}

#[export_name = "softroce_rdma_join_multicast_ex_impl"]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    crate::ffi::guard("rdma_join_multicast_ex", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        if attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &*attr };
        // librdmacm's checks: both attributes given, nothing unknown.
        let need = ATTR_ADDRESS | ATTR_JOIN_FLAGS;
        if a.comp_mask & need != need || a.comp_mask >= ATTR_RESERVED || a.join_flags >= JOIN_FLAG_RESERVED {
            return fail(libc::EINVAL);
        }
        join(i, a.addr, a.join_flags, context)
    })
}

#[export_name = "softroce_rdma_leave_multicast_impl"]
pub unsafe extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    crate::ffi::guard("rdma_leave_multicast", -1, || {
        // SAFETY: id_of checks the registry.
        let Some(i) = (unsafe { id_of(id) }) else { return -1 };
        // SAFETY: the caller's sockaddr.
        let Some(addr) = (unsafe { super::addr::from_c(addr) }) else { return fail(libc::EINVAL) };
        let j = {
            let mut l = i.mcast.lock().unwrap_or_else(|e| e.into_inner());
            match l.iter().position(|j| j.addr == addr) {
                Some(k) => l.remove(k),
                None => return fail(libc::EADDRNOTAVAIL),
            }
        };
        let qp = get!(i, qp);
        if !qp.is_null() && !j.send_only {
            // As librdmacm: a QP that was never attached (made after the
            // join) makes the detach fail, which it ignores.
            let gid = ibv_gid { raw: j.mgid.0 };
            // SAFETY: the ID's QP, checked by ibv_detach_mcast's registry.
            let r = unsafe { crate::mcast::ibv_detach_mcast(qp, &gid, 0) };
            if r != 0 {
                tracing::debug!(errno = r, group = %addr.ip(), "rdma_leave_multicast: the QP was not attached");
            }
        }
        tracing::debug!(group = %addr.ip(), "multicast group left");
        0
    })
}

/// A MULTICAST_JOIN being handed to the application: the group's UD
/// address and the join's context in `param.ud`, and the ID's QP attached
/// (MULTICAST_ERROR, status -1, if that fails).
pub(super) fn deliver_join(i: &Id, c: &mut rdma_cm_event, mgid: Gid, qkey: u32) {
    let (context, send_only) = {
        let l = i.mcast.lock().unwrap_or_else(|e| e.into_inner());
        l.iter().rev().find(|j| j.mgid == mgid).map_or((std::ptr::null_mut(), false), |j| (j.context, j.send_only))
    };
    // SAFETY: plain data, zero is valid.
    let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
    ah.grh.dgid = ibv_gid { raw: mgid.0 };
    ah.grh.hop_limit = 64;
    ah.is_global = 1;
    ah.port_num = 1;
    c.param.ud = rdma_ud_param {
        private_data: context,
        private_data_len: 0,
        ah_attr: ah,
        qp_num: rdma_core_rs::MULTICAST_QPN,
        qkey,
    };
    let qp = get!(i, qp);
    if qp.is_null() || send_only {
        return;
    }
    let gid = ibv_gid { raw: mgid.0 };
    // SAFETY: the ID's QP, checked by ibv_attach_mcast's registry.
    let r = unsafe { crate::mcast::ibv_attach_mcast(qp, &gid, 0) };
    if r != 0 {
        tracing::debug!(errno = r, "MULTICAST_JOIN: the QP could not be attached");
        crate::ffi::set_errno(r);
        c.event = rdma_core_rs::cm::EventType::MulticastError as c_int;
        c.status = -1;
    }
}
