//! Protection domains and memory regions, and the checks every access goes
//! through: the key, the protection domain, the bounds and the access flags.
//!
//! A region's bytes live in a [`RegionMemory`] shared with the application
//! side. It hands out copies, never references, so no safe caller can hold a
//! slice that the engine writes underneath it.

pub use crate::protection::{Access, Pd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The bytes of a memory region, shared between the application and the
/// engine. Every access copies under a lock (or, from a region that has
/// held only zeros, copies zeros without reading it: [`RegionMemory::zeroed`]),
/// so no safe caller ever holds a reference into bytes the engine may write.
#[derive(Debug, Clone)]
pub struct RegionMemory(Arc<Bytes>);

#[derive(Debug)]
enum Bytes {
    /// Owned by the region. `zeros`: no byte has been anything but zero
    /// yet ([`RegionMemory::zeroed`]); `len`: the bytes' length, kept
    /// apart for the bounds check of the zeros' path, which takes no lock.
    Owned { bytes: Mutex<Box<[u8]>>, len: usize, zeros: AtomicBool },
    /// The caller's memory, registered with [`RegionMemory::from_raw`].
    Raw { ptr: *mut u8, len: usize, lock: Mutex<()> },
    /// The caller's memory, on demand ([`RegionMemory::on_demand`]): any
    /// page may be unmapped, so it is never dereferenced, only copied with
    /// the kernel's fault-safe copies (`crate::odp`). The lock serializes
    /// the engine's read-modify-writes (atomics).
    OnDemand { addr: usize, len: usize, lock: Mutex<()> },
}

/// An access to an on-demand region ([`RegionMemory::on_demand`]) reached
/// a page that is not mapped, or does not allow it (a write to a read-only
/// page). Bytes before the fault may have been copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{len} bytes at offset {offset} of an on-demand region are not mapped (or not accessible)")]
pub struct MemoryFault {
    pub offset: usize,
    pub len: usize,
}

// SAFETY: `Raw` memory is only touched under its lock, and the caller of
// `from_raw` promised it stays valid and is not used through other paths
// while registered.
unsafe impl Send for Bytes {}
unsafe impl Sync for Bytes {}

/// Exclusive access to a region's bytes for as long as it lives.
pub struct RegionGuard<'a> {
    _lock: Option<MutexGuard<'a, ()>>,
    owned: Option<MutexGuard<'a, Box<[u8]>>>,
    raw: (*mut u8, usize),
}

impl core::ops::Deref for RegionGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.owned {
            Some(g) => g,
            // SAFETY: from_raw's contract, and the lock held by this guard.
            None => unsafe { core::slice::from_raw_parts(self.raw.0, self.raw.1) },
        }
    }
}

