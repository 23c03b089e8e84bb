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

#[repr(C)]
pub struct Pd {
    pub c: ibv_pd,
    pub verbs: ProtectionDomain,
    /// MRs, QPs, SRQs and AHs made from it (deallocating it first is EBUSY).
    pub users: Users,
    /// The device's engine (shared with other opens; outlives a close).
    pub engine: std::sync::Arc<Engine>,
}

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
    held.push(&pd.users);
    Some(pd)
}

// SAFETY: the raw pointers in `c` are the application's; see cq::Cq.
unsafe impl Send for Pd {}
unsafe impl Sync for Pd {}

#[repr(C)]
pub struct Mr {
    pub c: ibv_mr,
    verbs: MemoryRegion,
    pd: &'static Pd,
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
                    c: ibv_pd { context, handle: 0 },
                    verbs,
                    users: Users::default(),
                    engine: ctx.engine.clone(),
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
        drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
        0
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
    const ON_DEMAND: c_uint = 1 << 6;
    if flags & (ZERO_BASED | ON_DEMAND) != 0 {
        tracing::warn!(flags, "zero-based and on-demand memory regions are not supported");
        return Err(libc::EOPNOTSUPP);
    }
    Ok(Access(flags & 0xf))
}

fn reg(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_uint) -> *mut ibv_mr {
    let mut held = Held::new();
    // SAFETY: pd_use checks the registry.
    let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return std::ptr::null_mut() };
    if iova != addr as u64 {
        tracing::warn!(iova, addr = addr as u64, "an iova other than the address is not supported");
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    let access = match access_of(access) {
        Ok(a) => a,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    if addr.is_null() || !mapped(addr as usize, length) {
        tracing::debug!(addr = addr as u64, length, "ibv_reg_mr of memory that is not mapped");
        set_errno(libc::EFAULT);
        return std::ptr::null_mut();
    }
    // SAFETY: the application registers its own mapped memory and, as with
    // any RDMA device, keeps it valid until ibv_dereg_mr; the engine checks
    // every access against the region's bounds.
    let verbs = match unsafe { p.verbs.reg_mr_raw(addr.cast(), length, access) } {
        Ok(v) => v,
        Err(e) => {
            set_errno(errno_of(&e));
            return std::ptr::null_mut();
        }
    };
    let c =
        ibv_mr { context: p.c.context, pd, addr, length, handle: verbs.lkey(), lkey: verbs.lkey(), rkey: verbs.rkey() };
    held.keep();
    let mr = Box::into_raw(Box::new(Mr { c, verbs, pd: p }));
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
        if unsafe { live(&MRS, p, "ibv_mr") }.is_none() || !MRS.remove(p) {
            return libc::EINVAL;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let m = unsafe { Box::from_raw(p) };
        m.pd.users.put();
        0
    })
}

#[export_name = "softroce_ibv_rereg_mr"]
pub unsafe extern "C" fn ibv_rereg_mr(
    _mr: *mut ibv_mr,
    _flags: c_int,
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _length: usize,
    _access: c_int,
) -> c_int {
    // IBV_REREG_MR_ERR_INPUT: the old region stays valid.
    set_errno(libc::EOPNOTSUPP);
    -1
}
