//! The named scenarios of `rdma-fabric run`: how each builds its fabric,
//! runs it and measures it.

use crate::fabric::Fabric;
use crate::ib::routing::Routing;
use crate::ib::{IbConfig, IbPort};
use crate::link::Link;
use crate::multipath::Multipath;
use crate::pfc::PfcConfig;
use crate::report::{
    jain, percentile, thin, IbReport, PausedPort, Point, PortRef, Report, Series, VlPeak, MAX_SERIES_POINTS,
};
use crate::sm::fabric_transport::FabricTransport;
use crate::sm::{Sm, SmConfig};
use crate::switch::Red;
use crate::topology::Node;
use crate::topology::{Settings, Topology};
use core::time::Duration;
use rdma_transport::cc::{ControllerFactory, DcqcnParams, HpccParams, ReactionPoint, SwiftParams, TimelyParams};
use rdma_transport::sim::Rng;
use rdma_transport::Instant;

/// (name, what it shows).
pub const SCENARIOS: &[(&str, &str)] = &[
    ("rp-trajectory", "one reaction point, one CNP at t=0, timer-only increases (no network)"),
    ("dcqcn-fairness", "N long RDMA WRITE flows through one 40G bottleneck with DCQCN on"),
    ("incast", "N:1 incast of finite flows into a small switch buffer, DCQCN on or off, PFC on or off"),
    ("pfc-deadlock", "three switches in a ring, routes forming a cyclic buffer dependency: PFC deadlocks (--reroute breaks the cycle)"),
("ib-ring", "five IB switches in a ring, host i writing to i+2 and i-2: min-hop routes deadlock on credits, Up*/Down* (--routing updn) do not"),
    ("all-to-all", "every host writes --flow-kb to every other host on a leaf-spine (default 2 leaves x 4 hosts, 2 spines) or --topology rail-optimized"),
    ("victim", "an uncongested flow sharing an uplink with an incast: slowed by PFC pauses, relieved by DCQCN"),
    ("allreduce", "--hosts ranks all-reduce --size bytes, --algorithm ring (reduce-scatter + all-gather) or tree, steps driven by WRITE completions: JCT, algbw, busbw (on rails: a channel per rail, as NCCL)"),
    ("allgather", "ring all-gather of --size bytes in all over --hosts ranks"),
    ("reduce-scatter", "ring reduce-scatter of --size bytes over --hosts ranks"),
    ("mixed", "two long flows and a Poisson stream of short ones (4/16/64 KiB, 30 % of the link) into one receiver: the short flows' FCT, which standing queues make long"),
    ("parking-lot", "one long flow across --flows bottleneck links, each shared with a one-hop cross flow: how DCQCN shares a multi-bottleneck path"),
];

/// The most hosts a fabric may have (addresses 10.0.0.1 up; IB LIDs stay unicast).
pub const MAX_HOSTS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    Paper,
    Nvidia,
}

impl Preset {
    pub fn params(self, line_rate_bps: u64) -> DcqcnParams {
        match self {
            Preset::Paper => DcqcnParams::paper(line_rate_bps),
            Preset::Nvidia => DcqcnParams::nvidia(line_rate_bps),
        }
    }
}

/// The congestion controller every host's RC QPs run (`--cc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cc {
    /// No rate control (`--dcqcn off`, `--cc none`); CNPs are still sent.
    None,
    /// DCQCN with [`Options::preset`]'s parameters.
    Dcqcn,
    /// TIMELY, from RTT samples alone (ECN marks and CNPs are ignored).
    Timely,
    /// HPCC, from in-band telemetry the switches stamp ([`crate::int`]).
    Hpcc,
    /// Swift, a window from delay alone (RTT samples, as TIMELY).
    Swift,
}

/// TIMELY's unloaded RTT in the fabric: the gradient's unit. A host-switch-
/// host path at 1 µs per link is about 4.5 µs; a leaf-spine one twice that.
pub const TIMELY_MIN_RTT: Duration = Duration::from_micros(10);

/// HPCC's T, the base RTT (the same path estimate as TIMELY's), and N,
/// the most concurrent flows expected on a link, which sets W_AI =
/// W_init·(1 − η)/N (the paper's rule; the value of N is ours).
pub const HPCC_BASE_RTT: Duration = TIMELY_MIN_RTT;
pub const HPCC_EXPECTED_FLOWS: u32 = 100;

/// Swift's unloaded RTT: TIMELY's estimate plus a 1 KiB packet (the hosts'
/// MTU, `host::pair_config`) stored and forwarded at four hops, which
/// matters at slow line rates (16 µs a hop at 500 Mb/s), where a target
/// below one packet's serialisation would cut every flow to its floor.
pub fn swift_base_rtt(line_rate_bps: u64) -> Duration {
    let per_hop = Duration::from_nanos((1100u64 * 8 * 1_000_000_000) / line_rate_bps.max(1));
    TIMELY_MIN_RTT + per_hop * 4
}

impl Cc {
    /// The old `--dcqcn on|off`.
    pub fn from_dcqcn(on: bool) -> Cc {
        if on {
            Cc::Dcqcn
        } else {
            Cc::None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Cc::None => "none",
            Cc::Dcqcn => "dcqcn",
            Cc::Timely => "timely",
            Cc::Hpcc => "hpcc",
            Cc::Swift => "swift",
        }
    }

    /// What makes each QP's controller at `line_rate_bps`.
    pub fn factory(self, preset: Preset, line_rate_bps: u64) -> Option<std::sync::Arc<dyn ControllerFactory>> {
        match self {
            Cc::None => None,
            Cc::Dcqcn => Some(std::sync::Arc::new(preset.params(line_rate_bps))),
            Cc::Timely => Some(std::sync::Arc::new(TimelyParams::new(line_rate_bps, TIMELY_MIN_RTT))),
            Cc::Hpcc => Some(std::sync::Arc::new(HpccParams::new(line_rate_bps, HPCC_BASE_RTT, HPCC_EXPECTED_FLOWS))),
            Cc::Swift => {
                Some(std::sync::Arc::new(SwiftParams::new(line_rate_bps, swift_base_rtt(line_rate_bps), 1024)))
            }
        }
    }
}

