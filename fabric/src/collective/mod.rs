//! Collective workloads: `rdma-fabric run allreduce|allgather|reduce-scatter
//! --algorithm ring|tree --hosts N --size BYTES`. Rank r runs on host r; its
//! steps ([`schedule`]) are driven by the completions of its RDMA WRITEs
//! ([`driver`]); the report ([`report`]) gives the job completion time, the
//! algorithm and bus bandwidth as nccl-tests defines them, the tail across
//! ranks, and the fabric's drops, pauses and retransmissions.
//!
//! The hosts sit on one switch (`--topology incast`, the default: every
//! rank one hop from every other), on a leaf-spine of `--hosts-per-leaf`
//! hosts per leaf and `--spines` spines (`--hosts` a multiple of it), or
//! on a rail-optimized fabric of `--rails` NICs per server, where each
//! rail runs its own channel as NCCL does ([`rails`]).

pub mod driver;
pub mod rails;
pub mod report;
pub mod schedule;

use crate::fabric::Fabric;
use crate::scenarios::{
    fabric, out_of_sequence, settings, spine_data_packets, LinkKind, Options, ScenarioError, TopologyKind, MAX_HOSTS,
};
use crate::topology::Topology;
use core::time::Duration;
use driver::Collective;
use rdma_transport::Instant;
use report::{bandwidths, CollectiveReport, Kind};

/// How the ranks exchange data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Ring,
    /// A binary tree, pipelined in chunks of [`TREE_CHUNK`] (all-reduce only).
    Tree,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
        }
    }
}

/// The tree's pipelining unit (two 64 KiB WRITEs).
pub const TREE_CHUNK: u64 = 128 * 1024;
/// The largest `--size`: 64 GiB.
pub const MAX_SIZE: u64 = 64 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectiveOptions {
    pub kind: Kind,
    pub algorithm: Algorithm,
    pub hosts: usize,
    pub size_bytes: u64,
    /// Rail-optimized: each channel leaves a server on one NIC and enters
    /// the next on another (`NCCL_CROSS_NIC=1`), so it changes rail ([`rails`]).
    pub cross_nic: bool,
}

impl Default for CollectiveOptions {
    fn default() -> CollectiveOptions {
        CollectiveOptions {
            kind: Kind::AllReduce,
            algorithm: Algorithm::Ring,
            hosts: 8,
            size_bytes: 1 << 20,
            cross_nic: false,
        }
    }
}

/// The schedule of a collective of `size` bytes over `servers` x `rails`
/// NICs of a rail-optimized fabric: one channel per rail ([`rails`]).
pub fn rail_schedule(
    kind: Kind,
    algorithm: Algorithm,
    servers: usize,
    rails: usize,
    cross_nic: bool,
    size: u64,
) -> schedule::Schedule {
    let n = servers * rails;
    let chunk = rails::ring_chunk(size, servers, rails);
    let per_channel = size.div_ceil(rails as u64);
    schedule::on_groups(n, &rails::channels(servers, rails, cross_nic), |_| match (kind, algorithm) {
        (Kind::AllReduce, Algorithm::Tree) => schedule::tree_allreduce(servers, per_channel, TREE_CHUNK),
        (Kind::AllReduce, Algorithm::Ring) => schedule::ring_of_chunks(servers, chunk, 2 * (n - 1)),
        _ => schedule::ring_of_chunks(servers, chunk, n - 1),
    })
}

