//! A process's membership of a shared port: its slot, its socket's place
//! in the kernel's array, the services it listens on, and the keeper
//! thread that takes dead members out.

use super::error::ShareError;
use super::registry::{Locked, Registry, State, UNKNOWN};
use super::steer::{self, Steering};
use super::{fork, keeper};
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Shared {
    reg: Registry,
    addr: IpAddr,
    /// The scope of an IPv6 link-local `addr` (probes are sent to it).
    scope_id: u32,
    slot: u8,
    /// The member's receive socket (owned by the UDP backend, which makes
    /// the member leave before it closes it).
    fd: RawFd,
    /// This process's claims of CM services, counted: CM IDs of one
    /// process may bind one port together (see [`Services`]).
    claims: Mutex<HashMap<u32, usize>>,
    /// The probes this member is waiting for, and those of them that
    /// reached its socket.
    seen: Mutex<Probing>,
    /// Whether the socket may take UDP GRO (the device's offloads).
    gro_allowed: bool,
    /// Whether it takes it now: only while it is the port's only member.
    gro_on: AtomicBool,
    /// Twice the times GRO went off, odd while it is going off (counted
    /// before the change and again after it): datagrams merged before may
    /// still wait on the socket, and come up without their segment size.
    gro_offs: AtomicU64,
}

/// Probes sent per index, each from a socket of its own: an index past
/// the end of the kernel's array is hashed by flow, so that all of them
/// reaching us by chance is (1/members)^16.
const PROBES: u64 = 16;
/// How long a member waits for its probes to come back round.
const PROBE_WAIT: Duration = Duration::from_millis(50);
/// How long it waits for those naming its recorded index before it
/// probes every index: they come back within a millisecond or two.
const FIRST_WAIT: Duration = Duration::from_millis(10);

/// The probes a member sent (nonces from `first`, one flag each: none
/// while it is not probing), and which came back: what other members'
/// probes for its index bring is not kept.
#[derive(Debug, Default)]
struct Probing {
    first: u64,
    back: Vec<bool>,
}

impl Probing {
    /// Notes probe `nonce` back, if it is one of ours.
    fn note(&mut self, nonce: u64) {
        if let Some(b) = usize::try_from(nonce.wrapping_sub(self.first)).ok().and_then(|i| self.back.get_mut(i)) {
            *b = true;
        }
    }
}

/// A process's place in a shared port. Leaves on [`Member::leave`]; a
/// process that dies leaves through the others' keepers.
pub struct Member {
    shared: Arc<Shared>,
    keeper: Option<keeper::Keeper>,
    /// The process that joined (a forked child's copy must not leave).
    pid: u32,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member").field("addr", &self.shared.addr).field("slot", &self.shared.slot).finish()
    }
}

impl Shared {
    /// The record with dead members taken out (in the order of their
    /// indices: the kernel's order is not known; see [`ambiguous`]).
    fn pruned(&self, l: &Locked) -> (State, bool) {
        let mut st = self.reg.read(l);
        let alive = |s: u8| s == self.slot || s == UNKNOWN || self.reg.alive(s);
        let dead: Vec<u8> = st.order.iter().copied().filter(|&s| !alive(s)).collect();
        if ambiguous(&st.order, &dead) {
            tracing::warn!(addr = %self.addr, ?dead, "members died together in an order that decides the kernel's socket order: each member checks its place with probes");
        }
        for &s in &dead {
            tracing::info!(addr = %self.addr, slot = s, "a member of the shared port died: taken out");
            st.remove_slot(s);
        }
        // Sockets that no member owns, and no member at all: the places
        // are guesses about a port every member has left (a probe's find
        // that outlived the socket it found), or the record of a network
        // namespace that is gone and whose inode a new one has. The
        // kernel's array of a port no member holds is empty: keeping them
        // would put the next joiner at an index where it is not, and its
        // first CM requests would be steered elsewhere before its probes
        // repair the record (pyverbs' rdmacm tests failed so in CI).
        let guesses = !st.order.is_empty() && st.order.iter().all(|&s| s == UNKNOWN);
        if guesses {
            tracing::debug!(addr = %self.addr, stale = st.order.len(), "shared port: only sockets no member owns on record; starting from an empty array");
            st.order.clear();
        }
        let services = st.services.len();
        st.services.retain(|&(_, s)| alive(s));
        st.pids.retain(|&(s, _)| alive(s));
        let changed = !dead.is_empty() || guesses || services != st.services.len();
        (st, changed)
    }

