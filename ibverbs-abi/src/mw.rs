//! Memory windows: `ibv_alloc_mw` and `ibv_dealloc_mw` (through
//! `context->ops`, as verbs.h calls them), and the bind operation that
//! `post.rs` (`ibv_bind_mw`, `ibv_post_send`) and `qp_ex.rs` post. The
//! engine does the binding, the checks and the invalidation
//! (docs/memory-windows.md).

use crate::abi::*;
use crate::ffi::{guard, live, set_errno, Held, Registry};
use crate::pd::{pd_use, Mr, Pd, MRS};
use libc::{c_int, c_void};
use rdma_core_rs::{Access, MemoryWindow, MwType, SendOp};

pub static MWS: Registry = Registry::new();

#[repr(C)]
pub struct Mw {
    pub c: ibv_mw,
    pub(crate) verbs: MemoryWindow,
    pd: &'static Pd,
}

// SAFETY: the raw pointers in `c` are the application's; see cq::Cq.
unsafe impl Send for Mw {}
unsafe impl Sync for Mw {}

/// `ops.alloc_mw`, what the inline `ibv_alloc_mw` calls.
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: c_int) -> *mut ibv_mw {
    guard("ibv_alloc_mw", std::ptr::null_mut(), || {
        let t = match mw_type {
            IBV_MW_TYPE_1 => MwType::Type1,
            IBV_MW_TYPE_2 => MwType::Type2,
            _ => {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            }
        };
        let mut held = Held::new();
        // SAFETY: pd_use checks the registry.
        let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return std::ptr::null_mut() };
        let verbs = match p.verbs.alloc_mw(t) {
            Ok(v) => v,
            Err(e) => {
                // Every window slot taken (the one refusal left, now that a
                // device of several engines has windows too): libibverbs'
                // providers say ENOMEM.
                tracing::debug!(error = %e, "ibv_alloc_mw refused");
                set_errno(libc::ENOMEM);
                return std::ptr::null_mut();
            }
        };
        let c = ibv_mw { context: p.c.context, pd, rkey: verbs.rkey().into(), handle: verbs.id().0 as u32, mw_type };
        held.keep();
        let mw = Box::into_raw(Box::new(Mw { c, verbs, pd: p }));
        MWS.insert(mw);
        mw.cast()
    })
}

/// `ops.dealloc_mw`: unbinds and frees the window (as rxe, a bound window
/// may be deallocated).
pub unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    guard("ibv_dealloc_mw", libc::EIO, || {
        let p = mw.cast::<Mw>();
        // SAFETY: `live` checks the registry.
        if unsafe { live(&MWS, p, "ibv_mw") }.is_none() || !MWS.remove(p) {
            return libc::EINVAL;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let m = unsafe { Box::from_raw(p) };
        m.pd.users.put();
        0
    })
}

/// The window behind the application's `ibv_mw *`.
///
/// # Safety
/// Any pointer; looked up in the registry.
pub(crate) unsafe fn mw_of<'a>(mw: *mut c_void) -> Option<&'a Mw> {
    // SAFETY: `live` checks the registry.
    unsafe { live(&MWS, mw.cast::<Mw>(), "ibv_mw") }
}

/// The BIND_MW request binding `mw` to `info` with the window key `rkey`
/// (its low byte taken): the region's lkey from its registration (none for
/// a zero length), the remote rights of `mw_access_flags` (the local ones
/// mean nothing to a window and are dropped, as rxe ignores them).
pub(crate) fn bind_op(mw: &Mw, rkey: u32, info: &ibv_mw_bind_info) -> Result<SendOp, c_int> {
    let mr_lkey = if info.mr.is_null() {
        if info.addr != 0 || info.length != 0 {
            return Err(libc::EINVAL);
        }
        0
    } else {
        // SAFETY: `live` checks the registry.
        let Some(m) = (unsafe { live(&MRS, info.mr.cast::<Mr>(), "ibv_mr") }) else { return Err(libc::EINVAL) };
        m.lkey()
    };
    let remote = Access::REMOTE_READ.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0 | Access::ZERO_BASED.0;
    Ok(SendOp::BindMw {
        mw_rkey: mw.verbs.current_rkey(),
        rkey,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access: Access(info.mw_access_flags & remote),
    })
}
