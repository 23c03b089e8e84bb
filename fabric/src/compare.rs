//! `rdma-fabric compare SCENARIO`: the same workload on the IB fabric
//! (credits, no congestion control: IB CC is not modelled) and on the
//! RoCE v2 fabric with PFC only, PFC + DCQCN (or the `--cc` chosen:
//! TIMELY), and neither; one row each.
//! A collective (`compare allreduce|allgather|reduce-scatter`) gets its
//! own table: JCT, bandwidths, the tail across ranks.

use crate::collective::report::CollectiveReport;
use crate::collective::CollectiveOptions;
use crate::report::Report;
use crate::scenarios::{run, Cc, LinkKind, Options, ScenarioError};
use core::time::Duration;
use rdma_transport::Instant;
use rdma_wire::{
    BthRepr, EthernetRepr, GrhRepr, IbRepr, IpRepr, Ipv4Repr, Lnh, LrhRepr, Opcode, Psn, RoceV1Repr, RoceV2Repr,
    TransportRepr, UdpRepr, ROCE_V2_PORT,
};
use std::net::{Ipv4Addr, Ipv6Addr};

/// The four fabrics compared.
pub const CONFIGS: [&str; 4] = ["ib", "roce-pfc", "roce-pfc-dcqcn", "roce-lossy"];

/// The fabrics compared when `base` asks for TIMELY, HPCC or Swift: its row in DCQCN's place.
const CONFIGS_TIMELY: [&str; 4] = ["ib", "roce-pfc", "roce-pfc-timely", "roce-lossy"];
const CONFIGS_HPCC: [&str; 4] = ["ib", "roce-pfc", "roce-pfc-hpcc", "roce-lossy"];
const CONFIGS_SWIFT: [&str; 4] = ["ib", "roce-pfc", "roce-pfc-swift", "roce-lossy"];

/// The fabrics compared for `base`: the algorithm it asks for in DCQCN's row.
fn configs(base: &Options) -> [&'static str; 4] {
    match base.cc {
        Cc::Timely => CONFIGS_TIMELY,
        Cc::Hpcc => CONFIGS_HPCC,
        Cc::Swift => CONFIGS_SWIFT,
        _ => CONFIGS,
    }
}

/// The options of one configuration.
pub fn options(config: &str, base: &Options) -> Options {
    match config {
        "ib" => Options { link: LinkKind::Ib, pfc: false, cc: Cc::None, ..*base },
        "roce-pfc" => Options { link: LinkKind::Roce, pfc: true, cc: Cc::None, ..*base },
        "roce-pfc-dcqcn" => Options { link: LinkKind::Roce, pfc: true, cc: Cc::Dcqcn, ..*base },
        "roce-pfc-timely" => Options { link: LinkKind::Roce, pfc: true, cc: Cc::Timely, ..*base },
        "roce-pfc-hpcc" => Options { link: LinkKind::Roce, pfc: true, cc: Cc::Hpcc, ..*base },
        "roce-pfc-swift" => Options { link: LinkKind::Roce, pfc: true, cc: Cc::Swift, ..*base },
        _ => Options { link: LinkKind::Roce, pfc: false, cc: Cc::None, ..*base },
    }
}

/// Header and CRC bytes around the payload of one RC WRITE Middle packet,
/// as the encoders lay them out (Ethernet framing: 14-byte header + FCS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HeaderBytes {
    pub ib_local: usize,
    pub ib_global: usize,
    pub roce_v2_ipv4: usize,
    pub roce_v2_ipv6: usize,
    pub roce_v1: usize,
}

const FCS: usize = 4;

pub fn header_bytes() -> HeaderBytes {
    let t = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_WRITE_MIDDLE, 1, Psn::new(0)));
    let lrh = LrhRepr { vl: 0, sl: 0, lnh: Lnh::IbaLocal, dlid: 2, slid: 1 };
    let grh = GrhRepr {
        traffic_class: 0,
        flow_label: 0,
        next_header: 0x1b,
        hop_limit: 64,
        src: Ipv6Addr::LOCALHOST,
        dst: Ipv6Addr::LOCALHOST,
    };
    let eth = |ethertype| EthernetRepr { dst: [0; 6], src: [0; 6], vlan_tci: None, ethertype }.header_len() + FCS;
    let v4 = IpRepr::V4(Ipv4Repr {
        dscp: 0,
        ecn: 0,
        ident: 0,
        dont_frag: true,
        ttl: 64,
        protocol: 17,
        src: Ipv4Addr::LOCALHOST,
        dst: Ipv4Addr::LOCALHOST,
    });
    let udp = UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT, checksum: 0 };
    let len = |r: rdma_wire::Result<usize>| r.expect("an empty WRITE Middle has a length");
    HeaderBytes {
        ib_local: len(IbRepr { lrh, grh: None, transport: t }.buffer_len(0)),
        ib_global: len(
            IbRepr { lrh: LrhRepr { lnh: Lnh::IbaGlobal, ..lrh }, grh: Some(grh), transport: t }.buffer_len(0)
        ),
        roce_v2_ipv4: len(RoceV2Repr { ip: v4, udp, transport: t }.buffer_len(0)) + eth(0x0800),
        roce_v2_ipv6: len(RoceV2Repr { ip: IpRepr::V6(grh_as_ip(grh)), udp, transport: t }.buffer_len(0)) + eth(0x86dd),
        roce_v1: len(RoceV1Repr { grh, transport: t }.buffer_len(0)) + eth(0x8915),
    }
}

fn grh_as_ip(g: GrhRepr) -> rdma_wire::Ipv6Repr {
    rdma_wire::Ipv6Repr { next_header: 17, ..g }
}

