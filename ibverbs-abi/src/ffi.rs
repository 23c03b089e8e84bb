//! What every `extern "C"` entry point shares: no unwinding into C, errno,
//! and the registry that tells a live object from a NULL, foreign or
//! destroyed pointer before it is dereferenced.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

/// Runs `f`, turning a panic into `on_panic` (after setting errno to EIO and
/// logging it): a panic must never unwind across the C boundary.
pub fn guard<R>(name: &'static str, on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(e) => {
            let msg = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(call = name, panic = %msg, "internal error caught at the C boundary");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// The errno a verbs call that failed with `e` reports, as the kernel and
/// rdma-core's providers would.
pub fn errno_of(e: &rdma_core_rs::Error) -> i32 {
    use rdma_core_rs::{Error, McastError, VerbsError};
    let v = |v: &VerbsError| match v {
        VerbsError::QueueFull { .. } => libc::ENOMEM,
        VerbsError::UnsupportedOp { .. } => libc::EOPNOTSUPP,
        VerbsError::XrcdInUse(_) => libc::EBUSY,
        VerbsError::QpnsExhausted { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    };
    match e {
        Error::Verbs(x) => v(x),
        Error::Post { source, .. } => v(source),
        Error::Io(io) => io.raw_os_error().unwrap_or(match io.kind() {
            std::io::ErrorKind::AddrInUse => libc::EADDRINUSE,
            std::io::ErrorKind::AddrNotAvailable => libc::EADDRNOTAVAIL,
            std::io::ErrorKind::PermissionDenied => libc::EACCES,
            std::io::ErrorKind::OutOfMemory => libc::ENOMEM,
            // A native IB device's network interface is not there.
            std::io::ErrorKind::NotFound => libc::ENODEV,
            _ => libc::EIO,
        }),
        Error::InvalidArgument(_) | Error::WrongDevice(_) | Error::OutOfBounds { .. } => libc::EINVAL,
        Error::OutOfMemory { .. } => libc::ENOMEM,
        // rxe's limits are ENOMEM; the rest is EINVAL, as ib_attach_mcast
        // and the uverbs detach answer (docs/multicast.md).
        Error::Mcast(m) => match m {
            McastError::TooManyGroups | McastError::GroupFull { .. } | McastError::TooManyAttachments => libc::ENOMEM,
            _ => libc::EINVAL,
        },
    }
}

/// The addresses of the live objects of one kind. A pointer is used only
/// after it is found here, so a NULL, a pointer of another kind or one
/// already destroyed gets an error instead of a crash.
pub struct Registry {
    live: RwLock<Option<HashSet<usize>>>,
}

impl Registry {
    pub const fn new() -> Registry {
        Registry { live: RwLock::new(None) }
    }

    pub fn insert<T>(&self, p: *const T) {
        let mut g = self.live.write().unwrap_or_else(|e| e.into_inner());
        g.get_or_insert_with(HashSet::new).insert(p as usize);
    }

    /// The first live object of this registry (all of type `T`) for which
    /// `pred` holds, looked at under the read lock.
    ///
    /// # Safety
    /// Every object in this registry is a `T` (as for [`live`]: leaked
    /// boxes freed only after removal).
    pub unsafe fn find<T>(&self, pred: impl Fn(&T) -> bool) -> Option<&'static T> {
        let g = self.live.read().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the contract; found under the lock that removal takes.
        g.as_ref()?.iter().map(|&p| unsafe { &*(p as *const T) }).find(|t| pred(t))
    }

    /// Removes `p`; false if it was not live (a double destroy).
    pub fn remove<T>(&self, p: *const T) -> bool {
        let mut g = self.live.write().unwrap_or_else(|e| e.into_inner());
        g.as_mut().is_some_and(|s| s.remove(&(p as usize)))
    }

    /// Takes a use of the live object `p` (a QP's CQ, an MR's PD) with the
    /// lookup, under the read lock: a concurrent [`Registry::retire`] holds
    /// the write lock, so it either sees the use (EBUSY) or finishes first
    /// (then `p` is not found here). Looking up and counting in two steps
    /// let a destroy free an object a create had just found. Give the use
    /// back with [`Users::put`].
    ///
    /// # Safety
    /// As for [`live`]: objects here are leaked boxes freed only after
    /// removal.
    pub unsafe fn acquire<'a, T: Shared>(&self, p: *const T, what: &str) -> Option<&'a T> {
        let g = self.live.read().unwrap_or_else(|e| e.into_inner());
        if !p.is_null() && g.as_ref().is_some_and(|s| s.contains(&(p as usize))) {
            // SAFETY: found under the lock that removal takes; see the contract.
            let t = unsafe { &*p };
            if t.users().take() {
                return Some(t);
            }
        }
        drop(g);
        tracing::debug!(object = what, ptr = ?p, "not a live object");
        set_errno(libc::EINVAL);
        None
    }

    /// Removes `p` for its destroy call, unless something still uses it:
    /// Err(EINVAL) if it is not live, Err(EBUSY) if in use. After Ok the
    /// caller owns the box.
    ///
    /// # Safety
    /// As for [`live`].
    pub unsafe fn retire<T: Shared>(&self, p: *const T, what: &str) -> Result<(), i32> {
        let mut g = self.live.write().unwrap_or_else(|e| e.into_inner());
        let Some(set) = g.as_mut().filter(|s| !p.is_null() && s.contains(&(p as usize))) else {
            tracing::debug!(object = what, ptr = ?p, "not a live object");
            set_errno(libc::EINVAL);
            return Err(libc::EINVAL);
        };
        // SAFETY: found under the write lock; see the contract.
        if !unsafe { &*p }.users().close() {
            tracing::debug!(object = what, ptr = ?p, "destroy refused: still in use");
            set_errno(libc::EBUSY);
            return Err(libc::EBUSY);
        }
        set.remove(&(p as usize));
        Ok(())
    }

    pub fn contains<T>(&self, p: *const T) -> bool {
        if p.is_null() {
            return false;
        }
        let g = self.live.read().unwrap_or_else(|e| e.into_inner());
        g.as_ref().is_some_and(|s| s.contains(&(p as usize)))
    }
}

/// An object other objects depend on (a PD, a CQ, an SRQ): destroying it
/// while they exist is EBUSY, as the kernel's uverbs answers.
pub trait Shared {
    fn users(&self) -> &Users;
}

/// How many objects use this one; closed for good once its destroy has
/// begun, so that no use can be taken after the destroy checked for none.
#[derive(Debug, Default)]
pub struct Users(AtomicUsize);

impl Users {
    const CLOSED: usize = usize::MAX;

    /// One more use; false once closed.
    pub(crate) fn take(&self) -> bool {
        self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < Self::CLOSED - 1).then_some(n + 1)).is_ok()
    }

    /// Gives back a use taken by [`Registry::acquire`].
    pub fn put(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }

    /// Closes if unused; false (EBUSY) otherwise.
    fn close(&self) -> bool {
        self.0.compare_exchange(0, Self::CLOSED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// Uses taken by a create call in progress, given back if it fails.
pub struct Held<'a>(Vec<&'a Users>);

impl<'a> Held<'a> {
    pub fn new() -> Self {
        Held(Vec::with_capacity(4))
    }

    pub fn push(&mut self, u: &'a Users) {
        self.0.push(u);
    }

    /// The create succeeded: its object keeps the uses until destroyed.
    pub fn keep(mut self) {
        self.0.clear();
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        for u in &self.0 {
            u.put();
        }
    }
}

/// Looks `p` up in `reg` and borrows the object; None (errno EINVAL) if
/// it is not a live object of that kind.
///
/// # Safety
/// Objects in `reg` are `Box<T>`s leaked by this library and freed only
/// after removal from `reg`.
pub unsafe fn live<'a, T>(reg: &Registry, p: *const T, what: &str) -> Option<&'a T> {
    if reg.contains(p) {
        // SAFETY: see the function's contract.
        Some(unsafe { &*p })
    } else {
        tracing::debug!(object = what, ptr = ?p, "not a live object");
        set_errno(libc::EINVAL);
        None
    }
}

/// Copies `s` into a fixed C char array, NUL-terminated and truncated.
pub fn copy_cstr(dst: &mut [libc::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as libc::c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

/// An eventfd for a completion channel or the async events: readable while
/// events wait (semaphore mode: one read takes one event), blocking by
/// default as libibverbs' fds are; the application may set O_NONBLOCK.
pub fn event_fd() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscall; the fd is owned from here on.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Adds one event to an eventfd.
pub fn signal_fd(fd: i32) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from `one` to an eventfd.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Takes one event from an eventfd, blocking unless the application made it
/// non-blocking. Err(errno) on EAGAIN or another failure, and Err(EINTR)
/// when a signal interrupts the wait: libibverbs' `ibv_get_cq_event` and
/// `ibv_get_async_event` are a plain `read` of the channel's fd and return
/// -1 with errno EINTR then. qperf ends each test with SIGALRM (installed
/// without SA_RESTART) and relies on it to leave a wait for a completion
/// that will never come; retried here, its server hung in 1 run in 6 and
/// the client failed with "failed to receive results: timed out".
pub fn wait_fd(fd: i32) -> Result<(), i32> {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into `v`.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n == 8 {
        return Ok(());
    }
    Err(std::io::Error::last_os_error().raw_os_error().filter(|&e| e != 0).unwrap_or(libc::EIO))
}
