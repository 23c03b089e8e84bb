//! Protection domains and memory regions. `ibv_reg_mr` registers the
//! application's memory in place: the engine reads and writes those bytes
//! directly, as a NIC does by DMA.

use crate::abi::*;
use crate::context::{ctx_of, Engine};
use crate::ffi::{errno_of, guard, live, set_errno, Held, Registry, Shared, Users};
use libc::{c_int, c_uint, c_void};
use rdma_core_rs::{Access, MemoryRegion, ProtectionDomain};

pub static PDS: Registry = Registry::new();
pub static MRS: Registry = Registry::new();

/// A PD, or a parent domain: the same object, which QPs, CQs, SRQs, MRs
/// and AHs take alike (a parent domain is its PD's domain for the engine).
#[repr(C)]
pub struct Pd {
    pub c: ibv_pd,
    pub verbs: ProtectionDomain,
    /// MRs, QPs, SRQs and AHs made from it (deallocating it first is EBUSY).
    pub users: Users,
    /// The device's engine (shared with other opens; outlives a close).
    pub engine: std::sync::Arc<Engine>,
    /// For a parent domain: the PD and thread domain it holds a use of.
    parent: Option<(&'static Pd, Option<&'static Td>)>,
    /// For a PD imported into another context (`ibv_import_pd`): the PD it
    /// is, whose use it holds.
    imported: Option<&'static Pd>,
}

/// PD handles, unique in the process (`ibv_import_pd` finds a PD by its
/// handle and its device).
static NEXT_PD_HANDLE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

fn next_pd_handle() -> u32 {
    NEXT_PD_HANDLE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Pd {
    /// Whether it is a parent domain (`ibv_alloc_parent_domain`).
    pub(crate) fn is_parent_domain(&self) -> bool {
        self.parent.is_some()
    }
}

pub static TDS: Registry = Registry::new();

/// A thread domain. The engine has no per-thread doorbells to give it, so
/// it is a handle a parent domain names (and holds a use of).
#[repr(C)]
pub struct Td {
    pub c: ibv_td,
    users: Users,
}

impl Shared for Td {
    fn users(&self) -> &Users {
        &self.users
    }
}

// SAFETY: as for Pd.
unsafe impl Send for Td {}
unsafe impl Sync for Td {}

impl Shared for Pd {
    fn users(&self) -> &Users {
        &self.users
    }
}

/// A live PD for a call that makes an object from it: the PD counts the
/// use (see `Registry::acquire`), given back when `Held` drops unless
/// kept.
///
/// # Safety
/// `p` may be anything; it is dereferenced only if registered.
pub unsafe fn pd_use(p: *mut ibv_pd, held: &mut Held<'static>) -> Option<&'static Pd> {
    // SAFETY: registered PDs are leaked boxes freed only after removal.
    let pd = unsafe { PDS.acquire(p.cast::<Pd>(), "ibv_pd") }?;
    // An imported PD stands for the PD it imports: objects made in it use
    // (and hold) that one, so that `ibv_unimport_pd` may free the imported
    // object whatever was made in it, as rdma-core frees it.
    let pd = match pd.imported {
        Some(original) => {
            // The imported PD holds a use of the original, so it is live.
            let taken = original.users.take();
            pd.users.put();
            if !taken {
                set_errno(libc::EINVAL);
                return None;
            }
            original
        }
        None => pd,
    };
    held.push(&pd.users);
    Some(pd)
}

impl Pd {
    /// Whether `context` is a context of this PD's device (the PD's own, or
    /// another open or import of the same device in this process).
    pub(crate) fn of_device(&self, context: *mut ibv_context) -> bool {
        // SAFETY: ctx_of checks the registry.
        context == self.c.context
            || unsafe { ctx_of(context) }.is_some_and(|c| std::sync::Arc::ptr_eq(&c.engine, &self.engine))
    }
}

// SAFETY: the raw pointers in `c` are the application's; see cq::Cq.
unsafe impl Send for Pd {}
unsafe impl Sync for Pd {}

/// A memory region. `ibv_rereg_mr` changes it in place (the application
/// keeps its `ibv_mr *` and reads the new keys from it), hence the cell
/// and the lock.
#[repr(C)]
pub struct Mr {
    pub c: std::cell::UnsafeCell<ibv_mr>,
    state: std::sync::Mutex<MrState>,
}

struct MrState {
    /// The engine's registration: dropping it deregisters. None for an MR
    /// imported by `ibv_import_mr`, which names another's registration.
    verbs: Option<MemoryRegion>,
    pd: &'static Pd,
    /// As registered: the address, length and access flags (the C ones).
    addr: *mut c_void,
    length: usize,
    access: c_uint,
}

impl Mr {
    /// The region's lkey (its handle too).
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: plain data the library wrote; rewritten only by ibv_rereg_mr,
        // which the application does not run while using the MR.
        unsafe { (*self.c.get()).lkey }
    }
}

// SAFETY: as for Pd.
unsafe impl Send for Mr {}
unsafe impl Sync for Mr {}

#[export_name = "softroce_ibv_alloc_pd"]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard("ibv_alloc_pd", std::ptr::null_mut(), || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return std::ptr::null_mut() };
        match ctx.engine.verbs.alloc_pd() {
            Ok(verbs) => {
                let pd = Box::into_raw(Box::new(Pd {
                    c: ibv_pd { context, handle: next_pd_handle() },
                    verbs,
                    users: Users::default(),
                    engine: ctx.engine.clone(),
                    parent: None,
                    imported: None,
                }));
                PDS.insert(pd);
                pd.cast()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                std::ptr::null_mut()
            }
        }
    })
}

