//! Protection domains and access rights: what every access to memory is
//! checked against (a region's or window's PD and `IBV_ACCESS_*` flags).
//! Memory regions are in [`crate::memory`], windows in [`crate::window`].

/// Access rights of a memory region, with the bit values of libibverbs'
/// `IBV_ACCESS_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(2);
    pub const REMOTE_READ: Access = Access(4);
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// `IBV_ACCESS_FLUSH_GLOBAL`: a peer may FLUSH with placement type global.
    pub const FLUSH_GLOBAL: Access = Access(1 << 8);
    /// `IBV_ACCESS_FLUSH_PERSISTENT`: a peer may FLUSH with placement type persistent.
    pub const FLUSH_PERSISTENT: Access = Access(1 << 9);
    /// `IBV_ACCESS_MW_BIND`: memory windows may be bound to the region.
    pub const MW_BIND: Access = Access(1 << 4);
    /// `IBV_ACCESS_ZERO_BASED`: a window addressed from 0 (refused here).
    pub const ZERO_BASED: Access = Access(1 << 5);
    /// `IBV_ACCESS_ON_DEMAND`: on-demand paging. Registration pins and
    /// checks nothing; every access to the caller's memory is fault-safe
    /// ([`crate::memory::RegionMemory::on_demand`], docs/odp.md).
    pub const ON_DEMAND: Access = Access(1 << 6);
    pub const NONE: Access = Access(0);
    /// Everything, as the examples register their buffers.
    pub const ALL: Access = Access(1 | 2 | 4 | 8);

    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

/// A protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pd(pub u32);
