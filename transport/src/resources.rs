//! Responder resources (`max_dest_rd_atomic`): the RDMA READs and atomics a
//! responder executed most recently, remembered so that a retransmitted
//! request is answered again without being run twice.
//!
//! Only a duplicate that matches one of them is answered; any other
//! duplicate READ or atomic is dropped. This is what keeps a peer from
//! making the responder send region data for a PSN it never sent, or
//! replay one READ many times over (IBTA 9.5 and 9.7.5.1.3; rxe keeps the
//! same ring). The ring holds as many entries as the QP advertises; when
//! it is full the oldest entry goes, which a requester that honours the
//! limit can no longer ask to be replayed.

use rdma_wire::Psn;
use std::collections::VecDeque;

/// What a remembered request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Executed {
    /// A READ of `len` bytes at `va` under `rkey`.
    Read { rkey: u32, va: u64, len: u64 },
    /// An atomic that found `orig` (what its replay must answer again).
    Atomic { orig: u64 },
    /// A FLUSH (IBTA 1.5): a replay is answered again without flushing
    /// (rxe_resp.c, oA19-14/15).
    Flush,
    /// An ATOMIC WRITE: a replay is answered again, never written twice.
    AtomicWrite,
}

/// One executed READ or atomic and the PSNs its response takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resource {
    pub first: Psn,
    /// PSNs the response takes (1 for an atomic).
    pub npsn: u32,
    pub what: Executed,
}

impl Resource {
    /// Whether `psn` is one of this request's PSNs.
    pub fn holds(&self, psn: Psn) -> bool {
        psn.in_window(self.first, self.npsn)
    }
}

/// The ring of a QP's responder resources.
#[derive(Debug, Default)]
pub(crate) struct Resources {
    ring: VecDeque<Resource>,
}

impl Resources {
    /// Remembers `r`, forgetting the oldest entry beyond `capacity`.
    pub fn remember(&mut self, r: Resource, capacity: usize) {
        while self.ring.len() >= capacity.max(1) {
            self.ring.pop_front();
        }
        self.ring.push_back(r);
    }

    /// The remembered request whose PSNs hold `psn`, newest first.
    pub fn find(&self, psn: Psn) -> Option<Resource> {
        self.ring.iter().rev().find(|r| r.holds(psn)).copied()
    }

    pub fn clear(&mut self) {
        self.ring.clear();
    }
}

/// Whether a duplicate READ of `len` bytes at `va` under `rkey`, with PSN
/// `psn`, asks again for (the rest of) the remembered READ: the same key,
/// the address the remembered READ had reached at that PSN, and no byte
/// past its end. A requester that retries a READ half-way through asks
/// for exactly the part it is missing.
pub(crate) fn read_matches(r: &Resource, psn: Psn, rkey: u32, va: u64, len: u64, mtu: u64) -> bool {
    let Executed::Read { rkey: rk, va: rva, len: rlen } = r.what else { return false };
    if rk != rkey || !r.holds(psn) {
        return false;
    }
    let offset = u64::from(psn.distance_from(r.first)) * mtu;
    offset <= rlen && va == rva + offset && len <= rlen - offset
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(first: u32, npsn: u32, va: u64, len: u64) -> Resource {
        Resource { first: Psn::new(first), npsn, what: Executed::Read { rkey: 7, va, len } }
    }

    #[test]
    fn the_ring_keeps_the_newest_entries() {
        let mut res = Resources::default();
        for i in 0..5 {
            res.remember(read(i * 10, 4, 0x1000, 4096), 3);
        }
        assert!(res.find(Psn::new(0)).is_none());
        assert!(res.find(Psn::new(10)).is_none());
        assert_eq!(res.find(Psn::new(23)).map(|r| r.first), Some(Psn::new(20)));
        assert_eq!(res.find(Psn::new(43)).map(|r| r.first), Some(Psn::new(40)));
        assert!(res.find(Psn::new(44)).is_none());
    }

    #[test]
    fn psns_wrap_around_the_24_bit_space() {
        let mut res = Resources::default();
        res.remember(read(0xff_fffe, 4, 0, 4096), 1);
        assert!(res.find(Psn::new(0x00_0001)).is_some());
        assert!(res.find(Psn::new(0x00_0002)).is_none());
        assert!(res.find(Psn::new(0xff_fffd)).is_none());
    }

    #[test]
    fn a_duplicate_read_matches_only_the_part_it_may_ask_again() {
        let r = read(100, 4, 0x1000, 4000);
        // The whole READ again, and a retry from its third packet.
        assert!(read_matches(&r, Psn::new(100), 7, 0x1000, 4000, 1024));
        assert!(read_matches(&r, Psn::new(102), 7, 0x1000 + 2048, 4000 - 2048, 1024));
        // Another key, another address, more bytes, a PSN outside it.
        assert!(!read_matches(&r, Psn::new(100), 8, 0x1000, 4000, 1024));
        assert!(!read_matches(&r, Psn::new(102), 7, 0x1000, 4000, 1024));
        assert!(!read_matches(&r, Psn::new(100), 7, 0x1000, 4001, 1024));
        assert!(!read_matches(&r, Psn::new(104), 7, 0x1000 + 4096, 0, 1024));
        let atomic = Resource { first: Psn::new(5), npsn: 1, what: Executed::Atomic { orig: 1 } };
        assert!(!read_matches(&atomic, Psn::new(5), 7, 0, 8, 1024));
    }
}
