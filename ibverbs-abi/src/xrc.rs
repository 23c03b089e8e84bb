//! XRC domains (IBTA annex A14; docs/xrc.md): `ibv_open_xrcd` and
//! `ibv_close_xrcd`. What lives in a domain is made where its kind is:
//! XRC SRQs by `ibv_create_srq_ex` with `IBV_SRQT_XRC` and
//! `ibv_get_srq_num` (`srq.rs`), XRC QPs by `ibv_create_qp_ex`
//! (`qp_ex.rs`, `qp.rs`) and `ibv_open_qp` (`qp.rs`).
//!
//! A domain opened with fd -1 is private to its `ibv_open_xrcd` call. One
//! opened with a file descriptor is the domain of that file (its device
//! and inode) on this device: opening the same file again in this process
//! gives the same `ibv_xrcd`, counted, and each `ibv_close_xrcd` closes one
//! open (the last one is EBUSY while an XRC SRQ or XRC_RECV QP is in it).
//! Across processes nothing is shared: each process is a device of its own.

use crate::abi::*;
use crate::context::{ctx_of, Engine};
use crate::ffi::{errno_of, guard, live, set_errno, Registry, Shared, Users};
use libc::c_int;
use std::sync::{Arc, Mutex};

pub static XRCDS: Registry = Registry::new();

/// Serializes opens and closes (the by-file lookup and the open count).
static OPENING: Mutex<()> = Mutex::new(());

#[repr(C)]
pub struct Xrcd {
    pub c: ibv_xrcd,
    pub(crate) verbs: rdma_core_rs::Xrcd,
    pub(crate) engine: Arc<Engine>,
    /// The file (device, inode) of a shared domain.
    file: Option<(u64, u64)>,
    /// `ibv_open_xrcd` calls not yet closed (under `OPENING`).
    opens: std::sync::atomic::AtomicUsize,
    /// XRC SRQs and XRC_RECV QPs in it (closing then is EBUSY).
    pub(crate) users: Users,
}

// SAFETY: the raw pointer in `c` is the application's context.
unsafe impl Send for Xrcd {}
unsafe impl Sync for Xrcd {}

impl Shared for Xrcd {
    fn users(&self) -> &Users {
        &self.users
    }
}

/// `verbs_context.open_xrcd`.
pub unsafe extern "C" fn open_xrcd(context: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd {
    use std::sync::atomic::Ordering;
    guard("ibv_open_xrcd", std::ptr::null_mut(), || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return std::ptr::null_mut() };
        // SAFETY: the caller's attributes, if any.
        let Some(a) = (unsafe { attr.as_ref() }).copied() else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let known = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & !known != 0 || a.comp_mask & known != known {
            // ibv_open_xrcd(3): fd and oflags are both required.
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        if a.oflags & !(libc::O_CREAT | libc::O_EXCL) != 0 {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        let file = if a.fd == -1 {
            None
        } else {
            // SAFETY: fstat writes into the zeroed struct.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(a.fd, &mut st) } != 0 {
                set_errno(libc::EBADF);
                return std::ptr::null_mut();
            }
            Some((st.st_dev, st.st_ino))
        };
        let _open = OPENING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = file {
            // SAFETY: every object of XRCDS is an Xrcd.
            let found = unsafe { XRCDS.find::<Xrcd>(|x| x.file == Some(f) && Arc::ptr_eq(&x.engine, &ctx.engine)) };
            match found {
                Some(_) if a.oflags & libc::O_CREAT != 0 && a.oflags & libc::O_EXCL != 0 => {
                    set_errno(libc::EEXIST);
                    return std::ptr::null_mut();
                }
                Some(x) => {
                    x.opens.fetch_add(1, Ordering::AcqRel);
                    return (x as *const Xrcd).cast_mut().cast();
                }
                None if a.oflags & libc::O_CREAT == 0 => {
                    set_errno(libc::ENOENT);
                    return std::ptr::null_mut();
                }
                None => {}
            }
        }
        let verbs = match ctx.engine.verbs.open_xrcd() {
            Ok(v) => v,
            Err(e) => {
                set_errno(errno_of(&e));
                return std::ptr::null_mut();
            }
        };
        let x = Box::into_raw(Box::new(Xrcd {
            c: ibv_xrcd { context },
            verbs,
            engine: ctx.engine.clone(),
            file,
            opens: 1.into(),
            users: Users::default(),
        }));
        XRCDS.insert(x);
        tracing::debug!(?file, "XRC domain opened");
        x.cast()
    })
}

/// `verbs_context.close_xrcd`.
pub unsafe extern "C" fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    use std::sync::atomic::Ordering;
    guard("ibv_close_xrcd", libc::EIO, || {
        let p = xrcd.cast::<Xrcd>();
        let _open = OPENING.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `live` checks the registry.
        let Some(x) = (unsafe { live(&XRCDS, p, "ibv_xrcd") }) else { return libc::EINVAL };
        if x.opens.load(Ordering::Acquire) > 1 {
            x.opens.fetch_sub(1, Ordering::AcqRel);
            return 0;
        }
        // SAFETY: retire checks the registry; EBUSY while SRQs or QPs use it.
        if let Err(e) = unsafe { XRCDS.retire(p, "ibv_xrcd") } {
            return e;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let x = unsafe { Box::from_raw(p) };
        if let Err(e) = x.verbs.close() {
            tracing::warn!(error = %e, "XRC domain unused here but busy in the engine");
        }
        0
    })
}

/// The XRC domain `xrcd` names, with a use taken (for a QP in it).
///
/// # Safety
/// `xrcd` is the application's pointer, checked against the registry.
pub(crate) unsafe fn xrcd_use(xrcd: *mut ibv_xrcd) -> Option<&'static Xrcd> {
    // SAFETY: acquire checks the registry; registered objects are leaked
    // boxes kept until their uses are given back.
    unsafe { XRCDS.acquire(xrcd.cast::<Xrcd>(), "ibv_xrcd").map(|x| &*(x as *const Xrcd)) }
}
