//! `ibv_attach_mcast` / `ibv_detach_mcast`, with the errno values of the
//! kernel's uverbs and rxe: EINVAL for a QP that is not UD, a GID that is
//! not multicast or a detach of a group the QP is not attached to; ENOMEM
//! past rxe's group limits (docs/multicast.md). They return the errno, as
//! libibverbs' calls of this kind do.

use crate::abi::*;
use crate::ffi::{errno_of, guard, live};
use crate::qp::{Qp, QPS};
use libc::c_int;
use rdma_core_rs::Gid;

/// The QP and the GID of a call, or its errno.
///
/// # Safety
/// `gid` is NULL or points to an `ibv_gid`.
unsafe fn args(qp: *mut ibv_qp, gid: *const ibv_gid) -> Result<(&'static Qp, Gid), c_int> {
    // SAFETY: `live` checks the registry.
    let q = unsafe { live(&QPS, qp.cast::<Qp>(), "ibv_qp") }.ok_or(libc::EINVAL)?;
    if gid.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's GID, 16 bytes whichever member it was written as.
    Ok((q, Gid(unsafe { (*gid).raw })))
}

#[export_name = "softroce_ibv_attach_mcast"]
pub unsafe extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    guard("ibv_attach_mcast", libc::EIO, || {
        // SAFETY: see `args`.
        let (q, g) = match unsafe { args(qp, gid) } {
            Ok(x) => x,
            Err(e) => return e,
        };
        match q.verbs.attach_mcast(g, lid) {
            Ok(()) => 0,
            Err(e) => {
                tracing::debug!(qpn = q.c.qp_num, error = %e, "ibv_attach_mcast refused");
                errno_of(&e)
            }
        }
    })
}

#[export_name = "softroce_ibv_detach_mcast"]
pub unsafe extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    guard("ibv_detach_mcast", libc::EIO, || {
        // SAFETY: see `args`.
        let (q, g) = match unsafe { args(qp, gid) } {
            Ok(x) => x,
            Err(e) => return e,
        };
        match q.verbs.detach_mcast(g, lid) {
            Ok(()) => 0,
            Err(e) => {
                tracing::debug!(qpn = q.c.qp_num, error = %e, "ibv_detach_mcast refused");
                errno_of(&e)
            }
        }
    })
}
