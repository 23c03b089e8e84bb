//! Protection domains (`ibv_pd`) and memory regions (`ibv_mr`).

use crate::context::Context;
use crate::error::{Error, Result};
use rdma_transport::{Access, Pd, RegionGuard, RegionMemory, Sge};

/// A protection domain. Memory regions, QPs, SRQs and address handles are
/// made from it, and a QP reaches only memory registered in its own.
#[derive(Debug, Clone)]
pub struct ProtectionDomain {
    pub(crate) ctx: Context,
    pub(crate) pd: Pd,
}

// `ibv_alloc_pd` is the context's verb; it lives here, with the type it
// makes, so that the context need not know the PD (the PD holds the context).
impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        let pd = self.inner.mirror("alloc_pd", |st| st.ep.alloc_pd());
        Ok(ProtectionDomain { ctx: self.clone(), pd })
    }
}

impl ProtectionDomain {
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// `ibv_reg_mr` of `len` zeroed bytes the library owns. The safe way:
    /// the bytes are only reachable through the region's copying accessors
    /// and its lock, so nothing can alias what the engine writes.
    ///
    /// Memory that cannot be had is [`Error::OutOfMemory`], never an abort:
    /// tools size regions from what a peer asks for.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        let memory = RegionMemory::try_zeroed(len).map_err(|source| {
            tracing::warn!(len, "memory region refused: out of memory");
            Error::OutOfMemory { len, source }
        })?;
        self.register(memory, access)
    }

    /// `ibv_reg_mr` of the bytes of `data`, which the region takes over.
    pub fn reg_mr_from(&self, data: Vec<u8>, access: Access) -> Result<MemoryRegion> {
        self.register(RegionMemory::from_vec(data), access)
    }

    /// `ibv_reg_mr` of the caller's memory, used in place (zero copy for
    /// applications that manage their own buffers).
    ///
    /// A null `ptr` is refused whatever `len` is, 0 included
    /// ([`Error::InvalidArgument`]): the region's accessors make slices of
    /// `ptr`, and a slice from a null pointer is undefined behaviour even
    /// when empty. An empty region of owned memory is `reg_mr(0, ..)`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid for reads and writes until the
    /// region is dropped *and* every work request naming it has completed,
    /// and the caller must not read or write those bytes in that time except
    /// through [`MemoryRegion::lock`], [`MemoryRegion::read`] and
    /// [`MemoryRegion::write`]: a peer can write them at any moment.
    pub unsafe fn reg_mr_raw(&self, ptr: *mut u8, len: usize, access: Access) -> Result<MemoryRegion> {
        if ptr.is_null() {
            return Err(Error::InvalidArgument(format!("reg_mr_raw: null pointer (length {len})")));
        }
        // SAFETY: forwarded to our caller.
        unsafe { self.reg_mr_raw_at(ptr, len, ptr as u64, access) }
    }

    /// `ibv_reg_mr_iova2`: as [`ProtectionDomain::reg_mr_raw`], the region
    /// addressed at `iova` instead of the pointer: work requests and peers
    /// name `iova..iova+len`, and the engine reaches `ptr..ptr+len`.
    ///
    /// # Safety
    /// As [`ProtectionDomain::reg_mr_raw`].
    ///
    /// With [`Access::ON_DEMAND`] in `access` this is
    /// [`ProtectionDomain::reg_mr_on_demand`] (as `ibv_reg_mr` with
    /// `IBV_ACCESS_ON_DEMAND`), whose contract is weaker.
    pub unsafe fn reg_mr_raw_at(&self, ptr: *mut u8, len: usize, iova: u64, access: Access) -> Result<MemoryRegion> {
        if access.contains(Access::ON_DEMAND) {
            // SAFETY: reg_mr_raw_at's contract is stronger than reg_mr_on_demand's.
            return unsafe { self.reg_mr_on_demand(ptr, len, iova, access) };
        }
        if ptr.is_null() {
            return Err(Error::InvalidArgument(format!("reg_mr_raw: null pointer (length {len})")));
        }
        if iova.checked_add(len as u64).is_none() {
            return Err(Error::InvalidArgument(format!("iova {iova:#x} + length {len} overflows")));
        }
        // SAFETY: forwarded to our caller.
        self.register_at(unsafe { RegionMemory::from_raw(ptr, len) }, iova, access)
    }

    /// `ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND` (ODP): the caller's memory
    /// `ptr..ptr+len`, addressed at `iova`, registered on demand. Nothing
    /// is pinned or checked now: the range may hold unmapped pages, and
    /// pages may be unmapped, remapped or have their protection changed
    /// while the region lives. Every access the engine makes goes through
    /// the kernel's fault-safe copies (docs/odp.md): a peer's access to a
    /// page that is not there (or not writable, for a write) is answered
    /// with NAK Remote Access Error, a local SGE there completes with
    /// `LocProtErr`, and the process never takes a signal for it.
    /// [`Access::ON_DEMAND`] is added to `access`.
    ///
    /// `ptr` null with `len` `usize::MAX` is implicit ODP
    /// ([`ProtectionDomain::reg_mr_implicit`]), as in libibverbs.
    ///
    /// # Safety
    /// While the region is registered, a peer (or a READ response) may
    /// write any mapped, writable byte of the range at any moment: no Rust
    /// value that assumes it is not written behind its back may live
    /// there. Buffers the application reaches only through raw pointers,
    /// `read_volatile`/`write_volatile` or atomics meet this.
    pub unsafe fn reg_mr_on_demand(&self, ptr: *mut u8, len: usize, iova: u64, access: Access) -> Result<MemoryRegion> {
        if !rdma_transport::odp::supported() {
            return Err(Error::errno(
                libc::EOPNOTSUPP,
                format_args!("on-demand regions: process_vm_readv(2) is not available to this process"),
            ));
        }
        if (ptr as usize).checked_add(len).is_none() && !(ptr.is_null() && len == usize::MAX) {
            return Err(Error::InvalidArgument(format!("address {ptr:p} + length {len} overflows")));
        }
        if iova.checked_add(len as u64).is_none() {
            return Err(Error::InvalidArgument(format!("iova {iova:#x} + length {len} overflows")));
        }
        // SAFETY: forwarded to our caller.
        let memory = unsafe { RegionMemory::on_demand(ptr as usize, len) };
        self.register_at(memory, iova, access | Access::ON_DEMAND)
    }

    /// Implicit ODP (`ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND
    /// | access)`): one region of the whole address space, at address 0
    /// and `usize::MAX` bytes long, whose keys reach every address of the
    /// process; unmapped ones fail cleanly as in
    /// [`ProtectionDomain::reg_mr_on_demand`].
    ///
    /// # Safety
    /// As [`ProtectionDomain::reg_mr_on_demand`], for every writable byte
    /// of the process (with `REMOTE_WRITE`, a peer that knows the rkey can
    /// write any of them: grant it only to peers trusted that far).
    pub unsafe fn reg_mr_implicit(&self, access: Access) -> Result<MemoryRegion> {
        // SAFETY: forwarded to our caller.
        unsafe { self.reg_mr_on_demand(std::ptr::null_mut(), usize::MAX, 0, access) }
    }

    /// `ibv_advise_mr`: prefetches the ranges of `sg_list`, each in an
    /// on-demand region of this PD. `Prefetch` faults the pages in for
    /// reading, `PrefetchWrite` for writing (the region must allow local
    /// writes), `PrefetchNoFault` only checks: no byte changes. The only
    /// flag is `IBV_ADVISE_MR_FLAG_FLUSH` (1): the call is always
    /// synchronous here. Errors as the man page gives them:
    /// [`Error::Io`] with `EFAULT` for a key that names no region of this
    /// PD, a range outside its region, or pages that are not mapped (or
    /// not writable, for `PrefetchWrite`); [`Error::Io`] with `EPERM` for
    /// `PrefetchWrite` on a region without local write;
    /// [`Error::InvalidArgument`] (`EINVAL`) for other flags, an empty
    /// list, or a region that is not on demand.
    pub fn advise_mr(&self, advice: AdviseMr, flags: u32, sg_list: &[Sge]) -> Result<()> {
        if flags & !AdviseMr::FLAG_FLUSH != 0 {
            return Err(Error::InvalidArgument(format!("advise_mr: unknown flags {flags:#x}")));
        }
        if sg_list.is_empty() {
            return Err(Error::InvalidArgument("advise_mr: an empty scatter/gather list".into()));
        }
        let (write, fault) = match advice {
            AdviseMr::Prefetch => (false, true),
            AdviseMr::PrefetchWrite => (true, true),
            AdviseMr::PrefetchNoFault => (false, false),
        };
        use rdma_transport::memory::AccessError as E;
        let advised = self.ctx.inner.mirror("advise_mr", |st| st.ep.advise_mr(self.pd, sg_list, write, fault));
        advised.map_err(|e| match e {
            E::NotPermitted { .. } => Error::errno(libc::EPERM, format_args!("advise_mr: {e}")),
            E::NotOnDemand { .. } | E::Misaligned(_) => Error::InvalidArgument(e.to_string()),
            _ => Error::errno(libc::EFAULT, format_args!("advise_mr: {e}")),
        })
    }

    fn register(&self, memory: RegionMemory, access: Access) -> Result<MemoryRegion> {
        let addr = memory.base_addr();
        self.register_at(memory, addr, access)
    }

    fn register_at(&self, memory: RegionMemory, addr: u64, access: Access) -> Result<MemoryRegion> {
        check_access(access)?;
        let len = memory.len();
        let (lkey, rkey) = self.ctx.inner.mirror("reg_mr", |st| st.ep.reg_mr(self.pd, addr, memory.clone(), access));
        tracing::debug!(lkey, rkey, addr, len, "memory region registered");
        Ok(MemoryRegion { ctx: self.ctx.clone(), pd: self.pd, memory, addr, len, lkey, rkey, access })
    }
}

