//! Memory windows (`ibv_mw`): a range of a memory region offered to peers
//! under an rkey of its own, with rights of its own, that can be taken
//! back without deregistering the region (docs/memory-windows.md).
//!
//! | libibverbs | here |
//! |---|---|
//! | `ibv_alloc_mw(pd, IBV_MW_TYPE_1 / _2)` | [`ProtectionDomain::alloc_mw`]`(`[`MwType`]`)` |
//! | `ibv_dealloc_mw` | dropping the [`MemoryWindow`] |
//! | `ibv_bind_mw` (type 1) | [`MemoryWindow::bind`] |
//! | `IBV_WR_BIND_MW` (type 2) | [`SendOp::BindMw`], or [`MemoryWindow::bind_wr`], posted with [`QueuePair::post_send`] |
//! | `IBV_WR_LOCAL_INV`, `IBV_WR_SEND_WITH_INV` | [`SendOp::LocalInv`], [`SendOp::SendWithInv`] |
//! | `ibv_inc_rkey` | [`inc_rkey`] |
//! | `mw->rkey` | [`MemoryWindow::rkey`] |

use crate::context::Context;
use crate::error::{Error, Result};
use crate::pd::{MemoryRegion, ProtectionDomain};
use crate::qp::QueuePair;
use rdma_transport::{Access, MwId, MwType, Pd, SendOp, SendWr, WindowBinding};
use std::sync::atomic::{AtomicU32, Ordering};

/// `ibv_inc_rkey`: the rkey with its low 8 bits (the consumer's key)
/// increased by one, wrapping within them.
pub const fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// `ibv_mw_bind_info`: what a bind gives the window. `mr: None` with
/// `addr` and `length` 0 unbinds a type 1 window.
#[derive(Debug, Clone, Copy)]
pub struct MwBindInfo<'a> {
    pub mr: Option<&'a MemoryRegion>,
    pub addr: u64,
    pub length: u64,
    /// `mw_access_flags`: `REMOTE_READ`, `REMOTE_WRITE`, `REMOTE_ATOMIC`
    /// (the last two need `LOCAL_WRITE` on the region, which must have
    /// `MW_BIND`). `ZERO_BASED` is refused.
    pub access: Access,
}

/// A memory window. Dropping it deallocates it (`ibv_dealloc_mw`), which
/// unbinds it first.
#[derive(Debug)]
pub struct MemoryWindow {
    ctx: Context,
    pd: Pd,
    id: MwId,
    mw_type: MwType,
    /// `mw->rkey` as libibverbs keeps it: the allocation's, then the one
    /// each [`MemoryWindow::bind`] posts (before it completes, as
    /// `ibv_bind_mw` sets it).
    rkey: AtomicU32,
}

impl ProtectionDomain {
    /// `ibv_alloc_mw`: a new, unbound window of this PD.
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<MemoryWindow> {
        // The engines of a device of several share one window table: the
        // first's lock is enough to allocate (docs/multi-core-device.md).
        let (id, rkey) = self
            .ctx
            .inner
            .lock()
            .ep
            .alloc_mw(self.pd, mw_type)
            .ok_or_else(|| Error::InvalidArgument("ibv_alloc_mw: every memory window slot is taken".into()))?;
        tracing::debug!(rkey, ?mw_type, "memory window allocated");
        Ok(MemoryWindow { ctx: self.ctx.clone(), pd: self.pd, id, mw_type, rkey: AtomicU32::new(rkey) })
    }
}

impl MemoryWindow {
    /// `mw->rkey`: the key peers use once the last bind posted through
    /// [`MemoryWindow::bind`] has completed (or the allocation's). A type 2
    /// window bound by a work request keeps this value, as libibverbs'
    /// does; its key is the one that request asked for
    /// ([`MemoryWindow::current_rkey`] reads it from the engine).
    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Relaxed)
    }

    /// The rkey the window has in the engine now (binds executed so far).
    pub fn current_rkey(&self) -> u32 {
        self.ctx.inner.lock().ep.mw(self.id).map_or(self.rkey(), |w| w.rkey)
    }

    /// What the window reaches now, if it is bound.
    pub fn binding(&self) -> Option<WindowBinding> {
        self.ctx.inner.lock().ep.mw(self.id).and_then(|w| w.binding)
    }

    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }

    /// The engine's handle (stable across binds).
    pub fn id(&self) -> MwId {
        self.id
    }

    /// A BIND_MW work request for this window (`IBV_WR_BIND_MW`: how a
    /// type 2 window is bound): `length` bytes at `addr` of `mr` with
    /// `access`, the rkey becoming [`inc_rkey`] of [`MemoryWindow::current_rkey`].
    /// Post it with [`QueuePair::post_send`]; its completion is
    /// `IBV_WC_BIND_MW`, or `IBV_WC_MW_BIND_ERR` if refused.
    pub fn bind_wr(&self, wr_id: u64, mr: &MemoryRegion, addr: u64, length: u64, access: Access) -> SendWr {
        let mw_rkey = self.current_rkey();
        let op = SendOp::BindMw { mw_rkey, rkey: inc_rkey(mw_rkey), mr_lkey: mr.lkey(), addr, length, access };
        SendWr::new(wr_id, op, Vec::new())
    }

    /// `ibv_bind_mw` (type 1 only): posts a bind of this window on `qp`
    /// and returns the rkey the window has once it completes (also
    /// [`MemoryWindow::rkey`] from now on; if the completion says
    /// `IBV_WC_MW_BIND_ERR`, the window keeps its old key, which the
    /// caller should take back as libibverbs' callers do).
    ///
    /// Refused before anything is posted, as libibverbs and rxe's
    /// provider refuse them: a type 2 window, `addr` or `length` without
    /// a region, a region of another PD (libibverbs: EPERM), a zero-based
    /// window, a QP of another device.
    pub fn bind(&self, qp: &QueuePair, wr_id: u64, signaled: bool, info: &MwBindInfo<'_>) -> Result<u32> {
        if self.mw_type != MwType::Type1 {
            return Err(Error::InvalidArgument("ibv_bind_mw binds type 1 windows; post a BIND_MW for type 2".into()));
        }
        if !std::sync::Arc::ptr_eq(&qp.ctx.inner, &self.ctx.inner) {
            return Err(Error::WrongDevice("the queue pair"));
        }
        if info.mr.is_none() && (info.addr != 0 || info.length != 0) {
            return Err(Error::InvalidArgument("ibv_bind_mw: an address or length without a region".into()));
        }
        if let Some(mr) = info.mr {
            if mr.pd() != self.pd {
                return Err(Error::InvalidArgument("ibv_bind_mw: the region belongs to another PD (EPERM)".into()));
            }
        }
        if info.access.contains(Access::ZERO_BASED) {
            return Err(Error::InvalidArgument("ibv_bind_mw: zero-based windows are not supported".into()));
        }
        let old = self.rkey();
        let new = inc_rkey(old);
        let op = SendOp::BindMw {
            mw_rkey: old,
            rkey: new,
            mr_lkey: info.mr.map_or(0, MemoryRegion::lkey),
            addr: info.addr,
            length: info.length,
            access: info.access,
        };
        let mut wr = SendWr::new(wr_id, op, Vec::new());
        wr.signaled = signaled;
        qp.post_send(std::slice::from_ref(&wr))?;
        // As libibverbs: the key is the new one from the post on.
        self.rkey.store(new, Ordering::Relaxed);
        Ok(new)
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        self.ctx.inner.lock().ep.dealloc_mw(self.id);
    }
}
