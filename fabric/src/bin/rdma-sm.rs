//! `rdma-sm`: a minimal subnet manager (see `rdma_fabric::sm`).

use clap::{Parser, ValueEnum};
use rdma_fabric::ib::routing::Routing;
use rdma_fabric::sm::ibsim::IbsimClient;
use rdma_fabric::sm::port_agent::PortAgent;
use rdma_fabric::sm::raw_transport::RawSmpTransport;
use rdma_fabric::sm::{Sm, SmConfig, SmError, SmpTransport, SubnetView};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Clone, Copy, ValueEnum)]
enum RoutingArg {
    Minhop,
    Updn,
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    /// Native InfiniBand frames (EtherType 0x88B5) on --netdev.
    Ib,
}

#[derive(Parser)]
#[command(
    name = "rdma-sm",
    about = "A minimal InfiniBand subnet manager: discover, assign LIDs, route, configure",
    after_help = "The raw native-IB backend between two hosts or namespaces (root):\n  \
        rdma-sm --agent --netdev IFACE &             # on each end: the port's SMA, publishes its state\n  \
        rdma-sm --once --backend ib --netdev IFACE   # on one end: sweep, LIDs, ports ACTIVE\n  \
        rdma-sm --backend ib --netdev IFACE          # or a resident SM: sweeps every 10 s, reconfigures changes\n\
        then any tool with --backend ib --netdev IFACE uses the LID the SM assigned.\n\
        Port records go to $SOFTROCE_RUN_DIR (default /run/softroce)."
)]
struct Cli {
    /// Manage a fabric simulated by OFED's ibsim, over its client protocol
    /// (IBSIM_SOCKNAME, SIM_HOST as ibsim's own clients).
    #[arg(long)]
    ibsim: bool,
    /// Manage an emulated fabric (in this process) built from an ibsim
    /// topology file (ibsim's net format; SIM_HOST names the SM's HCA).
    #[arg(long, value_name = "NETFILE")]
    emulated: Option<String>,
    /// Manage the raw backend's ports: SMPs as VL15 frames on --netdev
    /// (root); every port needs its agent (--agent), the SM's own too.
    #[arg(long, value_enum, requires = "netdev")]
    backend: Option<BackendArg>,
    /// The network interface of --backend ib or --agent.
    #[arg(long, value_name = "IFACE")]
    netdev: Option<String>,
    /// Run the port agent of --netdev instead of an SM: the SMA of the
    /// emulated HCA port (answers SMPs, keeps LID, SM LID and port state)
    /// that publishes the port's state for the devices on that interface,
    /// until SIGINT or SIGTERM.
    #[arg(long, requires = "netdev", conflicts_with_all = ["once", "ibsim", "emulated", "backend"])]
    agent: bool,
    /// --backend ib: how long to wait for each SMP's answer.
    #[arg(long, default_value_t = 200, value_name = "MS")]
    timeout_ms: u64,
    /// --backend ib: sends of one SMP before giving up.
    #[arg(long, default_value_t = 3)]
    tries: u32,
    /// --backend ib: record the SMPs on the wire and their answers (pcap
    /// of ERF type-21 records, which tshark decodes).
    #[arg(long, value_name = "FILE", requires = "backend")]
    pcap: Option<std::path::PathBuf>,
    /// Sweep and configure once, exit 0 when every port is ACTIVE.
    /// Without it (--backend ib only) the SM stays: it sweeps every
    /// --interval-ms and configures the subnet again whenever it changed
    /// (a port came, went, or left ACTIVE, as when its agent restarts),
    /// ports keeping their LIDs, until SIGINT or SIGTERM.
    #[arg(long)]
    once: bool,
    /// A resident SM's time between sweeps (opensm's sweep interval is 10 s).
    #[arg(long, default_value_t = 10_000, value_name = "MS", conflicts_with = "once")]
    interval_ms: u64,
    #[arg(long, value_enum, default_value = "minhop")]
    routing: RoutingArg,
    /// Up*/Down* root switch GUID (repeatable), e.g. 0x200000.
    #[arg(long = "root", value_parser = parse_guid)]
    roots: Vec<u64>,
    /// Print the LIDs, P_Keys and LFTs as JSON.
    #[arg(long)]
    json: bool,
    /// The default partition's P_Key, which every end port gets (bit 15
    /// set: full member).
    #[arg(long, default_value = "0xffff", value_parser = parse_pkey, value_name = "PKEY")]
    pkey: u16,
    /// Put the end port GUID in partitions (repeatable), e.g.
    /// 0x0000000000000a01=0x8001. Bit 15 of a P_Key is full membership:
    /// two limited members of a partition may not talk. The port's P_Key
    /// table lists these keys first (QPs take index 0, the first) and the
    /// default partition's after them, for management MADs.
    #[arg(long = "partition", value_parser = parse_partition, value_name = "GUID=PKEY[,PKEY...]")]
    partitions: Vec<(u64, Vec<u16>)>,
}