#[export_name = "softroce_ibv_dealloc_pd"]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard("ibv_dealloc_pd", libc::EIO, || {
        // SAFETY: retire checks the registry.
        if let Err(e) = unsafe { PDS.retire(pd.cast::<Pd>(), "ibv_pd") } {
            return e;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let p = unsafe { Box::from_raw(pd.cast::<Pd>()) };
        if let Some((parent, td)) = p.parent {
            parent.users.put();
            if let Some(td) = td {
                td.users.put();
            }
        }
        if let Some(original) = p.imported {
            original.users.put();
        }
        0
    })
}

/// `ibv_import_pd`: the PD of `handle` (of the same device, in this
/// process) as a PD of `context`, holding a use of it (it cannot be
/// deallocated first: EBUSY). `ibv_unimport_pd` and `ibv_dealloc_pd` free
/// the imported object alone.
#[export_name = "softroce_ibv_import_pd"]
pub unsafe extern "C" fn ibv_import_pd(context: *mut ibv_context, handle: u32) -> *mut ibv_pd {
    guard("ibv_import_pd", std::ptr::null_mut(), || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return std::ptr::null_mut() };
        // SAFETY: PDS holds Pd objects only.
        let found = unsafe {
            PDS.find::<Pd>(|p| {
                p.c.handle == handle
                    && p.imported.is_none()
                    && p.parent.is_none()
                    && std::sync::Arc::ptr_eq(&p.engine, &ctx.engine)
            })
        };
        let mut held = Held::new();
        // SAFETY: pd_use checks the registry again and takes the use.
        let Some(original) = found.and_then(|p| unsafe { pd_use((p as *const Pd).cast_mut().cast(), &mut held) })
        else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        held.keep();
        let pd = Box::into_raw(Box::new(Pd {
            c: ibv_pd { context, handle },
            verbs: original.verbs.clone(),
            users: Users::default(),
            engine: ctx.engine.clone(),
            parent: None,
            imported: Some(original),
        }));
        PDS.insert(pd);
        pd.cast()
    })
}

