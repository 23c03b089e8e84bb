//! What the router saw: per-flow delivered bytes per window, the queue,
//! marks, drops and CNPs, and the report made from them (the same key
//! names as `rdma-fabric run --json`, so live and simulated runs compare
//! field by field).

use rdma_fabric::report::{jain, percentile, thin, Series, MAX_SERIES_POINTS};
use rdma_fabric::switch::Red;
use rdma_wire::{Opcode, ROCE_V2_PORT};
use serde::Serialize;
use std::net::IpAddr;
use std::time::Duration;

/// The RoCE v2 fields the router looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roce {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// The BTH opcode.
    pub opcode: Opcode,
}

/// The RoCE v2 view of an IP packet, or `None` for anything else (the
/// out-of-band TCP connections, ICMP, ...).
pub fn roce(packet: &[u8]) -> Option<Roce> {
    let (src, dst, l4) = match packet.first()? >> 4 {
        4 => {
            let ihl = (packet[0] & 0xf) as usize * 4;
            if packet.len() < ihl + 8 + 12 || ihl < 20 || packet[9] != 17 {
                return None;
            }
            let a = |o: usize| IpAddr::from(<[u8; 4]>::try_from(&packet[o..o + 4]).expect("4 bytes"));
            (a(12), a(16), &packet[ihl..])
        }
        6 => {
            if packet.len() < 40 + 8 + 12 || packet[6] != 17 {
                return None;
            }
            let a = |o: usize| IpAddr::from(<[u8; 16]>::try_from(&packet[o..o + 16]).expect("16 bytes"));
            (a(8), a(24), &packet[40..])
        }
        _ => return None,
    };
    (u16::from_be_bytes([l4[2], l4[3]]) == ROCE_V2_PORT).then_some(Roce { src, dst, opcode: Opcode(l4[8]) })
}

/// Counters and series, filled by the router's threads under one lock.
#[derive(Debug)]
pub struct Meter {
    window: Duration,
    /// (source, destination) of each RoCE flow, in order of appearance.
    flows: Vec<(IpAddr, IpAddr)>,
    /// Per flow, bytes delivered per window.
    delivered: Vec<Vec<u64>>,
    packets: Vec<u64>,
    /// The largest queue any arrival found in each window.
    queue_peak: Vec<u64>,
    /// (when, queue found) at every arrival at the bottleneck.
    queue_samples: Vec<(Duration, u64)>,
    /// When the first and the last RoCE packet left: the flows' lifetime,
    /// which the measured interval stays inside.
    roce_span: Option<(Duration, Duration)>,
    pub other_bytes: u64,
    pub cnps: u64,
    pub reverse_packets: u64,
    pub write_errors: u64,
}

impl Meter {
    pub fn new(window: Duration) -> Meter {
        Meter {
            window: window.max(Duration::from_micros(100)),
            flows: Vec::new(),
            delivered: Vec::new(),
            packets: Vec::new(),
            queue_peak: Vec::new(),
            queue_samples: Vec::new(),
            roce_span: None,
            other_bytes: 0,
            cnps: 0,
            reverse_packets: 0,
            write_errors: 0,
        }
    }

    fn bin(&self, t: Duration) -> usize {
        (t.as_nanos() / self.window.as_nanos()) as usize
    }

    /// An arrival at the bottleneck found `queue` bytes waiting.
    pub fn arrival(&mut self, t: Duration, queue: u64) {
        let b = self.bin(t);
        if self.queue_peak.len() <= b {
            self.queue_peak.resize(b + 1, 0);
        }
        self.queue_peak[b] = self.queue_peak[b].max(queue);
        self.queue_samples.push((t, queue));
    }

    /// A packet that is not RoCE went past the bottleneck (`ok`: written).
    pub fn bypassed(&mut self, len: usize, ok: bool) {
        self.other_bytes += len as u64;
        if !ok {
            self.write_errors += 1;
        }
    }

