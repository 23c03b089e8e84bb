//! What a child of `fork` must not inherit from its parent's devices.
//!
//! A child (Python's multiprocessing, a server forking per client) has a
//! copy of the parent's memory and descriptors but none of its threads.
//! It must open devices afresh rather than use the parent's engines, and
//! its copies of the parent's shared-port sockets and registry locks must
//! go: a socket stays in the port's group while any process holds it, so
//! a copy would keep the parent's place in the kernel's socket array (and
//! its slot lock) alive after the parent leaves, and the steering would
//! send packets to a socket that no one reads.
//!
//! A `pthread_atfork` child handler therefore bumps a generation number
//! (process-wide registries ignore, and leak, what an older generation
//! made: see [`PerProcess`]) and points each registered descriptor at
//! `/dev/null` with `dup2`, which drops the child's reference to the
//! socket or lock without freeing the number the leaked objects still
//! hold. Both are async-signal-safe, as a child handler must be.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Once;

/// Descriptors a child lets go of; -1 is a free entry.
static DETACH: [AtomicI32; 64] = [const { AtomicI32::new(-1) }; 64];
/// `/dev/null`, open for the life of the process.
static PLACEHOLDER: AtomicI32 = AtomicI32::new(-1);
/// Forks this process's line has gone through (0 in the first process).
static GENERATION: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

/// The fork generation of this process: it changes in a child.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    let null = PLACEHOLDER.load(Ordering::Acquire);
    for e in &DETACH {
        let fd = e.swap(-1, Ordering::AcqRel);
        if fd >= 0 && null >= 0 {
            // SAFETY: dup2 replaces the child's copy of a descriptor the
            // library registered; the number stays valid for its owner.
            unsafe { libc::dup2(null, fd) };
        }
    }
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: a plain open; the descriptor is kept for good.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if null < 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), "cannot open /dev/null: a forked child keeps its parent's shared sockets");
        }
        PLACEHOLDER.store(null, Ordering::Release);
        // SAFETY: registers a handler that only does async-signal-safe work.
        let r = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if r != 0 {
            tracing::warn!(errno = r, "pthread_atfork failed: a forked child would use its parent's devices");
        }
    });
}

/// Installs the child handler (once per process): a child of a fork from
/// now on opens devices of its own.
pub fn watch_forks() {
    install();
}

/// Makes a forked child drop its copy of `fd` (see the module's comment).
/// Returns false if the table is full: a child then keeps the copy.
pub fn detach_in_child(fd: RawFd) -> bool {
    install();
    let free = DETACH.iter().any(|e| e.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire).is_ok());
    if !free {
        tracing::warn!(fd, "fork table full: a forked child would keep this descriptor");
    }
    free
}

/// Undoes [`detach_in_child`] before `fd` is closed (its number may be
/// reused for something a child must keep).
pub fn forget(fd: RawFd) {
    for e in &DETACH {
        let _ = e.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// A process-wide value that a forked child starts over: the parent's
/// value (its engines, sockets, threads' handles) is leaked, never
/// dropped, since the child has none of the parent's threads to join and
/// the objects belong to the parent.
#[derive(Debug)]
pub struct PerProcess<T> {
    generation: u64,
    value: T,
}

impl<T: Default> PerProcess<T> {
    pub const fn new(value: T) -> PerProcess<T> {
        PerProcess { generation: 0, value }
    }

    /// This process's value (a fresh default in a child's first call).
    pub fn get(&mut self) -> &mut T {
        let g = generation();
        if g != self.generation {
            std::mem::forget(std::mem::take(&mut self.value));
            self.generation = g;
        }
        &mut self.value
    }
}

/// Closes the socket or file behind `fd` now while keeping the number
/// taken (it then names `/dev/null`), for an owner that closes it later.
pub fn close_in_place(fd: RawFd) -> bool {
    install();
    let null = PLACEHOLDER.load(Ordering::Acquire);
    // SAFETY: dup2 onto a descriptor the caller owns.
    null >= 0 && unsafe { libc::dup2(null, fd) } == fd
}