/// `ibv_import_mr`: the MR of `handle` (its lkey: what `mr->handle` says)
/// registered on the same device in this process, as an MR of `pd`: the
/// same keys, length and access; no address (the importer's `addr` is NULL,
/// as rdma-core leaves it). `ibv_unimport_mr` and `ibv_dereg_mr` free the
/// imported object alone; the registration stays its owner's.
#[export_name = "softroce_ibv_import_mr"]
pub unsafe extern "C" fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr {
    guard("ibv_import_mr", std::ptr::null_mut(), || {
        let mut held = Held::new();
        // SAFETY: pd_use checks the registry.
        let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return std::ptr::null_mut() };
        // SAFETY: MRS holds Mr objects only; `c` is read as the owner left it.
        let found = unsafe {
            MRS.find::<Mr>(|m| {
                let st = m.state.lock().unwrap_or_else(|e| e.into_inner());
                (*m.c.get()).handle == handle && st.verbs.is_some() && std::sync::Arc::ptr_eq(&st.pd.engine, &p.engine)
            })
        };
        let Some(original) = found else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        // SAFETY: as above.
        let o = unsafe { &*original.c.get() };
        let st = original.state.lock().unwrap_or_else(|e| e.into_inner());
        let c = ibv_mr {
            context: p.c.context,
            pd,
            addr: std::ptr::null_mut(),
            length: o.length,
            handle,
            lkey: o.lkey,
            rkey: o.rkey,
        };
        let state = MrState { verbs: None, pd: p, addr: st.addr, length: st.length, access: st.access };
        drop(st);
        held.keep();
        let mr = Box::into_raw(Box::new(Mr { c: c.into(), state: state.into() }));
        MRS.insert(mr);
        mr.cast()
    })
}

#[export_name = "softroce_ibv_unimport_mr"]
pub unsafe extern "C" fn ibv_unimport_mr(mr: *mut ibv_mr) {
    guard("ibv_unimport_mr", (), || {
        // SAFETY: `live` checks the registry.
        let imported = unsafe { live(&MRS, mr.cast::<Mr>(), "ibv_mr") }
            .is_some_and(|m| m.state.lock().unwrap_or_else(|e| e.into_inner()).verbs.is_none());
        if imported {
            // SAFETY: forwarded; an imported MR's dereg frees it alone.
            unsafe { ibv_dereg_mr(mr) };
        }
    })
}

#[export_name = "softroce_ibv_unimport_pd"]
pub unsafe extern "C" fn ibv_unimport_pd(pd: *mut ibv_pd) {
    guard("ibv_unimport_pd", (), || {
        // SAFETY: `live` checks the registry.
        if unsafe { live(&PDS, pd.cast::<Pd>(), "ibv_pd") }.is_some_and(|p| p.imported.is_some()) {
            // SAFETY: forwarded; an imported PD's dealloc frees it alone.
            unsafe { ibv_dealloc_pd(pd) };
        }
    })
}