/// The fabric `dcqcn-fairness` and `incast` run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyKind {
    /// Every host on one switch.
    Incast,
    /// `leaves` leaves of `hosts_per_leaf` hosts, each leaf joined to every spine; ECMP by 5-tuple hash.
    /// The oversubscription is hosts_per_leaf : spines (every link the same rate).
    LeafSpine { leaves: usize, spines: usize, hosts_per_leaf: usize },
    /// `servers` servers of `rails` NICs, NIC i of each on rail switch i,
    /// the rail switches joined by `spines` spines ([`Topology::rail_optimized`]).
    RailOptimized { servers: usize, rails: usize, spines: usize },
}

impl TopologyKind {
    /// The name `--topology` gives it.
    pub fn name(self) -> &'static str {
        match self {
            TopologyKind::Incast => "single-switch",
            TopologyKind::LeafSpine { .. } => "leaf-spine",
            TopologyKind::RailOptimized { .. } => "rail-optimized",
        }
    }

    /// Checks a two-tier fabric's sizes: (leaves, hosts per leaf, spines).
    pub fn check_two_tier(self) -> Result<(), ScenarioError> {
        let (leaves, per_leaf, spines) = match self {
            TopologyKind::Incast => return Ok(()),
            TopologyKind::LeafSpine { leaves, spines, hosts_per_leaf } => (leaves, hosts_per_leaf, spines),
            TopologyKind::RailOptimized { servers, rails, spines } => (rails, servers, spines),
        };
        let ok = match self {
            TopologyKind::RailOptimized { .. } => {
                (1..=64).contains(&leaves) && (2..=512).contains(&per_leaf) && (1..=512).contains(&spines)
            }
            _ => (1..=128).contains(&leaves) && (1..=64).contains(&per_leaf) && (1..=64).contains(&spines),
        };
        if !ok {
            return Err(ScenarioError::BadOption(match self {
                TopologyKind::RailOptimized { .. } => {
                    "--rails must be in 1..=64, --servers in 2..=512, --spines in 1..=512".into()
                }
                _ => "--leaves must be in 1..=128, --spines in 1..=64, --hosts-per-leaf in 1..=64".into(),
            }));
        }
        if leaves.saturating_mul(per_leaf) > MAX_HOSTS {
            return Err(ScenarioError::BadOption(format!("at most {MAX_HOSTS} hosts")));
        }
        Ok(())
    }
}

/// The link layer of every link of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkKind {
    /// RoCE v2 over Ethernet: drop-tail, RED/ECN, optional PFC.
    #[default]
    Roce,
    /// InfiniBand: credits per VL, LFT forwarding by DLID (see [`crate::ib`]).
    Ib,
}

/// The IB link settings a run may change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IbOptions {
    /// Configure the fabric with `rdma-sm` (a sweep over VL15) first.
    pub sm: bool,
    pub data_vls: u8,
    pub buffer_blocks: u16,
    pub fc_loss: f64,
    pub fc_corrupt: f64,
}

impl Default for IbOptions {
    fn default() -> IbOptions {
        let c = IbConfig::default();
        IbOptions { sm: false, data_vls: c.data_vls, buffer_blocks: c.buffer_blocks, fc_loss: 0.0, fc_corrupt: 0.0 }
    }
}

impl IbOptions {
    pub fn config(&self) -> IbConfig {
        IbConfig {
            fc_loss: self.fc_loss,
            fc_corrupt: self.fc_corrupt,
            ..IbConfig::new(self.data_vls, self.buffer_blocks)
        }
    }
}

/// Every knob a scenario may read; each uses its own defaults for `None`.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub seed: u64,
    pub duration: Option<Duration>,
    pub line_rate_gbps: f64,
    pub preset: Preset,
    pub flows: usize,
    pub fanin: usize,
    /// The congestion controller of every host.
    pub cc: Cc,
    pub flow_bytes: u64,
    pub buffer_bytes: Option<u64>,
    /// A switch-wide buffer the ports share, on top of each port's limit.
    pub shared_buffer_bytes: Option<u64>,
    /// PFC on the switches' ingress for the data priority.
    pub pfc: bool,
    /// PFC headroom per ingress port; `None`: the formula of §3.3.
    pub headroom_bytes: Option<u64>,
    /// pfc-deadlock: send one flow the other way round the ring.
    pub reroute: bool,
    /// dcqcn-fairness and incast: the topology.
    pub topology: TopologyKind,
    pub link: LinkKind,
    pub ib: IbOptions,
    /// ib-ring: how the SM routes.
    pub routing: RoutingKind,
    /// How switches pick among equal-cost next hops (two-tier fabrics).
    pub multipath: Multipath,
    /// Each host engine's agenda threshold (`Endpoint::set_agenda_threshold`;
    /// `None`: the engine's own): a run is the same either way, which
    /// tests check, and only costs differ.
    pub agenda_threshold: Option<usize>,
    /// `Some(n)`: the partitioned loop on `n` threads (`--threads`;
    /// [`crate::parallel`]): the same results for every `n`, not the
    /// single queue's. `None`: the single event queue.
    pub threads: Option<usize>,
}