/// `enum ibv_advise_mr_advice` ([`ProtectionDomain::advise_mr`]), with
/// libibverbs' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AdviseMr {
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH`
    Prefetch = 0,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`
    PrefetchWrite = 1,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`
    PrefetchNoFault = 2,
}

impl AdviseMr {
    /// `IBV_ADVISE_MR_FLAG_FLUSH`: wait until done (always so here).
    pub const FLAG_FLUSH: u32 = 1;

    /// The advice of this libibverbs value.
    pub fn from_raw(v: u32) -> Option<AdviseMr> {
        [AdviseMr::Prefetch, AdviseMr::PrefetchWrite, AdviseMr::PrefetchNoFault].into_iter().find(|a| *a as u32 == v)
    }
}

/// ibv_reg_mr(3): remote write or atomic access requires local write.
fn check_access(access: Access) -> Result<()> {
    if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE)
        || access.contains(Access::REMOTE_ATOMIC) && !access.contains(Access::LOCAL_WRITE)
    {
        return Err(Error::InvalidArgument(format!(
            "access flags {:#x}: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE",
            access.0
        )));
    }
    Ok(())
}

/// A registered memory region. Its bytes are shared with the engine, which
/// writes them whenever a peer's WRITE, a READ response or a received SEND
/// lands; so the safe accessors copy, and [`MemoryRegion::lock`] holds the
/// engine off for as long as its guard lives. Dropping the region
/// deregisters it.
#[derive(Debug)]
pub struct MemoryRegion {
    ctx: Context,
    pd: Pd,
    memory: RegionMemory,
    addr: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
    access: Access,
}

impl MemoryRegion {
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// The address of the first byte as work requests and peers name it
    /// (the iova: the pointer unless registered with
    /// [`ProtectionDomain::reg_mr_raw_at`]).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn access(&self) -> Access {
        self.access
    }
    /// The protection domain it is registered in (the engine's handle).
    pub fn pd(&self) -> Pd {
        self.pd
    }

    /// How many memory windows are bound to it now.
    pub fn windows_bound(&self) -> usize {
        self.ctx.inner.lock().ep.windows_bound_to(self.lkey)
    }

    /// `ibv_dereg_mr` as libibverbs answers it: refused while memory
    /// windows are bound to the region ([`Error::InvalidArgument`], EINVAL
    /// as rxe; IBA 10.6.7.2.6), the region handed back unchanged. Dropping
    /// a region instead always deregisters it, unbinding its windows first
    /// so that none reaches memory that may go.
    pub fn dereg(self) -> std::result::Result<(), (MemoryRegion, Error)> {
        let refused = self.ctx.inner.mirror("dereg_mr", |st| st.ep.try_dereg_mr(self.lkey));
        match refused {
            Err(rdma_transport::DeregError::WindowsBound { key, bound }) => Err((
                self,
                Error::InvalidArgument(format!("memory region {key:#x} has {bound} memory window(s) bound")),
            )),
            // Deregistered (or already gone): Drop's deregistration finds
            // nothing (a reused slot has another key).
            _ => Ok(()),
        }
    }

    /// Whether the region is on demand ([`ProtectionDomain::reg_mr_on_demand`]).
    pub fn is_on_demand(&self) -> bool {
        self.memory.is_on_demand()
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::OutOfBounds { offset, len, size: self.len });
        }
        Ok(())
    }

    /// A scatter/gather element for `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: u32) -> Result<Sge> {
        self.check(offset, len as usize)?;
        Ok(Sge { addr: self.addr + offset as u64, length: len, lkey: self.lkey })
    }

    /// The whole region as one scatter/gather element.
    pub fn sge_all(&self) -> Sge {
        Sge { addr: self.addr, length: self.len as u32, lkey: self.lkey }
    }

    /// Copies bytes out of the region: on an on-demand region, bytes that
    /// are not mapped are [`Error::Io`] with `EFAULT`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        self.memory.try_read(offset, out).map_err(|_| self.fault(offset, out.len()))
    }

    /// Copies bytes into the region: on an on-demand region, bytes that
    /// are not mapped or not writable are [`Error::Io`] with `EFAULT`
    /// (bytes before them may have been written).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        self.memory.try_write(offset, data).map_err(|_| self.fault(offset, data.len()))
    }

    fn fault(&self, offset: usize, len: usize) -> Error {
        let addr = self.addr.wrapping_add(offset as u64);
        Error::errno(libc::EFAULT, format_args!("{len} bytes at {addr:#x}: not mapped or not accessible"))
    }

    /// The 8-byte value at `offset` in host order (the target of atomics).
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// A copy of the whole region.
    ///
    /// # Panics
    /// On an on-demand region (it may have holes, or be the whole address
    /// space): use [`MemoryRegion::read`].
    pub fn to_vec(&self) -> Vec<u8> {
        self.memory.to_vec()
    }

    /// Exclusive access to the bytes in place: the engine cannot write them
    /// until the guard is dropped (a packet for this region waits). Do not
    /// post, poll or wait on the same device while holding it.
    ///
    /// # Panics
    /// On an on-demand region: no slice of its bytes can be made (a page
    /// may be unmapped). Use [`MemoryRegion::read`] / [`MemoryRegion::write`].
    pub fn lock(&self) -> RegionGuard<'_> {
        self.memory.lock()
    }
}

