//! `rdma-fabric`: list and run the simulated-fabric scenarios.

use clap::{Args, Parser, Subcommand, ValueEnum};
use rdma_fabric::collective::report::Kind;
use rdma_fabric::collective::{Algorithm, CollectiveOptions};
use rdma_fabric::multipath::Multipath;
use rdma_fabric::scenarios::{self, Cc, IbOptions, LinkKind, Options, Preset, RoutingKind, TopologyKind, SCENARIOS};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "rdma-fabric",
    about = "A deterministic simulated RoCE v2 fabric running the real engine",
    after_help = "Environment: where the kernel's transparent huge pages are in madvise mode, the tool starts again once \
                  with glibc.malloc.hugetlb=1 added to GLIBC_TUNABLES, so that its heap is in 2 MiB pages (a 256-host \
                  run 5-7 % faster, the same results). RDMA_FABRIC_HUGE_PAGES=0 turns that off (for timing against \
                  builds from before it, or under a tool that an exec would escape)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum PresetArg {
    Paper,
    Nvidia,
}

/// `--cc`: the congestion controller of every host.
#[derive(Clone, Copy, ValueEnum)]
enum CcArg {
    Dcqcn,
    Timely,
    Hpcc,
    Swift,
    None,
}

#[derive(Clone, Copy, ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, ValueEnum)]
enum RoutingArg {
    Minhop,
    Updn,
}

#[derive(Clone, Copy, ValueEnum)]
enum LinkArg {
    Roce,
    Ib,
}

#[derive(Clone, Copy, ValueEnum)]
enum AlgorithmArg {
    Ring,
    Tree,
}

#[derive(Clone, Copy, ValueEnum)]
enum TopologyArg {
    /// Every host on one switch.
    Incast,
    /// Leaves of --hosts-per-leaf hosts, each joined to every spine.
    LeafSpine,
    /// --servers servers of --rails NICs; NIC i of every server on rail switch i, rails joined by spines.
    RailOptimized,
}

#[derive(Clone, Copy, ValueEnum)]
enum MultipathArg {
    /// Per flow: the 5-tuple hash (RoCE), the SM's LFT entry per DLID (IB).
    Ecmp,
    /// Per packet, at random among the equal-cost ports (seeded per switch).
    Spray,
    /// Per packet, the equal-cost port with the shortest queue (InfiniBand AR, Spectrum-X).
    Adaptive,
}

#[derive(Subcommand)]
enum Cmd {
    /// The scenarios and what each shows.
    List,
    /// Run one scenario.
    #[command(args_override_self = true)]
    Run(Box<RunArgs>),
    /// Serve ibsim's client protocol (IBSIM_SOCKNAME) in front of the
    /// emulated fabric an ibsim net file describes, for opensm and
    /// infiniband-diags under libumad2sim; runs until killed.
    IbsimServe { netfile: std::path::PathBuf },
    /// Run one scenario on IB and on RoCE v2 (PFC only, PFC + DCQCN, neither)
    /// and print a table; --link, --pfc and --dcqcn are set per row
    /// (--cc timely puts TIMELY in DCQCN's row). A
    /// collective (allreduce, allgather, reduce-scatter) prints JCT, algbw,
    /// busbw and the tail across ranks, and --plot FILE.svg draws when the
    /// ranks finished on each fabric.
    #[command(args_override_self = true)]
    Compare(Box<RunArgs>),
}