    /// Attaches the program for `st` and records it.
    fn publish(&self, l: &Locked, st: &State) -> Result<(), ShareError> {
        if st.order.len() == 1 {
            // Alone: every datagram is ours, the program is not needed.
            steer::detach(self.fd);
        } else if !st.order.is_empty() {
            let slots = st.order.iter().enumerate().filter(|e| *e.1 != UNKNOWN).map(|(i, &s)| (s, i as u32)).collect();
            let prog = steer::build(&Steering { slots, services: st.services.clone() })?;
            steer::attach(self.fd, &prog).map_err(ShareError::Attach)?;
        }
        tracing::debug!(addr = %self.addr, slot = self.slot, order = ?st.order, services = st.services.len(), "shared port steering updated");
        self.reg.write(l, st)
    }

    /// The pids of the other members, as recorded (read without the lock:
    /// a torn read only makes the keeper look again sooner).
    fn others(&self) -> Vec<u32> {
        let st = self.reg.read_unlocked();
        st.pids.iter().filter(|p| p.0 != self.slot).map(|p| p.1).collect()
    }

    /// Which of `indices` of the kernel's array holds this member's
    /// socket: [`PROBES`] probes naming each go out at once, and an index
    /// whose probes all come back here within `wait` is ours. The array
    /// has `len` sockets as recorded: probes naming an index past its end
    /// are hashed by flow (all of them come back to a member alone), so
    /// such an index counts only when no index below `len` answered.
    /// None if none did (ours is not among them, or nothing reads our
    /// socket now).
    fn find_index(&self, indices: &[u32], len: usize, wait: Duration) -> Option<u32> {
        let base = random_u64();
        let id = |n: usize, k: u64| base.wrapping_add(n as u64 * PROBES + k);
        let to = |port| match self.addr {
            IpAddr::V4(a) => std::net::SocketAddr::from((a, port)),
            IpAddr::V6(a) => std::net::SocketAddrV6::new(a, port, 0, self.scope_id).into(),
        };
        let count = indices.len() * PROBES as usize;
        let mut complete = vec![true; indices.len()];
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Probing { first: base, back: vec![false; count] };
        for (n, &index) in indices.iter().enumerate() {
            for k in 0..PROBES {
                let mut p = [0u8; steer::PROBE_LEN];
                p[..4].copy_from_slice(&steer::PROBE_MAGIC.to_be_bytes());
                p[4..8].copy_from_slice(&index.to_be_bytes());
                p[8..].copy_from_slice(&id(n, k).to_be_bytes());
                let s = std::net::UdpSocket::bind(to(0));
                if s.and_then(|s| s.send_to(&p, to(rdma_wire::ROCE_V2_PORT))).is_err() {
                    complete[n] = false; // not all of them can come back
                }
            }
        }
        let start = Instant::now();
        let found = loop {
            let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            let per = PROBES as usize;
            let all_back = |n: usize| complete[n] && seen.back[n * per..(n + 1) * per].iter().all(|&b| b);
            let answered: Vec<u32> = (0..indices.len()).filter(|&n| all_back(n)).map(|n| indices[n]).collect();
            if let Some(&i) = answered.iter().find(|&&i| (i as usize) < len) {
                break Some(i);
            }
            if start.elapsed() > wait {
                break answered.first().copied(); // past the end, and nothing inside answered
            }
            drop(seen);
            std::thread::sleep(Duration::from_millis(1));
        };
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Probing::default();
        found
    }

