//! Memory windows (IBTA 1.1+ 10.6.7, kernel rxe's `rxe_mw.c`): a window
//! grants remote access to a range of a memory region under an rkey of
//! its own, with access rights of its own, and can be taken back without
//! touching the region.
//!
//! - A window is allocated in a PD, of type 1 or 2 (`ibv_alloc_mw`), and
//!   starts unbound: its rkey reaches nothing.
//! - A bind (`IBV_WR_BIND_MW`, executed in order with the send queue)
//!   gives it a range of a region that allows `IBV_ACCESS_MW_BIND` and an
//!   rkey whose low byte the consumer chose (`ibv_inc_rkey`). A type 2
//!   window is bound to the QP that bound it: only requests arriving on
//!   that QP reach memory through it (type 2B, as rxe).
//! - A type 2 window is unbound by `IBV_WR_LOCAL_INV` or by a peer's
//!   SEND with invalidate naming its rkey; a type 1 window by a bind of
//!   length 0; both by deallocation.
//!
//! Window rkeys have bit 31 set ([`WINDOW_KEY_BIT`]) and region keys never
//! do, so one lookup ([`crate::memory::MemoryTable::check_remote`]) tells
//! them apart.
//! See docs/memory-windows.md for the rules and where each comes from.

use crate::protection::{Access, Pd};
use crate::rng::Rng;
use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) mod verbs;

/// Set in every window rkey, never in a region's key.
pub const WINDOW_KEY_BIT: u32 = 1 << 31;

/// Regions' slots stay below this, so their keys never have bit 31 set.
pub(crate) const MAX_REGIONS: usize = (1 << 23) - 1;

/// How many windows an endpoint holds (the index takes bits 8..31 of the rkey).
pub const MAX_WINDOWS: usize = (1 << 23) - 1;

/// Whether `key` names a memory window rather than a region.
pub const fn is_window_key(key: u32) -> bool {
    key & WINDOW_KEY_BIT != 0
}

/// `enum ibv_mw_type`, with its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum MwType {
    /// `IBV_MW_TYPE_1`: bound by `ibv_bind_mw`, usable from any QP of its
    /// PD, unbound by a zero-length bind.
    Type1 = 1,
    /// `IBV_MW_TYPE_2` (type 2B): bound by a BIND_MW work request, usable
    /// only through the QP that bound it, invalidated by LOCAL_INV or
    /// SEND_WITH_INV.
    Type2 = 2,
}

/// A window's stable handle: the rkey without its low (consumer) byte,
/// which binds change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MwId(pub u32);

impl MwId {
    fn of(key: u32) -> MwId {
        MwId(key >> 8)
    }
}

/// What a bound window reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowBinding {
    /// The key of the region it lies in.
    pub mr_key: u32,
    pub addr: u64,
    pub len: u64,
    /// The remote rights it grants (`mw_access_flags`).
    pub access: Access,
    /// Type 2: the QP it is bound to.
    pub qpn: Option<u32>,
}

/// A memory window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryWindow {
    pub pd: Pd,
    pub mw_type: MwType,
    /// The current rkey (its low byte changes with each bind).
    pub rkey: u32,
    /// `None`: unbound (new, invalidated, or a type 1 bound with length 0).
    pub binding: Option<WindowBinding>,
}

/// The windows of an endpoint, by index: a handle that the engines of a
/// device of several share ([`crate::Endpoint::share_windows`]), since a
/// window is bound through one QP's engine and reached through any QP of
/// its PD (type 1), and every engine's deregistration must see the
/// windows bound to a region. Each call takes the table's lock for its
/// own work and gives copies back, so the lock is never held across
/// another; regions' accesses never take it (their keys never have
/// [`WINDOW_KEY_BIT`]).
#[derive(Debug, Clone, Default)]
pub struct WindowTable(Arc<Mutex<Windows>>);

#[derive(Debug, Default)]
pub(crate) struct Windows {
    slots: Vec<Option<MemoryWindow>>,
    /// Draws each window key's low byte: the table's own, so that windows
    /// made on one engine leave the engines' region keys in step.
    keys: Rng,
}

impl Windows {
    fn index(id: MwId) -> Option<usize> {
        let raw = id.0 << 8;
        if !is_window_key(raw) {
            return None;
        }
        Some(((raw & !WINDOW_KEY_BIT) >> 8).checked_sub(1)? as usize)
    }

    fn by_id(&self, id: MwId) -> Option<&MemoryWindow> {
        self.slots.get(Self::index(id)?)?.as_ref()
    }