#[derive(Args)]
struct RunArgs {
    /// The scenario (`rdma-fabric list`); or give --file.
    name: String,
    /// A scenario file: TOML whose keys are these flags' long names plus
    /// `scenario`; flags given here override it (fabric/scenarios/ has examples).
    #[arg(long, value_name = "FILE.toml")]
    file: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated time, e.g. 5ms, 300us, 1s (each scenario has a default).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Link rate in Gb/s.
    #[arg(long = "line-rate", default_value_t = 40.0)]
    line_rate: f64,
    #[arg(long, value_enum, default_value = "paper")]
    preset: PresetArg,
    /// dcqcn-fairness: the number of long flows; parking-lot: the number of bottleneck links.
    #[arg(long, default_value_t = 2)]
    flows: usize,
    /// incast: the number of senders.
    #[arg(long, default_value_t = 8)]
    fanin: usize,
    /// DCQCN on every host (the older spelling of --cc dcqcn / --cc none; default on).
    #[arg(long, value_enum)]
    dcqcn: Option<OnOff>,
    /// The congestion controller of every host: dcqcn (with --preset),
    /// timely or swift (RTT samples only), hpcc (in-band telemetry the
    /// switches stamp; RoCE fabrics only) or none; default: --dcqcn's choice.
    #[arg(long, value_enum)]
    cc: Option<CcArg>,
    /// incast: bytes per flow, in KiB.
    #[arg(long = "flow-kb", default_value_t = 256)]
    flow_kb: u64,
    /// Drop-tail limit of each switch port, in KB (1000 bytes).
    #[arg(long = "buffer-kb")]
    buffer_kb: Option<u64>,
    /// A buffer every port of a switch shares, in KB (1000 bytes): a packet
    /// is dropped when its switch's total would exceed it (lossy traffic).
    #[arg(long = "shared-buffer-kb")]
    shared_buffer_kb: Option<u64>,
    /// PFC on the switch ingress for the data priority (incast, victim, pfc-deadlock).
    #[arg(long, value_enum, default_value = "off")]
    pfc: OnOff,
    /// PFC headroom per ingress port in KB (1000 bytes); default: the formula
    /// 2·MTU + rate·2·delay + peer response, rounded up to 1 KiB.
    #[arg(long = "headroom-kb")]
    headroom_kb: Option<u64>,
    /// pfc-deadlock: route one flow the other way round the ring, breaking the cycle.
    #[arg(long)]
    reroute: bool,
    /// dcqcn-fairness, incast, all-to-all and the collectives: one switch
    /// (incast), leaf-spine, or rail-optimized.
    #[arg(long, value_enum, default_value = "incast")]
    topology: TopologyArg,
    /// leaf-spine and rail-optimized: a leaf's host links over its uplinks,
    /// e.g. 2 for 2:1. Every link runs at --line-rate, so this sets the
    /// spines (one uplink from each leaf to each): hosts per leaf / RATIO
    /// (servers / RATIO on rails), which must be a whole number.
    #[arg(long, value_name = "RATIO")]
    oversubscription: Option<f64>,
    /// rail-optimized: NICs per server, one rail switch each (default 4).
    #[arg(long)]
    rails: Option<usize>,
    /// rail-optimized: servers (default --hosts / --rails, else 4).
    #[arg(long)]
    servers: Option<usize>,
    /// rail-optimized collectives: each channel leaves a server on one NIC
    /// and enters the next on the following NIC (NCCL_CROSS_NIC=1), so it
    /// crosses the spines; default: the same NIC, staying on its rail.
    #[arg(long = "cross-nic")]
    cross_nic: bool,
    /// leaf-spine and rail-optimized: how switches pick among equal-cost
    /// next hops, on RoCE and IB alike. Per packet (spray, adaptive)
    /// reorders a QP's packets, which the go-back-N receiver NAKs.
    #[arg(long, value_enum, default_value = "ecmp")]
    multipath: MultipathArg,
    /// leaf-spine: leaf switches (default 2).
    #[arg(long)]
    leaves: Option<usize>,
    /// leaf-spine: spine switches (default 2; rail-optimized: --servers, full bisection).
    #[arg(long)]
    spines: Option<usize>,
    /// leaf-spine: hosts per leaf (default 8).
    #[arg(long = "hosts-per-leaf")]
    hosts_per_leaf: Option<usize>,
    /// The link layer: RoCE v2 over Ethernet, or InfiniBand (credits per VL, LFTs).
    #[arg(long, value_enum, default_value = "roce")]
    link: LinkArg,
    /// Run the fabric partitioned by pod (a switch with its hosts; spines
    /// dealt among them) on N threads, in windows of the link delay: the
    /// same JSON for every N, but not the single event queue's (its own
    /// random streams and tie order). Default: the single event queue.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// --link ib: configure the fabric with rdma-sm (a sweep over VL15) instead of preset LIDs and LFTs.
    #[arg(long)]
    sm: bool,
    /// --link ib: data VLs per link.
    #[arg(long, default_value_t = 2)]
    vls: u8,
    /// --link ib: receive buffer per data VL, in 64-byte blocks (credits).
    #[arg(long = "vl-buffer-blocks", default_value_t = 256)]
    vl_buffer_blocks: u16,
    /// --link ib: probability that a flow-control packet is lost on the wire.
    #[arg(long = "fc-loss", default_value_t = 0.0)]
    fc_loss: f64,
    /// --link ib: probability that a flow-control packet arrives corrupted (bad LPCRC).
    #[arg(long = "fc-corrupt", default_value_t = 0.0)]
    fc_corrupt: f64,
    /// ib-ring: the SM's routing engine (Up*/Down* rooted at the first switch).
    #[arg(long, value_enum, default_value = "minhop")]
    routing: RoutingArg,
    /// allreduce, allgather, reduce-scatter: how the ranks exchange data.
    #[arg(long, value_enum, default_value = "ring")]
    algorithm: AlgorithmArg,
    /// allreduce, allgather, reduce-scatter: the number of ranks, one per host (default 8).
    #[arg(long)]
    hosts: Option<usize>,
    /// allreduce, allgather, reduce-scatter: bytes, as nccl-tests counts
    /// them (e.g. 65536, 64KiB, 4MiB, 1GiB; default 1MiB).
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// No progress line on stderr (it is shown only on a terminal anyway).
    #[arg(long)]
    quiet: bool,
    #[arg(long)]
    json: bool,
    /// Write per-flow rates and the bottleneck queue over time to FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len()));
    let v: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration like 5ms"))?;
    let scale = match unit {
        "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        _ => return Err(format!("{s:?}: the unit must be s, ms, us or ns")),
    };
    let ns = v * scale;
    if !(ns.is_finite() && (1.0..=60e9).contains(&ns)) {
        return Err(format!("{s:?} is not between 1 ns and 60 s"));
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// A byte count with an optional unit: B, KB/MB/GB (powers of 1000) or
/// K/KiB, M/MiB, G/GiB (powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let v: u64 = num.parse().map_err(|_| format!("{s:?} is not a size like 4MiB or 65536"))?;
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        _ => return Err(format!("{s:?}: the unit must be B, KB, MB, GB, KiB, MiB or GiB")),
    };
    v.checked_mul(scale).ok_or_else(|| format!("{s:?} is too large"))
}