/// `verbs_context.alloc_td`, what the inline `ibv_alloc_td` calls.
pub unsafe extern "C" fn alloc_td(context: *mut ibv_context, attr: *mut ibv_td_init_attr) -> *mut ibv_td {
    guard("ibv_alloc_td", std::ptr::null_mut(), || {
        // SAFETY: ctx_of checks the registry.
        if unsafe { ctx_of(context) }.is_none() {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes, read if not NULL.
        if attr.is_null() || unsafe { (*attr).comp_mask } != 0 {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        let td = Box::into_raw(Box::new(Td { c: ibv_td { context }, users: Users::default() }));
        TDS.insert(td);
        td.cast()
    })
}

/// `verbs_context.dealloc_td`: EBUSY while a parent domain names it.
pub unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    guard("ibv_dealloc_td", libc::EIO, || {
        // SAFETY: retire checks the registry.
        if let Err(e) = unsafe { TDS.retire(td.cast::<Td>(), "ibv_td") } {
            return e;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        drop(unsafe { Box::from_raw(td.cast::<Td>()) });
        0
    })
}

/// `verbs_context.alloc_parent_domain`, what the inline
/// `ibv_alloc_parent_domain` calls: a domain that objects are made in as in
/// its PD, holding a use of the PD (and of the thread domain, if any) until
/// `ibv_dealloc_pd` frees it. The custom allocators are accepted and never
/// called: a provider calls them for the queue and CQ buffers it keeps in
/// the application's memory, and this library keeps none there (rdma-core
/// leaves that to the provider).
pub unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    guard("ibv_alloc_parent_domain", std::ptr::null_mut(), || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return std::ptr::null_mut() };
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &*attr };
        let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
        if a.comp_mask & !known != 0
            || (a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0 && (a.alloc.is_none() || a.free.is_none()))
        {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        let mut held = Held::new();
        // SAFETY: pd_use checks the registry.
        let Some(parent) = (unsafe { pd_use(a.pd, &mut held) }) else { return std::ptr::null_mut() };
        if !parent.of_device(context) || parent.is_parent_domain() {
            // rdma-core: the PD of a parent domain is a PD of this context.
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        let td = if a.td.is_null() {
            None
        } else {
            // SAFETY: acquire checks the registry.
            let Some(td) = (unsafe { TDS.acquire(a.td.cast::<Td>(), "ibv_td") }) else { return std::ptr::null_mut() };
            held.push(&td.users);
            if td.c.context != context {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            }
            Some(td)
        };
        held.keep();
        let pd = Box::into_raw(Box::new(Pd {
            c: ibv_pd { context, handle: parent.c.handle },
            verbs: parent.verbs.clone(),
            users: Users::default(),
            engine: ctx.engine.clone(),
            parent: Some((parent, td)),
            imported: None,
        }));
        PDS.insert(pd);
        tracing::debug!(
            td = td.is_some(),
            allocators = a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0,
            "parent domain allocated"
        );
        pd.cast()
    })
}

/// Whether every page of `addr..addr+len` is mapped (mincore fails with
/// ENOMEM on a hole), so that a bad range is EFAULT now, as the kernel's
/// page pinning reports it, instead of a fault in the engine later.
fn mapped(addr: usize, len: usize) -> bool {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let start = addr & !(page - 1);
    let Some(end) = addr.checked_add(len.max(1)) else { return false };
    let span = end - start;
    let mut vec = vec![0u8; span.div_ceil(page)];
    // SAFETY: mincore only inspects the mappings; `vec` has one byte per page.
    let r = unsafe { libc::mincore(start as *mut c_void, span, vec.as_mut_ptr()) };
    r == 0
}

/// Access flags this library honours; the optional ones (bits 20..29,
/// such as RELAXED_ORDERING) are ignored as rdma-core does on devices
/// without them, MW_BIND and HUGETLB need nothing here.
fn access_of(flags: c_uint) -> Result<Access, c_int> {
    const ZERO_BASED: c_uint = 1 << 5;
    if flags & ZERO_BASED != 0 {
        tracing::warn!(flags, "zero-based memory regions are not supported");
        return Err(libc::EOPNOTSUPP);
    }
    // LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND,
    // ON_DEMAND, and FLUSH_GLOBAL and FLUSH_PERSISTENT (the engine's checks
    // use the same bit values).
    Ok(Access(flags & (0xf | Access::MW_BIND.0 | Access::ON_DEMAND.0 | 1 << 8 | 1 << 9)))
}

