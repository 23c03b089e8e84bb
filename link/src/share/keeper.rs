//! A member's keeper thread: it sleeps on the other members' processes
//! (pidfds, readable when a process ends, however it ends) and on the
//! record's directory (inotify: a member joined, left or claimed), so that
//! a dead member is taken out of the shared port at once (the kernel's
//! move of the last socket into the dead one's place then misroutes
//! packets for microseconds, not until the next join), and the member's
//! receive options follow the number of members.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The longest a keeper sleeps without looking: a member that joined
/// since the last look, or a process that pidfds cannot watch.
const PERIOD: Duration = Duration::from_millis(250);

/// What a keeper keeps (a member's port).
pub(super) trait Port: Send + Sync + 'static {
    /// The pids of the other members, as recorded.
    fn others(&self) -> Vec<u32>;
    /// Takes dead members out. `changed`: the port's group may have
    /// changed under the record (just after the join, or a member's
    /// process ended), so the member also checks its own place.
    fn keep(&self, changed: bool);
    /// Someone rewrote the record.
    fn record_changed(&self);
}

/// A running keeper; [`Keeper::stop`] ends it.
pub(super) struct Keeper {
    handle: std::thread::JoinHandle<()>,
    stop: OwnedFd,
}

fn owned(fd: i64) -> Option<OwnedFd> {
    // SAFETY: a new descriptor of ours (or none).
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) with no flags.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) })
}

/// An inotify descriptor that becomes readable when a record of `dir` is
/// replaced (written under a temporary name, renamed over).
fn watch_dir(dir: &Path) -> Option<OwnedFd> {
    // SAFETY: plain syscalls; the descriptor is owned at once.
    let fd = owned(i64::from(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) }))?;
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a NUL-terminated path and our descriptor.
    let w = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_MOVED_TO) };
    (w >= 0).then_some(fd)
}

fn drain(fd: &OwnedFd) {
    let mut buf = [0u8; 4096];
    // SAFETY: reads into our buffer until the non-blocking fd is empty.
    while unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// Starts a keeper of `port` named `name`, watching the records in
/// `dir`. None if no thread could start.
pub(super) fn spawn(name: String, port: Arc<dyn Port>, dir: &Path) -> Option<Keeper> {
    let fail = |e: &dyn std::fmt::Display| {
        tracing::warn!(error = %e, "no keeper for the shared port: dead members are taken out at joins and leaves only");
    };
    // SAFETY: plain syscall.
    let Some(stop) = owned(i64::from(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })) else {
        fail(&std::io::Error::last_os_error());
        return None;
    };
    let stop_fd = stop.as_raw_fd();
    let records = watch_dir(dir);
    if records.is_none() {
        tracing::info!(dir = %dir.display(), "cannot watch the shared-port records: joins are seen within {PERIOD:?}");
    }
    let handle = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let records_fd = records.as_ref().map_or(-1, |f| f.as_raw_fd());
            let mut changed = true;
            loop {
                if changed {
                    port.keep(true);
                }
                let pids = port.others();
                let fds: Vec<OwnedFd> = pids.iter().filter_map(|&p| pidfd(p)).collect();
                // A process that is gone already (no pidfd): look at once.
                changed = fds.len() != pids.len();
                if changed {
                    continue;
                }
                let mut set: Vec<libc::pollfd> = [stop_fd, records_fd]
                    .into_iter()
                    .chain(fds.iter().map(|f| f.as_raw_fd()))
                    .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
                    .collect();
                // SAFETY: poll over descriptors alive across the call (a
                // negative one is skipped).
                let n = unsafe { libc::poll(set.as_mut_ptr(), set.len() as libc::nfds_t, PERIOD.as_millis() as i32) };
                if set[0].revents != 0 {
                    return;
                }
                changed = set[2..].iter().any(|p| p.revents != 0);
                if let Some(r) = records.as_ref().filter(|_| set[1].revents != 0) {
                    drain(r);
                    port.record_changed();
                } else if !changed && n >= 0 {
                    port.keep(false);
                }
            }
        })
        .map_err(|e| fail(&e))
        .ok()?;
    Some(Keeper { handle, stop })
}

impl Keeper {
    /// Ends the keeper and waits for it.
    pub(super) fn stop(self) {
        let one: u64 = 1;
        // SAFETY: an 8-byte write to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let _ = self.handle.join();
    }
}