impl core::ops::DerefMut for RegionGuard<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.owned {
            Some(g) => g,
            // SAFETY: as above; the guard is the only path to the bytes.
            None => unsafe { core::slice::from_raw_parts_mut(self.raw.0, self.raw.1) },
        }
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave plain bytes invalid.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RegionMemory {
    /// `len` zeroed bytes.
    ///
    /// Until a byte other than zero is written, the region is read as zeros
    /// without touching its bytes, and zeros written into it are not copied
    /// (nothing would change), as the kernel's zero page serves untouched
    /// memory. The fabric simulator's hosts move only zeros: their payloads
    /// then cost no cache misses on either side (docs/performance.md). The
    /// first write of anything else, and any [`RegionMemory::lock`], end it.
    pub fn zeroed(len: usize) -> RegionMemory {
        RegionMemory::owned(vec![0u8; len], true)
    }

    /// `len` zeroed bytes, or the allocator's refusal: for sizes a caller
    /// (or a peer) chose, where `zeroed` would abort the process.
    pub fn try_zeroed(len: usize) -> Result<RegionMemory, std::collections::TryReserveError> {
        let mut v = Vec::new();
        v.try_reserve_exact(len)?;
        v.resize(len, 0);
        Ok(RegionMemory::owned(v, true))
    }

    /// Wraps existing bytes.
    pub fn from_vec(v: Vec<u8>) -> RegionMemory {
        RegionMemory::owned(v, false)
    }

    /// Whether the region is still served as zeros ([`RegionMemory::zeroed`]):
    /// no byte has been anything but zero. (Another thread may end that at
    /// any time; a caller that reads the region itself knows it holds.)
    pub fn holds_only_zeros(&self) -> bool {
        matches!(&*self.0, Bytes::Owned { zeros, .. } if zeros.load(Ordering::Acquire))
    }

    /// Runs `f` on the bytes as they are stored and whether the region is
    /// still served as zeros, without ending that ([`RegionMemory::lock`]
    /// would): for an oracle that checks the zeros served are the bytes
    /// held (the engine fuzz target). Do not drive the engine inside `f`.
    /// Not for on-demand regions.
    pub(crate) fn with_stored<R>(&self, f: impl FnOnce(&[u8], bool) -> R) -> R {
        match &*self.0 {
            Bytes::Owned { bytes, zeros, .. } => {
                let held = relock(bytes);
                f(&held, zeros.load(Ordering::Acquire))
            }
            Bytes::Raw { .. } => f(&self.lock(), false),
            Bytes::OnDemand { .. } => on_demand_misuse("with_stored"),
        }
    }

    /// Writes `v` at `offset` behind the zeros' back (their flag stays
    /// set): the inconsistency the fuzz target's oracle must catch.
    #[cfg(test)]
    pub(crate) fn write_behind_zeros(&self, offset: usize, v: &[u8]) {
        if let Bytes::Owned { bytes, .. } = &*self.0 {
            relock(bytes)[offset..offset + v.len()].copy_from_slice(v);
        }
    }

    /// `zeros`: every byte of `v` is zero.
    fn owned(v: Vec<u8>, zeros: bool) -> RegionMemory {
        let len = v.len();
        RegionMemory(Arc::new(Bytes::Owned {
            bytes: Mutex::new(v.into_boxed_slice()),
            len,
            zeros: AtomicBool::new(zeros),
        }))
    }

    /// Memory the caller owns, used in place.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for as long as
    /// any clone of the returned value exists, and must not be read or
    /// written except through it (the engine writes it whenever a peer's
    /// WRITE or a READ response arrives).
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> RegionMemory {
        RegionMemory(Arc::new(Bytes::Raw { ptr, len, lock: Mutex::new(()) }))
    }

    /// The caller's memory `addr..addr+len`, on demand (ODP): nothing is
    /// checked or pinned now, and any page of it may be unmapped or
    /// remapped while the region lives. Every access copies through the
    /// kernel's fault-safe copies ([`RegionMemory::try_read`] and the
    /// other `try_` accessors): a page that is not mapped (or not
    /// writable, for a write) is a [`MemoryFault`], never a signal, and
    /// no Rust reference to the bytes is ever made. Packets never carry
    /// its bytes by reference ([`crate::PayloadRef`]).
    ///
    /// `on_demand(0, usize::MAX)` is implicit ODP: the whole address space.
    ///
    /// # Safety
    /// The engine writes whatever mapped, writable bytes of the range a
    /// peer or a READ response names, at any moment while the region is
    /// registered: those bytes must not belong to Rust values that
    /// assume nobody else writes them (the caller's own buffers, used only
    /// through raw pointers or volatile/atomic accesses, are fine).
    pub unsafe fn on_demand(addr: usize, len: usize) -> RegionMemory {
        RegionMemory(Arc::new(Bytes::OnDemand { addr, len, lock: Mutex::new(()) }))
    }

    /// Implicit ODP: the whole address space (`addr` 0, `len` `usize::MAX`).
    ///
    /// # Safety
    /// As [`RegionMemory::on_demand`], for every address of the process.
    pub unsafe fn implicit() -> RegionMemory {
        // SAFETY: forwarded to our caller.
        unsafe { RegionMemory::on_demand(0, usize::MAX) }
    }

    /// Whether the bytes are on demand ([`RegionMemory::on_demand`]).
    pub fn is_on_demand(&self) -> bool {
        matches!(&*self.0, Bytes::OnDemand { .. })
    }

    /// Locks the bytes: neither the engine nor another thread touches them
    /// until the guard is dropped. Do not drive the engine (poll, post,
    /// wait) while holding it: the engine would wait for it forever.
    ///
    /// # Panics
    /// On an on-demand region: its pages may not be mapped, so no slice of
    /// them can exist. Use [`RegionMemory::try_read`] / `try_write`.
    #[inline]
    pub fn lock(&self) -> RegionGuard<'_> {
        match &*self.0 {
            Bytes::Owned { bytes, zeros, .. } => {
                // The guard may write anything.
                if zeros.load(Ordering::Relaxed) {
                    zeros.store(false, Ordering::Release);
                }
                RegionGuard { _lock: None, owned: Some(relock(bytes)), raw: (core::ptr::null_mut(), 0) }
            }
            Bytes::Raw { ptr, len, lock } => RegionGuard { _lock: Some(relock(lock)), owned: None, raw: (*ptr, *len) },
            Bytes::OnDemand { .. } => on_demand_misuse("lock"),
        }
    }

    /// Whether the bytes are the caller's ([`RegionMemory::from_raw`]):
    /// they stay valid only while the caller keeps its promise, which a
    /// clone kept alive here cannot extend.
    pub fn is_callers(&self) -> bool {
        matches!(&*self.0, Bytes::Raw { .. })
    }

    /// Whether `self` and `other` are the same region's bytes (clones of
    /// one another).
    pub fn same(&self, other: &RegionMemory) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The address of the first byte (what libibverbs would register as `addr`).
    pub fn base_addr(&self) -> u64 {
        match &*self.0 {
            Bytes::Owned { bytes, .. } => relock(bytes).as_ptr() as u64,
            Bytes::Raw { ptr, .. } => *ptr as u64,
            Bytes::OnDemand { addr, .. } => *addr as u64,
        }
    }

    pub fn len(&self) -> usize {
        match &*self.0 {
            Bytes::Owned { len, .. } => *len,
            Bytes::Raw { len, .. } | Bytes::OnDemand { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `out.len()` bytes from `offset`. The caller has bounds-checked.
    ///
    /// # Panics
    /// On an on-demand region whose bytes there are not mapped: the engine
    /// uses [`RegionMemory::try_read`].
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        if let Err(e) = self.try_read(offset, out) {
            panic!("RegionMemory::read: {e}");
        }
    }

    /// Copies `data` to `offset`. The caller has bounds-checked.
    ///
    /// # Panics
    /// As [`RegionMemory::read`]; the engine uses [`RegionMemory::try_write`].
    pub fn write(&self, offset: usize, data: &[u8]) {
        if let Err(e) = self.try_write(offset, data) {
            panic!("RegionMemory::write: {e}");
        }
    }

    /// Copies `out.len()` bytes from `offset`, or says that some of them
    /// are not mapped (on-demand regions only: other regions' bytes are
    /// always there). The caller has bounds-checked.
    #[inline]
    pub fn try_read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemoryFault> {
        match &*self.0 {
            Bytes::OnDemand { addr, .. } => odp_copy(*addr, offset, out.len(), |a| crate::odp::read(a, out)),
            Bytes::Owned { bytes, len, zeros } => {
                // Zeros without reading them (a writer clears the flag
                // before its bytes land, under the lock). Out of bounds
                // panics here as the slice below would.
                if zeros.load(Ordering::Acquire) {
                    assert!(
                        offset.checked_add(out.len()).is_some_and(|end| end <= *len),
                        "RegionMemory: read past the end"
                    );
                    out.fill(0);
                } else {
                    out.copy_from_slice(&relock(bytes)[offset..offset + out.len()]);
                }
                Ok(())
            }
            Bytes::Raw { .. } => {
                out.copy_from_slice(&self.lock()[offset..offset + out.len()]);
                Ok(())
            }
        }
    }

    /// Copies `data` to `offset`, or says that some of the bytes there are
    /// not mapped or not writable (on-demand regions only); bytes before
    /// the fault may have been written. The caller has bounds-checked.
    #[inline]
    pub fn try_write(&self, offset: usize, data: &[u8]) -> Result<(), MemoryFault> {
        match &*self.0 {
            Bytes::OnDemand { addr, .. } => odp_copy(*addr, offset, data.len(), |a| crate::odp::write(a, data)),
            Bytes::Owned { bytes, zeros, .. } => {
                let mut g = relock(bytes);
                let dst = &mut g[offset..offset + data.len()];
                if zeros.load(Ordering::Acquire) {
                    // Zeros onto zeros change nothing: a scan of the
                    // caller's bytes (hot) instead of a copy into the
                    // region's (cold). It runs only while the region has
                    // held nothing else, never after its first other byte.
                    if data.iter().fold(0, |acc, &b| acc | b) == 0 {
                        return Ok(());
                    }
                    zeros.store(false, Ordering::Release);
                }
                dst.copy_from_slice(data);
                Ok(())
            }
            Bytes::Raw { .. } => {
                self.lock()[offset..offset + data.len()].copy_from_slice(data);
                Ok(())
            }
        }
    }

    /// [`RegionMemory::atomic`], or a [`MemoryFault`] (on-demand regions):
    /// the 8 bytes are read, `f` applied and the result written under the
    /// region's lock, through the fault-safe copies; nothing is written if
    /// the read or the write faults (the 8 aligned bytes lie in one page).
    /// Atomic with respect to every other engine access, as
    /// `IBV_ATOMIC_HCA` promises, not to the CPU's own atomics.
    pub fn try_atomic(&self, offset: usize, f: impl FnOnce(u64) -> u64) -> Result<u64, MemoryFault> {
        match &*self.0 {
            Bytes::OnDemand { addr, lock, .. } => {
                let _g = relock(lock);
                let mut v = [0u8; 8];
                odp_copy(*addr, offset, 8, |a| crate::odp::read(a, &mut v))?;
                let old = u64::from_ne_bytes(v);
                odp_copy(*addr, offset, 8, |a| crate::odp::write(a, &f(old).to_ne_bytes()))?;
                Ok(old)
            }
            _ => Ok(self.atomic(offset, f)),
        }
    }

    /// [`RegionMemory::atomic_write`], or a [`MemoryFault`] (on-demand
    /// regions: an 8-byte fault-safe copy under the region's lock, whole to
    /// every engine-side reader; see docs/odp.md for application threads).
    pub fn try_atomic_write(&self, offset: usize, value: [u8; 8]) -> Result<(), MemoryFault> {
        match &*self.0 {
            Bytes::OnDemand { addr, lock, .. } => {
                let _g = relock(lock);
                odp_copy(*addr, offset, 8, |a| crate::odp::write(a, &value))?;
                core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
                Ok(())
            }
            _ => {
                self.atomic_write(offset, value);
                Ok(())
            }
        }
    }

    /// [`RegionMemory::flush`] of `len` bytes at `offset`: on an on-demand
    /// region the range must be mapped (its pages are faulted in, as a
    /// NIC's FLUSH would), else a [`MemoryFault`]. The caller has
    /// bounds-checked.
    pub fn try_flush(&self, offset: usize, len: usize) -> Result<(), MemoryFault> {
        if let Bytes::OnDemand { addr, .. } = &*self.0 {
            odp_copy(*addr, offset, len, |a| crate::odp::populate(a, len, false))?;
        }
        self.flush();
        Ok(())
    }

    /// `ibv_advise_mr`'s prefetch of `len` bytes at `offset`: on an
    /// on-demand region the pages are faulted in for reading, or for
    /// writing if `write` (no byte changes), and a range that is not
    /// mapped (or not writable) is a [`MemoryFault`]; other regions are
    /// always present. The caller has bounds-checked.
    pub fn prefetch(&self, offset: usize, len: usize, write: bool) -> Result<(), MemoryFault> {
        match &*self.0 {
            Bytes::OnDemand { addr, .. } => odp_copy(*addr, offset, len, |a| crate::odp::populate(a, len, write)),
            _ => Ok(()),
        }
    }

    /// Writes the 8 bytes of `value` at `offset` as one store, after every
    /// earlier write to this region (release ordering, as rxe's
    /// `smp_store_release`); no reader through [`Self::lock`] or another
    /// thread's aligned 64-bit load sees half of it. The caller has
    /// bounds-checked; a misaligned host address falls back to a copy
    /// under the lock, which is still whole to every engine-side reader.
    ///
    /// # Panics
    /// As [`RegionMemory::lock`]: the engine uses [`RegionMemory::try_atomic_write`].
    pub fn atomic_write(&self, offset: usize, value: [u8; 8]) {
        let mut g = self.lock();
        let dst = &mut g[offset..offset + 8];
        let ptr = dst.as_mut_ptr();
        if ptr as usize % 8 == 0 {
            // SAFETY: `ptr` is valid for 8 bytes (the slice above), 8-byte
            // aligned (checked), and the guard gives this thread the only
            // engine-side access to the bytes while it lives.
            let cell = unsafe { core::sync::atomic::AtomicU64::from_ptr(ptr.cast::<u64>()) };
            cell.store(u64::from_ne_bytes(value), core::sync::atomic::Ordering::Release);
        } else {
            dst.copy_from_slice(&value);
        }
    }

    /// Makes every earlier write to these bytes visible to other threads
    /// before returning (what a FLUSH asks of ordinary memory: see
    /// docs/flush-atomic-write.md). Takes the lock, so that no engine
    /// write is half done, then a sequentially consistent fence.
    pub fn flush(&self) {
        match &*self.0 {
            Bytes::OnDemand { lock, .. } => drop(relock(lock)),
            _ => drop(self.lock()),
        }
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    }

    /// A copy of every byte.
    ///
    /// # Panics
    /// On an on-demand region (it may span the address space and have
    /// holes): read it with [`RegionMemory::try_read`].
    pub fn to_vec(&self) -> Vec<u8> {
        self.lock().to_vec()
    }

    /// Runs `f` on the 8 bytes at `offset` as one atomic step and returns
    /// the value that was there. In memory the value is in the host's byte
    /// order, as an application's `uint64_t` is (and as rxe and ConnectX
    /// operate on it); only the wire carries it big-endian.
    ///
    /// # Panics
    /// As [`RegionMemory::lock`]: the engine uses [`RegionMemory::try_atomic`].
    pub fn atomic(&self, offset: usize, f: impl FnOnce(u64) -> u64) -> u64 {
        let mut g = self.lock();
        let mut v = [0u8; 8];
        v.copy_from_slice(&g[offset..offset + 8]);
        let old = u64::from_ne_bytes(v);
        g[offset..offset + 8].copy_from_slice(&f(old).to_ne_bytes());
        old
    }
}

#[cold]
#[inline(never)]
fn on_demand_misuse(what: &str) -> ! {
    panic!("RegionMemory::{what} on an on-demand region: its pages may be unmapped; use the try_ accessors")
}

/// A fault-safe copy of `len` bytes at `offset` of the on-demand bytes at
/// `base` (`copy` gets the address).
#[cold]
#[inline(never)]
fn odp_copy(
    base: usize,
    offset: usize,
    len: usize,
    copy: impl FnOnce(usize) -> Result<(), crate::odp::Faulted>,
) -> Result<(), MemoryFault> {
    let fault = MemoryFault { offset, len };
    let addr = base.checked_add(offset).ok_or(fault)?;
    copy(addr).map_err(|_| fault)
}

/// A registered memory region.
#[derive(Debug, Clone)]
pub struct MemoryRegion {
    pub pd: Pd,
    pub lkey: u32,
    pub rkey: u32,
    /// The address the first byte is registered at.
    pub va: u64,
    pub len: u64,
    pub access: Access,
    pub memory: RegionMemory,
}

impl MemoryRegion {
    /// The offset of `len` bytes at `addr` if they lie inside the region.
    /// No sum here can overflow, so an implicit on-demand region (`va` 0,
    /// `len` 2^64 - 1) holds every range that does not wrap around.
    #[inline]
    pub fn offset_of(&self, addr: u64, len: u64) -> Option<usize> {
        let offset = addr.checked_sub(self.va)?;
        (len <= self.len && offset <= self.len - len).then_some(offset as usize)
    }
}

/// Why an access was refused. Each maps to one completion status or NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    #[error("no memory region with key {0:#x}")]
    BadKey(u32),
    #[error("memory region {key:#x} belongs to another protection domain")]
    PdMismatch { key: u32 },
    #[error("access of {len} bytes at {addr:#x} is outside memory region {key:#x}")]
    OutOfBounds { key: u32, addr: u64, len: u64 },
    #[error("memory region {key:#x} does not allow {needed:?}")]
    NotPermitted { key: u32, needed: Access },
    #[error("atomic address {0:#x} is not 8-byte aligned")]
    Misaligned(u64),
    /// A memory window's rkey, but the window is not bound (never, or
    /// since it was invalidated or unbound).
    #[error("memory window {0:#x} is not bound")]
    WindowNotBound(u32),
    /// A type 2 window's rkey arriving on a QP other than the one it is bound to.
    #[error("memory window {key:#x} is bound to another QP")]
    WindowOfAnotherQp { key: u32 },
    /// An on-demand region's page there is not mapped (or not writable).
    #[error("{len} bytes at {addr:#x} in on-demand memory region {key:#x} are not mapped (or not accessible)")]
    Unmapped { key: u32, addr: u64, len: u64 },
    /// `ibv_advise_mr` named a region that is not on demand.
    #[error("memory region {key:#x} is not an on-demand region")]
    NotOnDemand { key: u32 },
}