/// ib-ring's routing engine; Up*/Down* is rooted at the first switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RoutingKind {
    #[default]
    MinHop,
    UpDown,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            seed: 1,
            duration: None,
            line_rate_gbps: 40.0,
            preset: Preset::Paper,
            flows: 2,
            fanin: 8,
            cc: Cc::Dcqcn,
            flow_bytes: 256 * 1024,
            buffer_bytes: None,
            shared_buffer_bytes: None,
            pfc: false,
            headroom_bytes: None,
            reroute: false,
            topology: TopologyKind::Incast,
            link: LinkKind::Roce,
            ib: IbOptions::default(),
            routing: RoutingKind::MinHop,
            multipath: Multipath::Ecmp,
            agenda_threshold: None,
            threads: None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScenarioError {
    #[error("no scenario named {0:?} (see `rdma-fabric list`)")]
    Unknown(String),
    #[error("{0}")]
    BadOption(String),
}

/// Runs scenario `name`; `progress` hears the virtual time now and then.
pub fn run(name: &str, o: &Options, progress: &mut dyn FnMut(Instant, Duration)) -> Result<Report, ScenarioError> {
    if !(o.line_rate_gbps > 0.0 && o.line_rate_gbps <= 1000.0) {
        return Err(ScenarioError::BadOption(format!("--line-rate {} is not in (0, 1000] Gb/s", o.line_rate_gbps)));
    }
    if o.reroute && name != "pfc-deadlock" {
        return Err(ScenarioError::BadOption("--reroute is for pfc-deadlock only".into()));
    }
    if let TopologyKind::LeafSpine { leaves: a, hosts_per_leaf: b, .. }
    | TopologyKind::RailOptimized { rails: a, servers: b, .. } = o.topology
    {
        let t = o.topology.name();
        if !matches!(name, "dcqcn-fairness" | "incast" | "mixed" | "all-to-all") {
            return Err(ScenarioError::BadOption(format!(
                "--topology {t} is for dcqcn-fairness, incast, all-to-all and the collectives"
            )));
        }
        o.topology.check_two_tier()?;
        let hosts = a * b;
        let senders = if matches!(name, "incast" | "mixed") { o.fanin } else { o.flows };
        if senders >= hosts {
            return Err(ScenarioError::BadOption(format!(
                "leaf-spine has {hosts} hosts: it needs more than the {senders} senders and at most {MAX_HOSTS}"
            )));
        }
    }
    if o.link == LinkKind::Ib {
        if o.pfc {
            return Err(ScenarioError::BadOption("--pfc is Ethernet's: an IB link is lossless by credits".into()));
        }
        let ib = &o.ib;
        if !(1..=15).contains(&ib.data_vls) || !(1..=2048).contains(&ib.buffer_blocks) {
            return Err(ScenarioError::BadOption("--vls must be in 1..=15 and --vl-buffer-blocks in 1..=2048".into()));
        }
        if !((0.0..1.0).contains(&ib.fc_loss) && (0.0..1.0).contains(&ib.fc_corrupt)) {
            return Err(ScenarioError::BadOption("--fc-loss and --fc-corrupt are probabilities below 1".into()));
        }
    }
    if o.headroom_bytes.is_some() && !o.pfc {
        return Err(ScenarioError::BadOption("--headroom-kb needs --pfc on".into()));
    }
    check_multipath(o)?;
    match name {
        "rp-trajectory" if matches!(o.cc, Cc::Timely | Cc::Hpcc | Cc::Swift) => {
            Err(ScenarioError::BadOption(format!("rp-trajectory is DCQCN's reaction point: no --cc {}", o.cc.name())))
        }
        "rp-trajectory" => Ok(rp_trajectory(o)),
        "dcqcn-fairness" => {
            if !(1..=64).contains(&o.flows) {
                return Err(ScenarioError::BadOption(format!("--flows {} is not in 1..=64", o.flows)));
            }
            fairness(o, progress)
        }
        "incast" => {
            if !(1..=64).contains(&o.fanin) || o.flow_bytes == 0 {
                return Err(ScenarioError::BadOption("--fanin must be in 1..=64 and --flow-kb above 0".into()));
            }
            incast(o, progress)
        }
        "victim" => {
            if !(1..=32).contains(&o.fanin) {
                return Err(ScenarioError::BadOption(format!("--fanin {} is not in 1..=32", o.fanin)));
            }
            victim(o, progress)
        }
        "pfc-deadlock" => pfc_deadlock(o, progress),
        "mixed" => {
            if !(3..=64).contains(&o.fanin) {
                return Err(ScenarioError::BadOption(format!(
                    "--fanin {} is not in 3..=64 (2 long flows + short)",
                    o.fanin
                )));
            }
            mixed(o, progress)
        }
        "parking-lot" => {
            if !(1..=16).contains(&o.flows) {
                return Err(ScenarioError::BadOption(format!(
                    "--flows {} (bottleneck links) is not in 1..=16",
                    o.flows
                )));
            }
            parking_lot(o, progress)
        }
        "ib-ring" => ib_ring(o, progress),
        "all-to-all" => all_to_all(o, progress),
        "allreduce" | "allgather" | "reduce-scatter" => Err(ScenarioError::BadOption(format!(
            "{name} is a collective: `rdma-fabric run {name}` runs it (collective::run); compare does not yet"
        ))),
        _ => Err(ScenarioError::Unknown(name.to_string())),
    }
}

/// `--multipath` other than ECMP needs equal-cost paths (a two-tier
/// fabric) and, on IB, the fabric's own AR groups (not an SM sweep's).
pub(crate) fn check_multipath(o: &Options) -> Result<(), ScenarioError> {
    if o.multipath == Multipath::Ecmp {
        return Ok(());
    }
    let m = o.multipath.name();
    if o.topology == TopologyKind::Incast {
        return Err(ScenarioError::BadOption(format!(
            "--multipath {m} needs equal-cost paths: --topology leaf-spine or rail-optimized"
        )));
    }
    if o.link == LinkKind::Ib && o.ib.sm {
        return Err(ScenarioError::BadOption(format!(
            "--multipath {m} on IB uses the fabric's AR groups; rdma-sm (--sm) programs LFTs only"
        )));
    }
    Ok(())
}

