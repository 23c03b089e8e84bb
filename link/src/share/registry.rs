//! The host-wide record of a shared port's members, kept in a file so
//! that every process of the user on the host sees it.
//!
//! Two files per address and network namespace, in
//! `/dev/shm/softroce-UID/` (or `$TMPDIR` without `/dev/shm`):
//!
//! - `NAME.lock`, never rewritten, holds the locks: byte 0 is the mutex
//!   over the record, byte 1 + slot is held by the member of that slot for
//!   as long as it lives. They are open-file-description (OFD) locks: the
//!   kernel drops them when the process dies, however it dies, so a free
//!   slot byte is a dead member; and unlike POSIX record locks they are
//!   not lost when some other descriptor of the file is closed.
//! - `NAME.state`: the kernel's socket array as far as we know it (the
//!   slot at each index), which slot listens on which CM service and the
//!   process of each slot,
//!   rewritten whole (written to a temporary file, then renamed over) under
//!   the mutex. It names the network namespace it was written in by its
//!   cookie (`SO_NETNS_COOKIE`, never reused while the system runs): the
//!   file's name has the namespace's inode, which a new namespace may get
//!   once the old one is gone, and a record of a gone namespace describes
//!   sockets that no longer exist (CI's pyverbs runs, one namespace after
//!   another, met one). Such a record is read as empty.

use super::error::ShareError;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// The slot of a socket of the port that no member owns (its place was
/// found by a member's probe; see `Member`).
pub(crate) const UNKNOWN: u8 = u8::MAX;

/// What the record says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct State {
    /// The slot of the socket at each index of the kernel's array.
    pub order: Vec<u8>,
    /// `(service ID low 32 bits, slot)`: who listens where.
    pub services: Vec<(u32, u8)>,
    /// `(slot, pid)`: the process of each member, which the others'
    /// keepers watch (its slot's lock says whether it lives).
    pub pids: Vec<(u8, u32)>,
}

impl State {
    /// The record and the cookie of the namespace it was written in.
    fn parse(text: &str) -> Option<(State, Option<u64>)> {
        let mut lines = text.lines();
        if lines.next()? != "softroce-share 1" {
            return None;
        }
        let mut st = State::default();
        let mut netns = None;
        for l in lines {
            let mut w = l.split_whitespace();
            match w.next()? {
                "order" => st.order = w.map(|s| s.parse().ok()).collect::<Option<_>>()?,
                "service" => {
                    let key = u32::from_str_radix(w.next()?, 16).ok()?;
                    st.services.push((key, w.next()?.parse().ok()?));
                }
                "pid" => st.pids.push((w.next()?.parse().ok()?, w.next()?.parse().ok()?)),
                "netns" => netns = Some(u64::from_str_radix(w.next()?, 16).ok()?),
                _ => return None,
            }
        }
        Some((st, netns))
    }

    fn render(&self, netns: Option<u64>) -> String {
        let mut s = String::from("softroce-share 1\n");
        if let Some(c) = netns {
            s += &format!("netns {c:016x}\n");
        }
        s += "order";
        for slot in &self.order {
            s += &format!(" {slot}");
        }
        s.push('\n');
        for (key, slot) in &self.services {
            s += &format!("service {key:08x} {slot}\n");
        }
        for (slot, pid) in &self.pids {
            s += &format!("pid {slot} {pid}\n");
        }
        s
    }

    /// Takes the socket at `index` out as the kernel does: the last one
    /// moves into its place (net/core/sock_reuseport.c).
    pub fn remove_index(&mut self, index: usize) {
        if index < self.order.len() {
            self.order.swap_remove(index);
        }
    }

    /// Takes `slot`'s socket and services out.
    pub fn remove_slot(&mut self, slot: u8) {
        if let Some(i) = self.order.iter().position(|&s| s == slot) {
            self.remove_index(i);
        }
        self.services.retain(|s| s.1 != slot);
        self.pids.retain(|p| p.0 != slot);
    }
}

/// One member's handle on the record: its own open of the lock file
/// (OFD locks belong to an open, so each member needs one).
pub(crate) struct Registry {
    lock: File,
    state: PathBuf,
    pub name: String,
    /// This network namespace's cookie (None: the kernel has none to give).
    netns: Option<u64>,
}