/// Runs one collective on the fabric `o` describes; `progress` hears the
/// virtual time now and then, with the run's time limit.
pub fn run(
    c: &CollectiveOptions,
    o: &Options,
    progress: &mut dyn FnMut(Instant, Duration),
) -> Result<CollectiveReport, ScenarioError> {
    let bad = |m: String| Err(ScenarioError::BadOption(m));
    if !(2..=MAX_HOSTS).contains(&c.hosts) {
        return bad(format!("--hosts {} is not in 2..={MAX_HOSTS}", c.hosts));
    }
    if !(1..=MAX_SIZE).contains(&c.size_bytes) {
        return bad(format!("--size {} is not in 1..={MAX_SIZE} bytes", c.size_bytes));
    }
    if c.algorithm == Algorithm::Tree && c.kind != Kind::AllReduce {
        return bad(format!("--algorithm tree is for allreduce; {} runs on a ring", c.kind.name()));
    }
    if !(o.line_rate_gbps > 0.0 && o.line_rate_gbps <= 1000.0) {
        return bad(format!("--line-rate {} is not in (0, 1000] Gb/s", o.line_rate_gbps));
    }
    if o.link == LinkKind::Ib && o.pfc {
        return bad("--pfc is Ethernet's: an IB link is lossless by credits".into());
    }
    if o.headroom_bytes.is_some() && !o.pfc {
        return bad("--headroom-kb needs --pfc on".into());
    }
    if c.cross_nic && !matches!(o.topology, TopologyKind::RailOptimized { .. }) {
        return bad("--cross-nic is for --topology rail-optimized".into());
    }
    let s = settings(o, o.buffer_bytes.unwrap_or(300_000));
    let topo = match o.topology {
        TopologyKind::Incast => Topology::incast(c.hosts - 1, &s),
        TopologyKind::RailOptimized { servers, rails, spines } => {
            if servers * rails != c.hosts {
                return bad(format!("--hosts {} is not --servers {servers} x --rails {rails}", c.hosts));
            }
            o.topology.check_two_tier()?;
            Topology::rail_optimized(servers, rails, spines, &s)
        }
        TopologyKind::LeafSpine { spines, hosts_per_leaf, .. } => {
            if c.hosts % hosts_per_leaf != 0 || !(1..=64).contains(&spines) || hosts_per_leaf == 0 {
                return bad(format!(
                    "--hosts {} must be a multiple of --hosts-per-leaf {hosts_per_leaf}, --spines in 1..=64",
                    c.hosts
                ));
            }
            Topology::leaf_spine(c.hosts / hosts_per_leaf, spines, hosts_per_leaf, &s)
        }
    };
    let mut fab = fabric(topo, o)?;
    let sched = match (o.topology, c.kind, c.algorithm) {
        (TopologyKind::RailOptimized { servers, rails, .. }, kind, alg) => {
            rail_schedule(kind, alg, servers, rails, c.cross_nic, c.size_bytes)
        }
        (_, Kind::AllReduce, Algorithm::Ring) => schedule::ring_allreduce(c.hosts, c.size_bytes),
        (_, Kind::AllReduce, Algorithm::Tree) => schedule::tree_allreduce(c.hosts, c.size_bytes, TREE_CHUNK),
        _ => schedule::ring_gather(c.hosts, c.size_bytes),
    };
    let steps = sched.first().map_or(0, Vec::len);
    // A ring step's chunk: the first send of any rank's first step.
    let chunk = sched.iter().find_map(|st| st.first()?.sends.first().map(|s| s.1)).unwrap_or(0);
    let bound = (c.algorithm == Algorithm::Ring).then(|| ring_bound(chunk, steps, o, &fab));
    // Generous: a run that has not finished by then is stuck or hopeless.
    let limit = o.duration.unwrap_or_else(|| {
        let ring_chunk = c.size_bytes.div_ceil(c.hosts as u64);
        let scale = bound.unwrap_or_else(|| ring_bound(ring_chunk, 2 * (c.hosts - 1), o, &fab));
        (Duration::from_millis(10) + scale * 50).min(Duration::from_secs(60))
    });
    let work = Collective::start(sched, &mut fab.topo, Instant::ZERO);
    fab.set_workload(Box::new(work));
    fab.run(Instant::ZERO + limit, true, &mut |t| progress(t, limit));
    Ok(measure(&mut fab, c, o, bound))
}

/// The ring's lower bound (α-β): each of `steps` steps moves a chunk of
/// `chunk` bytes (size/n; on rails size/(R·n)), with its headers, over a
/// link at line rate, and its last packet crosses two links (two
/// propagation delays and one more serialisation).
fn ring_bound(chunk: u64, steps: usize, o: &Options, fab: &Fabric) -> Duration {
    let link = fab.topo.ports[fab.topo.host_nodes[0]][0].link;
    let header = if o.link == LinkKind::Ib { 26 } else { 44 };
    let per_step =
        link.serialise(wire_bytes(chunk, header) as usize) + link.delay * 2 + link.serialise(1024 + header as usize);
    per_step * steps as u32
}

/// Bytes on the wire for a message of `payload` bytes sent as WRITEs of at
/// most 64 KiB in 1 KiB packets: `header` bytes a packet (IP, UDP, BTH,
/// ICRC on RoCE v2), a RETH (16) on each WRITE's first packet, the
/// immediate data (4) on the last.
pub fn wire_bytes(payload: u64, header: u64) -> u64 {
    const MSG: u64 = crate::host::MAX_MESSAGE as u64;
    let full = payload / MSG;
    let rest = payload % MSG;
    let packets = full * MSG.div_ceil(1024) + rest.div_ceil(1024);
    let messages = full + u64::from(rest > 0);
    payload + packets * header + messages * 16 + 4
}