fn line_bps(o: &Options) -> u64 {
    (o.line_rate_gbps * 1e9).round() as u64
}

fn empty_report(name: &str, o: &Options) -> Report {
    Report {
        scenario: name.to_string(),
        seed: o.seed,
        jain: None,
        throughput_fraction: None,
        drops: 0,
        pauses: 0,
        pfc: o.pfc,
        headroom_bytes: None,
        headroom_used_bytes: None,
        resumes: 0,
        paused_us_total: 0.0,
        paused_ports: Vec::new(),
        cnps: 0,
        ecn_marks: 0,
        queue_p50_bytes: None,
        queue_p99_bytes: None,
        convergence_us: None,
        fct_us_p50: None,
        fct_us_p99: None,
        flows: Vec::new(),
        duration_us: 0.0,
        measured_from_us: 0.0,
        queue_in_band_fraction: None,
        queue_below_kmax_fraction: None,
        jain_min_window: None,
        flows_unfinished: 0,
        retransmits: 0,
        victim_gbps: None,
        trajectory: None,
        deadlock: None,
        deadlock_us: None,
        deadlock_ports: None,
        spine_data_packets: None,
        multipath: None,
        out_of_sequence: None,
        latency_us_p50: None,
        latency_us_p99: None,
        latency_us_p999: None,
        ib: None,
        series: Series::default(),
    }
}

/// §2.1/§2.2: the rate after one CNP at t = 0, one point per timer event.
pub fn rp_trajectory(o: &Options) -> Report {
    let end = o.duration.unwrap_or(Duration::from_millis(3));
    let mut rp = ReactionPoint::new(o.preset.params(line_bps(o)));
    rp.on_cnp(Instant::ZERO);
    let point =
        |t: Instant, rp: &ReactionPoint| Point { t_us: t.as_nanos() as f64 / 1e3, rate_gbps: rp.rate() as f64 / 1e9 };
    let mut traj = vec![point(Instant::ZERO, &rp)];
    while let Some(t) = rp.next_timer().filter(|&t| t <= Instant::ZERO + end) {
        rp.on_timer(t);
        traj.push(point(t, &rp));
    }
    let mut r = empty_report("rp-trajectory", o);
    r.cnps = 1;
    r.duration_us = end.as_nanos() as f64 / 1e3;
    let rates: Vec<(f64, f64)> = traj.iter().map(|p| (p.t_us, p.rate_gbps)).collect();
    r.series.flow_rates = vec![thin(&rates, MAX_SERIES_POINTS)];
    r.trajectory = Some(traj);
    r
}

pub(crate) fn settings(o: &Options, buffer: u64) -> Settings {
    let link = Link::new(line_bps(o), Duration::from_micros(1));
    Settings {
        link,
        pfc: o.pfc.then(|| PfcConfig::for_link(link.rate_bps, link.delay, o.headroom_bytes)),
        red: Red::PAPER,
        buffer_bytes: buffer,
        shared_buffer_bytes: o.shared_buffer_bytes,
        cc: o.cc.factory(o.preset, line_bps(o)),
        seed: o.seed,
    }
}

/// The topology of `o` with at least `senders` senders (checked in [`run`]).
fn build(o: &Options, senders: usize, s: &Settings) -> Topology {
    match o.topology {
        TopologyKind::Incast => Topology::incast(senders, s),
        _ => two_tier(o.topology, s),
    }
}

/// A leaf-spine or rail-optimized fabric (sizes checked by the caller).
pub(crate) fn two_tier(t: TopologyKind, s: &Settings) -> Topology {
    match t {
        TopologyKind::RailOptimized { servers, rails, spines } => Topology::rail_optimized(servers, rails, spines, s),
        TopologyKind::LeafSpine { leaves, spines, hosts_per_leaf } => {
            Topology::leaf_spine(leaves, spines, hosts_per_leaf, s)
        }
        TopologyKind::Incast => Topology::leaf_spine(2, 2, 4, s),
    }
}

/// The fabric of a run: `topo` as it is, or with IB links, configured
/// either as if an SM had run (LIDs in host order, LFTs from the IP
/// routes) or, with `--sm`, by `rdma-sm` itself: a sweep over VL15 from
/// host 0's HCA with every port starting in Init; the run then starts at
/// time zero on the configured fabric.
pub(crate) fn fabric(mut topo: Topology, o: &Options) -> Result<Fabric, ScenarioError> {
    check_multipath(o)?;
    if o.threads == Some(0) {
        return Err(ScenarioError::BadOption("--threads 0: give at least one".into()));
    }
    topo.set_multipath(o.multipath, o.seed);
    if let Some(qps) = o.agenda_threshold {
        for h in &mut topo.hosts {
            h.ep.set_agenda_threshold(qps);
        }
    }
    if o.link != LinkKind::Ib {
        let mut fab = Fabric::new(topo, o.seed);
        fab.threads = o.threads;
        if o.cc == Cc::Hpcc {
            fab.enable_int();
        }
        return Ok(fab);
    }
    if o.cc == Cc::Hpcc {
        return Err(ScenarioError::BadOption(
            "--cc hpcc needs switches that stamp INT: RoCE fabrics only (IB has credits instead)".into(),
        ));
    }
    if !o.ib.sm {
        topo.make_ib(&o.ib.config());
        let mut fab = Fabric::new(topo, o.seed);
        fab.threads = o.threads;
        return Ok(fab);
    }
    topo.make_ib_unconfigured(&o.ib.config());
    let sm_node = topo.host_nodes[0];
    let t = FabricTransport::new(Fabric::new(topo, o.seed), sm_node);
    let mut sm = Sm::new(t, SmConfig::default());
    sm.run_once().map_err(|e| ScenarioError::BadOption(format!("rdma-sm over the fabric: {e}")))?;
    let mut topo = sm.transport.fab.topo;
    // The sweep's last link events are dropped with its event queue.
    for p in topo.ports.iter_mut().flatten() {
        p.busy = false;
    }
    let mut fab = Fabric::new(topo, o.seed);
    fab.threads = o.threads;
    Ok(fab)
}

