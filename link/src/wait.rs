//! Waiting on file descriptors: what a blocking wait of a device, and the
//! drop-in libibverbs' idle-progress thread, sleep in.

use std::os::fd::RawFd;
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
