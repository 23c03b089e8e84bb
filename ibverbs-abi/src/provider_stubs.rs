//! Stand-ins for the provider libraries Debian's binaries link
//! (`libmlx5.so.1`, `libefa.so.1`: perftest, UCX's `libuct_ib`, libfabric,
//! pyverbs' provider modules). `softroce-run` points those sonames at this
//! library, which exports every call they export, with its version
//! (`providers.txt`, made by `scripts/gen-provider-stubs.py` from Debian's
//! libraries and headers), so that these programs load without the real
//! providers (which bind rdma-core's private libibverbs symbols that this
//! library does not have). No mlx5 or EFA device exists here, so every
//! call answers as a provider without its hardware would: "not
//! supported". `build.rs` points each call's trampoline at one of the
//! three answers below, by the call's C return type.

use libc::{c_int, c_void};

/// A call that returns a pointer or a bool (NULL, false: `mlx5dv_is_supported`
/// says no device is an mlx5 one), or nothing (a free of what was never
/// made); errno EOPNOTSUPP.
#[export_name = "softroce_provider_zero"]
pub extern "C" fn provider_zero() -> *mut c_void {
    crate::ffi::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// A call that returns an int status: EOPNOTSUPP, and in errno too (rdma-core's
/// provider calls return an errno value; some callers read errno).
#[export_name = "softroce_provider_eopnotsupp"]
pub extern "C" fn provider_eopnotsupp() -> c_int {
    crate::ffi::set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// A call that returns an `ssize_t` or a file descriptor: -1, errno EOPNOTSUPP.
#[export_name = "softroce_provider_minus_one"]
pub extern "C" fn provider_minus_one() -> isize {
    crate::ffi::set_errno(libc::EOPNOTSUPP);
    -1
}