    /// A RoCE packet left the bottleneck towards the receivers.
    pub fn departure(&mut self, t: Duration, packet: &[u8]) {
        let Some(r) = roce(packet) else {
            return;
        };
        self.roce_span = Some(self.roce_span.map_or((t, t), |(first, _)| (first, t)));
        let key = (r.src, r.dst);
        let f = match self.flows.iter().position(|k| *k == key) {
            Some(f) => f,
            None => {
                self.flows.push(key);
                self.delivered.push(Vec::new());
                self.packets.push(0);
                self.flows.len() - 1
            }
        };
        let b = self.bin(t);
        let d = &mut self.delivered[f];
        if d.len() <= b {
            d.resize(b + 1, 0);
        }
        d[b] += packet.len() as u64;
        self.packets[f] += 1;
    }

    /// A packet went back from the receivers to the senders.
    pub fn reverse(&mut self, packet: &[u8]) {
        self.reverse_packets += 1;
        if roce(packet).is_some_and(|r| r.opcode == Opcode::CNP) {
            self.cnps += 1;
        }
    }

    /// Gb/s of flow `f` in window `b`.
    fn rate(&self, f: usize, b: usize) -> f64 {
        let bytes = self.delivered[f].get(b).copied().unwrap_or(0);
        bytes as f64 * 8.0 / self.window.as_secs_f64() / 1e9
    }

    /// The report of a run of `duration`. Rates, fairness and the queue are
    /// measured from `warmup` after the first RoCE packet to the last one,
    /// in whole windows (the warm-up is cut to at most half of that span).
    pub fn report(&self, cfg: &RunInfo, duration: Duration, warmup: Duration) -> LiveReport {
        let (first, last) = self.roce_span.unwrap_or((Duration::ZERO, duration));
        let measured_from = first + warmup.min((last - first) / 2);
        let (from, to) = (self.bin(measured_from), self.bin(last).max(self.bin(measured_from) + 1));
        let measured_to = to as f64 * self.window.as_secs_f64();
        let secs = (to - from) as f64 * self.window.as_secs_f64();
        let flow_bytes: Vec<u64> =
            self.delivered.iter().map(|d| d.iter().skip(from).take(to - from).sum::<u64>()).collect();
        let gbps: Vec<f64> = flow_bytes.iter().map(|&b| b as f64 * 8.0 / secs / 1e9).collect();
        let total: f64 = gbps.iter().sum();

        // Fairness per window of `FAIRNESS_WINDOWS` bins, as the simulator
        // judges convergence, but coarser: a live host's scheduler adds
        // jitter that a 10 ms window would count as unfairness.
        let per = FAIRNESS_WINDOWS;
        let windows: Vec<(usize, f64)> = (from..to)
            .step_by(per)
            .filter(|w| w + per <= to)
            .filter_map(|w| {
                let rates: Vec<f64> =
                    (0..self.flows.len()).map(|f| (w..w + per).map(|b| self.rate(f, b)).sum()).collect();
                jain(&rates).map(|j| (w, j))
            })
            .collect();
        let convergence = (0..windows.len())
            .find(|&i| windows[i..].iter().all(|w| w.1 >= 0.99))
            .map(|i| windows[i].0 as f64 * self.window.as_secs_f64() * 1e6);

        let measured: Vec<u64> = self
            .queue_samples
            .iter()
            .filter(|(t, _)| *t >= measured_from && t.as_secs_f64() < measured_to)
            .map(|s| s.1)
            .collect();
        let in_band = cfg.red.filter(|_| !measured.is_empty()).map(|r| {
            measured.iter().filter(|&&q| q >= r.kmin_bytes && q <= r.kmax_bytes).count() as f64 / measured.len() as f64
        });
        LiveReport {
            scenario: "live-bottleneck".into(),
            seed: cfg.seed,
            rate_mbps: cfg.rate_bps as f64 / 1e6,
            buffer_bytes: cfg.buffer_bytes,
            red: cfg.red.map(|r| RedReport { kmin_bytes: r.kmin_bytes, kmax_bytes: r.kmax_bytes, pmax: r.pmax }),
            duration_us: duration.as_secs_f64() * 1e6,
            measured_from_us: measured_from.as_secs_f64() * 1e6,
            measured_to_us: measured_to * 1e6,
            jain: jain(&gbps),
            jain_min_window: windows.iter().map(|w| w.1).reduce(f64::min),
            convergence_us: convergence,
            throughput_fraction: (cfg.rate_bps > 0).then(|| total * 1e9 / cfg.rate_bps as f64),
            drops: cfg.drops,
            ecn_marks: cfg.marks,
            cnps: self.cnps,
            queue_p50_bytes: percentile(&measured, 0.5),
            queue_p99_bytes: percentile(&measured, 0.99),
            queue_in_band_fraction: in_band,
            flows: gbps.clone(),
            flow_details: self
                .flows
                .iter()
                .enumerate()
                .map(|(f, (s, d))| FlowReport {
                    src: *s,
                    dst: *d,
                    gbps: gbps[f],
                    bytes: flow_bytes[f],
                    packets: self.packets[f],
                })
                .collect(),
            other_bytes: self.other_bytes,
            reverse_packets: self.reverse_packets,
            write_errors: self.write_errors,
        }
    }

