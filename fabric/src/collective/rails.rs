//! Which NICs a collective's rings and trees use on a rail-optimized
//! fabric, as NCCL maps them.
//!
//! A server's GPUs reach each other over NVLink, which this fabric does
//! not carry; what reaches the network is, per NCCL channel, one hop
//! from each server to the next. NCCL runs one channel per NIC and, by
//! default (`NCCL_CROSS_NIC=0`, "suited for networks with per NIC
//! switches (rails)"), leaves a server and enters the next through the
//! same NIC index, so channel c's network hops all stay on rail switch c.
//! Channel c of an all-reduce is then a ring over NIC c of servers 0, 1,
//! ..., S-1: host s·R + c (hosts are numbered server-major, see
//! [`crate::topology::Topology::rail_optimized`]). It carries 1/R of the
//! buffer, and since its ring in NCCL has all N = S·R GPUs on it, it takes
//! NCCL's 2(N-1) steps of size/(R·N) bytes; the R-1 NVLink hops between
//! its network hops are taken as free. Per NIC that is 2(N-1)/N · size/R
//! on the wire, so nccl-tests' bus bandwidth approaches R times the link
//! rate, as on a DGX.
//!
//! With `cross_nic` (`NCCL_CROSS_NIC=1`, what a rail-unaware placement
//! does), channel c leaves server s on NIC (c + s) mod R and enters server
//! s + 1 on NIC (c + s + 1) mod R: the same traffic, but every network
//! hop changes rail and so crosses a spine.

/// The hosts of each channel, in ring order: channel c is NIC c of every
/// server (or, with `cross_nic`, NIC (c + s) mod R of server s).
pub fn channels(servers: usize, rails: usize, cross_nic: bool) -> Vec<Vec<usize>> {
    (0..rails)
        .map(|c| (0..servers).map(|s| s * rails + if cross_nic { (c + s) % rails } else { c }).collect())
        .collect()
}

/// Bytes a channel's ring moves per step for a collective of `size`
/// bytes over `servers` x `rails` NICs: its 1/R of the buffer over NCCL's
/// N = servers x rails ranks.
pub fn ring_chunk(size: u64, servers: usize, rails: usize) -> u64 {
    size.div_ceil(rails as u64).div_ceil((servers * rails) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::report::Kind;
    use crate::collective::schedule::{balanced, messages};
    use crate::collective::{rail_schedule, Algorithm};

    #[test]
    fn each_channel_stays_on_its_rail_unless_it_crosses_nics() {
        // 3 servers x 4 NICs: host s*4 + c is NIC c of server s.
        assert_eq!(channels(3, 4, false)[1], vec![1, 5, 9]);
        assert_eq!(channels(3, 4, true)[1], vec![1, 6, 11]);
        for cross in [false, true] {
            let mut all: Vec<usize> = channels(3, 4, cross).concat();
            all.sort_unstable();
            assert_eq!(all, (0..12).collect::<Vec<_>>(), "every NIC in exactly one channel");
        }
        let s = rail_schedule(Kind::AllReduce, Algorithm::Ring, 3, 4, false, 12 * 4 * 100);
        assert!(balanced(&s));
        // Every message stays on one rail: sender and receiver share h % 4.
        assert!(messages(&s).keys().all(|&(a, b)| a % 4 == b % 4));
        // NCCL's 2(N-1) steps of size/(R·N).
        assert_eq!(s[5].len(), 2 * 11);
        assert_eq!(s[5][0].sends, vec![(9, 100)]);
        let x = rail_schedule(Kind::AllGather, Algorithm::Ring, 3, 4, true, 4800);
        assert!(messages(&x).keys().all(|&(a, b)| a % 4 != b % 4));
        assert_eq!(x[0].len(), 11);
    }
}