/// `SO_NETNS_COOKIE` (Linux 5.14), not in the libc crate: its number
/// where the generic socket options apply (mips, sparc and powerpc
/// number them otherwise; there the record carries no cookie).
const SO_NETNS_COOKIE: Option<libc::c_int> = if cfg!(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm",
    target_arch = "riscv64"
)) {
    Some(71)
} else {
    None
};

/// The cookie of the calling thread's network namespace.
fn netns_cookie() -> Option<u64> {
    let opt = SO_NETNS_COOKIE?;
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).ok()?;
    let (mut v, mut len) = (0u64, std::mem::size_of::<u64>() as libc::socklen_t);
    // SAFETY: reads a u64 option of our own socket into `v`.
    let r = unsafe { libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, opt, (&mut v as *mut u64).cast(), &mut len) };
    (r == 0 && len as usize == std::mem::size_of::<u64>()).then_some(v)
}

/// The mutex over the record, held while this lives (on the lock file's
/// descriptor, which its registry outlives).
pub(crate) struct Locked(std::os::fd::RawFd);

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = ofd_lock(self.0, 0, libc::F_UNLCK as i16, libc::F_OFD_SETLK);
    }
}

fn ofd_lock(fd: std::os::fd::RawFd, byte: u64, kind: i16, cmd: i32) -> io::Result<libc::flock> {
    // SAFETY: a zeroed flock is valid; l_pid must be 0 for OFD locks.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind;
    l.l_whence = libc::SEEK_SET as i16;
    l.l_start = byte as libc::off_t;
    l.l_len = 1;
    loop {
        // SAFETY: fcntl on our descriptor with a valid flock.
        let r = unsafe { libc::fcntl(fd, cmd, &mut l) };
        if r == 0 {
            return Ok(l);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The directory of the records: the user's own, mode 0700.
fn dir() -> io::Result<PathBuf> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let d = base.join(format!("softroce-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&d) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::metadata(&d)?;
    if m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not this user's private directory", d.display()),
        ));
    }
    Ok(d)
}

/// The record's name: the network namespace (its inode: one address is
/// a different port in another namespace), the address and its scope.
fn name(addr: IpAddr, scope_id: u32) -> String {
    let netns = std::fs::metadata("/proc/self/ns/net").map(|m| m.ino()).unwrap_or(0);
    let mut n = format!("net{netns}-{addr}");
    if scope_id != 0 {
        n += &format!("-s{scope_id}");
    }
    n
}

impl Registry {
    pub fn open(addr: IpAddr, scope_id: u32) -> Result<Registry, ShareError> {
        let fail = |what: &str, e: io::Error| ShareError::Registry { what: what.to_string(), source: e };
        let d = dir().map_err(|e| fail("make the registry directory", e))?;
        let name = name(addr, scope_id);
        let path = d.join(format!("{name}.lock"));
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| fail(&format!("open {}", path.display()), e))?;
        Ok(Registry { lock, state: d.join(format!("{name}.state")), name, netns: netns_cookie() })
    }

    /// The directory of the records (a keeper watches it).
    pub fn dir(&self) -> &std::path::Path {
        self.state.parent().unwrap_or(std::path::Path::new("/"))
    }

    /// The lock file's descriptor (a forked child must let go of it).
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.lock.as_raw_fd()
    }

    /// Takes the mutex, waiting for it.
    pub fn lock(&self) -> Result<Locked, ShareError> {
        ofd_lock(self.lock.as_raw_fd(), 0, libc::F_WRLCK as i16, libc::F_OFD_SETLKW)
            .map_err(|e| ShareError::Registry { what: "lock the registry".into(), source: e })?;
        Ok(Locked(self.lock.as_raw_fd()))
    }

    /// Takes `slot`'s life lock; false if a live member has it.
    pub fn hold_slot(&self, slot: u8) -> Result<bool, ShareError> {
        match ofd_lock(self.lock.as_raw_fd(), 1 + u64::from(slot), libc::F_WRLCK as i16, libc::F_OFD_SETLK) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => Ok(false),
            Err(e) => Err(ShareError::Registry { what: format!("lock slot {slot}"), source: e }),
        }
    }

    /// Gives `slot`'s life lock back.
    pub fn release_slot(&self, slot: u8) {
        let _ = ofd_lock(self.lock.as_raw_fd(), 1 + u64::from(slot), libc::F_UNLCK as i16, libc::F_OFD_SETLK);
    }

    /// Whether another open holds `slot`'s life lock (its member lives).
    /// Our own slot's lock does not count: it never conflicts with us.
    pub fn alive(&self, slot: u8) -> bool {
        match ofd_lock(self.lock.as_raw_fd(), 1 + u64::from(slot), libc::F_WRLCK as i16, libc::F_OFD_GETLK) {
            Ok(l) => l.l_type != libc::F_UNLCK as i16,
            // Unknown: keep it rather than move others' sockets on a guess.
            Err(_) => true,
        }
    }

    /// Reads the record (empty if there is none yet or it is unreadable:
    /// a torn record is rebuilt from the live members' next changes).
    pub fn read(&self, _: &Locked) -> State {
        self.read_unlocked()
    }

    /// Reads the record without the mutex (a look, never a basis for a
    /// change).
    pub fn read_unlocked(&self) -> State {
        let mut text = String::new();
        match File::open(&self.state).and_then(|mut f| f.read_to_string(&mut text)) {
            Ok(_) => match State::parse(&text) {
                Some((st, Some(theirs))) if self.netns.is_some_and(|ours| ours != theirs) => {
                    tracing::debug!(record = %self.state.display(), stale = ?st, "shared-port record of a network namespace that is gone: starting over");
                    State::default()
                }
                Some((st, _)) => st,
                None => {
                    tracing::warn!(record = %self.state.display(), "unreadable shared-port record: starting over");
                    State::default()
                }
            },
            Err(_) => State::default(),
        }
    }

    pub fn write(&self, _: &Locked, st: &State) -> Result<(), ShareError> {
        let tmp = self.state.with_extension("tmp");
        let r = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(st.render(self.netns).as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &self.state));
        r.map_err(|e| ShareError::Registry { what: format!("write {}", self.state.display()), source: e })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_back_what_was_written() {
        let st = State {
            order: vec![3, 0, 127],
            services: vec![(0x0106_1c06, 3), (0x0111_0001, 0)],
            pids: vec![(3, 4242), (0, 1)],
        };
        assert_eq!(State::parse(&st.render(Some(0x1234))), Some((st.clone(), Some(0x1234))));
        assert_eq!(State::parse(&st.render(None)), Some((st, None)));
        assert_eq!(State::parse("softroce-share 2\norder 1\n"), None);
        assert_eq!(State::parse("softroce-share 1\norder 1 x\n"), None);
    }

    /// A record written in another network namespace (another cookie)
    /// reads as empty; one of ours, or one without a cookie, as written.
    #[test]
    fn a_record_of_another_network_namespace_reads_as_empty() {
        let addr: IpAddr = "127.0.22.15".parse().unwrap();
        let reg = Registry::open(addr, 0).unwrap();
        let ours = reg.netns.expect("this kernel gives a network namespace cookie");
        let st = State { order: vec![1, 0], services: vec![(7, 1)], pids: vec![(1, 42), (0, 43)] };
        let l = reg.lock().unwrap();
        for (cookie, want) in [(Some(ours), st.clone()), (None, st.clone()), (Some(ours ^ 1), State::default())] {
            std::fs::write(&reg.state, st.render(cookie)).unwrap();
            assert_eq!(reg.read(&l), want, "written with cookie {cookie:?}");
        }
        reg.write(&l, &st).unwrap();
        assert!(std::fs::read_to_string(&reg.state).unwrap().contains(&format!("netns {ours:016x}")));
    }

    #[test]
    fn removing_a_socket_moves_the_last_into_its_place_as_the_kernel_does() {
        let mut st = State { order: vec![5, 6, 7, 8], services: vec![(1, 6), (2, 7)], pids: vec![(6, 60)] };
        st.remove_slot(6);
        assert_eq!(st.order, [5, 8, 7]);
        assert_eq!(st.services, [(2, 7)]);
        assert_eq!(st.pids, []);
        st.remove_slot(7);
        assert_eq!(st.order, [5, 8]);
        st.remove_slot(9);
        assert_eq!(st.order, [5, 8]);
    }
}
