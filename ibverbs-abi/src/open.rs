//! `ibv_open_device` and `ibv_import_device`: a new context (`context.rs`)
//! with this library's verbs (`ops.rs`).

use crate::abi::*;
use crate::context::{cmd_file, device_of_cmd_fd};
use crate::device::{dev_of, Dev};
use crate::ffi::{guard, set_errno};
use crate::ops::{context_ops, extended_verbs};
use std::os::fd::OwnedFd;

/// Opens `dev` with `cmd` as its command descriptor (see
/// [`crate::context::open_with`]).
fn open_with(dev: &'static Dev, cmd: OwnedFd) -> Result<*mut ibv_context, i32> {
    crate::context::open_with(dev, cmd, extended_verbs(), context_ops())
}

fn open(dev: &'static Dev) -> Result<*mut ibv_context, i32> {
    open_with(dev, cmd_file()?)
}

#[export_name = "softroce_ibv_open_device"]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard("ibv_open_device", std::ptr::null_mut(), || {
        let Some(dev) = dev_of(device) else {
            set_errno(libc::ENODEV);
            return std::ptr::null_mut();
        };
        open(dev).unwrap_or_else(|e| {
            set_errno(e);
            std::ptr::null_mut()
        })
    })
}

/// `ibv_import_device`: another context of the device whose context's
/// `cmd_fd` this is (the application's dup of it, usually), in this process;
/// on success the new context owns the descriptor and closes it at
/// `ibv_close_device`, as rdma-core's does. A descriptor of no context of
/// this process (another process's: each has its own engine) is EOPNOTSUPP.
#[export_name = "softroce_ibv_import_device"]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: libc::c_int) -> *mut ibv_context {
    guard("ibv_import_device", std::ptr::null_mut(), || {
        let Some(dev) = device_of_cmd_fd(cmd_fd) else {
            tracing::debug!(cmd_fd, "ibv_import_device: not the command descriptor of a context of this process");
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        };
        // Our own copy, so that a failure leaves the caller's descriptor open.
        // SAFETY: fcntl on a descriptor fstat just accepted.
        let copy = unsafe { libc::fcntl(cmd_fd, libc::F_DUPFD_CLOEXEC, 0) };
        if copy < 0 {
            set_errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
            return std::ptr::null_mut();
        }
        use std::os::fd::FromRawFd;
        // SAFETY: a fresh descriptor we own.
        let owned = unsafe { OwnedFd::from_raw_fd(copy) };
        match open_with(dev, owned) {
            Ok(ctx) => {
                // SAFETY: the caller's descriptor, now ours to close.
                unsafe { libc::close(cmd_fd) };
                tracing::debug!(device = %dev.spec.name, "device context imported");
                ctx
            }
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    })
}