/// Mixed into the seed of the windows' key generator.
const WINDOW_SEED: u64 = 0x7769_6e64_6f77_7321;

/// The memory regions of an endpoint, by key.
///
/// Keys are `index << 8 | generation`, so a stale key of a deregistered
/// region does not match the region that reuses its slot.
#[derive(Debug, Default)]
pub struct MemoryTable {
    slots: Vec<(u8, Option<MemoryRegion>)>,
    /// Draws each key's low byte.
    pub(crate) keys: crate::rng::Rng,
    /// The memory windows, beside the regions ([`crate::window`]); an
    /// rkey with [`crate::window::WINDOW_KEY_BIT`] names one of them.
    pub(crate) windows: crate::window::WindowTable,
}

impl MemoryTable {
    /// A table whose keys draw their low byte from `keys`.
    pub fn with_rng(keys: crate::rng::Rng) -> MemoryTable {
        // The windows' keys from a generator of their own, seeded from
        // (not drawn from) the regions': `keys` stays as it was.
        let windows = crate::window::WindowTable::with_rng(crate::rng::Rng::new(keys.clone().next_u64() ^ WINDOW_SEED));
        MemoryTable { slots: Vec::new(), keys, windows }
    }

    /// Registers `memory` at address `va`; returns the new region's keys.
    pub fn register(&mut self, pd: Pd, va: u64, memory: RegionMemory, access: Access) -> (u32, u32) {
        let index = match self.slots.iter().position(|(_, r)| r.is_none()) {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                self.slots.len() - 1
            }
        };
        debug_assert!(index < crate::window::MAX_REGIONS, "region keys stay below the window range");
        let slot = &mut self.slots[index];
        // The low byte is drawn at random, as rxe does, and never repeats
        // the slot's last one: a stale key misses the new region, and a
        // blind peer has to guess it (defence in depth: RoCE has no
        // authentication).
        let mut generation = self.keys.next_u64() as u8;
        if generation == slot.0 {
            generation = generation.wrapping_add(1);
        }
        slot.0 = generation;
        let key = ((index as u32 + 1) << 8) | u32::from(slot.0);
        let len = memory.len() as u64;
        slot.1 = Some(MemoryRegion { pd, lkey: key, rkey: key, va, len, access, memory });
        (key, key)
    }

    /// `ibv_rereg_mr`: gives the region of `key` a new PD, translation
    /// (address and bytes) and/or access, keeping its keys, as rxe keeps
    /// them; returns whether the region existed. An access in flight
    /// finished under the old values (every access looks the region up).
    pub fn reregister(
        &mut self,
        key: u32,
        pd: Option<Pd>,
        translation: Option<(u64, RegionMemory)>,
        access: Option<Access>,
    ) -> bool {
        let Some((_, Some(r))) = self.slot_mut(key) else { return false };
        if let Some(pd) = pd {
            r.pd = pd;
        }
        if let Some((va, memory)) = translation {
            r.va = va;
            r.len = memory.len() as u64;
            r.memory = memory;
        }
        if let Some(access) = access {
            r.access = access;
        }
        true
    }

    /// Removes a region; returns whether it existed. Windows still bound
    /// to it are unbound first (their rkeys stop working): callers that
    /// must refuse instead, as `ibv_dereg_mr` does, ask
    /// [`MemoryTable::windows_bound_to`] first.
    pub fn deregister(&mut self, key: u32) -> bool {
        if self.get(key).is_some() {
            self.windows.unbind_all_of(key);
        }
        match self.slot_mut(key) {
            Some(slot) => {
                slot.1 = None;
                true
            }
            None => false,
        }
    }

    fn slot_mut(&mut self, key: u32) -> Option<&mut (u8, Option<MemoryRegion>)> {
        let index = (key >> 8).checked_sub(1)? as usize;
        let slot = self.slots.get_mut(index)?;
        (slot.1.is_some() && slot.0 == key as u8).then_some(slot)
    }

    /// The region with this key.
    pub fn get(&self, key: u32) -> Option<&MemoryRegion> {
        let index = (key >> 8).checked_sub(1)? as usize;
        let (generation, region) = self.slots.get(index)?;
        (*generation == key as u8).then_some(region.as_ref()?)
    }

    /// Checks an access of `len` bytes at `addr` through `key` by `pd`
    /// needing `needed`; returns the region and the offset into it.
    pub fn check(
        &self,
        key: u32,
        pd: Pd,
        addr: u64,
        len: u64,
        needed: Access,
    ) -> Result<(&MemoryRegion, usize), AccessError> {
        let r = self.get(key).ok_or(AccessError::BadKey(key))?;
        if r.pd != pd {
            return Err(AccessError::PdMismatch { key });
        }
        let Some(offset) = r.offset_of(addr, len) else {
            return Err(AccessError::OutOfBounds { key, addr, len });
        };
        if !r.access.contains(needed) {
            return Err(AccessError::NotPermitted { key, needed });
        }
        Ok((r, offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zeroed region is served as zeros until something else lands in
    /// it; whatever path puts the first other byte there (a write, a
    /// write of mixed bytes starting with zeros, a guard, an atomic), every
    /// later read sees it, and zeros written over data are written.
    #[test]
    fn a_zeroed_region_reads_what_was_written_by_every_path() {
        let read = |m: &RegionMemory| {
            let mut out = vec![0xaa; m.len()];
            m.read(0, &mut out);
            out
        };
        let m = RegionMemory::zeroed(64);
        assert_eq!(read(&m), vec![0; 64]);
        m.write(8, &[0; 16]);
        assert_eq!(read(&m), vec![0; 64], "zeros onto zeros");
        assert!(m.holds_only_zeros(), "reads and zeros written keep the region's zeros served without reading it");
        m.write(8, &[0, 0, 0, 7]);
        assert!(!m.holds_only_zeros());
        let mut want = vec![0; 64];
        want[11] = 7;
        assert_eq!(read(&m), want, "a write whose first bytes are zero");
        m.write(8, &[0; 4]);
        want[11] = 0;
        assert_eq!(read(&m), want, "zeros over data");

        let m = RegionMemory::zeroed(64);
        m.lock()[3] = 9;
        assert_eq!(read(&m)[3], 9, "a byte written through the guard");

        let m = RegionMemory::zeroed(64);
        m.atomic_write(40, 3u64.to_ne_bytes());
        assert_eq!(read(&m)[40..48], 3u64.to_ne_bytes(), "an atomic write");

        let m = RegionMemory::zeroed(64);
        m.atomic(16, |v| v + 5);
        assert_eq!(m.atomic(16, |v| v), 5, "an atomic's result");
        assert_eq!(read(&m)[16..24], 5u64.to_ne_bytes());

        let m = RegionMemory::try_zeroed(32).expect("32 bytes");
        m.write(31, &[1]);
        assert_eq!(read(&m)[31], 1);
        let m = RegionMemory::from_vec(vec![4; 8]);
        assert_eq!(read(&m), vec![4; 8], "from_vec's bytes are not taken for zeros");
    }

    /// Out of bounds is the panic it always was, zeros or not.
    #[test]
    fn a_zeroed_region_still_refuses_out_of_bounds() {
        let m = RegionMemory::zeroed(16);
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.read(12, &mut [0; 8])));
        assert!(read.is_err(), "a read past the end");
        let write = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.write(12, &[0; 8])));
        assert!(write.is_err(), "zeros written past the end");
        assert!(m.holds_only_zeros());
    }

    /// Readers on other threads see a value written on this one as soon
    /// as the write returns: never the zeros from before it.
    #[test]
    fn readers_see_the_first_write_once_it_returns() {
        for _ in 0..50 {
            let m = RegionMemory::zeroed(4096);
            let done = Arc::new(AtomicBool::new(false));
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let (m, done) = (m.clone(), done.clone());
                    std::thread::spawn(move || loop {
                        let seen = done.load(Ordering::Acquire);
                        let mut b = [0u8; 8];
                        m.read(4000, &mut b);
                        if seen {
                            assert_eq!(b, [9; 8], "read after the write returned");
                            return;
                        }
                    })
                })
                .collect();
            m.write(4000, &[9; 8]);
            done.store(true, Ordering::Release);
            readers.into_iter().for_each(|r| r.join().expect("reader"));
        }
    }

    #[test]
    fn checks_key_pd_bounds_and_access() {
        let mut t = MemoryTable::default();
        let (lkey, rkey) =
            t.register(Pd(1), 0x1000, RegionMemory::zeroed(64), Access::LOCAL_WRITE | Access::REMOTE_READ);
        assert!(t.check(rkey, Pd(1), 0x1000, 64, Access::REMOTE_READ).is_ok());
        assert_eq!(
            t.check(rkey, Pd(1), 0x1001, 64, Access::REMOTE_READ).unwrap_err(),
            AccessError::OutOfBounds { key: rkey, addr: 0x1001, len: 64 }
        );
        assert_eq!(
            t.check(rkey, Pd(1), 0xfff, 1, Access::REMOTE_READ).unwrap_err(),
            AccessError::OutOfBounds { key: rkey, addr: 0xfff, len: 1 }
        );
        assert_eq!(
            t.check(rkey, Pd(2), 0x1000, 1, Access::REMOTE_READ).unwrap_err(),
            AccessError::PdMismatch { key: rkey }
        );
        assert_eq!(
            t.check(lkey, Pd(1), 0x1000, 8, Access::REMOTE_WRITE).unwrap_err(),
            AccessError::NotPermitted { key: lkey, needed: Access::REMOTE_WRITE }
        );
        assert_eq!(
            t.check(rkey ^ 0x100, Pd(1), 0x1000, 1, Access::NONE).unwrap_err(),
            AccessError::BadKey(rkey ^ 0x100)
        );
        assert!(t.check(rkey, Pd(1), u64::MAX, 2, Access::NONE).is_err(), "address overflow is out of bounds");
    }

    #[test]
    fn a_reregistered_region_keeps_its_keys_and_answers_with_its_new_values() {
        let mut t = MemoryTable::default();
        let (_, rkey) = t.register(Pd(1), 0x1000, RegionMemory::zeroed(64), Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        assert!(t.reregister(rkey, Some(Pd(2)), Some((0x8000, RegionMemory::zeroed(16))), Some(Access::LOCAL_WRITE)));
        assert_eq!(t.check(rkey, Pd(1), 0x8000, 8, Access::NONE).unwrap_err(), AccessError::PdMismatch { key: rkey });
        assert_eq!(
            t.check(rkey, Pd(2), 0x1000, 8, Access::NONE).unwrap_err(),
            AccessError::OutOfBounds { key: rkey, addr: 0x1000, len: 8 }
        );
        assert_eq!(
            t.check(rkey, Pd(2), 0x8000, 8, Access::REMOTE_WRITE).unwrap_err(),
            AccessError::NotPermitted { key: rkey, needed: Access::REMOTE_WRITE }
        );
        assert!(t.check(rkey, Pd(2), 0x8000, 16, Access::LOCAL_WRITE).is_ok());
        assert!(!t.reregister(rkey ^ 0x100, None, None, None), "a key that names no region");
    }

    #[test]
    fn atomic_write_stores_the_bytes_as_given_aligned_or_not() {
        let m = RegionMemory::zeroed(32);
        m.atomic_write(8, [1, 2, 3, 4, 5, 6, 7, 8]);
        m.atomic_write(19, [9; 8]); // host-misaligned: the locked copy
        let mut want = vec![0u8; 32];
        want[8..16].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        want[19..27].fill(9);
        assert_eq!(m.to_vec(), want);
        m.flush();
        assert_eq!(m.to_vec(), want, "a flush changes no byte");
    }

    #[test]
    fn stale_keys_do_not_reach_a_reused_slot() {
        let mut t = MemoryTable::default();
        let (k1, _) = t.register(Pd(1), 0, RegionMemory::zeroed(8), Access::ALL);
        assert!(t.deregister(k1));
        let (k2, _) = t.register(Pd(1), 0, RegionMemory::zeroed(8), Access::ALL);
        assert_ne!(k1, k2);
        assert!(t.get(k1).is_none());
        assert!(t.get(k2).is_some());
    }
}
