//! What a run measured, as a perftest-like table or one JSON object.

use hdrhistogram::Histogram;
use rdma_core_rs::{Context, Stats};
use serde::Serialize;
use std::time::{Duration, Instant};

/// On a failed run: says on stderr how long this process went without a
/// round of progress, if over [`rdma_core_rs::ProgressGaps::LONG`]. A
/// peer's QPs that ended with RetryExcErr waited that long for ACKs.
pub fn note_progress_gaps(ctx: &Context) {
    let g = ctx.progress_gaps();
    if g.longest > rdma_core_rs::ProgressGaps::LONG {
        eprintln!(
            "rdma-perf: this process went up to {} ms without a round of progress ({} times over {} ms): its peer's \
             requests waited as long for their ACKs (a peer gives up after 8 ACK timeouts: -u/--qp-timeout)",
            g.longest.as_millis(),
            g.long,
            rdma_core_rs::ProgressGaps::LONG.as_millis()
        );
    }
}

/// The endpoint counters a run ends with.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Counters {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub naks_sent: u64,
    pub naks_received: u64,
    pub rnr_naks_sent: u64,
    pub rnr_naks_received: u64,
    pub icrc_drops: u64,
    pub other_drops: u64,
    pub ipv4_ident_recovered: u64,
    pub send_syscalls: u64,
    pub recv_syscalls: u64,
    /// Sends that carried several packets (UDP GSO).
    pub gso_sends: u64,
    /// Received datagrams that carried several packets (UDP GRO).
    pub gro_receives: u64,
    /// Packets whose payload the kernel copied straight from the memory
    /// region (the socket driver's bulk sends).
    pub payloads_by_reference: u64,
    /// Packets sent on a connected socket to its peer (no route lookup).
    pub connected_sends: u64,
    /// IPv4 Identification probes, and the predictions they found wrong.
    pub ident_probes: u64,
    pub ident_mismatches: u64,
    /// The I/O driver that moved the packets: "sockets" or "io-uring" (UDP),
    /// "roce1-frames" or "ib-frames" (the raw-frame backends).
    pub io_driver: String,
    /// Received packets that carried an ECN Congestion Experienced mark.
    pub ecn_ce_received: u64,
    /// CNPs sent for CE-marked data, CNPs received for this side's QPs,
    /// and the rate cuts the congestion controller made (`--cc`, `--dcqcn`).
    pub cnps_sent: u64,
    pub cnps_received: u64,
    pub rate_cuts: u64,
    /// The lowest current rate over the device's QPs at the end of the
    /// run, bits per second; `null` without a congestion controller.
    pub rate_bps: Option<u64>,
    /// The longest interval between two rounds of progress on the device,
    /// in milliseconds, and how many were over 100 ms
    /// (`rdma_core_rs::ProgressGaps`): a process that waited that long
    /// for a core left its peer's requests unanswered as long.
    pub longest_progress_gap_ms: u64,
    pub progress_gaps_over_100ms: u64,
}

impl Counters {
    pub fn of(ctx: &Context) -> Counters {
        let s: Stats = ctx.stats();
        let io = ctx.io_stats();
        let gaps = ctx.progress_gaps();
        let icrc = s.drops_for(rdma_core_rs::DropReason::IcrcMismatch);
        Counters {
            packets_sent: s.packets_sent,
            packets_received: s.packets_received,
            retransmits: s.retransmits,
            timeouts: s.timeouts,
            naks_sent: s.naks_sent,
            naks_received: s.naks_received,
            rnr_naks_sent: s.rnr_naks_sent,
            rnr_naks_received: s.rnr_naks_received,
            icrc_drops: icrc,
            other_drops: s.drops.values().sum::<u64>() - icrc + io.truncated,
            ipv4_ident_recovered: s.ipv4_ident_recovered,
            send_syscalls: io.send_syscalls,
            recv_syscalls: io.recv_syscalls,
            gso_sends: io.gso_sends,
            gro_receives: io.gro_receives,
            payloads_by_reference: io.payloads_by_reference,
            connected_sends: io.connected_sends,
            ident_probes: io.ident_probes,
            ident_mismatches: io.ident_mismatches,
            io_driver: match ctx.link_kind() {
                rdma_core_rs::LinkKind::RoceV2 => ctx.io_driver().name().to_string(),
                kind => format!("{}-frames", kind.name()),
            },
            ecn_ce_received: s.ecn_ce_received,
            cnps_sent: s.cnps_sent,
            cnps_received: s.cnps_received,
            rate_cuts: s.rate_cuts,
            rate_bps: ctx.min_qp_rate(),
            longest_progress_gap_ms: gaps.longest.as_millis() as u64,
            progress_gaps_over_100ms: gaps.long,
        }
    }

