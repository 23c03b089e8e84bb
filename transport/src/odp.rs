//! Fault-safe access to the application's memory, for on-demand (ODP)
//! regions ([`crate::RegionMemory::on_demand`]; docs/odp.md).
//!
//! An on-demand region pins nothing and checks nothing at registration:
//! any of its pages may be unmapped, or become unmapped while it is
//! registered. So the engine never dereferences its addresses, and never
//! makes a Rust slice of them (a slice over unmapped memory is undefined
//! behaviour even before it is read). Every copy goes through the kernel
//! instead: `process_vm_readv(2)` / `process_vm_writev(2)` on the calling
//! process itself. The kernel copies with its fault-handling user copy
//! routines and answers `EFAULT` (or a short count) for a page that is not
//! mapped, or not readable / writable, where a load or store would have
//! raised SIGSEGV. A process may always use them on itself: the ptrace
//! access check passes at once for the caller's own thread group
//! (`__ptrace_may_access`), whatever Yama's `ptrace_scope` says; a seccomp
//! policy could still forbid the calls, which [`supported`] finds out.
//!
//! Prefetching (`ibv_advise_mr`) is `madvise(MADV_POPULATE_READ/WRITE)`
//! (Linux 5.14): it faults the pages in as a read or a write would,
//! changes no byte, and fails for a range that is not mapped, or not
//! writable for a write. Older kernels fall back to reading one byte of
//! each page (a read-only check).

use std::sync::OnceLock;

/// Why a fault-safe copy failed: some byte of the range is not mapped,
/// or does not allow the access. Bytes before the fault may have been
/// copied (the kernel copies page by page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Faulted;

fn pid() -> libc::pid_t {
    // Not cached: a forked child must copy within itself, not its parent.
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// Copies `out.len()` bytes from address `addr` of this process.
pub(crate) fn read(addr: usize, out: &mut [u8]) -> Result<(), Faulted> {
    let mut done = 0;
    while done < out.len() {
        let at = addr.checked_add(done).ok_or(Faulted)?;
        let local = libc::iovec { iov_base: out[done..].as_mut_ptr().cast(), iov_len: out.len() - done };
        let remote = libc::iovec { iov_base: at as *mut libc::c_void, iov_len: out.len() - done };
        // SAFETY: `local` is the live, writable rest of `out`; the kernel
        // checks `remote` itself and never faults on it.
        let n = unsafe { libc::process_vm_readv(pid(), &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(Faulted);
        }
        done += n as usize;
    }
    Ok(())
}

/// Copies `data` to address `addr` of this process.
pub(crate) fn write(addr: usize, data: &[u8]) -> Result<(), Faulted> {
    let mut done = 0;
    while done < data.len() {
        let at = addr.checked_add(done).ok_or(Faulted)?;
        let local = libc::iovec { iov_base: data[done..].as_ptr() as *mut libc::c_void, iov_len: data.len() - done };
        let remote = libc::iovec { iov_base: at as *mut libc::c_void, iov_len: data.len() - done };
        // SAFETY: `local` is the live rest of `data`, only read; the
        // kernel checks `remote` itself and never faults on it.
        let n = unsafe { libc::process_vm_writev(pid(), &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(Faulted);
        }
        done += n as usize;
    }
    Ok(())
}

const MADV_POPULATE_READ: libc::c_int = 22;
const MADV_POPULATE_WRITE: libc::c_int = 23;

fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1))
}

/// Faults in `len` bytes at `addr` for reading, or for writing if `write`,
/// as an access would, without changing a byte (`ibv_advise_mr`'s
/// prefetch, and the check of a FLUSH's range).
pub(crate) fn populate(addr: usize, len: usize, write: bool) -> Result<(), Faulted> {
    if len == 0 {
        return Ok(());
    }
    let end = addr.checked_add(len).ok_or(Faulted)?;
    let page = page_size();
    let start = addr - addr % page;
    let advice = if write { MADV_POPULATE_WRITE } else { MADV_POPULATE_READ };
    // SAFETY: MADV_POPULATE_* only faults pages in; it changes no mapping
    // and no byte, and fails on a range that is not mapped.
    let r = unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
    if r == 0 {
        return Ok(());
    }
    if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) || write {
        return Err(Faulted);
    }
    // EINVAL: a kernel older than 5.14, or a mapping it cannot populate
    // (PROT_NONE): read one byte per page instead.
    let mut byte = [0u8; 1];
    let mut at = addr;
    while at < end {
        read(at, &mut byte)?;
        at = (at - at % page).saturating_add(page);
    }
    Ok(())
}

/// Whether the fault-safe copies work in this process (a seccomp policy
/// may forbid `process_vm_readv`): on-demand registration is refused
/// otherwise.
pub fn supported() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let src = [0x5au8; 8];
        let mut dst = [0u8; 8];
        read(src.as_ptr() as usize, &mut dst).is_ok() && dst == src
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pages, the second unmapped: copies into or out of it fail, the
    /// first page works and keeps its bytes.
    #[test]
    fn an_unmapped_page_is_an_error_not_a_signal() {
        let page = page_size();
        // SAFETY: a fresh anonymous mapping of two pages.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let a = p as usize;
        // SAFETY: the second page of the mapping above.
        assert_eq!(unsafe { libc::munmap((a + page) as *mut libc::c_void, page) }, 0);
        assert!(supported());
        write(a, b"hello").unwrap();
        let mut out = [0u8; 5];
        read(a, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert_eq!(write(a + page, b"x"), Err(Faulted));
        assert_eq!(read(a + page, &mut out), Err(Faulted));
        assert_eq!(write(a + page - 2, b"abcd"), Err(Faulted), "a copy that runs into the hole");
        assert_eq!(read(0, &mut out), Err(Faulted), "address 0");
        assert_eq!(read(usize::MAX - 2, &mut out), Err(Faulted), "the end of the address space");
        assert!(populate(a, page, true).is_ok());
        assert_eq!(populate(a, page + 1, false), Err(Faulted));
        assert_eq!(populate(a + page, 1, true), Err(Faulted));
        // SAFETY: the first page, mapped and ours.
        assert_eq!(unsafe { core::slice::from_raw_parts(a as *const u8, 5) }, b"hello");
        // SAFETY: make the first page read-only, then unmap it.
        unsafe {
            assert_eq!(libc::mprotect(p, page, libc::PROT_READ), 0);
            assert_eq!(write(a, b"x"), Err(Faulted), "a read-only page");
            assert_eq!(populate(a, 1, true), Err(Faulted), "a read-only page");
            assert!(populate(a, 1, false).is_ok());
            libc::munmap(p, page);
        }
    }
}