    /// Checks with probes that this member's socket is where the record
    /// says, and if it is elsewhere, puts it there (the member recorded in
    /// its place moves to ours; each member checks itself). Run after a
    /// join and after members died, when the kernel's order may differ
    /// from the record's (see [`ambiguous`]).
    ///
    /// The recorded index first, which is the usual answer; if its probes
    /// did not all come back within [`FIRST_WAIT`], every index at once.
    /// (One index after another, each wrong one cost the whole wait: after
    /// two members of a process died together the repair took 150 ms,
    /// longer than an RC QP of timeout 12 retries.)
    fn verify(&self) {
        let st = self.reg.read_unlocked();
        let Some(expected) = st.order.iter().position(|&s| s == self.slot) else { return };
        if st.order.len() == 1 {
            return; // alone: every datagram is ours, whatever the index
        }
        let len = st.order.len();
        let found = self.find_index(&[expected as u32], len, FIRST_WAIT).or_else(|| {
            let all: Vec<u32> = (0..len + 2).map(|i| i as u32).collect();
            self.find_index(&all, len, PROBE_WAIT)
        });
        match found {
            Some(i) if i as usize != expected => self.move_to(i as usize),
            Some(_) => {}
            None => tracing::debug!(slot = self.slot, "shared port: no probe told our place (is anything receiving?)"),
        }
    }

    /// Records this member at `index`, found by probing.
    fn move_to(&self, index: usize) {
        let r = self.reg.lock().and_then(|l| {
            let mut st = self.reg.read(&l);
            let Some(was) = st.order.iter().position(|&s| s == self.slot) else { return Ok(()) };
            if was == index {
                return Ok(()); // another member's repair put us there meanwhile
            }
            if st.order.len() <= index {
                st.order.resize(index + 1, UNKNOWN);
            }
            st.order.swap(was, index);
            tracing::warn!(addr = %self.addr, slot = self.slot, recorded = was, found = index, order = ?st.order, "shared port: our socket was not where the record said: steering repaired");
            self.publish(&l, &st)
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "shared port: cannot record our place");
        }
    }

    /// A keeper's look: takes dead members out if there are any.
    fn prune_now(&self) -> Result<(), ShareError> {
        let l = self.reg.lock()?;
        let (st, changed) = self.pruned(&l);
        if changed {
            self.publish(&l, &st)?;
        }
        self.follow(&st);
        Ok(())
    }

    /// Sets the socket's receive options for the port's members in `st`:
    /// UDP GRO merges datagrams of one flow, and a merged datagram goes
    /// where its first packet goes, so only a member alone may take it.
    /// The others' keepers follow a join at once (the record's directory
    /// wakes them), before the newcomer has a QP anyone could send to.
    fn follow(&self, st: &State) {
        let want = self.gro_allowed && st.order.len() == 1;
        if self.gro_on.swap(want, Ordering::AcqRel) == want {
            return;
        }
        if !want {
            // Odd from here until GRO is off: a receiver that drains the
            // socket meanwhile may not have read a datagram merged just
            // before the change (see `UdpIo::receive`).
            self.gro_offs.fetch_add(1, Ordering::AcqRel);
        }
        let v: i32 = want.into();
        // SAFETY: an int option on the member's socket.
        let r = unsafe {
            libc::setsockopt(
                self.fd,
                libc::SOL_UDP,
                libc::UDP_GRO,
                (&v as *const i32).cast(),
                std::mem::size_of::<i32>() as u32,
            )
        };
        if !want {
            self.gro_offs.fetch_add(1, Ordering::AcqRel);
        }
        if r == 0 {
            tracing::debug!(addr = %self.addr, slot = self.slot, gro = want, members = st.order.len(), "shared port: UDP GRO follows the members");
        } else {
            tracing::warn!(error = %io::Error::last_os_error(), gro = want, "shared port: cannot set UDP GRO");
        }
    }
}

impl keeper::Port for Shared {
    fn others(&self) -> Vec<u32> {
        Shared::others(self)
    }

