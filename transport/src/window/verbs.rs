//! The window verbs on an endpoint's memory table: `ibv_alloc_mw` and
//! `ibv_dealloc_mw`, binds, invalidations (LOCAL_INV, SEND_WITH_INV), the
//! local operations the requester reaches (BIND_MW, LOCAL_INV), and the one
//! lookup of a remote key, a region's or a window's
//! ([`MemoryTable::check_remote`]). The rules are the parent module's.

use super::{
    is_window_key, BindArgs, BindError, InvalidateError, MemoryWindow, MwId, MwType, WindowBinding, WindowTable,
    Windows, MAX_WINDOWS, WINDOW_KEY_BIT,
};
use crate::memory::{Access, AccessError, MemoryRegion, MemoryTable, Pd};

/// The rights a window may grant (rxe's `RXE_ACCESS_SUPPORTED_MW` less
/// `IB_ZERO_BASED`, which is refused here).
const WINDOW_ACCESS: u32 = Access::LOCAL_WRITE.0
    | Access::REMOTE_WRITE.0
    | Access::REMOTE_READ.0
    | Access::REMOTE_ATOMIC.0
    | Access::MW_BIND.0
    | Access::FLUSH_GLOBAL.0
    | Access::FLUSH_PERSISTENT.0;

/// Executes a local operation posted on QP `qpn` of PD `pd` when the
/// requester reaches it: a bind (refused: `IBV_WC_MW_BIND_ERR`) or a
/// local invalidate (refused: `IBV_WC_LOC_QP_OP_ERR`), as rxe_req.c's
/// `rxe_do_local_ops` completes them.
pub(crate) fn execute_local(
    mrs: &mut MemoryTable,
    pd: Pd,
    qpn: u32,
    op: &crate::wr::SendOp,
) -> Result<(), crate::wr::WcStatus> {
    use crate::wr::{SendOp, WcStatus};
    match op {
        &SendOp::BindMw { mw_rkey, rkey, mr_lkey, addr, length, access } => {
            let args = BindArgs { mw_rkey, rkey, mr_lkey, addr, length, access };
            match mrs.bind_window(pd, qpn, &args) {
                Ok(rkey) => {
                    tracing::debug!(qpn, rkey, addr = args.addr, len = args.length, "memory window bound");
                    Ok(())
                }
                Err(e) => {
                    tracing::debug!(qpn, error = %e, "memory window bind refused");
                    Err(WcStatus::MwBindErr)
                }
            }
        }
        SendOp::LocalInv { invalidate_rkey } => match mrs.invalidate(*invalidate_rkey, pd, None) {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::debug!(qpn, error = %e, "local invalidate refused");
                Err(WcStatus::LocQpOpErr)
            }
        },
        _ => Err(WcStatus::LocQpOpErr),
    }
}

