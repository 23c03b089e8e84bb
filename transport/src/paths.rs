//! The port's path table on native InfiniBand: which LID a GID is
//! reached at.
//!
//! RoCE addresses a peer by its GID alone. An IB packet needs the peer's
//! LID in its LRH, and the GSI (the connection manager's MADs) and the
//! CM's connected QPs know peers by GID. On a real fabric the LID comes
//! from a path record (the subnet administrator); here it is set by
//! whoever resolves the route ([`crate::Endpoint::set_path`]), and learned
//! from the LRH of each MAD that arrives with a GRH, so that the passive
//! side can answer at once, as an IB CM answers at the REQ's source LID.
//!
//! The table is bounded: a peer sending MADs from ever new GIDs must not
//! grow memory; the oldest entry makes room.

use crate::framing::LinkKind;
use crate::qp::AddressVector;
use core::net::IpAddr;
use std::collections::{HashMap, VecDeque};

/// Entries kept; far above any fabric a soft device talks to.
pub const MAX_PATHS: usize = 4096;

/// GID to LID, bounded, oldest out first.
#[derive(Debug, Default)]
pub struct PathTable {
    lids: HashMap<IpAddr, u16>,
    order: VecDeque<IpAddr>,
}

impl PathTable {
    /// Records that `gid` is reached at `lid` (replacing what was known).
    pub fn set(&mut self, gid: IpAddr, lid: u16) {
        let gid = gid.to_canonical();
        if self.lids.insert(gid, lid).is_none() {
            if self.order.len() == MAX_PATHS {
                if let Some(old) = self.order.pop_front() {
                    self.lids.remove(&old);
                }
            }
            self.order.push_back(gid);
        }
    }

    /// The LID `gid` is reached at, if known.
    pub fn lid(&self, gid: IpAddr) -> Option<u16> {
        self.lids.get(&gid.to_canonical()).copied()
    }

    /// The address vector of the peer `gid` on a link of `kind`: on
    /// native IB with the LID known for it (0 if none: every port drops
    /// a packet for LID 0, as a fabric drops one without a path).
    pub fn route(&self, kind: LinkKind, gid: IpAddr) -> AddressVector {
        let mut av = AddressVector::new(gid);
        if kind == LinkKind::Ib {
            av.dlid = self.lid(gid).unwrap_or(0);
        }
        av
    }

    pub fn len(&self) -> usize {
        self.lids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(n: u32) -> IpAddr {
        IpAddr::V6(core::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, (n >> 16) as u16, n as u16))
    }

    #[test]
    fn set_replaces_and_the_oldest_entry_makes_room() {
        let mut t = PathTable::default();
        t.set(gid(1), 5);
        t.set(gid(1), 6);
        assert_eq!((t.lid(gid(1)), t.len()), (Some(6), 1));
        for n in 2..=MAX_PATHS as u32 + 1 {
            t.set(gid(n), n as u16);
        }
        assert_eq!(t.len(), MAX_PATHS, "bounded");
        assert_eq!(t.lid(gid(1)), None, "the oldest went first");
        assert_eq!(t.lid(gid(2)), Some(2));
        assert_eq!(t.lid(gid(MAX_PATHS as u32 + 1)), Some((MAX_PATHS + 1) as u16));
        assert_eq!(t.order.len(), t.lids.len(), "the order holds each entry once");
    }

    #[test]
    fn ipv4_mapped_and_plain_forms_are_one_entry() {
        let mut t = PathTable::default();
        t.set("::ffff:10.0.0.1".parse().unwrap(), 9);
        assert_eq!(t.lid("10.0.0.1".parse().unwrap()), Some(9));
    }
}