/// The progress callback of a run: a line on stderr now and then, only
/// on a terminal and without --quiet.
fn progress_printer(quiet: bool) -> impl FnMut(rdma_transport::Instant, Duration) {
    use std::io::IsTerminal;
    let show = !quiet && std::io::stderr().is_terminal();
    let mut meter = rdma_fabric::progress::Meter::new(std::time::Instant::now());
    move |t, limit| {
        if show {
            if let Some(line) = meter.tick(std::time::Instant::now(), t, limit) {
                eprintln!("{line}");
            }
        }
    }
}

/// What `run` and `compare` of a collective ask for: the flags, with
/// 8 ranks and 1 MiB by default (one rank per NIC on a rail-optimized
/// topology).
fn collective_options(kind: Kind, args: &RunArgs, o: &Options) -> CollectiveOptions {
    let default_hosts = match o.topology {
        TopologyKind::RailOptimized { servers, rails, .. } => servers * rails,
        _ => 8,
    };
    CollectiveOptions {
        kind,
        algorithm: match args.algorithm {
            AlgorithmArg::Ring => Algorithm::Ring,
            AlgorithmArg::Tree => Algorithm::Tree,
        },
        hosts: args.hosts.unwrap_or(default_hosts),
        size_bytes: args.size.unwrap_or(1 << 20),
        cross_nic: args.cross_nic,
    }
}

