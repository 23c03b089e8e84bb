//! librdmacm's error convention: -1 with errno, and the errno of each
//! [`CmError`].

use crate::ffi::{errno_of, set_errno};
use libc::c_int;
use rdma_core_rs::cm::CmError;

pub(super) fn cm_errno(e: &CmError) -> c_int {
    match e {
        CmError::Verbs(v) => errno_of(v),
        CmError::NoDevice(..) => libc::ENODEV,
        CmError::AddrInUse { .. } => libc::EADDRINUSE,
        CmError::NoRoute(..) => libc::EHOSTUNREACH,
        CmError::Unsupported(_) => libc::ENOSYS,
        CmError::Ipv6Multicast(_) => 524, // the kernel's ENOTSUPP
        CmError::NotMulticast(_) => libc::EINVAL,
        CmError::Timeout(_) => libc::EAGAIN,
        CmError::WrongState { .. }
        | CmError::PrivateDataTooLong { .. }
        | CmError::FamilyMismatch { .. }
        | CmError::Cm { .. } => libc::EINVAL,
    }
}

/// -1 with errno `e` (librdmacm's error convention).
pub(super) fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

pub(super) fn fail_cm(call: &str, e: &CmError) -> c_int {
    tracing::debug!(call, error = %e, "refused");
    fail(cm_errno(e))
}