impl MemoryTable {
    /// `ibv_alloc_mw`: a new unbound window of `pd`; `None` when every
    /// slot is taken.
    pub fn alloc_window(&mut self, pd: Pd, mw_type: MwType) -> Option<(MwId, u32)> {
        let mut windows = self.windows.lock();
        let index = match windows.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if windows.slots.len() < MAX_WINDOWS => {
                windows.slots.push(None);
                windows.slots.len() - 1
            }
            None => return None,
        };
        let rkey = WINDOW_KEY_BIT | ((index as u32 + 1) << 8) | u32::from(windows.keys.next_u64() as u8);
        windows.slots[index] = Some(MemoryWindow { pd, mw_type, rkey, binding: None });
        Some((MwId::of(rkey), rkey))
    }

    /// `ibv_dealloc_mw`: unbinds and frees the window; returns whether it existed.
    pub fn dealloc_window(&mut self, id: MwId) -> bool {
        match self.windows.lock().slot_mut(id) {
            Some(slot @ Some(_)) => {
                *slot = None;
                true
            }
            _ => false,
        }
    }

    /// The window whose handle is `id`.
    pub fn window(&self, id: MwId) -> Option<MemoryWindow> {
        self.windows.by_id(id)
    }

    /// How many windows are bound to the region of `mr_key`: `ibv_dereg_mr`
    /// refuses while any is (IBA 10.6.7.2.6, rxe_verbs.c `rxe_dereg_mr`).
    pub fn windows_bound_to(&self, mr_key: u32) -> usize {
        self.windows.bound_to(mr_key)
    }

    /// The window table, to share with the other engines of a device.
    pub fn window_table(&self) -> WindowTable {
        self.windows.clone()
    }

    /// Uses `table` (another engine's) for windows from now on; this
    /// table must have none of its own yet.
    pub fn share_window_table(&mut self, table: WindowTable) {
        debug_assert!(self.windows.lock().slots.is_empty(), "windows are shared before any is made");
        self.windows = table;
    }

    /// Executes a bind posted on QP `qpn` of PD `qp_pd`; returns the
    /// window's new rkey. Refused binds change nothing. The checks are
    /// rxe's (`rxe_check_bind_mw`), plus: the region's PD must be the
    /// window's (libibverbs' `ibv_bind_mw` checks it for type 1) and
    /// zero-based windows are refused. Checked and done under the window
    /// table's lock: another engine binding the same window waits.
    pub fn bind_window(&mut self, qp_pd: Pd, qpn: u32, a: &BindArgs) -> Result<u32, BindError> {
        let mut windows = self.windows.lock();
        let w = *windows.get(a.mw_rkey).ok_or(BindError::NoWindow(a.mw_rkey))?;
        if a.access.0 & !WINDOW_ACCESS != 0 {
            return Err(BindError::BadAccess(a.access.0));
        }
        if w.mw_type == MwType::Type2 {
            if w.binding.is_some() {
                return Err(BindError::Type2Bound(a.mw_rkey)); // o10-37.2.30
            }
            if qp_pd != w.pd {
                return Err(BindError::QpPdMismatch(a.mw_rkey)); // C10-72
            }
            if a.length == 0 {
                return Err(BindError::ZeroLengthType2); // o10-37.2.40
            }
        }
        let binding = if a.length == 0 {
            None
        } else {
            let r = self.get(a.mr_lkey).filter(|r| r.lkey == a.mr_lkey).ok_or(BindError::NoRegion(a.mr_lkey))?;
            if r.pd != w.pd {
                return Err(BindError::RegionPdMismatch(a.mr_lkey));
            }
            if !r.access.contains(Access::MW_BIND) {
                return Err(BindError::NoMwBind(a.mr_lkey)); // C10-73
            }
            let writable = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0);
            if a.access.0 & writable.0 != 0 && !r.access.contains(Access::LOCAL_WRITE) {
                return Err(BindError::NeedsLocalWrite(a.mr_lkey)); // C10-74
            }
            let inside = a.addr >= r.va && a.addr.checked_add(a.length).is_some_and(|end| end <= r.va + r.len);
            if !inside {
                return Err(BindError::OutsideRegion { key: a.mr_lkey, addr: a.addr, len: a.length });
                // C10-75
            }
            let qpn = (w.mw_type == MwType::Type2).then_some(qpn);
            Some(WindowBinding { mr_key: r.lkey, addr: a.addr, len: a.length, access: a.access, qpn })
        };
        let rkey = (w.rkey & !0xff) | (a.rkey & 0xff);
        let slot = windows.get_mut(a.mw_rkey).expect("looked up above");
        slot.rkey = rkey;
        slot.binding = binding;
        Ok(rkey)
    }

    /// Whether `key` may be invalidated by a QP of `pd`: by LOCAL_INV
    /// (`qpn` None) or by a SEND with invalidate arriving on QP `qpn`,
    /// which must be the QP a type 2 window is bound to. Changes nothing.
    pub fn check_invalidate(&self, key: u32, pd: Pd, qpn: Option<u32>) -> Result<(), InvalidateError> {
        self.windows.lock().check_invalidate(key, pd, qpn)
    }

    /// Invalidates the window of `key` if [`MemoryTable::check_invalidate`]
    /// allows it: it is unbound, and its rkey reaches nothing until bound
    /// again. Checked and done under the window table's lock.
    pub fn invalidate(&mut self, key: u32, pd: Pd, qpn: Option<u32>) -> Result<(), InvalidateError> {
        let mut windows = self.windows.lock();
        windows.check_invalidate(key, pd, qpn)?;
        if let Some(w) = windows.get_mut(key) {
            w.binding = None;
        }
        Ok(())
    }

    /// Checks a remote access of `len` bytes at `addr` through `rkey`
    /// arriving on QP `qpn` of PD `pd`, needing `needed`: a region's rkey
    /// as [`MemoryTable::check`]; a window's must name a bound window of
    /// `pd` (and, type 2, bound to `qpn`) that grants `needed` over the
    /// whole range, which must lie in its region too. Returns the region
    /// and the offset into it.
    pub fn check_remote(
        &self,
        rkey: u32,
        pd: Pd,
        qpn: u32,
        addr: u64,
        len: u64,
        needed: Access,
    ) -> Result<(&MemoryRegion, usize), AccessError> {
        if !is_window_key(rkey) {
            return self.check(rkey, pd, addr, len, needed);
        }
        let w = self.windows.get(rkey).ok_or(AccessError::BadKey(rkey))?;
        if w.pd != pd {
            return Err(AccessError::PdMismatch { key: rkey });
        }
        let b = w.binding.ok_or(AccessError::WindowNotBound(rkey))?;
        if b.qpn.is_some_and(|q| q != qpn) {
            return Err(AccessError::WindowOfAnotherQp { key: rkey });
        }
        if !b.access.contains(needed) {
            return Err(AccessError::NotPermitted { key: rkey, needed });
        }
        let in_window = addr >= b.addr && addr.checked_add(len).is_some_and(|end| end <= b.addr + b.len);
        if !in_window {
            return Err(AccessError::OutOfBounds { key: rkey, addr, len });
        }
        // The region's own rights do not matter (the window's were checked
        // against them at bind time); its bounds still do, should it have
        // been reregistered since.
        self.check(b.mr_key, w.pd, addr, len, Access::NONE)
    }
}

