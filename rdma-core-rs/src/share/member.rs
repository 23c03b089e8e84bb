//! A process's membership of a shared port: its slot, its socket's place
//! in the kernel's array, the services it listens on, and the keeper
//! thread that takes dead members out.

use super::registry::{Locked, Registry, State};
use super::steer::{self, Steering};
use super::{fork, keeper, ShareError};
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

struct Shared {
    reg: Registry,
    addr: IpAddr,
    slot: u8,
    /// The member's receive socket (owned by the UDP backend, which makes
    /// the member leave before it closes it).
    fd: RawFd,
    /// This process's claims of CM services, counted: CM IDs of one
    /// process may bind one port together (see [`Services`]).
    claims: Mutex<HashMap<u32, usize>>,
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
        let alive = |s: u8| s == self.slot || self.reg.alive(s);
        let dead: Vec<u8> = st.order.iter().copied().filter(|&s| !alive(s)).collect();
        if ambiguous(&st.order, &dead) {
            tracing::warn!(addr = %self.addr, ?dead, "members died together in an order that decides the kernel's socket order: steering may be wrong until the next change");
        }
        for &s in &dead {
            tracing::info!(addr = %self.addr, slot = s, "a member of the shared port died: taken out");
            st.remove_slot(s);
        }
        let services = st.services.len();
        st.services.retain(|&(_, s)| alive(s));
        st.pids.retain(|&(s, _)| alive(s));
        let changed = !dead.is_empty() || services != st.services.len();
        (st, changed)
    }

    /// Attaches the program for `st` and records it.
    fn publish(&self, l: &Locked, st: &State) -> Result<(), ShareError> {
        if !st.order.is_empty() {
            let slots = st.order.iter().enumerate().map(|(i, &s)| (s, i as u32)).collect();
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

    /// A keeper's look: takes dead members out if there are any.
    fn keep(&self) -> Result<(), ShareError> {
        let l = self.reg.lock()?;
        let (st, changed) = self.pruned(&l);
        if changed {
            self.publish(&l, &st)?;
        }
        Ok(())
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
        bind: impl FnOnce() -> io::Result<()>,
    ) -> Result<Member, ShareError> {
        let reg = Registry::open(addr, scope_id)?;
        let l = reg.lock()?;
        // The slot is known only below; prune with none of ours.
        let probe = Shared { reg, addr, slot: u8::MAX, fd, claims: Mutex::default() };
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
        drop(l);
        tracing::info!(%addr, slot, index = st.order.len() - 1, members = st.order.len(), registry = %shared.reg.name, "joined the shared port");
        fork::detach_in_child(fd);
        fork::detach_in_child(shared.reg.fd());
        let shared = Arc::new(shared);
        let (w, k) = (shared.clone(), shared.clone());
        let keeper = keeper::spawn(
            format!("softroce-share-{slot}"),
            move || w.others(),
            move || {
                if let Err(e) = k.keep() {
                    tracing::warn!(error = %e, "shared port keeper");
                }
            },
        );
        Ok(Member { shared, keeper, pid: std::process::id() })
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