/// Long flows from every sender to one receiver, started within 10 µs of
/// each other (seeded); measured over the second half of the run.
fn fairness(o: &Options, progress: &mut dyn FnMut(Instant, Duration)) -> Result<Report, ScenarioError> {
    let dur = o.duration.unwrap_or(Duration::from_millis(6));
    let s = settings(o, o.buffer_bytes.unwrap_or(2_000_000));
    let topo = build(o, o.flows, &s);
    let mut fab = fabric(topo, o)?;
    let mut rng = Rng::new(o.seed ^ 0x5eed);
    for i in 0..o.flows {
        let (src, dst) = (fab.topo.senders[i], fab.topo.receivers[0]);
        fab.add_flow(src, dst, None, Instant::from_nanos(rng.below(10_000)));
    }
    fab.run(Instant::ZERO + dur, false, &mut |t| progress(t, dur));
    Ok(measure(&fab, "dcqcn-fairness", o, Instant::ZERO + dur / 2, Instant::ZERO + dur, &s))
}

/// The parking lot (`Topology::parking_lot`, `flows` links): long flows
/// everywhere, measured over the second half. Flow 0 is the long flow;
/// `throughput_fraction` is the least busy link's (long + its cross flow
/// over the line rate), `jain` over all flows (the max-min fair share is
/// half a link each).
fn parking_lot(o: &Options, progress: &mut dyn FnMut(Instant, Duration)) -> Result<Report, ScenarioError> {
    let dur = o.duration.unwrap_or(Duration::from_millis(20));
    let s = settings(o, o.buffer_bytes.unwrap_or(2_000_000));
    let topo = Topology::parking_lot(o.flows, &s);
    let mut fab = fabric(topo, o)?;
    let mut rng = Rng::new(o.seed ^ 0x5eed);
    for i in 0..=o.flows {
        let (src, dst) = (fab.topo.senders[i], fab.topo.receivers[i]);
        fab.add_flow(src, dst, None, Instant::from_nanos(rng.below(10_000)));
    }
    fab.run(Instant::ZERO + dur, false, &mut |t| progress(t, dur));
    let mut r = measure(&fab, "parking-lot", o, Instant::ZERO + dur / 2, Instant::ZERO + dur, &s);
    let line = o.line_rate_gbps;
    r.throughput_fraction = (1..r.flows.len()).map(|i| (r.flows[0] + r.flows[i]) / line).reduce(f64::min);
    Ok(r)
}

/// `fanin` senders each write `flow_bytes` to one receiver at once. The
/// default buffer (300 KB) is above Kmax, so marking can act before drops.
fn incast(o: &Options, progress: &mut dyn FnMut(Instant, Duration)) -> Result<Report, ScenarioError> {
    let dur = o.duration.unwrap_or(Duration::from_millis(20));
    let s = settings(o, o.buffer_bytes.unwrap_or(300_000));
    let topo = build(o, o.fanin, &s);
    let mut fab = fabric(topo, o)?;
    for i in 0..o.fanin {
        let (src, dst) = (fab.topo.senders[i], fab.topo.receivers[0]);
        fab.add_flow(src, dst, Some(o.flow_bytes), Instant::ZERO);
    }
    fab.run(Instant::ZERO + dur, true, &mut |t| progress(t, dur));
    let end = fab.now;
    Ok(measure(&fab, "incast", o, Instant::ZERO, end, &s))
}

/// Short flows behind long ones (HPCC's point, §5 of the paper: the FCT
/// of short flows is the queue they wait behind): senders 0 and 1 send
/// long flows to the receiver from time zero; the other `fanin` - 2
/// senders take turns starting short flows of 4, 16 or 64 KiB (equally
/// likely) at Poisson arrivals that add 30 % of the link's rate, over the
/// first 80 % of the run. FCT percentiles are the short flows'.
fn mixed(o: &Options, progress: &mut dyn FnMut(Instant, Duration)) -> Result<Report, ScenarioError> {
    const SIZES: [u64; 3] = [4096, 16384, 65536];
    const LOAD: f64 = 0.3;
    let dur = o.duration.unwrap_or(Duration::from_millis(5));
    let s = settings(o, o.buffer_bytes.unwrap_or(300_000));
    let topo = build(o, o.fanin, &s);
    let mut fab = fabric(topo, o)?;
    let dst = fab.topo.receivers[0];
    let senders = fab.topo.senders.clone();
    for &src in &senders[..2] {
        fab.add_flow(src, dst, None, Instant::ZERO);
    }
    let mean_bytes = SIZES.iter().sum::<u64>() as f64 / SIZES.len() as f64;
    let per_sec = s.link.rate_bps as f64 * LOAD / 8.0 / mean_bytes;
    let mut rng = Rng::new(o.seed ^ 0x6d_6978_6564);
    let (mut t, end, mut i) = (0.0f64, dur.as_secs_f64() * 0.8, 0usize);
    loop {
        // Exponential gaps: -ln(U) / λ with U in (0, 1].
        let u = (rng.below(1 << 53) + 1) as f64 / (1u64 << 53) as f64;
        t += -u.ln() / per_sec;
        if t > end {
            break;
        }
        let src = senders[2 + i % (senders.len() - 2)];
        let size = SIZES[rng.below(SIZES.len() as u64) as usize];
        fab.add_flow(src, dst, Some(size), Instant::ZERO + Duration::from_secs_f64(t));
        i += 1;
    }
    fab.run(Instant::ZERO + dur, false, &mut |t| progress(t, dur));
    let end = fab.now;
    let mut r = measure(&fab, "mixed", o, Instant::ZERO, end, &s);
    // The two long flows never finish: they are not short flows left over.
    r.flows_unfinished = r.flows_unfinished.saturating_sub(2);
    (r.jain, r.jain_min_window, r.convergence_us) = (None, None, None);
    Ok(r)
}