    /// The plotted series: per-flow rate and the queue peak per window.
    pub fn series(&self) -> Series {
        let t = |b: usize| b as f64 * self.window.as_secs_f64() * 1e6;
        let bins = self.delivered.iter().map(Vec::len).chain([self.queue_peak.len()]).max().unwrap_or(0);
        Series {
            flow_rates: (0..self.flows.len())
                .map(|f| thin(&(0..bins).map(|b| (t(b), self.rate(f, b))).collect::<Vec<_>>(), MAX_SERIES_POINTS))
                .collect(),
            queue: thin(
                &self.queue_peak.iter().enumerate().map(|(b, &q)| (t(b), q as f64)).collect::<Vec<_>>(),
                MAX_SERIES_POINTS,
            ),
        }
    }
}

/// Bins per fairness window (10 bins of the default 10 ms: 100 ms).
pub const FAIRNESS_WINDOWS: usize = 10;

/// What the report needs from the router's configuration and queue.
#[derive(Debug, Clone, Copy)]
pub struct RunInfo {
    pub seed: u64,
    pub rate_bps: u64,
    pub buffer_bytes: u64,
    pub red: Option<Red>,
    pub marks: u64,
    pub drops: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RedReport {
    pub kmin_bytes: u64,
    pub kmax_bytes: u64,
    pub pmax: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FlowReport {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub gbps: f64,
    pub bytes: u64,
    pub packets: u64,
}

/// `rdma-bottleneck --json`. Keys shared with `rdma-fabric run --json`
/// mean the same; the rest describe the live run.
#[derive(Debug, Clone, Serialize)]
pub struct LiveReport {
    pub scenario: String,
    pub seed: u64,
    pub rate_mbps: f64,
    pub buffer_bytes: u64,
    pub red: Option<RedReport>,
    pub duration_us: f64,
    /// The measured interval: from the warm-up's end to the last RoCE packet.
    pub measured_from_us: f64,
    pub measured_to_us: f64,
    pub jain: Option<f64>,
    pub jain_min_window: Option<f64>,
    /// Start of the first 100 ms window from which every window's Jain index is >= 0.99.
    pub convergence_us: Option<f64>,
    pub throughput_fraction: Option<f64>,
    pub drops: u64,
    pub ecn_marks: u64,
    /// CNPs seen going back from the receivers.
    pub cnps: u64,
    pub queue_p50_bytes: Option<u64>,
    pub queue_p99_bytes: Option<u64>,
    pub queue_in_band_fraction: Option<f64>,
    /// Each RoCE flow's delivered Gb/s over the measured interval.
    pub flows: Vec<f64>,
    pub flow_details: Vec<FlowReport>,
    /// Bytes that were not RoCE (the out-of-band TCP), which pass the queue by.
    pub other_bytes: u64,
    pub reverse_packets: u64,
    pub write_errors: u64,
}

impl LiveReport {
    /// The readable summary without `--json`.
    pub fn table(&self) -> String {
        let mut s = format!(
            "live bottleneck {:.0} Mb/s, buffer {} B, {}\n",
            self.rate_mbps,
            self.buffer_bytes,
            match &self.red {
                Some(r) => format!("RED/ECN Kmin {} B Kmax {} B Pmax {}", r.kmin_bytes, r.kmax_bytes, r.pmax),
                None => "no ECN marking".into(),
            }
        );
        for f in &self.flow_details {
            s += &format!("  {} -> {}: {:.3} Gb/s ({} packets)\n", f.src, f.dst, f.gbps, f.packets);
        }
        let opt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
        s += &format!(
            "  jain {} (min window {}), throughput {} of the link, drops {}, ECN marks {}, CNPs {}\n",
            opt(self.jain),
            opt(self.jain_min_window),
            opt(self.throughput_fraction),
            self.drops,
            self.ecn_marks,
            self.cnps
        );
        s += &format!(
            "  queue p50 {} B, p99 {} B, in [Kmin, Kmax] {}\n",
            self.queue_p50_bytes.map_or("-".into(), |v| v.to_string()),
            self.queue_p99_bytes.map_or("-".into(), |v| v.to_string()),
            opt(self.queue_in_band_fraction)
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roce_v4(src: [u8; 4], dst: [u8; 4], opcode: Opcode, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len.max(20 + 8 + 12)];
        p[0] = 0x45;
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[22..24].copy_from_slice(&ROCE_V2_PORT.to_be_bytes());
        p[28] = opcode.0;
        p
    }

    #[test]
    fn classifies_roce_and_cnps() {
        let p = roce_v4([10, 0, 0, 1], [10, 0, 0, 2], Opcode::RC_RDMA_WRITE_ONLY, 100);
        assert_eq!(
            roce(&p),
            Some(Roce {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                opcode: Opcode::RC_RDMA_WRITE_ONLY
            })
        );
        let mut tcp = p.clone();
        tcp[9] = 6;
        assert_eq!(roce(&tcp), None);
        assert_eq!(roce(&p[..30]), None, "too short for a BTH");
        assert_eq!(roce(&[]), None);
        let mut m = Meter::new(Duration::from_millis(10));
        m.reverse(&roce_v4([10, 0, 0, 2], [10, 0, 0, 1], Opcode::CNP, 60));
        m.reverse(&roce_v4([10, 0, 0, 2], [10, 0, 0, 1], Opcode::RC_ACKNOWLEDGE, 60));
        assert_eq!((m.cnps, m.reverse_packets), (1, 2));
    }

    #[test]
    fn report_measures_rates_fairness_and_the_queue() {
        let mut m = Meter::new(Duration::from_millis(10));
        let a = roce_v4([10, 0, 0, 1], [10, 0, 1, 1], Opcode::RC_RDMA_WRITE_ONLY, 1000);
        let b = roce_v4([10, 0, 0, 2], [10, 0, 1, 2], Opcode::RC_RDMA_WRITE_ONLY, 1000);
        // Two seconds: flow a at 8 Mb/s throughout, flow b at 8 Mb/s only in the second.
        for ms in 0..=2000u64 {
            let t = Duration::from_millis(ms);
            m.departure(t, &a);
            if ms >= 1000 {
                m.departure(t, &b);
            }
            m.arrival(t, if ms >= 1000 { 10_000 } else { 0 });
        }
        let info = RunInfo {
            seed: 3,
            rate_bps: 16_000_000,
            buffer_bytes: 1 << 20,
            red: Some(Red { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.01 }),
            marks: 4,
            drops: 0,
        };
        let r = m.report(&info, Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(r.flows.len(), 2);
        for g in &r.flows {
            assert!((g - 0.008).abs() < 1e-9, "{g}");
        }
        assert!((r.jain.unwrap() - 1.0).abs() < 1e-9);
        assert!((r.throughput_fraction.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(r.queue_p50_bytes, Some(10_000));
        assert_eq!(r.queue_in_band_fraction, Some(1.0));
        assert_eq!(r.convergence_us, Some(1_000_000.0));
        // From the start, b's silent first second is unfair.
        let r = m.report(&info, Duration::from_secs(2), Duration::ZERO);
        assert!(r.jain.unwrap() < 0.95);
        assert_eq!(r.convergence_us, Some(1_000_000.0));
        assert_eq!(r.jain_min_window, Some(0.5));
        let s = m.series();
        assert_eq!(s.flow_rates.len(), 2);
        assert_eq!(s.queue.len(), 201);
    }
}