/// One configuration's run.
#[derive(Debug, Clone)]
pub struct Row {
    pub config: &'static str,
    pub report: Report,
}

/// Runs `name` on every configuration.
pub fn compare(
    name: &str,
    base: &Options,
    progress: &mut dyn FnMut(&str, Instant, Duration),
) -> Result<Vec<Row>, ScenarioError> {
    configs(base)
        .iter()
        .map(|&c| {
            let o = options(c, base);
            run(name, &o, &mut |t, d| progress(c, t, d)).map(|report| Row { config: c, report })
        })
        .collect()
}

/// One configuration's run of a collective.
#[derive(Debug, Clone)]
pub struct CollectiveRow {
    pub config: &'static str,
    pub report: CollectiveReport,
}

/// Runs collective `c` on every configuration.
pub fn compare_collective(
    c: &CollectiveOptions,
    base: &Options,
    progress: &mut dyn FnMut(&str, Instant, Duration),
) -> Result<Vec<CollectiveRow>, ScenarioError> {
    configs(base)
        .iter()
        .map(|&cfg| {
            let o = options(cfg, base);
            crate::collective::run(c, &o, &mut |t, d| progress(cfg, t, d))
                .map(|report| CollectiveRow { config: cfg, report })
        })
        .collect()
}

/// The comparison table of a collective.
pub fn collective_table(rows: &[CollectiveRow]) -> String {
    let f = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |x| format!("{x:.p$}"));
    let Some(first) = rows.first().map(|r| &r.report) else { return String::new() };
    let mut s = format!(
        "compare {} ({}): {} ranks, {} bytes, {}; four fabrics\n",
        first.scenario,
        first.algorithm,
        first.hosts,
        first.size_bytes,
        first.topology_line()
    );
    s += &format!(
        "{:<15} {:>10} {:>7} {:>7} {:>10} {:>10} {:>10} {:>7} {:>14} {:>7} {:>7} {:>6}\n",
        "fabric",
        "JCT us",
        "algbw",
        "busbw",
        "rank p50",
        "p99",
        "max us",
        "drops",
        "pauses|stalls",
        "retx",
        "OOS",
        "CNPs"
    );
    for r in rows {
        let rep = &r.report;
        let stalls = match rep.credit_stalls {
            Some(c) => format!("{c} stalls"),
            None => format!("{} pauses", rep.pauses),
        };
        s += &format!(
            "{:<15} {:>10} {:>7} {:>7} {:>10} {:>10} {:>10} {:>7} {:>14} {:>7} {:>7} {:>6}\n",
            r.config,
            f(rep.jct_us, 1),
            f(rep.algbw_gbps, 2),
            f(rep.busbw_gbps, 2),
            f(rep.rank_completion_us_p50, 1),
            f(rep.rank_completion_us_p99, 1),
            f(rep.rank_completion_us_max, 1),
            rep.drops,
            stalls,
            rep.retransmits,
            rep.out_of_sequence,
            rep.cnps
        );
        if rep.ranks_unfinished > 0 || rep.failed {
            s += &format!("  {}: {} ranks unfinished, failed {}\n", r.config, rep.ranks_unfinished, rep.failed);
        }
    }
    s += "algbw and busbw in Gb/s (nccl-tests' definitions); OOS: packets receivers dropped as out of sequence\n";
    s
}

/// Aggregate goodput of a run, Gb/s.
fn goodput(r: &Report, line_gbps: f64) -> Option<f64> {
    r.throughput_fraction.map(|f| f * line_gbps)
}

/// The comparison table.
pub fn table(name: &str, rows: &[Row], line_gbps: f64) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    let h = header_bytes();
    let mut s = format!("compare {name}: the same workload on four fabrics\n");
    s += &format!(
        "{:<15} {:>8} {:>9} {:>9} {:>9} {:>7} {:>14} {:>6} {:>7}\n",
        "fabric", "Gb/s", "lat p50", "p99", "p999 us", "drops", "pauses|stalls", "CNPs", "hdr B"
    );
    for r in rows {
        let rep = &r.report;
        let (stalls, hdr) = match &rep.ib {
            Some(ib) => (format!("{} stalls", ib.credit_stalls), h.ib_local),
            None => (format!("{} pauses", rep.pauses), h.roce_v2_ipv4),
        };
        s += &format!(
            "{:<15} {:>8} {:>9} {:>9} {:>9} {:>7} {:>14} {:>6} {:>7}\n",
            r.config,
            f(goodput(rep, line_gbps)),
            f(rep.latency_us_p50),
            f(rep.latency_us_p99),
            f(rep.latency_us_p999),
            rep.drops,
            stalls,
            rep.cnps,
            hdr
        );
    }
    s += &format!(
        "header + CRC bytes per packet (RC WRITE Middle): IB local {}, IB global {}, RoCE v2 IPv4 {}, \
         RoCE v2 IPv6 {}, RoCE v1 {} (Ethernet framing with FCS; preamble and gap not counted)\n",
        h.ib_local, h.ib_global, h.roce_v2_ipv4, h.roce_v2_ipv6, h.roce_v1
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes_match_the_layouts() {
        let h = header_bytes();
        // LRH 8 + BTH 12 + ICRC 4 + VCRC 2; + GRH 40.
        assert_eq!((h.ib_local, h.ib_global), (26, 66));
        // Eth 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + FCS 4; IPv6 40.
        assert_eq!((h.roce_v2_ipv4, h.roce_v2_ipv6), (62, 82));
        // Eth 14 + GRH 40 + BTH 12 + ICRC 4 + FCS 4.
        assert_eq!(h.roce_v1, 74);
    }
}
