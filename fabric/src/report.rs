//! The report of a run: the JSON contract of `rdma-fabric run --json` and
//! the statistics behind it.

use serde::Serialize;

/// One point of a reaction point's rate over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    pub t_us: f64,
    pub rate_gbps: f64,
}

/// A transmitting port and how long its data priority was paused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PausedPort {
    /// `host3` or `switch0`.
    pub node: String,
    pub port: usize,
    pub paused_us: f64,
}

/// A switch port, named as in [`PausedPort`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortRef {
    pub node: String,
    pub port: usize,
}

/// The time series behind `--plot`, at most [`MAX_SERIES_POINTS`] points
/// each; not part of the JSON (it would dwarf the rest).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Per flow, (t µs, Gb/s): delivered bytes per 100 µs window, or for
    /// rp-trajectory the reaction point's rate.
    pub flow_rates: Vec<Vec<(f64, f64)>>,
    /// (t µs, bytes) at the bottleneck data queue: the most in each bucket.
    pub queue: Vec<(f64, f64)>,
}

/// Bounds each plotted series, however long the run.
pub const MAX_SERIES_POINTS: usize = 2000;

/// Keeps at most `max` points: the largest value of each run of
/// consecutive points, so spikes survive the thinning.
pub fn thin(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max || max == 0 {
        return points.to_vec();
    }
    points
        .chunks(points.len().div_ceil(max))
        .map(|c| c.iter().copied().fold(c[0], |a, p| if p.1 > a.1 { p } else { a }))
        .collect()
}

/// Field names are a contract (issue 19): keep them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    /// Jain's fairness index of the flows' throughputs over the measured interval.
    pub jain: Option<f64>,
    /// Delivered over bottleneck capacity in the measured interval.
    pub throughput_fraction: Option<f64>,
    pub drops: u64,
    /// PFC frames sent with a non-zero time: XOFFs and their refreshes.
    pub pauses: u64,
    /// Whether PFC was on, and the headroom per ingress port it used.
    pub pfc: bool,
    pub headroom_bytes: Option<u64>,
    /// The most headroom any ingress used: its peak bytes above XOFF.
    pub headroom_used_bytes: Option<u64>,
    /// PFC frames with time 0 (XON).
    pub resumes: u64,
    /// Time transmitters spent with the data priority paused, summed, and per port.
    pub paused_us_total: f64,
    pub paused_ports: Vec<PausedPort>,
    pub cnps: u64,
    pub ecn_marks: u64,
    pub queue_p50_bytes: Option<u64>,
    pub queue_p99_bytes: Option<u64>,
    /// Start of the first window from which every window's Jain index is >= 0.99.
    pub convergence_us: Option<f64>,
    pub fct_us_p50: Option<f64>,
    pub fct_us_p99: Option<f64>,
    /// Each flow's throughput in Gb/s (long flows: delivered bytes in the
    /// measured interval; finite flows: size over completion time).
    pub flows: Vec<f64>,
    /// Simulated time of the run and the interval measured, µs.
    pub duration_us: f64,
    pub measured_from_us: f64,
    /// Fraction of queue samples (every 1 µs) with Kmin <= q <= Kmax, and with q <= Kmax.
    pub queue_in_band_fraction: Option<f64>,
    pub queue_below_kmax_fraction: Option<f64>,
    /// The smallest per-window (100 µs) Jain index after `measured_from_us`.
    pub jain_min_window: Option<f64>,
    pub flows_unfinished: u64,
    pub retransmits: u64,
    /// `victim`: the uncongested flow's throughput, Gb/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub victim_gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<Vec<Point>>,
    /// `pfc-deadlock`: whether the run deadlocked, when it was detected
    /// (the run stops there), and the paused egress ports holding data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadlock: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadlock_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadlock_ports: Option<Vec<PortRef>>,
    /// Leaf-spine: data packets each spine forwarded (how ECMP spread the flows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spine_data_packets: Option<Vec<u64>>,
    /// Two-tier fabrics: how switches picked among equal-cost next hops
    /// (`--multipath`), and the packets receivers dropped as out of
    /// sequence (reordering or loss; each gap costs a NAK and a resend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multipath: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_sequence: Option<u64>,
    /// WRITE post-to-completion latency (messages of up to 64 KiB), µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us_p99: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us_p999: Option<f64>,
    /// `--link ib` only: the IB link layer's account (absent on RoCE).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub ib: Option<IbReport>,
    #[serde(skip)]
    pub series: Series,
}

/// A data VL's buffer peak over every port, against what was advertised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VlPeak {
    pub vl: u8,
    pub peak_blocks: u16,
    pub advertised_blocks: u16,
}

/// What `--link ib` adds to a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IbReport {
    pub link: &'static str,
    /// Times a port's head packet on a VL found no credit and had to wait.
    pub credit_stalls: u64,
    pub vl_buffer_peaks: Vec<VlPeak>,
    /// Receive-buffer overruns (a credit violation): always 0 on a correct link.
    pub overruns: u64,
    pub fc_packets: u64,
    pub fc_lost: u64,
    pub fc_bad_lpcrc: u64,
    pub vl15_dropped: u64,
    /// Packets dropped by an LFT miss or SL2VL 15.
    pub ib_drops: u64,
    /// Header + CRC bytes of one IB data packet (LRH, BTH, RETH?, ICRC, VCRC)
    /// versus the same packet as RoCE v2 over IPv4 with its Ethernet framing.
    pub header_bytes_ib: u64,
}