/// `run` of a collective: allreduce, allgather, reduce-scatter.
fn run_collective(kind: Kind, args: &RunArgs, o: &Options) -> ExitCode {
    let c = collective_options(kind, args, o);
    if args.leaves.is_some() {
        eprintln!("rdma-fabric: --leaves follows from --hosts and --hosts-per-leaf for collectives");
        return ExitCode::from(2);
    }
    if let Some(Err(e)) = args.plot.as_deref().map(rdma_fabric::plot::check_path) {
        eprintln!("rdma-fabric: {e}");
        return ExitCode::from(2);
    }
    let mut progress = progress_printer(args.quiet);
    let r = rdma_fabric::collective::run(&c, o, &mut progress);
    if let (Ok(r), Some(path)) = (&r, &args.plot) {
        let caption = format!("{} ({}), {} ranks: when each rank finished", r.scenario, r.algorithm, r.hosts);
        let lines = [(r.topology_line(), r.rank_completion_us.clone())];
        if let Err(e) = rdma_fabric::plot::write_cdfs(&caption, "time (us)", &lines, path) {
            eprintln!("rdma-fabric: {e}");
            return ExitCode::from(2);
        }
    }
    match r {
        Ok(r) if args.json => {
            println!("{}", serde_json::to_string(&r).expect("a report serialises"));
            ExitCode::SUCCESS
        }
        Ok(r) => {
            print!("{}", r.table());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rdma-fabric: {e}");
            ExitCode::from(2)
        }
    }
}