/// §3.4 2: long flows VS→VR (the victim, flow 0), H2→R2 and `fanin` - 1
/// local senders → R2 on S2, so R2's port is an `fanin`:1 incast and H2's
/// backlog at S2's ingress from S1 pauses S1's uplink, which VS shares.
/// Measured over the second half; `victim_gbps` is flow 0's rate.
fn victim(o: &Options, progress: &mut dyn FnMut(Instant, Duration)) -> Result<Report, ScenarioError> {
    let dur = o.duration.unwrap_or(Duration::from_millis(10));
    let s = settings(o, o.buffer_bytes.unwrap_or(300_000));
    let topo = Topology::victim(o.fanin - 1, &s);
    let mut fab = fabric(topo, o)?;
    let (vr, r2) = (fab.topo.receivers[0], fab.topo.receivers[1]);
    let senders = fab.topo.senders.clone();
    for (i, &src) in senders.iter().enumerate() {
        fab.add_flow(src, if i == 0 { vr } else { r2 }, None, Instant::ZERO);
    }
    fab.run(Instant::ZERO + dur, false, &mut |t| progress(t, dur));
    let mut r = measure(&fab, "victim", o, Instant::ZERO + dur / 2, Instant::ZERO + dur, &s);
    r.victim_gbps = r.flows.first().copied();
    // Only the flows into R2 cross the bottleneck.
    let into_r2: f64 = r.flows.iter().skip(1).sum();
    r.throughput_fraction = Some(into_r2 * 1e9 / s.link.rate_bps as f64);
    // Jain and convergence over unequal paths say nothing here.
    (r.jain, r.jain_min_window, r.convergence_us) = (None, None, None);
    Ok(r)
}

/// §3.4's deadlock: host i writes to host i + 2 round a ring of three
/// switches, every route clockwise. Deadlock is looked for at each 100 µs
/// window: 200 µs without a delivered byte while every switch egress
/// holding data is paused.
fn pfc_deadlock(o: &Options, progress: &mut dyn FnMut(Instant, Duration)) -> Result<Report, ScenarioError> {
    const N: usize = 3;
    let dur = o.duration.unwrap_or(Duration::from_millis(5));
    let s = settings(o, o.buffer_bytes.unwrap_or(300_000));
    let topo = Topology::ring(N, o.reroute, &s);
    let mut fab = fabric(topo, o)?;
    fab.deadlock_window = Some(Duration::from_micros(200));
    for i in 0..N {
        fab.add_flow(i, (i + 2) % N, None, Instant::ZERO);
    }
    fab.run(Instant::ZERO + dur, false, &mut |t| progress(t, dur));
    let end = fab.now;
    let mut r = measure(&fab, "pfc-deadlock", o, Instant::ZERO, end, &s);
    r.deadlock = Some(fab.deadlock.is_some());
    r.deadlock_us = fab.deadlock.as_ref().map(|d| us(d.at));
    let ports = fab.deadlock.iter().flat_map(|d| &d.ports);
    r.deadlock_ports = Some(ports.map(|&(n, port)| PortRef { node: node_name(&fab, n), port }).collect());
    // Each flow crosses two of the three ring links: there is no single
    // bottleneck to measure against.
    (r.throughput_fraction, r.jain_min_window, r.convergence_us) = (None, None, None);
    Ok(r)
}

/// The IB link layer's counters over every port.
fn ib_report(fab: &Fabric, cfg: &IbConfig) -> IbReport {
    let ports: Vec<&IbPort> = fab.topo.ports.iter().flatten().filter_map(|p| p.ib.as_ref()).collect();
    let sum = |f: &dyn Fn(&IbPort) -> u64| ports.iter().map(|p| f(p)).sum::<u64>();
    let vl_buffer_peaks = (0..cfg.data_vls)
        .map(|vl| VlPeak {
            vl,
            peak_blocks: ports.iter().map(|p| p.vls[usize::from(vl)].rx.peak).max().unwrap_or(0),
            advertised_blocks: cfg.buffer_blocks,
        })
        .collect();
    IbReport {
        link: "ib",
        credit_stalls: sum(&|p| p.counters.credit_stalls),
        vl_buffer_peaks,
        overruns: sum(&|p| p.vls.iter().map(|c| c.rx.overruns).sum()),
        fc_packets: sum(&|p| p.counters.fc_sent),
        fc_lost: sum(&|p| p.counters.fc_lost),
        fc_bad_lpcrc: sum(&|p| p.counters.fc_bad),
        vl15_dropped: sum(&|p| p.counters.vl15_dropped),
        ib_drops: sum(&|p| p.counters.drops),
        // LRH 8 + BTH 12 + RETH 16 + ICRC 4 + VCRC 2 on a WRITE First.
        header_bytes_ib: 42,
    }
}

/// Every host writes `flow_bytes` to every other host at once, on a
/// leaf-spine (the default: 2 leaves of 4 hosts, 2 spines) or a
/// rail-optimized fabric; ECMP by 5-tuple on RoCE, by DLID on IB, unless
/// `--multipath` sprays or routes adaptively.
fn all_to_all(o: &Options, progress: &mut dyn FnMut(Instant, Duration)) -> Result<Report, ScenarioError> {
    let dur = o.duration.unwrap_or(Duration::from_millis(20));
    let (mut fab, s) = all_to_all_fabric(o)?;
    fab.run(Instant::ZERO + dur, true, &mut |t| progress(t, dur));
    let end = fab.now;
    let mut r = measure(&fab, "all-to-all", o, Instant::ZERO, end, &s);
    (r.jain, r.jain_min_window, r.convergence_us) = (None, None, None);
    Ok(r)
}