impl MemoryRegion {
    /// `ibv_rereg_mr`: moves the region to `pd`, to the caller's memory
    /// `ptr..ptr+len` addressed at `iova` (`translation`), and/or to new
    /// `access` rights, keeping its keys (as rxe keeps them). Nothing
    /// changes if any of them is refused.
    ///
    /// # Safety
    /// For a new translation, as [`ProtectionDomain::reg_mr_raw`].
    pub unsafe fn rereg_raw(
        &mut self,
        pd: Option<&ProtectionDomain>,
        translation: Option<(*mut u8, usize, u64)>,
        access: Option<Access>,
    ) -> Result<()> {
        if let Some(pd) = pd {
            if !std::sync::Arc::ptr_eq(&pd.ctx.inner, &self.ctx.inner) {
                return Err(Error::WrongDevice("the protection domain"));
            }
        }
        if let Some(a) = access {
            check_access(a)?;
        }
        let on_demand = access.unwrap_or(self.access).contains(Access::ON_DEMAND);
        if on_demand != self.access.contains(Access::ON_DEMAND) && translation.is_none() {
            return Err(Error::InvalidArgument(
                "rereg_raw: IBV_ACCESS_ON_DEMAND changes only with a new translation".into(),
            ));
        }
        let memory = match translation {
            Some((ptr, len, iova)) if on_demand => {
                if !rdma_transport::odp::supported() {
                    return Err(Error::errno(libc::EOPNOTSUPP, format_args!("on-demand regions")));
                }
                if iova.checked_add(len as u64).is_none() || (ptr as usize).checked_add(len).is_none() {
                    return Err(Error::InvalidArgument(format!("iova {iova:#x} + length {len} overflows")));
                }
                // SAFETY: forwarded to our caller (reg_mr_on_demand's contract).
                Some((iova, unsafe { RegionMemory::on_demand(ptr as usize, len) }))
            }
            Some((ptr, len, iova)) => {
                if ptr.is_null() {
                    return Err(Error::InvalidArgument(format!("rereg_raw: null pointer (length {len})")));
                }
                if iova.checked_add(len as u64).is_none() {
                    return Err(Error::InvalidArgument(format!("iova {iova:#x} + length {len} overflows")));
                }
                // SAFETY: forwarded to our caller.
                Some((iova, unsafe { RegionMemory::from_raw(ptr, len) }))
            }
            None => None,
        };
        let found =
            self.ctx.inner.mirror("rereg_mr", |st| st.ep.rereg_mr(self.lkey, pd.map(|p| p.pd), memory.clone(), access));
        if !found {
            return Err(Error::InvalidArgument(format!("memory region {:#x} is not registered", self.lkey)));
        }
        if let Some((iova, m)) = memory {
            self.addr = iova;
            self.len = m.len();
            self.memory = m;
        }
        if let Some(a) = access {
            self.access = a;
        }
        if let Some(pd) = pd {
            self.pd = pd.pd;
        }
        tracing::debug!(lkey = self.lkey, addr = self.addr, len = self.len, "memory region reregistered");
        Ok(())
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.ctx.inner.mirror("dereg_mr", |st| st.ep.dereg_mr(self.lkey));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    /// A domain on a device of its own address, so no other test's device
    /// shares its port.
    fn pd_on(name: &str, addr: &str) -> ProtectionDomain {
        let dev = Device::new(name, addr.parse().unwrap()).unwrap();
        dev.open().unwrap().alloc_pd().unwrap()
    }

    #[test]
    fn an_absurd_region_is_a_typed_error_not_an_abort() {
        let pd = pd_on("rxe-pd-oom", "127.53.17.1");
        for len in [usize::MAX / 2, 1 << 50] {
            match pd.reg_mr(len, Access::ALL) {
                Err(Error::OutOfMemory { len: asked, .. }) => assert_eq!(asked, len),
                other => panic!("reg_mr({len}) gave {other:?}"),
            }
        }
        let e = pd.reg_mr(usize::MAX / 2, Access::ALL).unwrap_err().to_string();
        assert!(e.contains(&(usize::MAX / 2).to_string()), "the error names the length: {e}");
        // the domain is still usable afterwards
        let mr = pd.reg_mr(4096, Access::ALL).unwrap();
        assert_eq!((mr.len(), mr.to_vec()), (4096, vec![0u8; 4096]));
    }

    #[test]
    fn a_null_pointer_is_refused_even_for_an_empty_region() {
        let pd = pd_on("rxe-pd-null", "127.53.17.2");
        for len in [0, 8] {
            // SAFETY: refused before any use of the pointer.
            let r = unsafe { pd.reg_mr_raw(std::ptr::null_mut(), len, Access::LOCAL_WRITE) };
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "len {len}: {r:?}");
        }
        let empty = pd.reg_mr(0, Access::LOCAL_WRITE).unwrap();
        assert!(empty.is_empty());
        assert!(empty.lock().is_empty());
    }
}