/// Registers `addr..addr+length` at `iova` in `p`, as `ibv_reg_mr` checks it:
/// the access flags, then that the range is mapped (EFAULT). An on-demand
/// region (`IBV_ACCESS_ON_DEMAND`) needs no mapping: the engine reaches it
/// only through fault-safe copies (docs/odp.md), and `addr` NULL with
/// `length` SIZE_MAX is implicit ODP, the whole address space.
fn register(p: &Pd, addr: *mut c_void, length: usize, iova: u64, access: c_uint) -> Result<MemoryRegion, c_int> {
    let flags = access_of(access)?;
    if flags.contains(Access::ON_DEMAND) {
        let implicit = addr.is_null() && length == usize::MAX;
        // SAFETY: the engine never dereferences an on-demand region's bytes.
        let r = if implicit {
            if iova != 0 {
                return Err(libc::EINVAL);
            }
            unsafe { p.verbs.reg_mr_implicit(flags) }
        } else {
            unsafe { p.verbs.reg_mr_on_demand(addr.cast(), length, iova, flags) }
        };
        return r.map_err(|e| errno_of(&e));
    }
    if addr.is_null() || !mapped(addr as usize, length) {
        tracing::debug!(addr = addr as u64, length, "ibv_reg_mr of memory that is not mapped");
        return Err(libc::EFAULT);
    }
    // SAFETY: the application registers its own mapped memory and, as with
    // any RDMA device, keeps it valid until ibv_dereg_mr; the engine checks
    // every access against the region's bounds.
    unsafe { p.verbs.reg_mr_raw_at(addr.cast(), length, iova, flags) }.map_err(|e| errno_of(&e))
}

/// `verbs_context.advise_mr`, what the inline `ibv_advise_mr` calls:
/// prefetches ranges of on-demand regions of `pd`.
pub unsafe extern "C" fn advise_mr(pd: *mut ibv_pd, advice: u32, flags: u32, sg: *mut ibv_sge, n: u32) -> c_int {
    guard("ibv_advise_mr", libc::EIO, || {
        let mut held = Held::new();
        // SAFETY: pd_use checks the registry.
        let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return libc::EINVAL };
        let Some(advice) = rdma_core_rs::AdviseMr::from_raw(advice) else { return libc::EINVAL };
        if n > 0 && sg.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's `n` entries (checked for NULL).
        let list = if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(sg, n as usize) } };
        let sges: Vec<rdma_core_rs::Sge> =
            list.iter().map(|e| rdma_core_rs::Sge { addr: e.addr, length: e.length, lkey: e.lkey }).collect();
        match p.verbs.advise_mr(advice, flags, &sges) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

fn c_mr(p: &Pd, pd: *mut ibv_pd, addr: *mut c_void, length: usize, verbs: &MemoryRegion) -> ibv_mr {
    ibv_mr { context: p.c.context, pd, addr, length, handle: verbs.lkey(), lkey: verbs.lkey(), rkey: verbs.rkey() }
}

fn reg(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_uint) -> *mut ibv_mr {
    let mut held = Held::new();
    // SAFETY: pd_use checks the registry.
    let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return std::ptr::null_mut() };
    let verbs = match register(p, addr, length, iova, access) {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    let c = c_mr(p, pd, addr, length, &verbs);
    held.keep();
    let state = MrState { verbs: Some(verbs), pd: p, addr, length, access };
    let mr = Box::into_raw(Box::new(Mr { c: c.into(), state: state.into() }));
    MRS.insert(mr);
    mr.cast()
}

#[export_name = "softroce_ibv_reg_mr"]
pub unsafe extern "C" fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr {
    guard("ibv_reg_mr", std::ptr::null_mut(), || reg(pd, addr, length, addr as u64, access as c_uint))
}

#[export_name = "softroce_ibv_reg_mr_iova"]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova", std::ptr::null_mut(), || reg(pd, addr, length, iova, access as c_uint))
}

#[export_name = "softroce_ibv_reg_mr_iova2"]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova2", std::ptr::null_mut(), || reg(pd, addr, length, iova, access))
}