/// A P_Key: hexadecimal (0x optional), neither 0x0000 nor 0x8000 (invalid keys).
fn parse_pkey(s: &str) -> Result<u16, String> {
    let t = s.trim_start_matches("0x").trim_start_matches("0X");
    let k = u16::from_str_radix(t, 16).map_err(|_| format!("{s:?} is not a hexadecimal 16-bit P_Key"))?;
    if k & 0x7fff == 0 {
        return Err(format!("{s}: 0x0000 and 0x8000 are the invalid P_Key"));
    }
    Ok(k)
}

/// GUID=PKEY[,PKEY...]: at most 31 keys (one P_KeyTable block, the
/// default partition's key after them).
fn parse_partition(s: &str) -> Result<(u64, Vec<u16>), String> {
    let (guid, keys) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected GUID=PKEY[,PKEY...]"))?;
    let keys = keys.split(',').map(parse_pkey).collect::<Result<Vec<u16>, String>>()?;
    if keys.len() > 31 {
        return Err(format!("{s}: {} P_Keys, at most 31 per port", keys.len()));
    }
    Ok((parse_guid(guid)?, keys))
}

fn parse_guid(s: &str) -> Result<u64, String> {
    let t = s.trim_start_matches("0x").trim_start_matches("0X");
    u64::from_str_radix(t, 16).map_err(|_| format!("{s:?} is not a hexadecimal GUID"))
}

fn report(v: &SubnetView, cfg: &SmConfig, json: bool) {
    // The P_Keys each end port was given, first block, as configured.
    let pkeys = |n: usize| -> Vec<String> {
        if v.found[n].info.node_type == rdma_wire::smp::node_type::SWITCH {
            return Vec::new();
        }
        cfg.pkey_table(v.found[n].info.port_guid).iter().map(|k| format!("{k:#06x}")).collect()
    };
    if json {
        let lids: Vec<serde_json::Value> = v
            .subnet
            .lids
            .iter()
            .map(|(&(n, p), &lid)| {
                let pg = v.subnet.nodes[n].port_guids.get(usize::from(p)).copied().unwrap_or(0);
                serde_json::json!({
                    "node": v.found[n].description, "guid": format!("{:#018x}", v.found[n].info.node_guid),
                    "port": p, "port_guid": format!("{pg:#018x}"), "lid": lid, "pkeys": pkeys(n),
                })
            })
            .collect();
        let lfts: Vec<serde_json::Value> = v
            .lfts
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_empty())
            .map(|(n, l)| {
                let entries: serde_json::Map<String, serde_json::Value> = l
                    .iter()
                    .enumerate()
                    .filter(|&(lid, &p)| lid > 0 && p != 0xff)
                    .map(|(lid, &p)| (lid.to_string(), p.into()))
                    .collect();
                serde_json::json!({ "node": v.found[n].description,
                    "guid": format!("{:#018x}", v.found[n].info.node_guid), "lft": entries })
            })
            .collect();
        println!("{}", serde_json::json!({ "sm_lid": v.sm_lid(), "lids": lids, "lfts": lfts }));
        return;
    }
    println!("SM LID {}; {} nodes", v.sm_lid(), v.found.len());
    for (&(n, p), &lid) in &v.subnet.lids {
        let keys = pkeys(n);
        let keys = if keys.is_empty() { String::new() } else { format!(" P_Keys {}", keys.join(",")) };
        let pg = v.subnet.nodes[n].port_guids.get(usize::from(p)).copied().unwrap_or(0);
        println!("  LID {lid:<4} port GUID {pg:#018x} port {p} {}{keys}", v.found[n].description);
    }
}

