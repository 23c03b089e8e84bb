//! Waiting on file descriptors: what a blocking wait of a device, and the
//! drop-in libibverbs' idle-progress thread, sleep in.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Sleeps until one of `fds` is readable or `timeout` passes (to the
/// microsecond: the engine's ACK delay and timers are that fine); returns
/// which may be read: readable, or with an error or hang-up a read will
/// report. A negative fd is skipped. On a failed wait (EINTR) nothing is
/// known and every one may be: a caller that reads must not block then.
pub fn poll_readable<const N: usize>(fds: &[RawFd; N], timeout: Duration) -> [bool; N] {
    let mut p = fds.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `p` is a valid array of N pollfds; `ts` a valid timespec.
    let n = unsafe { libc::ppoll(p.as_mut_ptr(), N as libc::nfds_t, &ts, std::ptr::null()) };
    p.map(|q| n < 0 || q.revents != 0)
}

/// One fd that stands for several: an epoll set, readable when one of
/// its members is (a link that reads more than one fd waits on this).
#[derive(Debug)]
pub struct EpollSet(OwnedFd);

impl EpollSet {
    /// A set of `fds` (negative ones skipped).
    pub fn new(fds: &[RawFd]) -> io::Result<EpollSet> {
        // SAFETY: a plain system call; the fd is owned from here on.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd of ours.
        let set = EpollSet(unsafe { OwnedFd::from_raw_fd(fd) });
        for &fd in fds.iter().filter(|&&fd| fd >= 0) {
            set.add(fd)?;
        }
        Ok(set)
    }

    /// Watches `fd` for reading.
    pub fn add(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd)
    }

    /// Stops watching `fd`.
    pub fn remove(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd)
    }

    fn ctl(&self, op: i32, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: both fds are open; `ev` outlives the call.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The set's fd: readable when a member is.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