/// The fabric of `all-to-all` with its flows, not yet run (benches
/// measure exactly what the command runs), and its settings.
pub fn all_to_all_fabric(o: &Options) -> Result<(Fabric, Settings), ScenarioError> {
    let s = settings(o, o.buffer_bytes.unwrap_or(300_000));
    o.topology.check_two_tier()?;
    let topo = two_tier(o.topology, &s);
    let n = topo.hosts.len();
    let mut fab = fabric(topo, o)?;
    for a in 0..n {
        for b in (0..n).filter(|&b| b != a) {
            fab.add_flow(a, b, Some(o.flow_bytes), Instant::ZERO);
        }
    }
    Ok((fab, s))
}

/// §7: the minimal credit loop. Five switches in a ring; every distance-2
/// route is a unique shortest path, so min-hop's clockwise and
/// anticlockwise 2-hop routes close a cycle of buffer dependencies and the
/// ring deadlocks; Up*/Down* from switch 0 (GUID 0x200000, as opensm's
/// `-R updn` with that root) breaks it.
fn ib_ring(o: &Options, progress: &mut dyn FnMut(Instant, Duration)) -> Result<Report, ScenarioError> {
    const N: usize = 5;
    if o.link != LinkKind::Ib {
        return Err(ScenarioError::BadOption("ib-ring needs --link ib".into()));
    }
    let dur = o.duration.unwrap_or(Duration::from_millis(3));
    let s = settings(o, o.buffer_bytes.unwrap_or(300_000));
    let routing = match o.routing {
        RoutingKind::MinHop => Routing::MinHop,
        RoutingKind::UpDown => Routing::UpDown { roots: vec![0x200000] },
    };
    let topo = Topology::ib_ring(N, &s, &o.ib.config(), &routing)
        .map_err(|e| ScenarioError::BadOption(format!("routing: {e}")))?;
    let mut fab = Fabric::new(topo, o.seed);
    fab.threads = o.threads;
    fab.deadlock_window = Some(Duration::from_micros(200));
    for i in 0..N {
        fab.add_flow(i, (i + 2) % N, None, Instant::ZERO);
        fab.add_flow(i, (i + N - 2) % N, None, Instant::ZERO);
    }
    fab.run(Instant::ZERO + dur, false, &mut |t| progress(t, dur));
    let end = fab.now;
    let mut r = measure(&fab, "ib-ring", o, Instant::ZERO, end, &s);
    r.deadlock = Some(fab.deadlock.is_some());
    r.deadlock_us = fab.deadlock.as_ref().map(|d| us(d.at));
    let ports = fab.deadlock.iter().flat_map(|d| &d.ports);
    r.deadlock_ports = Some(ports.map(|&(n, port)| PortRef { node: node_name(&fab, n), port }).collect());
    (r.throughput_fraction, r.jain_min_window, r.convergence_us) = (None, None, None);
    Ok(r)
}

fn node_name(fab: &Fabric, n: usize) -> String {
    match fab.topo.nodes[n] {
        Node::Host(h) => format!("host{h}"),
        Node::Switch(sw) => format!("switch{sw}"),
    }
}

fn us(t: Instant) -> f64 {
    t.as_nanos() as f64 / 1e3
}