    fn keep(&self, changed: bool) {
        if let Err(e) = self.prune_now() {
            tracing::warn!(error = %e, "shared port keeper");
        }
        if changed {
            self.verify();
        }
    }

    fn record_changed(&self) {
        self.follow(&self.reg.read_unlocked());
    }
}

/// Whether taking `dead` out in another order would leave the kernel's
/// array different (then which one it did is not known).
fn ambiguous(order: &[u8], dead: &[u8]) -> bool {
    if dead.len() < 2 {
        return false;
    }
    let run = |seq: &mut dyn Iterator<Item = &u8>| {
        let mut st = State { order: order.to_vec(), ..State::default() };
        seq.for_each(|&s| st.remove_slot(s));
        st.order
    };
    run(&mut dead.iter()) != run(&mut dead.iter().rev())
}

impl Member {
    /// Joins the shared port of `addr`: takes a free slot, binds the
    /// socket `fd` (set to `SO_REUSEPORT`) with `bind`, and attaches the
    /// program that now includes it.
    pub fn join(
        addr: IpAddr,
        scope_id: u32,
        fd: RawFd,
        gro_allowed: bool,
        bind: impl FnOnce() -> io::Result<()>,
    ) -> Result<Member, ShareError> {
        let reg = Registry::open(addr, scope_id)?;
        let l = reg.lock()?;
        // The slot is known only below; prune with none of ours.
        let probe = Shared {
            reg,
            addr,
            scope_id,
            slot: u8::MAX,
            fd,
            claims: Mutex::default(),
            seen: Mutex::default(),
            gro_allowed,
            gro_on: AtomicBool::new(false),
            gro_offs: AtomicU64::new(0),
        };
        let (mut st, _) = probe.pruned(&l);
        let mut slot = None;
        for s in 0..steer::SLOTS as u8 {
            if !st.order.contains(&s) && probe.reg.hold_slot(s)? {
                slot = Some(s);
                break;
            }
        }
        let Some(slot) = slot else {
            drop(l);
            return Err(ShareError::SlotsFull { addr });
        };
        let shared = Shared { slot, ..probe };
        let fail = |e: ShareError| {
            shared.reg.release_slot(slot);
            e
        };
        bind().map_err(|source| fail(ShareError::Bind { addr, source }))?;
        // The kernel appended our socket.
        st.order.push(slot);
        st.pids.push((slot, std::process::id()));
        shared.publish(&l, &st).map_err(fail)?;
        shared.follow(&st);
        drop(l);
        tracing::info!(%addr, slot, index = st.order.len() - 1, members = st.order.len(), registry = %shared.reg.name, "joined the shared port");
        fork::detach_in_child(fd);
        fork::detach_in_child(shared.reg.fd());
        let shared = Arc::new(shared);
        let dir = shared.reg.dir().to_path_buf();
        let keeper = keeper::spawn(format!("softroce-share-{slot}"), shared.clone(), &dir);
        Ok(Member { shared, keeper, pid: std::process::id() })
    }

    /// Takes a datagram the socket received if it is a probe (see
    /// [`steer::PROBE_MAGIC`]): our own come back to `verify`; others'
    /// are only dropped.
    pub fn take_probe(&self, datagram: Option<&[u8]>) -> bool {
        let Some(d) = datagram.filter(|d| d.len() == steer::PROBE_LEN) else { return false };
        if d[..4] != steer::PROBE_MAGIC.to_be_bytes() {
            return false;
        }
        let mut nonce = [0u8; 8];
        nonce.copy_from_slice(&d[8..]);
        self.shared.seen.lock().unwrap_or_else(|e| e.into_inner()).note(u64::from_be_bytes(nonce));
        true
    }

    /// Checks with probes that this member's socket is where the record
    /// says, and repairs the record if not (its keeper does it by itself
    /// after joins and deaths; for tests).
    #[cfg(test)]
    pub(crate) fn verify_place(&self) {
        self.shared.verify();
    }