    pub fn add(&mut self, o: &Counters) {
        self.packets_sent += o.packets_sent;
        self.packets_received += o.packets_received;
        self.retransmits += o.retransmits;
        self.timeouts += o.timeouts;
        self.naks_sent += o.naks_sent;
        self.naks_received += o.naks_received;
        self.rnr_naks_sent += o.rnr_naks_sent;
        self.rnr_naks_received += o.rnr_naks_received;
        self.icrc_drops += o.icrc_drops;
        self.other_drops += o.other_drops;
        self.ipv4_ident_recovered += o.ipv4_ident_recovered;
        self.send_syscalls += o.send_syscalls;
        self.recv_syscalls += o.recv_syscalls;
        self.gso_sends += o.gso_sends;
        self.payloads_by_reference += o.payloads_by_reference;
        self.gro_receives += o.gro_receives;
        self.connected_sends += o.connected_sends;
        self.ident_probes += o.ident_probes;
        self.ident_mismatches += o.ident_mismatches;
        self.ecn_ce_received += o.ecn_ce_received;
        self.cnps_sent += o.cnps_sent;
        self.cnps_received += o.cnps_received;
        self.rate_cuts += o.rate_cuts;
        self.longest_progress_gap_ms = self.longest_progress_gap_ms.max(o.longest_progress_gap_ms);
        self.progress_gaps_over_100ms += o.progress_gaps_over_100ms;
        self.rate_bps = match (self.rate_bps, o.rate_bps) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        if self.io_driver.is_empty() {
            self.io_driver.clone_from(&o.io_driver);
        }
    }
}

/// One test's result. The first keys are a contract for scripts.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub test: String,
    pub size: usize,
    pub iterations: u64,
    /// Payload bandwidth, gigabits per second.
    pub gbps: f64,
    /// Messages per second, millions.
    pub mpps: f64,
    /// Full round trip, microseconds (latency tests).
    pub rtt_us_p50: Option<f64>,
    pub rtt_us_p99: Option<f64>,
    /// Whether every byte checked out (`None`: not asked for).
    pub verified: Option<bool>,
    pub retransmits: u64,
    pub role: String,
    pub qps: usize,
    pub mtu: u32,
    pub seconds: f64,
    pub rtt_us_min: Option<f64>,
    pub rtt_us_avg: Option<f64>,
    pub rtt_us_p999: Option<f64>,
    pub rtt_us_max: Option<f64>,
    pub counters: Counters,
    /// Peak resident memory of this process (VmHWM), KiB.
    pub peak_rss_kib: Option<u64>,
    /// What failed verification, if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_detail: Option<String>,
}