    fn slot_mut(&mut self, id: MwId) -> Option<&mut Option<MemoryWindow>> {
        self.slots.get_mut(Self::index(id)?)
    }

    /// The window whose current rkey is `key`.
    fn get(&self, key: u32) -> Option<&MemoryWindow> {
        self.by_id(MwId::of(key)).filter(|w| w.rkey == key)
    }

    fn get_mut(&mut self, key: u32) -> Option<&mut MemoryWindow> {
        self.slot_mut(MwId::of(key))?.as_mut().filter(|w| w.rkey == key)
    }
}

impl WindowTable {
    /// An empty table whose keys draw their low byte from `keys`.
    pub(crate) fn with_rng(keys: Rng) -> WindowTable {
        WindowTable(Arc::new(Mutex::new(Windows { slots: Vec::new(), keys })))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Windows> {
        // A panic elsewhere cannot leave a window half changed: every
        // change is one assignment.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The window whose handle is `id`.
    pub fn by_id(&self, id: MwId) -> Option<MemoryWindow> {
        self.lock().by_id(id).copied()
    }

    /// The window whose current rkey is `key`.
    pub fn get(&self, key: u32) -> Option<MemoryWindow> {
        self.lock().get(key).copied()
    }

    /// How many windows are bound to the region of `mr_key`.
    pub fn bound_to(&self, mr_key: u32) -> usize {
        self.lock().slots.iter().flatten().filter(|w| w.binding.is_some_and(|b| b.mr_key == mr_key)).count()
    }

    /// Unbinds every type 2 window bound to QP `qpn` (it is destroyed: a
    /// later QP that reuses the number must not inherit them).
    pub(crate) fn unbind_all_of_qp(&self, qpn: u32) {
        for w in self.lock().slots.iter_mut().flatten() {
            if w.binding.is_some_and(|b| b.qpn == Some(qpn)) {
                w.binding = None;
            }
        }
    }

    /// Unbinds every window bound to the region of `mr_key`.
    pub(crate) fn unbind_all_of(&self, mr_key: u32) {
        for w in self.lock().slots.iter_mut().flatten() {
            if w.binding.is_some_and(|b| b.mr_key == mr_key) {
                w.binding = None;
            }
        }
    }
}

/// Why a bind failed: the WQE completes with `IBV_WC_MW_BIND_ERR` and the
/// QP moves to the error state (rxe_req.c `rxe_do_local_ops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("no memory window with rkey {0:#x}")]
    NoWindow(u32),
    #[error("no memory region with lkey {0:#x}")]
    NoRegion(u32),
    #[error("access flags {0:#x} cannot be given to a window")]
    BadAccess(u32),
    #[error("type 2 window {0:#x} is bound: invalidate it before binding it again")]
    Type2Bound(u32),
    #[error("type 2 window {0:#x} belongs to another PD than the QP")]
    QpPdMismatch(u32),
    #[error("a type 2 window cannot be bound with length 0")]
    ZeroLengthType2,
    #[error("region {0:#x} belongs to another PD than the window")]
    RegionPdMismatch(u32),
    #[error("region {0:#x} does not allow MW_BIND")]
    NoMwBind(u32),
    #[error("remote write or atomic rights need LOCAL_WRITE on region {0:#x}")]
    NeedsLocalWrite(u32),
    #[error("window {addr:#x}+{len} is outside region {key:#x}")]
    OutsideRegion { key: u32, addr: u64, len: u64 },
}

/// Why an invalidation (LOCAL_INV, SEND_WITH_INV) was refused: nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidateError {
    #[error("no memory window with rkey {0:#x}")]
    NoWindow(u32),
    #[error("rkey {0:#x} is a memory region's: only fast-registration regions can be invalidated, and there are none")]
    Region(u32),
    #[error("window {0:#x} is of type 1: only a zero-length bind unbinds it")]
    Type1(u32),
    #[error("window {0:#x} is not bound")]
    NotBound(u32),
    #[error("window {0:#x} belongs to another PD")]
    PdMismatch(u32),
    #[error("window {0:#x} is bound to another QP")]
    OtherQp(u32),
}

/// The operands of a bind (`ibv_send_wr.bind_mw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindArgs {
    /// The window's current rkey.
    pub mw_rkey: u32,
    /// Its new rkey: only the low byte is taken (the consumer's key).
    pub rkey: u32,
    pub mr_lkey: u32,
    pub addr: u64,
    pub length: u64,
    pub access: Access,
}