    /// Twice the times this member's socket turned UDP GRO off, odd while
    /// it is turning it off. A receiver that has not drained the socket
    /// since the count was last even and unchanged may find datagrams
    /// merged while GRO was on, without the control message that says
    /// where their packets end (`udp::rx::segment_size`).
    pub fn gro_offs(&self) -> u64 {
        self.shared.gro_offs.load(Ordering::Acquire)
    }

    /// This process's slot: its QPNs are [`steer::qpn_range`] of it.
    pub fn slot(&self) -> u8 {
        self.shared.slot
    }

    /// A handle on this member's CM services, for the RDMA CM.
    pub fn services(&self) -> Services {
        Services(self.shared.clone())
    }

    /// Leaves the port: the program is attached without this socket, the
    /// socket closed (its descriptor number then names `/dev/null`, which
    /// the backend's own close releases) and the slot given back, all
    /// under the record's lock, so that the record and the kernel agree.
    pub fn leave(mut self) {
        if self.pid != std::process::id() {
            return; // a forked child's copy: the parent's membership
        }
        if let Some(k) = self.keeper.take() {
            k.stop();
        }
        let s = &self.shared;
        let l = match s.reg.lock() {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot lock the shared port's record to leave: others take this member out when it is gone");
                return;
            }
        };
        let (mut st, _) = s.pruned(&l);
        st.remove_slot(s.slot);
        let r = s.publish(&l, &st);
        fork::forget(s.fd);
        if !fork::close_in_place(s.fd) {
            tracing::warn!("cannot close the shared socket in place: the next joiner may see a stale index");
        }
        fork::forget(s.reg.fd());
        s.reg.release_slot(s.slot);
        drop(l);
        match r {
            Ok(()) => tracing::info!(addr = %s.addr, slot = s.slot, members = st.order.len(), "left the shared port"),
            Err(e) => tracing::warn!(error = %e, "leaving the shared port"),
        }
    }
}

/// Which process the CM's REQs for a service go to: a listener claims
/// its service (port space and port) for its process. Cheap to clone.
#[derive(Clone)]
pub struct Services(Arc<Shared>);

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Services").field(&self.0.slot).finish()
    }
}

impl Services {
    /// This process's slot: the top bits of its CM communication IDs.
    pub fn slot(&self) -> u8 {
        self.0.slot
    }

    /// Steers REQs for `key` (a service ID's low 32 bits: port space and
    /// port) to this process. Refused if another live process has it, as
    /// the kernel refuses a port bound elsewhere on the host.
    pub fn claim(&self, key: u32) -> Result<(), ShareError> {
        let s = &self.0;
        let mut claims = s.claims.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = claims.get_mut(&key) {
            *n += 1;
            return Ok(());
        }
        let l = s.reg.lock()?;
        let (mut st, _) = s.pruned(&l);
        match st.services.iter().find(|e| e.0 == key) {
            Some(&(_, slot)) if slot != s.slot => return Err(ShareError::ServiceTaken { key, slot }),
            Some(_) => {}
            None => st.services.push((key, s.slot)),
        }
        s.publish(&l, &st)?;
        claims.insert(key, 1);
        Ok(())
    }

    /// Gives back one claim of `key`; the last one frees the service.
    pub fn release(&self, key: u32) {
        let s = &self.0;
        let mut claims = s.claims.lock().unwrap_or_else(|e| e.into_inner());
        match claims.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                return;
            }
            Some(_) => {
                claims.remove(&key);
            }
            None => return,
        }
        let r = s.reg.lock().and_then(|l| {
            let (mut st, _) = s.pruned(&l);
            st.services.retain(|e| !(e.0 == key && e.1 == s.slot));
            s.publish(&l, &st)
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, key = format_args!("{key:#010x}"), "cannot free a CM service of the shared port: REQs for it still come here");
        }
    }
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom fills the buffer it is given.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        // Only a probe's nonce: uniqueness within a process is enough.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return t.as_nanos() as u64 ^ u64::from(std::process::id()) << 32;
    }
    u64::from_be_bytes(b)
}
