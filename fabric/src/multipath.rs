//! How a switch picks one of several equal-cost next hops (`--multipath`):
//! per flow (ECMP), per packet at random (spraying), or per packet to the
//! least-loaded port (adaptive routing). RoCE switches and IB switches use
//! the same rule; only what "load" means differs (see [`pick`]).
//!
//! Per flow keeps a QP's packets on one path, so they arrive in order;
//! per packet spreads load evenly but lets packets of one QP overtake
//! each other, which a go-back-N receiver takes for loss (a PSN sequence
//! error NAK and a resend). That trade is what `--multipath` measures.

use rdma_transport::sim::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Multipath {
    /// Per flow: the 5-tuple hash on RoCE (the QP's UDP source port is the
    /// entropy), the DLID on IB (the LFT entry the SM spread).
    #[default]
    Ecmp,
    /// Per packet, uniformly at random from a per-switch generator seeded
    /// by `--seed` (random packet spraying, Dixit et al., INFOCOM 2013).
    Spray,
    /// Per packet, the port with the fewest queued bytes (RoCE) or packets
    /// (IB) right now; ties go to the flow's ECMP port, then the next in
    /// the group (as InfiniBand adaptive routing and Spectrum-X pick the
    /// least-congested port of an AR group).
    Adaptive,
}

impl Multipath {
    pub fn name(self) -> &'static str {
        match self {
            Multipath::Ecmp => "ecmp",
            Multipath::Spray => "spray",
            Multipath::Adaptive => "adaptive",
        }
    }
}

/// One port of `group` (not empty) for a packet whose flow hashes to
/// `hash`; `load` is a port's queue now (only asked for by `Adaptive`),
/// `rng` is the switch's own generator (only drawn from by `Spray`, so
/// ECMP and adaptive runs draw nothing from it).
pub fn pick(mode: Multipath, group: &[usize], hash: u64, load: impl Fn(usize) -> u64, rng: &mut Rng) -> usize {
    let n = group.len();
    let home = (hash % n as u64) as usize;
    match mode {
        Multipath::Ecmp => group[home],
        Multipath::Spray => group[rng.below(n as u64) as usize],
        Multipath::Adaptive => {
            // The first strict minimum walking from the flow's own port.
            let mut best = (u64::MAX, group[home]);
            for i in 0..n {
                let p = group[(home + i) % n];
                let l = load(p);
                if l < best.0 {
                    best = (l, p);
                }
            }
            best.1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecmp_follows_the_hash_spray_spreads_adaptive_takes_the_shortest_queue() {
        let g = [4, 5, 6, 7];
        let mut rng = Rng::new(1);
        assert_eq!(pick(Multipath::Ecmp, &g, 6, |_| 0, &mut rng), 6);
        let mut count = [0u32; 8];
        for _ in 0..4000 {
            count[pick(Multipath::Spray, &g, 6, |_| 0, &mut rng)] += 1;
        }
        assert!(count[4..].iter().all(|&c| (900..=1100).contains(&c)), "{count:?}");
        // Empty queues everywhere: the flow's own port (so no reordering
        // on an idle fabric); otherwise the shortest queue.
        assert_eq!(pick(Multipath::Adaptive, &g, 1, |_| 0, &mut rng), 5);
        let load = |p: usize| [0, 0, 0, 0, 9, 3, 1, 1][p];
        assert_eq!(pick(Multipath::Adaptive, &g, 1, load, &mut rng), 6);
        assert_eq!(pick(Multipath::Adaptive, &g, 3, load, &mut rng), 7);
    }
}