/// VmHWM from /proc/self/status (Linux).
fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl Report {
    /// A report of `iterations` messages of `size` bytes in `elapsed`, with
    /// round-trip times in `rtt` (nanoseconds) for latency tests.
    pub fn new(
        cfg: &super::Config,
        role: &str,
        iterations: u64,
        elapsed: Duration,
        rtt: Option<&Histogram<u64>>,
    ) -> Report {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let h = rtt.filter(|h| !h.is_empty());
        Report {
            test: cfg.test.name().to_string(),
            size: cfg.size,
            iterations,
            gbps: (iterations as f64 * cfg.size as f64 * 8.0) / secs / 1e9,
            mpps: iterations as f64 / secs / 1e6,
            rtt_us_p50: h.map(|h| us(h.value_at_quantile(0.5))),
            rtt_us_p99: h.map(|h| us(h.value_at_quantile(0.99))),
            verified: None,
            retransmits: 0,
            role: role.to_string(),
            qps: cfg.qps,
            mtu: cfg.mtu.bytes(),
            seconds: secs,
            rtt_us_min: h.map(|h| us(h.min())),
            rtt_us_avg: h.map(|h| h.mean() / 1000.0),
            rtt_us_p999: h.map(|h| us(h.value_at_quantile(0.999))),
            rtt_us_max: h.map(|h| us(h.max())),
            counters: Counters::default(),
            peak_rss_kib: peak_rss_kib(),
            verify_detail: None,
        }
    }

    /// The perftest-like table.
    pub fn table(&self) -> String {
        let line = "-".repeat(96);
        let mut s = String::new();
        s += &format!("{line}\n");
        s += &format!(
            " {} ({}), {} QP(s), MTU {}, {} iterations in {:.3} s\n",
            self.test, self.role, self.qps, self.mtu, self.iterations, self.seconds
        );
        s += &format!("{line}\n");
        if self.rtt_us_p50.is_some() {
            s += &format!(
                " {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}\n",
                "#bytes", "#iters", "t_min[us]", "t_avg[us]", "t_p50[us]", "t_p99[us]", "t_p99.9[us]", "t_max[us]"
            );
            s += &format!(
                " {:>10} {:>10} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>12.2}\n",
                self.size,
                self.iterations,
                self.rtt_us_min.unwrap_or(0.0),
                self.rtt_us_avg.unwrap_or(0.0),
                self.rtt_us_p50.unwrap_or(0.0),
                self.rtt_us_p99.unwrap_or(0.0),
                self.rtt_us_p999.unwrap_or(0.0),
                self.rtt_us_max.unwrap_or(0.0)
            );
            s += "  (t = full round trip; perftest prints half of it)\n";
        } else {
            s += &format!(
                " {:>10} {:>10} {:>14} {:>14} {:>14}\n",
                "#bytes", "#iters", "BW avg[Gb/s]", "BW avg[MB/s]", "MsgRate[Mpps]"
            );
            s += &format!(
                " {:>10} {:>10} {:>14.3} {:>14.2} {:>14.6}\n",
                self.size,
                self.iterations,
                self.gbps,
                self.gbps * 1e9 / 8.0 / 1e6,
                self.mpps
            );
        }
        s += &format!("{line}\n");
        let c = &self.counters;
        s += &format!(
            " packets sent {} received {}, retransmits {}, timeouts {}, NAKs sent {} received {}, RNR NAKs sent {} received {}, ICRC drops {}, other drops {}\n",
            c.packets_sent, c.packets_received, c.retransmits, c.timeouts, c.naks_sent, c.naks_received,
            c.rnr_naks_sent, c.rnr_naks_received, c.icrc_drops, c.other_drops
        );
        s += &format!(
            " system calls ({}): {} sends (carrying {} GSO messages), {} receives ({} GRO datagrams); {} payloads sent straight from their region\n",
            c.io_driver, c.send_syscalls, c.gso_sends, c.recv_syscalls, c.gro_receives, c.payloads_by_reference
        );
        s += &format!(
            " {} packets sent on connected sockets; {} IPv4 Identification probes, {} mispredictions\n",
            c.connected_sends, c.ident_probes, c.ident_mismatches
        );
        s += &match self.verified {
            None => " verify: not asked (--verify checks every byte)\n".to_string(),
            Some(true) => " verify: every byte checked out\n".to_string(),
            Some(false) => format!(" verify: FAILED: {}\n", self.verify_detail.as_deref().unwrap_or("mismatch")),
        };
        s += &format!("{line}\n");
        s
    }
}

/// Prints a progress line on stderr about once a second on long runs.
pub struct ProgressLine {
    enabled: bool,
    start: Instant,
    last: Instant,
    test: &'static str,
    size: usize,
}

impl ProgressLine {
    pub fn new(enabled: bool, test: &'static str, size: usize) -> ProgressLine {
        let now = Instant::now();
        ProgressLine { enabled, start: now, last: now, test, size }
    }

    pub fn tick(&mut self, done: u64, target: Option<u64>) {
        if !self.enabled || self.last.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last = Instant::now();
        let secs = self.start.elapsed().as_secs_f64();
        let gbps = done as f64 * self.size as f64 * 8.0 / secs / 1e9;
        let of = target.map(|t| format!(" of {t}")).unwrap_or_default();
        eprintln!("rdma-perf: {}: {secs:.1} s, {done}{of} iterations, {gbps:.3} Gb/s", self.test);
    }
}