/// `compare` of a collective: the four fabrics' table (or JSON) and,
/// with --plot, when the ranks finished on each.
fn compare_collective(
    kind: Kind,
    args: &RunArgs,
    o: &Options,
    progress: &mut dyn FnMut(&str, rdma_transport::Instant, Duration),
) -> ExitCode {
    let c = collective_options(kind, args, o);
    if let Some(Err(e)) = args.plot.as_deref().map(rdma_fabric::plot::check_path) {
        eprintln!("rdma-fabric: {e}");
        return ExitCode::from(2);
    }
    let rows = match rdma_fabric::compare::compare_collective(&c, o, progress) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rdma-fabric: {e}");
            return ExitCode::from(2);
        }
    };
    if let (Some(path), Some(first)) = (&args.plot, rows.first()) {
        let r = &first.report;
        let caption = format!(
            "{} ({}), {} ranks, {} B, {}: when each rank finished",
            r.scenario,
            r.algorithm,
            r.hosts,
            r.size_bytes,
            r.topology_line()
        );
        let lines: Vec<(String, Vec<f64>)> =
            rows.iter().map(|row| (row.config.to_string(), row.report.rank_completion_us.clone())).collect();
        if let Err(e) = rdma_fabric::plot::write_cdfs(&caption, "time (us)", &lines, path) {
            eprintln!("rdma-fabric: {e}");
            return ExitCode::from(2);
        }
    }
    if args.json {
        let v: Vec<serde_json::Value> =
            rows.iter().map(|r| serde_json::json!({ "fabric": r.config, "report": r.report })).collect();
        println!("{}", serde_json::json!({ "scenario": args.name, "rows": v }));
    } else {
        print!("{}", rdma_fabric::compare::collective_table(&rows));
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    rdma_fabric::huge_pages::restart_with_huge_pages();
    let args = match rdma_fabric::scenario_file::expand(std::env::args().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rdma-fabric: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(args);
    match cli.cmd {
        Cmd::List => {
            for (name, what) in SCENARIOS {
                println!("{name:<16} {what}");
            }
            ExitCode::SUCCESS
        }
        Cmd::IbsimServe { netfile } => {
            let base = std::env::var("IBSIM_SOCKNAME").unwrap_or_else(|_| "sim".into());
            let r = rdma_fabric::sm::fabric_transport::emulated(&netfile.to_string_lossy())
                .and_then(|t| rdma_fabric::sm::ibsim_server::IbsimServer::bind(&base, t))
                .and_then(|mut s| s.serve(&|| false));
            match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rdma-fabric: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Compare(args) => {
            let o = match options(&args) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("rdma-fabric: {e}");
                    return ExitCode::from(2);
                }
            };
            // Each fabric's runs get the progress line of `run`, under its name.
            let mut current = String::new();
            let quiet = args.quiet;
            let mut line = progress_printer(quiet);
            let show = !quiet && std::io::IsTerminal::is_terminal(&std::io::stderr());
            let mut progress = |c: &str, t: rdma_transport::Instant, limit: Duration| {
                if c != current {
                    current = c.to_string();
                    line = progress_printer(quiet);
                    if show {
                        eprintln!("rdma-fabric: {c}");
                    }
                }
                line(t, limit);
            };
            if let Some(kind) = Kind::from_name(&args.name) {
                return compare_collective(kind, &args, &o, &mut progress);
            }
            let rows = match rdma_fabric::compare::compare(&args.name, &o, &mut progress) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("rdma-fabric: {e}");
                    return ExitCode::from(2);
                }
            };
            if let Some(stem) = &args.plot {
                for row in &rows {
                    let path = stem.with_file_name(format!(
                        "{}-{}.svg",
                        stem.file_stem().map_or("compare".into(), |s| s.to_string_lossy()),
                        row.config
                    ));
                    if let Err(e) = rdma_fabric::plot::write(&row.report, &path) {
                        eprintln!("rdma-fabric: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            if args.json {
                let v: Vec<serde_json::Value> =
                    rows.iter().map(|r| serde_json::json!({ "fabric": r.config, "report": r.report })).collect();
                let h = rdma_fabric::compare::header_bytes();
                println!("{}", serde_json::json!({ "scenario": args.name, "rows": v, "header_bytes": h }));
            } else {
                print!("{}", rdma_fabric::compare::table(&args.name, &rows, o.line_rate_gbps));
            }
            ExitCode::SUCCESS
        }
        Cmd::Run(args) => {
            let o = match options(&args) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("rdma-fabric: {e}");
                    return ExitCode::from(2);
                }
            };
            if let Some(kind) = Kind::from_name(&args.name) {
                return run_collective(kind, &args, &o);
            }
            if args.hosts.is_some()
                || args.size.is_some()
                || args.cross_nic
                || !matches!(args.algorithm, AlgorithmArg::Ring)
            {
                eprintln!(
                    "rdma-fabric: --hosts, --size, --algorithm and --cross-nic are for allreduce, allgather and \
                     reduce-scatter"
                );
                return ExitCode::from(2);
            }
            let RunArgs { name, json, plot, quiet, .. } = *args;
            if let Some(Err(e)) = plot.as_deref().map(rdma_fabric::plot::check_path) {
                eprintln!("rdma-fabric: {e}");
                return ExitCode::from(2);
            }
            let mut progress = progress_printer(quiet);
            match scenarios::run(&name, &o, &mut progress) {
                Ok(r) => {
                    if let Some(path) = &plot {
                        if let Err(e) = rdma_fabric::plot::write(&r, path) {
                            eprintln!("rdma-fabric: {e}");
                            return ExitCode::from(2);
                        }
                    }
                    if json {
                        println!("{}", serde_json::to_string(&r).expect("a report serialises"));
                    } else {
                        print!("{}", r.table());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("rdma-fabric: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

fn options(args: &RunArgs) -> Result<Options, String> {
    let RunArgs {
        seed,
        duration,
        line_rate,
        preset,
        flows,
        fanin,
        dcqcn,
        cc,
        flow_kb,
        buffer_kb,
        shared_buffer_kb,
        pfc,
        headroom_kb,
        reroute,
        topology,
        leaves,
        spines,
        hosts_per_leaf,
        link,
        vls,
        vl_buffer_blocks,
        fc_loss,
        fc_corrupt,
        routing,
        sm,
        oversubscription,
        rails,
        servers,
        multipath,
        hosts,
        threads,
        ..
    } = *args;
    // The spines: given, or from the oversubscription of `down` host links a leaf.
    let spines_for = |down: usize, default: usize| -> Result<usize, String> {
        let Some(ratio) = oversubscription else { return Ok(spines.unwrap_or(default)) };
        let n = rdma_fabric::topology::spines_for_oversubscription(down, ratio)?;
        match spines {
            Some(s) if s != n => Err(format!("--spines {s} is not what --oversubscription {ratio} gives ({n})")),
            _ => Ok(n),
        }
    };
    let topology = match topology {
        TopologyArg::LeafSpine if rails.or(servers).is_some() => {
            return Err("--rails and --servers need --topology rail-optimized".into());
        }
        TopologyArg::LeafSpine => {
            let per = hosts_per_leaf.unwrap_or(8);
            TopologyKind::LeafSpine { leaves: leaves.unwrap_or(2), spines: spines_for(per, 2)?, hosts_per_leaf: per }
        }
        TopologyArg::RailOptimized if leaves.or(hosts_per_leaf).is_some() => {
            return Err("rail-optimized: --rails are the leaves and --servers the hosts per leaf".into());
        }
        TopologyArg::RailOptimized => {
            let rails = rails.unwrap_or(4);
            let servers = servers.or(hosts.map(|h| h / rails.max(1))).unwrap_or(4);
            TopologyKind::RailOptimized { servers, rails, spines: spines_for(servers, servers)? }
        }
        TopologyArg::Incast
            if leaves.or(spines).or(hosts_per_leaf).or(rails).or(servers).is_some() || oversubscription.is_some() =>
        {
            return Err("--leaves, --spines, --hosts-per-leaf, --rails, --servers and --oversubscription need \
                        --topology leaf-spine or rail-optimized"
                .into());
        }
        TopologyArg::Incast => TopologyKind::Incast,
    };
    let cc = match (cc, dcqcn) {
        (Some(CcArg::Dcqcn), Some(OnOff::Off)) => return Err("--cc dcqcn and --dcqcn off contradict".into()),
        (Some(CcArg::Timely | CcArg::Hpcc | CcArg::Swift | CcArg::None), Some(OnOff::On)) => {
            return Err("--dcqcn on contradicts --cc: give one of them".into())
        }
        (Some(CcArg::Dcqcn), _) => Cc::Dcqcn,
        (Some(CcArg::Timely), _) => Cc::Timely,
        (Some(CcArg::Hpcc), _) => Cc::Hpcc,
        (Some(CcArg::Swift), _) => Cc::Swift,
        (Some(CcArg::None), _) => Cc::None,
        (None, d) => Cc::from_dcqcn(!matches!(d, Some(OnOff::Off))),
    };
    let o = Options {
        seed,
        duration,
        line_rate_gbps: line_rate,
        preset: match preset {
            PresetArg::Paper => Preset::Paper,
            PresetArg::Nvidia => Preset::Nvidia,
        },
        flows,
        fanin,
        cc,
        flow_bytes: flow_kb.saturating_mul(1024),
        buffer_bytes: buffer_kb.map(|k| k.saturating_mul(1000)),
        shared_buffer_bytes: shared_buffer_kb.map(|k| k.saturating_mul(1000)),
        pfc: matches!(pfc, OnOff::On),
        headroom_bytes: headroom_kb.map(|k| k.saturating_mul(1000)),
        reroute,
        topology,
        link: match link {
            LinkArg::Roce => LinkKind::Roce,
            LinkArg::Ib => LinkKind::Ib,
        },
        ib: IbOptions { sm, data_vls: vls, buffer_blocks: vl_buffer_blocks, fc_loss, fc_corrupt },
        routing: match routing {
            RoutingArg::Minhop => RoutingKind::MinHop,
            RoutingArg::Updn => RoutingKind::UpDown,
        },
        multipath: match multipath {
            MultipathArg::Ecmp => Multipath::Ecmp,
            MultipathArg::Spray => Multipath::Spray,
            MultipathArg::Adaptive => Multipath::Adaptive,
        },
        agenda_threshold: None,
        threads,
    };
    Ok(o)
}
