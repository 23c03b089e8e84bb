//! Multicast groups of one device: which UD QPs are attached to which
//! multicast GID (`ibv_attach_mcast` / `ibv_detach_mcast`).
//!
//! The rules are the kernel's (`ib_attach_mcast` in verbs.c, the uverbs
//! attach/detach commands and rxe's `rxe_mcast.c`): only UD QPs, only a
//! multicast GID (`ff00::/8`, or an IPv4-mapped `::ffff:224.0.0.0/4`),
//! attaching twice is a no-op, detaching what is not attached is an
//! error, and the device limits are rxe's. The receive path looks a
//! packet's destination GID up here and gives each member a copy.

use core::net::{IpAddr, Ipv6Addr};
use std::collections::BTreeMap;

/// The destination QPN of a multicast packet (the IBTA's multicast QPN, rxe's `IB_MULTICAST_QPN`).
pub const MULTICAST_QPN: u32 = 0xff_ffff;
/// Groups a device can have (`max_mcast_grp`, rxe's `RXE_MAX_MCAST_GRP`).
pub const MAX_MCAST_GRP: usize = 8192;
/// QPs one group can hold (`max_mcast_qp_attach`, rxe's `RXE_MAX_MCAST_QP_ATTACH`).
pub const MAX_MCAST_QP_ATTACH: usize = 56;
/// Attachments of all groups together (`max_total_mcast_qp_attach`, rxe's
/// `RXE_MAX_TOT_MCAST_QP_ATTACH`).
pub const MAX_TOTAL_MCAST_QP_ATTACH: usize = 0x70000;
/// The lowest multicast LID (the kernel's `IB_MULTICAST_LID_BASE`).
pub const MULTICAST_LID_BASE: u16 = 0xc000;
/// The permissive LID, never a group's.
const PERMISSIVE_LID: u16 = 0xffff;

/// Why an attach or detach was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McastError {
    #[error("no QP with number {0:#x}")]
    NoSuchQp(u32),
    #[error("QP {qpn:#x} is not a UD QP: only UD QPs join multicast groups")]
    NotUd { qpn: u32 },
    #[error("{gid} is not a multicast GID")]
    NotMulticast { gid: IpAddr },
    #[error("LID {lid:#x} is not a multicast LID (0xc000..0xfffe) on an InfiniBand port")]
    NotMulticastLid { lid: u16 },
    #[error("the device has {MAX_MCAST_GRP} multicast groups already")]
    TooManyGroups,
    #[error("multicast group {gid} has {MAX_MCAST_QP_ATTACH} QPs attached already")]
    GroupFull { gid: IpAddr },
    #[error("the device has {MAX_TOTAL_MCAST_QP_ATTACH} multicast attachments already")]
    TooManyAttachments,
    #[error("QP {qpn:#x} is not attached to multicast group {gid} (LID {lid:#x})")]
    NotAttached { qpn: u32, gid: IpAddr, lid: u16 },
}

/// Whether `gid` is a multicast GID, as rdma-core's and the kernel's
/// `rdma_is_multicast_addr`: `ff00::/8`, or an IPv4 multicast address
/// (plain or IPv4-mapped).
pub fn is_multicast_gid(gid: IpAddr) -> bool {
    match gid.to_canonical() {
        IpAddr::V4(v4) => v4.is_multicast(),
        IpAddr::V6(v6) => v6.is_multicast(),
    }
}