/// Everything a report says about a fabric run, measured over [from, to].
fn measure(fab: &Fabric, name: &str, o: &Options, from: Instant, to: Instant, s: &Settings) -> Report {
    let mut r = empty_report(name, o);
    r.duration_us = us(to);
    r.measured_from_us = us(from);
    r.drops = fab.topo.switches.iter().flat_map(|sw| &sw.egress).map(|e| e.drops).sum();
    r.ecn_marks = fab.topo.switches.iter().flat_map(|sw| &sw.egress).map(|e| e.marks).sum();
    r.cnps = fab.topo.hosts.iter().map(|h| h.ep.stats().cnps_sent).sum();
    r.retransmits = fab.topo.hosts.iter().map(|h| h.ep.stats().retransmits).sum();
    r.pauses = fab.counters.pauses;
    r.resumes = fab.counters.resumes;
    r.headroom_bytes = s.pfc.map(|p| p.headroom_bytes);
    r.headroom_used_bytes = s.pfc.map(|p| {
        let peak = fab.topo.switches.iter().flat_map(|sw| &sw.ingress).map(|i| i.peak_bytes).max();
        peak.unwrap_or(0).saturating_sub(p.xoff_bytes)
    });
    for (n, ports) in fab.topo.ports.iter().enumerate() {
        for (port, p) in ports.iter().enumerate().filter(|(_, p)| p.paused_ns > 0) {
            let node = node_name(fab, n);
            r.paused_ports.push(PausedPort { node, port, paused_us: p.paused_ns as f64 / 1e3 });
        }
    }
    // A fold from +0.0: an empty f64 sum is -0.0.
    r.paused_us_total = r.paused_ports.iter().fold(0.0, |a, p| a + p.paused_us);
    let q: Vec<u64> = fab.queue_samples.iter().filter(|(t, _)| *t >= from && *t <= to).map(|&(_, q)| q).collect();
    r.queue_p50_bytes = percentile(&q, 0.5);
    r.queue_p99_bytes = percentile(&q, 0.99);
    if !q.is_empty() {
        let n = q.len() as f64;
        r.queue_in_band_fraction =
            Some(q.iter().filter(|&&x| x >= s.red.kmin_bytes && x <= s.red.kmax_bytes).count() as f64 / n);
        r.queue_below_kmax_fraction = Some(q.iter().filter(|&&x| x <= s.red.kmax_bytes).count() as f64 / n);
    }
    r.series = series(fab);
    let lat = &fab.message_latency_ns;
    let p = |q| percentile(lat, q).map(|ns: u64| ns as f64 / 1e3);
    (r.latency_us_p50, r.latency_us_p99, r.latency_us_p999) = (p(0.5), p(0.99), p(0.999));
    if let Some(cfg) = &fab.topo.ib {
        let ib = ib_report(fab, cfg);
        r.drops += ib.ib_drops;
        r.ib = Some(ib);
    }
    if !fab.topo.spines.is_empty() {
        r.spine_data_packets = Some(spine_data_packets(fab));
        r.multipath = Some(o.multipath.name());
        r.out_of_sequence = Some(out_of_sequence(fab));
    }
    let finite = fab.flows.iter().any(|f| f.size.is_some());
    let capacity_bps = s.link.rate_bps as f64;
    if finite {
        let fct: Vec<f64> = fab.flows.iter().filter_map(|f| Some(us(f.finish?) - us(f.start))).collect();
        r.flows_unfinished = (fab.flows.len() - fct.len()) as u64;
        r.fct_us_p50 = percentile(&fct, 0.5);
        r.fct_us_p99 = percentile(&fct, 0.99);
        r.flows = fab
            .flows
            .iter()
            .map(|f| f.finish.map_or(0.0, |e| f.completed as f64 * 8.0 / ((us(e) - us(f.start)) * 1e3)))
            .collect();
        let secs = (us(to) - us(from)) / 1e6;
        let total: u64 = fab.flows.iter().map(|f| f.completed).sum();
        r.throughput_fraction = (secs > 0.0).then(|| total as f64 * 8.0 / (capacity_bps * secs));
    } else {
        // Per-flow delivered bytes at the window boundaries inside [from, to].
        let w: Vec<&(Instant, Vec<u64>)> = fab.windows.iter().filter(|(t, _)| *t >= from && *t <= to).collect();
        if let (Some(a), Some(b)) = (w.first(), w.last()) {
            let secs = (us(b.0) - us(a.0)) / 1e6;
            if secs > 0.0 {
                r.flows = a.1.iter().zip(&b.1).map(|(x, y)| (y - x) as f64 * 8.0 / secs / 1e9).collect();
                r.jain = jain(&r.flows);
                r.throughput_fraction = Some(r.flows.iter().sum::<f64>() * 1e9 / capacity_bps);
            }
        }
        let per_window: Vec<(Instant, Option<f64>)> = fab
            .windows
            .windows(2)
            .map(|p| {
                let x: Vec<f64> = p[0].1.iter().zip(&p[1].1).map(|(a, b)| (b - a) as f64).collect();
                (p[0].0, jain(&x))
            })
            .collect();
        r.jain_min_window = per_window
            .iter()
            .filter(|(t, _)| *t >= from)
            .map(|(_, j)| j.unwrap_or(0.0))
            .min_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        // The first window from which every later one is fair.
        let mut conv = None;
        for (t, j) in per_window.iter().rev() {
            if j.is_some_and(|j| j >= 0.99) {
                conv = Some(us(*t));
            } else {
                break;
            }
        }
        r.convergence_us = conv;
    }
    r
}

/// Data packets each spine forwarded.
pub(crate) fn spine_data_packets(fab: &Fabric) -> Vec<u64> {
    let sent = |&sw: &usize| fab.topo.switches[sw].egress.iter().map(|e| e.data_sent).sum();
    fab.topo.spines.iter().map(sent).collect()
}

/// Packets the receivers' engines dropped for a PSN past the one they
/// expected (each gap answered by one PSN sequence error NAK): what
/// reordering, as well as loss, costs a go-back-N receiver.
pub(crate) fn out_of_sequence(fab: &Fabric) -> u64 {
    let oos = rdma_transport::Drop::PsnOutOfSequence;
    fab.topo.hosts.iter().map(|h| h.ep.stats().drops_for(oos)).sum()
}

/// Per-flow rates per window and the bottleneck queue over the whole run, thinned.
fn series(fab: &Fabric) -> Series {
    let mut flow_rates = vec![Vec::new(); fab.flows.len()];
    for w in fab.windows.windows(2) {
        let secs = (us(w[1].0) - us(w[0].0)) / 1e6;
        for (f, (a, b)) in w[0].1.iter().zip(&w[1].1).enumerate() {
            flow_rates[f].push((us(w[1].0), (b - a) as f64 * 8.0 / secs / 1e9));
        }
    }
    let q: Vec<(f64, f64)> = fab.queue_samples.iter().map(|&(t, q)| (us(t), q as f64)).collect();
    Series {
        flow_rates: flow_rates.iter().map(|r| thin(r, MAX_SERIES_POINTS)).collect(),
        queue: thin(&q, MAX_SERIES_POINTS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_and_bad_flags_are_errors() {
        let mut p = |_, _| {};
        assert!(matches!(run("nope", &Options::default(), &mut p), Err(ScenarioError::Unknown(_))));
        let o = Options { flows: 0, ..Options::default() };
        assert!(matches!(run("dcqcn-fairness", &o, &mut p), Err(ScenarioError::BadOption(_))));
        let o = Options { line_rate_gbps: -1.0, ..Options::default() };
        assert!(matches!(run("rp-trajectory", &o, &mut p), Err(ScenarioError::BadOption(_))));
        let o = Options { headroom_bytes: Some(1000), pfc: false, ..Options::default() };
        assert!(matches!(run("incast", &o, &mut p), Err(ScenarioError::BadOption(_))));
    }
}
