//! What a collective run reports: the job completion time, algorithm and
//! bus bandwidth as nccl-tests defines them, the tail across ranks, and
//! what the fabric did (drops, pauses, retransmissions).

use serde::Serialize;

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    AllReduce,
    AllGather,
    ReduceScatter,
}

impl Kind {
    /// The scenario name of `rdma-fabric run`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "allreduce",
            Kind::AllGather => "allgather",
            Kind::ReduceScatter => "reduce-scatter",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        [Kind::AllReduce, Kind::AllGather, Kind::ReduceScatter].into_iter().find(|k| k.name() == name)
    }

    /// nccl-tests' bus bandwidth factor for `n` ranks: what each rank's
    /// link must carry relative to the algorithm bandwidth, so that the bus
    /// bandwidth compares with the link rate whatever `n` (2(n-1)/n for
    /// all-reduce, (n-1)/n for all-gather and reduce-scatter).
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Kind::AllReduce => 2.0 * (n - 1.0) / n,
            Kind::AllGather | Kind::ReduceScatter => (n - 1.0) / n,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CollectiveReport {
    pub scenario: String,
    pub algorithm: String,
    pub hosts: usize,
    /// nccl-tests' size: the all-reduce buffer, all-gather's whole output,
    /// reduce-scatter's whole input.
    pub size_bytes: u64,
    pub seed: u64,
    pub link: String,
    /// `single-switch`, `leaf-spine` or `rail-optimized`.
    pub topology: String,
    /// Two-tier fabrics: a leaf's host-link capacity over its uplink capacity.
    pub oversubscription: Option<f64>,
    /// Rail-optimized: NICs (rails) per server, and whether each channel
    /// changed NIC between servers (`--cross-nic`).
    pub rails: Option<usize>,
    pub cross_nic: bool,
    /// How switches picked among equal-cost next hops: ecmp, spray, adaptive.
    pub multipath: String,
    pub pfc: bool,
    /// Whether DCQCN ran (kept for older readers), and the controller that ran.
    pub dcqcn: bool,
    pub cc: String,
    /// Time until the last rank finished (`None`: not all did).
    pub jct_us: Option<f64>,
    /// size / JCT, in Gb/s.
    pub algbw_gbps: Option<f64>,
    /// algbw × the bus factor ([`Kind::bus_factor`]), in Gb/s.
    pub busbw_gbps: Option<f64>,
    /// The ring's α-β lower bound: every step moves its chunk (with its
    /// headers) over one link at line rate and crosses at least two links.
    pub lower_bound_us: Option<f64>,
    /// When ranks finished, across ranks.
    pub rank_completion_us_p50: Option<f64>,
    pub rank_completion_us_p99: Option<f64>,
    pub rank_completion_us_max: Option<f64>,
    pub ranks_unfinished: usize,
    /// A WRITE completed in error (its QP ran out of retries).
    pub failed: bool,
    pub drops: u64,
    pub pauses: u64,
    /// IB: times a port's head packet waited for credit (IB's pauses).
    pub credit_stalls: Option<u64>,
    pub retransmits: u64,
    pub ecn_marks: u64,
    pub cnps: u64,
    /// Packets the receivers dropped as out of sequence (a gap: loss or
    /// reordering), the PSN sequence error NAKs they sent, and the
    /// senders' ACK timeouts.
    pub out_of_sequence: u64,
    pub naks: u64,
    pub timeouts: u64,
    /// Two-tier fabrics: data packets each spine forwarded.
    pub spine_data_packets: Option<Vec<u64>>,
    /// When each rank finished, µs, in rank order (finished ranks only;
    /// for plots, not in the JSON).
    #[serde(skip)]
    pub rank_completion_us: Vec<f64>,
    pub packet_hops: u64,
    pub simulated_us: f64,
}

/// (algbw, busbw) in Gb/s for `size` bytes in `jct_us`.
pub fn bandwidths(kind: Kind, n: usize, size: u64, jct_us: f64) -> (f64, f64) {
    let algbw = size as f64 * 8.0 / (jct_us * 1e3);
    (algbw, algbw * kind.bus_factor(n))
}

impl CollectiveReport {
    /// The readable summary of `rdma-fabric run` without `--json`.
    pub fn table(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
        let rows = [
            ("scenario", format!("{} ({})", self.scenario, self.algorithm)),
            ("hosts", self.hosts.to_string()),
            ("size_bytes", self.size_bytes.to_string()),
            ("seed", self.seed.to_string()),
            ("fabric", format!("{} pfc={} cc={}", self.link, self.pfc, self.cc)),
            ("topology", self.topology_line()),
            ("jct_us", f(self.jct_us)),
            ("lower_bound_us", f(self.lower_bound_us)),
            ("algbw_gbps", f(self.algbw_gbps)),
            ("busbw_gbps", f(self.busbw_gbps)),
            (
                "rank_completion_us",
                format!(
                    "p50 {} p99 {} max {}",
                    f(self.rank_completion_us_p50),
                    f(self.rank_completion_us_p99),
                    f(self.rank_completion_us_max)
                ),
            ),
            ("ranks_unfinished", self.ranks_unfinished.to_string()),
            ("drops", self.drops.to_string()),
            ("pauses", self.pauses.to_string()),
            ("retransmits", self.retransmits.to_string()),
            ("out_of_sequence", format!("{} (naks {}, timeouts {})", self.out_of_sequence, self.naks, self.timeouts)),
            ("ecn_marks", self.ecn_marks.to_string()),
            ("cnps", self.cnps.to_string()),
        ];
        let mut s: String = rows.iter().map(|(k, v)| format!("{k:<20}{v}\n")).collect();
        if let Some(c) = self.credit_stalls {
            s += &format!("{:<20}{c}\n", "credit_stalls");
        }
        if let Some(sp) = &self.spine_data_packets {
            s += &format!("{:<20}{sp:?}\n", "spine_data_packets");
        }
        s
    }

    /// The topology, its oversubscription, rails and multipath, in a line.
    pub fn topology_line(&self) -> String {
        let mut t = self.topology.clone();
        if let Some(r) = self.rails {
            t += &format!(" rails={r}{}", if self.cross_nic { " cross-nic" } else { "" });
        }
        if let Some(o) = self.oversubscription {
            t += &format!(" oversubscription={o}:1");
        }
        t + &format!(" multipath={}", self.multipath)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths_follow_nccl_tests() {
        // 1 GB in 1 s: 8 Gb/s; all-reduce on 8 ranks moves 2·7/8 of it per link.
        let (alg, bus) = bandwidths(Kind::AllReduce, 8, 1_000_000_000, 1e6);
        assert!((alg - 8.0).abs() < 1e-9 && (bus - 14.0).abs() < 1e-9);
        let (_, bus) = bandwidths(Kind::AllGather, 4, 1_000_000_000, 1e6);
        assert!((bus - 6.0).abs() < 1e-9);
        assert_eq!(Kind::from_name("reduce-scatter"), Some(Kind::ReduceScatter));
        assert_eq!(Kind::from_name("alltoall"), None);
    }
}