/// The form groups are keyed by: IPv4 as IPv4-mapped, the GID's bytes.
fn key(gid: IpAddr) -> Ipv6Addr {
    match gid {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// One group: its LID (what native IB addresses it by) and its members.
#[derive(Debug, Clone, Default)]
struct Group {
    lid: u16,
    qpns: Vec<u32>,
}

/// The groups of one device.
#[derive(Debug, Default)]
pub(crate) struct McastTable {
    groups: BTreeMap<Ipv6Addr, Group>,
    attachments: usize,
}

/// The members of a group, copied out (at most [`MAX_MCAST_QP_ATTACH`])
/// so that the receive path can hand each a packet while it borrows the
/// QP table mutably, without an allocation per packet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Members {
    qpns: [u32; MAX_MCAST_QP_ATTACH],
    len: usize,
}

impl Members {
    pub(crate) fn as_slice(&self) -> &[u32] {
        &self.qpns[..self.len]
    }
}

impl McastTable {
    /// Attaches `qpn` (a UD QP: the caller checked) to `gid`. Attaching a
    /// QP that is already a member is a no-op, as in rxe.
    pub(crate) fn attach(&mut self, gid: IpAddr, lid: u16, qpn: u32) -> Result<(), McastError> {
        if !is_multicast_gid(gid) {
            return Err(McastError::NotMulticast { gid });
        }
        let k = key(gid);
        let new_group = !self.groups.contains_key(&k);
        if new_group && self.groups.len() >= MAX_MCAST_GRP {
            return Err(McastError::TooManyGroups);
        }
        let g = self.groups.get(&k);
        if g.is_some_and(|g| g.qpns.contains(&qpn)) {
            return Ok(());
        }
        if g.is_some_and(|g| g.qpns.len() >= MAX_MCAST_QP_ATTACH) {
            return Err(McastError::GroupFull { gid });
        }
        if self.attachments >= MAX_TOTAL_MCAST_QP_ATTACH {
            return Err(McastError::TooManyAttachments);
        }
        let g = self.groups.entry(k).or_insert_with(|| Group { lid, qpns: Vec::new() });
        g.qpns.push(qpn);
        self.attachments += 1;
        tracing::debug!(qpn, %gid, lid, members = g.qpns.len(), "QP attached to multicast group");
        Ok(())
    }

    /// Detaches `qpn` from `gid`; the group goes with its last member.
    pub(crate) fn detach(&mut self, gid: IpAddr, lid: u16, qpn: u32) -> Result<(), McastError> {
        let k = key(gid);
        let Some(g) = self.groups.get_mut(&k) else {
            return Err(McastError::NotAttached { qpn, gid, lid });
        };
        let Some(i) = g.qpns.iter().position(|&q| q == qpn) else {
            return Err(McastError::NotAttached { qpn, gid, lid });
        };
        g.qpns.swap_remove(i);
        self.attachments -= 1;
        if g.qpns.is_empty() {
            self.groups.remove(&k);
        }
        tracing::debug!(qpn, %gid, lid, "QP detached from multicast group");
        Ok(())
    }

    /// Detaches `qpn` from every group (the QP is being destroyed).
    pub(crate) fn detach_all(&mut self, qpn: u32) {
        let before = self.attachments;
        self.groups.retain(|_, g| {
            g.qpns.retain(|&q| q != qpn);
            !g.qpns.is_empty()
        });
        self.attachments = self.groups.values().map(|g| g.qpns.len()).sum();
        if self.attachments != before {
            tracing::debug!(qpn, groups = before - self.attachments, "destroyed QP left its multicast groups");
        }
    }

    /// The members of the group `gid`, if there is one.
    pub(crate) fn members(&self, gid: IpAddr) -> Option<Members> {
        let g = self.groups.get(&key(gid))?;
        let mut m = Members { qpns: [0; MAX_MCAST_QP_ATTACH], len: g.qpns.len() };
        m.qpns[..g.qpns.len()].copy_from_slice(&g.qpns);
        Some(m)
    }

    /// The members of the group with multicast LID `lid` (native IB
    /// packets without a GRH name only the LID).
    pub(crate) fn members_by_lid(&self, lid: u16) -> Option<Members> {
        let (gid, _) = self.groups.iter().find(|(_, g)| g.lid == lid)?;
        self.members(IpAddr::V6(*gid))
    }

    /// The groups `qpn` is attached to, with their LIDs.
    pub(crate) fn groups_of(&self, qpn: u32) -> Vec<(IpAddr, u16)> {
        let of = |(k, g): (&Ipv6Addr, &Group)| g.qpns.contains(&qpn).then(|| (IpAddr::V6(*k).to_canonical(), g.lid));
        self.groups.iter().filter_map(of).collect()
    }
}

/// Whether `lid` may name a group on a native IB port (ib_attach_mcast's
/// `is_valid_mcast_lid`: 0xc000 and up, not the permissive LID). RoCE
/// ignores the LID (the RoCE annex), so it is checked for IB only.
pub fn is_multicast_lid(lid: u16) -> bool {
    (MULTICAST_LID_BASE..PERMISSIVE_LID).contains(&lid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: IpAddr = IpAddr::V4(core::net::Ipv4Addr::new(239, 21, 0, 1));

    #[test]
    fn multicast_gids_are_those_rdma_is_multicast_addr_accepts() {
        assert!(is_multicast_gid(G));
        assert!(is_multicast_gid(IpAddr::V6(core::net::Ipv4Addr::new(239, 21, 0, 1).to_ipv6_mapped())));
        assert!(is_multicast_gid("ff0e::21:1".parse().unwrap()));
        assert!(!is_multicast_gid("127.0.21.1".parse().unwrap()));
        assert!(!is_multicast_gid("::ffff:127.0.21.1".parse().unwrap()));
        assert!(!is_multicast_gid("fe80::1".parse().unwrap()));
    }

    #[test]
    fn attach_is_idempotent_and_detach_of_a_stranger_fails() {
        let mut t = McastTable::default();
        t.attach(G, 0, 0x11).unwrap();
        t.attach(G, 0, 0x11).unwrap();
        t.attach(G, 0, 0x12).unwrap();
        assert_eq!(t.members(G).unwrap().as_slice(), [0x11, 0x12]);
        // The IPv4-mapped form names the same group.
        let mapped = IpAddr::V6(core::net::Ipv4Addr::new(239, 21, 0, 1).to_ipv6_mapped());
        assert_eq!(t.members(mapped).unwrap().as_slice().len(), 2);
        assert_eq!(t.detach(G, 0, 0x13), Err(McastError::NotAttached { qpn: 0x13, gid: G, lid: 0 }));
        t.detach(G, 0, 0x11).unwrap();
        t.detach(G, 0, 0x12).unwrap();
        assert!(t.members(G).is_none(), "the group goes with its last member");
        assert_eq!(t.attachments, 0);
        assert!(matches!(t.attach("127.0.21.1".parse().unwrap(), 0, 1), Err(McastError::NotMulticast { .. })));
    }

    #[test]
    fn limits_are_rxes() {
        let mut t = McastTable::default();
        for q in 0..MAX_MCAST_QP_ATTACH as u32 {
            t.attach(G, 0, 0x100 + q).unwrap();
        }
        assert_eq!(t.attach(G, 0, 0x999), Err(McastError::GroupFull { gid: G }));
        t.detach_all(0x100);
        assert_eq!(t.members(G).unwrap().as_slice().len(), MAX_MCAST_QP_ATTACH - 1);
        t.attach(G, 0, 0x999).unwrap();
        let mut t = McastTable::default();
        for i in 0..MAX_MCAST_GRP as u32 {
            t.attach(IpAddr::V6(Ipv6Addr::from(0xff0e_u128 << 112 | u128::from(i))), 0, 1).unwrap();
        }
        assert_eq!(t.attach(G, 0, 1), Err(McastError::TooManyGroups));
        assert_eq!(t.groups_of(1).len(), MAX_MCAST_GRP);
    }

    #[test]
    fn multicast_lids_exclude_unicast_and_permissive() {
        assert!(is_multicast_lid(0xc000));
        assert!(is_multicast_lid(0xfffe));
        assert!(!is_multicast_lid(0xbfff));
        assert!(!is_multicast_lid(0xffff));
    }
}