impl Windows {
    /// [`MemoryTable::check_invalidate`], the table locked.
    fn check_invalidate(&self, key: u32, pd: Pd, qpn: Option<u32>) -> Result<(), InvalidateError> {
        if !is_window_key(key) {
            return Err(InvalidateError::Region(key));
        }
        let w = self.get(key).ok_or(InvalidateError::NoWindow(key))?;
        if w.mw_type == MwType::Type1 {
            return Err(InvalidateError::Type1(key)); // o10-37.2.26
        }
        if w.pd != pd {
            return Err(InvalidateError::PdMismatch(key));
        }
        let b = w.binding.ok_or(InvalidateError::NotBound(key))?;
        if qpn.is_some_and(|q| b.qpn != Some(q)) {
            return Err(InvalidateError::OtherQp(key));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RegionMemory;

    const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

    fn table() -> (MemoryTable, u32) {
        let mut t = MemoryTable::default();
        let (key, _) = t.register(Pd(1), 0x1000, RegionMemory::zeroed(256), RW | Access::MW_BIND);
        (t, key)
    }

    fn bind(mw_rkey: u32, mr: u32, addr: u64, length: u64, access: Access) -> BindArgs {
        BindArgs { mw_rkey, rkey: mw_rkey.wrapping_add(1), mr_lkey: mr, addr, length, access }
    }

    #[test]
    fn a_type2_window_reaches_its_range_from_its_qp_only_and_until_invalidated() {
        let (mut t, mr) = table();
        let (id, k0) = t.alloc_window(Pd(1), MwType::Type2).unwrap();
        assert!(is_window_key(k0) && !is_window_key(mr));
        assert_eq!(t.check_remote(k0, Pd(1), 7, 0x1000, 8, Access::NONE).unwrap_err(), AccessError::WindowNotBound(k0));
        let k1 = t.bind_window(Pd(1), 7, &bind(k0, mr, 0x1040, 64, Access::REMOTE_READ)).unwrap();
        assert_eq!((k1 & !0xff, k1 & 0xff), (k0 & !0xff, (k0 + 1) & 0xff));
        assert_eq!(t.window(id).unwrap().rkey, k1);
        let (r, at) = t.check_remote(k1, Pd(1), 7, 0x1040, 64, Access::REMOTE_READ).unwrap();
        assert_eq!((r.lkey, at), (mr, 0x40));
        assert_eq!(t.check_remote(k0, Pd(1), 7, 0x1040, 8, Access::NONE).unwrap_err(), AccessError::BadKey(k0));
        assert_eq!(
            t.check_remote(k1, Pd(1), 8, 0x1040, 8, Access::REMOTE_READ).unwrap_err(),
            AccessError::WindowOfAnotherQp { key: k1 }
        );
        assert_eq!(
            t.check_remote(k1, Pd(1), 7, 0x1040, 8, Access::REMOTE_WRITE).unwrap_err(),
            AccessError::NotPermitted { key: k1, needed: Access::REMOTE_WRITE }
        );
        for (addr, len) in [(0x103f, 2), (0x1070, 17), (0x1000, 8), (u64::MAX, 2)] {
            assert!(
                matches!(
                    t.check_remote(k1, Pd(1), 7, addr, len, Access::REMOTE_READ),
                    Err(AccessError::OutOfBounds { .. })
                ),
                "{addr:#x}+{len}: outside the window though inside the region"
            );
        }
        assert_eq!(
            t.check_remote(k1, Pd(2), 7, 0x1040, 8, Access::NONE).unwrap_err(),
            AccessError::PdMismatch { key: k1 }
        );
        // Rebinding a bound type 2 window is refused, and changes nothing.
        assert_eq!(t.bind_window(Pd(1), 7, &bind(k1, mr, 0x1000, 8, RW)), Err(BindError::Type2Bound(k1)));
        assert!(t.check_remote(k1, Pd(1), 7, 0x1040, 64, Access::REMOTE_READ).is_ok());
        // Only its QP may invalidate it by SEND_WITH_INV; LOCAL_INV needs its PD.
        assert_eq!(t.invalidate(k1, Pd(1), Some(8)), Err(InvalidateError::OtherQp(k1)));
        assert_eq!(t.invalidate(k1, Pd(2), None), Err(InvalidateError::PdMismatch(k1)));
        assert_eq!(t.windows_bound_to(mr), 1);
        t.invalidate(k1, Pd(1), Some(7)).unwrap();
        assert_eq!(t.windows_bound_to(mr), 0);
        assert_eq!(t.check_remote(k1, Pd(1), 7, 0x1040, 8, Access::NONE).unwrap_err(), AccessError::WindowNotBound(k1));
        assert_eq!(t.invalidate(k1, Pd(1), None), Err(InvalidateError::NotBound(k1)));
        // Bound again, with a new key.
        let k2 = t.bind_window(Pd(1), 9, &bind(k1, mr, 0x1000, 256, RW)).unwrap();
        assert!(t.check_remote(k2, Pd(1), 9, 0x1000, 256, Access::REMOTE_WRITE).is_ok());
        assert!(t.dealloc_window(id));
        assert!(t.check_remote(k2, Pd(1), 9, 0x1000, 8, Access::NONE).is_err());
        assert!(!t.dealloc_window(id));
    }

    #[test]
    fn binds_are_checked_as_rxe_checks_them() {
        let (mut t, mr) = table();
        let (_, plain) = t.register(Pd(1), 0x9000, RegionMemory::zeroed(64), RW);
        let (_, read_only) = t.register(Pd(1), 0xa000, RegionMemory::zeroed(64), Access::MW_BIND);
        let (_, other_pd) = t.register(Pd(2), 0xb000, RegionMemory::zeroed(64), RW | Access::MW_BIND);
        let (_, w2) = t.alloc_window(Pd(1), MwType::Type2).unwrap();
        let (_, w2_other) = t.alloc_window(Pd(2), MwType::Type2).unwrap();
        let cases = [
            (Pd(1), bind(w2 ^ 0x100, mr, 0x1000, 8, RW), BindError::NoWindow(w2 ^ 0x100)),
            (Pd(1), bind(w2, mr ^ 0x100, 0x1000, 8, RW), BindError::NoRegion(mr ^ 0x100)),
            (Pd(1), bind(w2, mr, 0x1000, 8, Access::ZERO_BASED), BindError::BadAccess(Access::ZERO_BASED.0)),
            (Pd(1), bind(w2_other, other_pd, 0xb000, 8, RW), BindError::QpPdMismatch(w2_other)),
            (Pd(1), bind(w2, mr, 0x1000, 0, RW), BindError::ZeroLengthType2),
            (Pd(1), bind(w2, other_pd, 0xb000, 8, RW), BindError::RegionPdMismatch(other_pd)),
            (Pd(1), bind(w2, plain, 0x9000, 8, RW), BindError::NoMwBind(plain)),
            (Pd(1), bind(w2, read_only, 0xa000, 8, Access::REMOTE_WRITE), BindError::NeedsLocalWrite(read_only)),
            (Pd(1), bind(w2, mr, 0xfff, 8, RW), BindError::OutsideRegion { key: mr, addr: 0xfff, len: 8 }),
            (Pd(1), bind(w2, mr, 0x10f9, 8, RW), BindError::OutsideRegion { key: mr, addr: 0x10f9, len: 8 }),
        ];
        for (pd, args, want) in cases {
            assert_eq!(t.bind_window(pd, 1, &args), Err(want));
            assert!(t.windows.get(w2).is_some_and(|w| w.binding.is_none()), "{want}: nothing changed");
        }
        // Reading through a window on a region without local write is fine.
        assert!(t.bind_window(Pd(1), 1, &bind(w2, read_only, 0xa000, 64, Access::REMOTE_READ)).is_ok());
    }

    #[test]
    fn a_type1_window_is_unbound_by_a_zero_length_bind_and_never_invalidated() {
        let (mut t, mr) = table();
        let (_, k0) = t.alloc_window(Pd(1), MwType::Type1).unwrap();
        let k1 = t.bind_window(Pd(1), 3, &bind(k0, mr, 0x1000, 16, Access::REMOTE_READ)).unwrap();
        // Any QP of the PD reaches it.
        assert!(t.check_remote(k1, Pd(1), 99, 0x1000, 16, Access::REMOTE_READ).is_ok());
        assert_eq!(t.invalidate(k1, Pd(1), Some(3)), Err(InvalidateError::Type1(k1)));
        assert_eq!(t.invalidate(k1, Pd(1), None), Err(InvalidateError::Type1(k1)));
        // Rebinding a bound type 1 window moves it.
        let k2 = t.bind_window(Pd(1), 3, &bind(k1, mr, 0x1080, 16, Access::REMOTE_READ)).unwrap();
        assert!(t.check_remote(k2, Pd(1), 3, 0x1000, 16, Access::REMOTE_READ).is_err());
        assert!(t.check_remote(k2, Pd(1), 3, 0x1080, 16, Access::REMOTE_READ).is_ok());
        let k3 = t.bind_window(Pd(1), 3, &bind(k2, 0, 0, 0, Access::NONE)).unwrap();
        assert_eq!(t.check_remote(k3, Pd(1), 3, 0x1080, 1, Access::NONE).unwrap_err(), AccessError::WindowNotBound(k3));
        // A region's key cannot be invalidated (no fast-registration regions).
        assert_eq!(t.check_invalidate(mr, Pd(1), None), Err(InvalidateError::Region(mr)));
    }

    #[test]
    fn deregistering_a_region_unbinds_its_windows() {
        let (mut t, mr) = table();
        let (_, k0) = t.alloc_window(Pd(1), MwType::Type1).unwrap();
        let k1 = t.bind_window(Pd(1), 3, &bind(k0, mr, 0x1000, 16, Access::REMOTE_READ)).unwrap();
        assert_eq!(t.windows_bound_to(mr), 1);
        assert!(t.deregister(mr));
        assert_eq!(t.windows_bound_to(mr), 0);
        assert_eq!(t.check_remote(k1, Pd(1), 3, 0x1000, 1, Access::NONE).unwrap_err(), AccessError::WindowNotBound(k1));
    }
}