/// Sweeps and configures over `t`. `lone` says what a subnet of the SM's
/// node alone means: None is fine, Some(why) an error (on the raw
/// backend a link whose other end runs no agent looks like that).
fn run<T: SmpTransport>(t: T, cfg: SmConfig, json: bool, lone: Option<&str>) -> Result<(), SmError> {
    let mut sm = Sm::new(t, cfg.clone());
    let v = sm.run_once()?;
    if let (1, Some(why)) = (v.found.len(), lone) {
        return Err(SmError::Transport(why.to_string()));
    }
    report(&v, &cfg, json);
    eprintln!("rdma-sm: SUBNET UP ({} SMPs)", sm.smps);
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber_init();
    let cli = Cli::parse();
    let routing = match cli.routing {
        RoutingArg::Minhop => Routing::MinHop,
        RoutingArg::Updn => Routing::UpDown { roots: cli.roots.clone() },
    };
    if cli.agent {
        let netdev = cli.netdev.as_deref().unwrap_or_default();
        return agent(netdev);
    }
    if !cli.once && cli.backend.is_none() {
        eprintln!(
            "rdma-sm: --ibsim and --emulated need --once (sweep, configure, exit); a resident SM runs on --backend ib"
        );
        return ExitCode::from(2);
    }
    let cfg = SmConfig { routing, pkey: cli.pkey, port_pkeys: cli.partitions.clone(), ..SmConfig::default() };
    let r = match (cli.ibsim, &cli.emulated, cli.backend, &cli.netdev) {
        (true, None, None, None) => {
            let base = std::env::var("IBSIM_SOCKNAME").unwrap_or_else(|_| "sim".into());
            let host = std::env::var("SIM_HOST").ok();
            IbsimClient::connect(&base, host.as_deref()).and_then(|c| run(c, cfg, cli.json, None))
        }
        (false, Some(spec), None, None) => match rdma_fabric::sm::fabric_transport::emulated(spec) {
            Ok(t) => run(t, cfg, cli.json, None),
            Err(e) => Err(e),
        },
        (false, None, Some(BackendArg::Ib), Some(netdev)) => RawSmpTransport::open(netdev, cli.pcap.as_deref()).and_then(|mut t| {
            t.timeout = Duration::from_millis(cli.timeout_ms.max(1));
            t.tries = cli.tries.max(1);
            let lone = format!(
                "only the SM's own port answered on {netdev}: no SMA at the other end (run `rdma-sm --agent --netdev IFACE` there)"
            );
            if cli.once {
                run(t, cfg, cli.json, Some(&lone))
            } else {
                resident(t, cfg, cli.json, Duration::from_millis(cli.interval_ms.max(1)), &lone)
            }
        }),
        _ => {
            eprintln!("rdma-sm: give exactly one of --ibsim, --emulated TOPOLOGY and --backend ib --netdev IFACE");
            return ExitCode::from(2);
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-sm: {e}");
            ExitCode::FAILURE
        }
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGINT and SIGTERM set [`STOP`].
fn stop_on_signals() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}

/// The resident SM: sweeps every `interval` until SIGINT or SIGTERM,
/// configuring the subnet whenever it changed (`Sm::sweep`). A failed
/// sweep (an agent not up yet, a lost answer) is said once and tried
/// again at the next.
fn resident<T: SmpTransport>(t: T, cfg: SmConfig, json: bool, interval: Duration, lone: &str) -> Result<(), SmError> {
    stop_on_signals();
    let mut sm = Sm::new(t, cfg.clone());
    let mut said = String::new();
    let ms = interval.as_millis();
    while !STOP.load(Ordering::Relaxed) {
        let before = sm.smps;
        let now = match sm.sweep() {
            Ok(Some(v)) if v.found.len() == 1 => format!("{lone}; sweeping again every {ms} ms"),
            Ok(Some(v)) => {
                report(&v, &cfg, json);
                eprintln!("rdma-sm: SUBNET UP ({} SMPs)", sm.smps - before);
                String::new()
            }
            Ok(None) => said.clone(),
            Err(e) => format!("sweep failed: {e}; again in {ms} ms"),
        };
        if !now.is_empty() && now != said {
            eprintln!("rdma-sm: {now}");
        }
        said = now;
        let until = std::time::Instant::now() + interval;
        while !STOP.load(Ordering::Relaxed) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20).min(interval));
        }
    }
    eprintln!("rdma-sm: stopped");
    Ok(())
}

/// `--agent`: serves the port of `netdev` until SIGINT or SIGTERM, then
/// removes its record (the agent's Drop).
fn agent(netdev: &str) -> ExitCode {
    stop_on_signals();
    let r = PortAgent::open(netdev).and_then(|mut a| {
        eprintln!(
            "rdma-sm: port agent on {netdev}, port GUID {}, record {}",
            rdma_link::ib_port::guid_text(a.guid()),
            rdma_link::ib_port::record_path(a.guid()).display()
        );
        a.run(&STOP)
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-sm: {e}");
            ExitCode::FAILURE
        }
    }
}

/// RUST_LOG=rdma_fabric=debug shows the sweep, on stderr.
fn tracing_subscriber_init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}