#[export_name = "softroce_ibv_dereg_mr"]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard("ibv_dereg_mr", libc::EIO, || {
        let p = mr.cast::<Mr>();
        // SAFETY: `live` checks the registry.
        let Some(m) = (unsafe { live(&MRS, p, "ibv_mr") }) else { return libc::EINVAL };
        // As rxe (IBA 10.6.7.2.6): a region with windows bound to it stays.
        // Checked and deregistered in one step with every engine's lock
        // held (`MemoryRegion::dereg`): a bind on another engine cannot
        // come between the check and the deregistration.
        {
            let mut st = m.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(v) = st.verbs.take() {
                if let Err((v, e)) = v.dereg() {
                    tracing::debug!(error = %e, "ibv_dereg_mr refused");
                    st.verbs = Some(v);
                    return libc::EINVAL;
                }
            }
        }
        if !MRS.remove(p) {
            return libc::EINVAL;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let m = unsafe { Box::from_raw(p) };
        m.state.into_inner().unwrap_or_else(|e| e.into_inner()).pd.users.put();
        0
    })
}

/// `enum ibv_rereg_mr_flags`.
const REREG_CHANGE_TRANSLATION: c_int = 1 << 0;
const REREG_CHANGE_PD: c_int = 1 << 1;
const REREG_CHANGE_ACCESS: c_int = 1 << 2;
/// `enum ibv_rereg_mr_err_code`: the request was refused before anything
/// changed; the command failed (EFAULT: a new range that is not mapped).
const REREG_ERR_INPUT: c_int = -1;
const REREG_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr`: a new translation (address and length; the iova is the
/// address), PD and/or access for the region, as `flags` says, keeping its
/// keys as rxe does (and mlx5's translation change too); a refusal leaves
/// the region as it was.
#[export_name = "softroce_ibv_rereg_mr"]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard("ibv_rereg_mr", REREG_ERR_INPUT, || {
        let all = REREG_CHANGE_TRANSLATION | REREG_CHANGE_PD | REREG_CHANGE_ACCESS;
        let input = |e: c_int| {
            set_errno(e);
            REREG_ERR_INPUT
        };
        // SAFETY: `live` checks the registry.
        let Some(m) = (unsafe { live(&MRS, mr.cast::<Mr>(), "ibv_mr") }) else { return input(libc::EINVAL) };
        if flags == 0 || flags & !all != 0 {
            return input(libc::EINVAL);
        }
        let mut st = m.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = Held::new();
        let new_pd = if flags & REREG_CHANGE_PD != 0 {
            // SAFETY: pd_use checks the registry.
            let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return input(libc::EINVAL) };
            if !std::sync::Arc::ptr_eq(&p.engine, &st.pd.engine) {
                return input(libc::EINVAL);
            }
            Some(p)
        } else {
            None
        };
        let new_access = if flags & REREG_CHANGE_ACCESS != 0 {
            match access_of(access as c_uint) {
                Ok(a) => Some(a),
                Err(e) => return input(e),
            }
        } else {
            None
        };
        let translation = if flags & REREG_CHANGE_TRANSLATION != 0 {
            if addr.is_null() || !mapped(addr as usize, length) {
                set_errno(libc::EFAULT);
                return REREG_ERR_CMD;
            }
            Some((addr.cast::<u8>(), length, addr as u64))
        } else {
            None
        };
        let Some(verbs) = st.verbs.as_mut() else { return input(libc::EOPNOTSUPP) }; // an imported MR
                                                                                     // SAFETY: as ibv_reg_mr's: the application's own mapped memory, kept
                                                                                     // valid until the region is deregistered or reregistered again.
        if let Err(e) = unsafe { verbs.rereg_raw(new_pd.map(|p| &p.verbs), translation, new_access) } {
            tracing::debug!(error = %e, flags, "ibv_rereg_mr refused; the region stays as it was");
            return input(errno_of(&e));
        }
        // SAFETY: the application does not use the MR while it reregisters
        // it (libibverbs' contract).
        let c = unsafe { &mut *m.c.get() };
        if let Some(p) = new_pd {
            held.keep();
            st.pd.users.put();
            st.pd = p;
            c.pd = pd;
        }
        if translation.is_some() {
            (st.addr, st.length) = (addr, length);
            (c.addr, c.length) = (addr, length);
        }
        if new_access.is_some() {
            st.access = access as c_uint;
        }
        0
    })
}