/// Jain's index: (Σx)² / (n Σx²); 1 when all are equal.
pub fn jain(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    (!x.is_empty() && sq > 0.0).then(|| sum * sum / (x.len() as f64 * sq))
}

/// The `q`-quantile (0..=1) by nearest rank.
pub fn percentile<T: Copy + PartialOrd>(values: &[T], q: f64) -> Option<T> {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len();
    (n > 0).then(|| v[((q * n as f64).ceil() as usize).clamp(1, n) - 1])
}

impl Report {
    /// The readable summary of `rdma-fabric run` without `--json`.
    pub fn table(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.4}"));
        let u = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
        let mut s = format!("scenario            {}\nseed                {}\n", self.scenario, self.seed);
        if let Some(t) = &self.trajectory {
            s += "t_us        rate_gbps\n";
            for p in t {
                s += &format!("{:<11} {:.6}\n", p.t_us, p.rate_gbps);
            }
            return s;
        }
        s += &format!("duration            {} us (measured from {} us)\n", self.duration_us, self.measured_from_us);
        s += &format!("jain                {}   (min window {})\n", f(self.jain), f(self.jain_min_window));
        s += &format!("throughput_fraction {}\n", f(self.throughput_fraction));
        s += &format!("drops               {}\n", self.drops);
        let pfc = match self.headroom_bytes {
            Some(h) => format!("PFC on, headroom {h} B, used {} B", u(self.headroom_used_bytes)),
            None => "PFC off".to_string(),
        };
        s += &format!("pauses / resumes    {} / {} ({pfc})\n", self.pauses, self.resumes);
        s += &format!("paused              {:.3} us in total\n", self.paused_us_total);
        for p in &self.paused_ports {
            s += &format!("  {:<8} port {:<3} {:.3} us paused\n", p.node, p.port, p.paused_us);
        }
        s += &format!("cnps                {}\necn_marks           {}\n", self.cnps, self.ecn_marks);
        s += &format!("retransmits         {}\n", self.retransmits);
        if let Some(d) = self.deadlock {
            let at = self.deadlock_us.map_or(String::new(), |t| format!(" at {t} us"));
            s += &format!("deadlock            {d}{at}\n");
            for p in self.deadlock_ports.iter().flatten() {
                s += &format!("  {:<8} port {} paused with data queued\n", p.node, p.port);
            }
        }
        if let Some(sp) = &self.spine_data_packets {
            s += &format!("spine data packets  {sp:?}\n");
        }
        if let (Some(m), Some(o)) = (self.multipath, self.out_of_sequence) {
            s += &format!("multipath           {m} ({o} packets out of sequence at receivers)\n");
        }
        if let Some(ib) = &self.ib {
            s += &format!("link                ib (credit stalls {}, overruns {})\n", ib.credit_stalls, ib.overruns);
            s += &format!(
                "flow control        {} packets, {} lost, {} bad LPCRC; VL15 dropped {}\n",
                ib.fc_packets, ib.fc_lost, ib.fc_bad_lpcrc, ib.vl15_dropped
            );
            for v in &ib.vl_buffer_peaks {
                s += &format!("  VL{:<2} buffer peak {} of {} blocks\n", v.vl, v.peak_blocks, v.advertised_blocks);
            }
        }
        if let Some(v) = self.victim_gbps {
            s += &format!("victim              {v:.3} Gb/s\n");
        }
        s += &format!("queue p50 / p99     {} / {} bytes\n", u(self.queue_p50_bytes), u(self.queue_p99_bytes));
        s += &format!("queue in [Kmin,Kmax] {}\n", f(self.queue_in_band_fraction));
        s += &format!("convergence         {} us\n", f(self.convergence_us));
        s += &format!(
            "fct p50 / p99       {} / {} us (unfinished {})\n",
            f(self.fct_us_p50),
            f(self.fct_us_p99),
            self.flows_unfinished
        );
        for (i, g) in self.flows.iter().enumerate() {
            s += &format!("flow {i:<3}            {g:.3} Gb/s\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_and_percentiles() {
        assert_eq!(jain(&[1.0, 1.0, 1.0]), Some(1.0));
        assert_eq!(jain(&[1.0, 0.0]), Some(0.5));
        assert_eq!(percentile(&[5, 1, 3, 2, 4], 0.5), Some(3));
        assert_eq!(percentile(&[5, 1, 3, 2, 4], 0.99), Some(5));
        assert_eq!(percentile::<u64>(&[], 0.5), None);
    }

    #[test]
    fn thinning_bounds_points_and_keeps_peaks() {
        let p: Vec<(f64, f64)> = (0..10_000).map(|i| (i as f64, if i == 4321 { 99.0 } else { 1.0 })).collect();
        let t = thin(&p, 100);
        assert_eq!(t.len(), 100);
        assert!(t.contains(&(4321.0, 99.0)));
        assert_eq!(thin(&p[..5], 100).len(), 5);
    }
}
