//! A member's keeper thread: it sleeps on the other members' processes
//! (pidfds, readable when a process ends, however it ends) and, when one
//! ends or a period passes, has dead members taken out of the shared
//! port at once, so that the kernel's move of the last socket into the
//! dead one's place misroutes packets for microseconds, not until the
//! next join.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// The longest a keeper sleeps without looking: a member that joined
/// since the last look, or a process that pidfds cannot watch.
const PERIOD: Duration = Duration::from_millis(250);

/// A running keeper; [`Keeper::stop`] ends it.
pub(super) struct Keeper {
    handle: std::thread::JoinHandle<()>,
    stop: OwnedFd,
}

fn pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) with no flags; the result is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a new descriptor of ours.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Starts a keeper named `name`: `watch` gives the pids of the other
/// members, `keep` takes dead ones out; its argument says whether the
/// port's group may have changed under the record (the first look, just
/// after the join, or a member's process ended), so that the member checks
/// its own place. None if no thread could start.
pub(super) fn spawn(
    name: String,
    watch: impl Fn() -> Vec<u32> + Send + 'static,
    keep: impl Fn(bool) + Send + 'static,
) -> Option<Keeper> {
    // SAFETY: plain syscall; owned below.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "no keeper for the shared port: dead members are taken out at joins and leaves only");
        return None;
    }
    // SAFETY: a new descriptor of ours.
    let stop = unsafe { OwnedFd::from_raw_fd(efd) };
    let stop_fd = stop.as_raw_fd();
    let handle = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let mut changed = true;
            loop {
                if changed {
                    keep(true);
                }
                let pids = watch();
                let fds: Vec<OwnedFd> = pids.iter().filter_map(|&p| pidfd(p)).collect();
                // A process that is gone already (no pidfd): look at once.
                changed = fds.len() != pids.len();
                if !changed {
                    let mut set: Vec<libc::pollfd> = std::iter::once(stop_fd)
                        .chain(fds.iter().map(|f| f.as_raw_fd()))
                        .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
                        .collect();
                    // SAFETY: poll over descriptors alive across the call.
                    unsafe { libc::poll(set.as_mut_ptr(), set.len() as libc::nfds_t, PERIOD.as_millis() as i32) };
                    if set[0].revents != 0 {
                        return;
                    }
                    changed = set[1..].iter().any(|p| p.revents != 0);
                }
                if !changed {
                    keep(false);
                }
            }
        })
        .map_err(|e| tracing::warn!(error = %e, "no keeper thread for the shared port: dead members are taken out at joins and leaves only"))
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
