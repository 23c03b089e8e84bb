//! TUN devices created inside a named network namespace: the router's two
//! ends. The device lives in the namespace; its file descriptor stays with
//! the router, which thereby sees every IP packet the namespace routes to it.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// The TUN device could not be made, or the namespace could not be entered.
#[derive(Debug, thiserror::Error)]
pub enum TunError {
    #[error("network namespace {0:?} (/var/run/netns/{0}): {1}")]
    Netns(String, io::Error),
    #[error("/dev/net/tun: {0} (the router needs root, or CAP_NET_ADMIN, and the tun module)")]
    Open(io::Error),
    #[error("TUNSETIFF {0:?}: {1}")]
    Create(String, io::Error),
    #[error("device name {0:?}: at most 15 bytes")]
    Name(String),
}

/// `struct ifreq` as TUNSETIFF reads it: the name and the flags.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _union_rest: [u8; 22],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// One end of the router: an IP-level (no Ethernet, no packet info) TUN device.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
}

impl Tun {
    /// Creates TUN device `name` in the namespace `netns` (as `ip netns add`
    /// names it). `setns` moves only the calling thread, so a scratch thread
    /// does it and the router's own threads stay where they are.
    pub fn create_in(netns: &str, name: &str) -> Result<Tun, TunError> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(TunError::Name(name.into()));
        }
        let (netns, name) = (netns.to_owned(), name.to_owned());
        std::thread::spawn(move || {
            let ns = File::open(format!("/var/run/netns/{netns}")).map_err(|e| TunError::Netns(netns.clone(), e))?;
            // SAFETY: setns on a namespace file we hold open; affects this thread only.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(TunError::Netns(netns, io::Error::last_os_error()));
            }
            Tun::create(&name)
        })
        .join()
        .unwrap_or_else(|_| Err(TunError::Open(io::Error::other("the namespace thread panicked"))))
    }

    /// Creates TUN device `name` in the calling thread's namespace.
    fn create(name: &str) -> Result<Tun, TunError> {
        // SAFETY: a plain open of a path we own as a C string.
        let raw = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(TunError::Open(io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _union_rest: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads an ifreq, which `req` is, for its duration.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) } != 0 {
            return Err(TunError::Create(name.into(), io::Error::last_os_error()));
        }
        Ok(Tun { fd, name: name.into() })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits up to `timeout` for a packet; false on timeout (so readers can
    /// notice the router stopping).
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
        match n {
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
            n => Ok(n > 0),
        }
    }

    /// Reads one IP packet into `buf`.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Hands one IP packet to the namespace, as if it arrived on the device.
    pub fn write(&self, packet: &[u8]) -> io::Result<()> {
        // SAFETY: `packet` is valid for reads of its length.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), packet.as_ptr().cast(), packet.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}