fn measure(fab: &mut Fabric, c: &CollectiveOptions, o: &Options, bound: Option<Duration>) -> CollectiveReport {
    let us = |t: Instant| t.as_nanos() as f64 / 1e3;
    let work = fab.take_workload().and_then(|w| w.into_any().downcast::<Collective>().ok());
    let (finish, failed) = work.map_or((Vec::new(), true), |w| (w.finish_times(), w.failed));
    let done: Vec<f64> = finish.iter().flatten().map(|&t| us(t)).collect();
    let unfinished = finish.len() - done.len();
    let jct_us = (unfinished == 0 && !done.is_empty()).then(|| done.iter().copied().fold(0.0, f64::max));
    let bw = jct_us.map(|j| bandwidths(c.kind, c.hosts, c.size_bytes, j));
    let p = |q| crate::report::percentile(&done, q);
    let switches = &fab.topo.switches;
    let ib_ports = || fab.topo.ports.iter().flatten().filter_map(|p| p.ib.as_ref());
    let ib_drops: u64 = ib_ports().map(|ib| ib.counters.drops).sum();
    let two_tier = !fab.topo.spines.is_empty();
    let oversubscription = fab.topo.leaves.first().and_then(|&l| fab.topo.oversubscription(l));
    CollectiveReport {
        scenario: c.kind.name().to_string(),
        algorithm: c.algorithm.name().to_string(),
        hosts: c.hosts,
        size_bytes: c.size_bytes,
        seed: o.seed,
        link: if o.link == LinkKind::Ib { "ib" } else { "roce" }.to_string(),
        topology: o.topology.name().to_string(),
        oversubscription,
        rails: (fab.topo.rails > 0).then_some(fab.topo.rails),
        cross_nic: c.cross_nic,
        multipath: o.multipath.name().to_string(),
        pfc: o.pfc,
        dcqcn: o.cc == crate::scenarios::Cc::Dcqcn,
        cc: o.cc.name().to_string(),
        jct_us,
        algbw_gbps: bw.map(|b| b.0),
        busbw_gbps: bw.map(|b| b.1),
        lower_bound_us: bound.map(|b| b.as_nanos() as f64 / 1e3),
        rank_completion_us_p50: p(0.5),
        rank_completion_us_p99: p(0.99),
        rank_completion_us_max: p(1.0),
        ranks_unfinished: unfinished,
        failed,
        drops: switches.iter().flat_map(|sw| &sw.egress).map(|e| e.drops).sum::<u64>() + ib_drops,
        pauses: fab.counters.pauses,
        credit_stalls: fab.topo.ib.as_ref().map(|_| ib_ports().map(|ib| ib.counters.credit_stalls).sum()),
        retransmits: fab.topo.hosts.iter().map(|h| h.ep.stats().retransmits).sum(),
        ecn_marks: switches.iter().flat_map(|sw| &sw.egress).map(|e| e.marks).sum(),
        cnps: fab.topo.hosts.iter().map(|h| h.ep.stats().cnps_sent).sum(),
        out_of_sequence: out_of_sequence(fab),
        naks: fab.topo.hosts.iter().map(|h| h.ep.stats().naks_sent).sum(),
        timeouts: fab.topo.hosts.iter().map(|h| h.ep.stats().timeouts).sum(),
        spine_data_packets: two_tier.then(|| spine_data_packets(fab)),
        rank_completion_us: done.clone(),
        packet_hops: fab.counters.packet_hops,
        simulated_us: us(fab.now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_bytes_count_every_packet_header() {
        // One 1 KiB packet: 44 + RETH 16 + ImmDt 4.
        assert_eq!(wire_bytes(1024, 44), 1024 + 44 + 16 + 4);
        // 64 KiB + 1: two WRITEs, 65 packets.
        assert_eq!(wire_bytes(65537, 44), 65537 + 65 * 44 + 2 * 16 + 4);
    }

    #[test]
    fn bad_options_are_errors_naming_the_flag() {
        let mut p = |_, _| {};
        let c = CollectiveOptions {
            kind: Kind::AllReduce,
            algorithm: Algorithm::Ring,
            hosts: 1,
            size_bytes: 1,
            cross_nic: false,
        };
        let e = run(&c, &Options::default(), &mut p).unwrap_err();
        assert!(e.to_string().contains("--hosts 1"), "{e}");
        let c = CollectiveOptions { hosts: 4, size_bytes: 0, ..c };
        assert!(run(&c, &Options::default(), &mut p).unwrap_err().to_string().contains("--size"));
        let c =
            CollectiveOptions { kind: Kind::AllGather, algorithm: Algorithm::Tree, hosts: 4, size_bytes: 4096, ..c };
        assert!(run(&c, &Options::default(), &mut p).unwrap_err().to_string().contains("tree"));
        let o = Options {
            topology: TopologyKind::LeafSpine { leaves: 2, spines: 2, hosts_per_leaf: 3 },
            ..Options::default()
        };
        let c = CollectiveOptions { algorithm: Algorithm::Ring, ..c };
        assert!(run(&c, &o, &mut p).unwrap_err().to_string().contains("multiple"));
    }
}
