//! `rdma-sm`: a minimal subnet manager (see `rdma_fabric::sm`).

use clap::{Parser, ValueEnum};
use rdma_fabric::ib::routing::Routing;
use rdma_fabric::sm::ibsim::IbsimClient;
use rdma_fabric::sm::{Sm, SmConfig, SmError, SmpTransport, SubnetView};
use std::process::ExitCode;

#[derive(Clone, Copy, ValueEnum)]
enum RoutingArg {
    Minhop,
    Updn,
}

#[derive(Parser)]
#[command(name = "rdma-sm", about = "A minimal InfiniBand subnet manager: discover, assign LIDs, route, configure")]
struct Cli {
    /// Manage a fabric simulated by OFED's ibsim, over its client protocol
    /// (IBSIM_SOCKNAME, SIM_HOST as ibsim's own clients).
    #[arg(long)]
    ibsim: bool,
    /// Manage the emulated fabric of rdma-fabric: ring:N, incast:N or leaf-spine:LxSxH.
    #[arg(long, value_name = "TOPOLOGY")]
    emulated: Option<String>,
    /// Sweep and configure once, exit 0 when every port is ACTIVE.
    #[arg(long)]
    once: bool,
    #[arg(long, value_enum, default_value = "minhop")]
    routing: RoutingArg,
    /// Up*/Down* root switch GUID (repeatable), e.g. 0x200000.
    #[arg(long = "root", value_parser = parse_guid)]
    roots: Vec<u64>,
    /// Print the LIDs and LFTs as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_guid(s: &str) -> Result<u64, String> {
    let t = s.trim_start_matches("0x").trim_start_matches("0X");
    u64::from_str_radix(t, 16).map_err(|_| format!("{s:?} is not a hexadecimal GUID"))
}

fn report(v: &SubnetView, json: bool) {
    if json {
        let lids: Vec<serde_json::Value> = v
            .subnet
            .lids
            .iter()
            .map(|(&(n, p), &lid)| {
                let pg = v.subnet.nodes[n].port_guids.get(usize::from(p)).copied().unwrap_or(0);
                serde_json::json!({
                    "node": v.found[n].description, "guid": format!("{:#018x}", v.found[n].info.node_guid),
                    "port": p, "port_guid": format!("{pg:#018x}"), "lid": lid,
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
        println!("  LID {lid:<4} {:#018x} port {p} {}", v.found[n].info.node_guid, v.found[n].description);
    }
}

fn run<T: SmpTransport>(t: T, cfg: SmConfig, json: bool) -> Result<(), SmError> {
    let mut sm = Sm::new(t, cfg);
    let v = sm.run_once()?;
    report(&v, json);
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
    if !cli.once {
        eprintln!("rdma-sm: only --once is implemented (sweep, configure, exit); pass --once");
        return ExitCode::from(2);
    }
    let cfg = SmConfig { routing, ..SmConfig::default() };
    let r = match (cli.ibsim, &cli.emulated) {
        (true, None) => {
            let base = std::env::var("IBSIM_SOCKNAME").unwrap_or_else(|_| "sim".into());
            let host = std::env::var("SIM_HOST").ok();
            IbsimClient::connect(&base, host.as_deref()).and_then(|c| run(c, cfg, cli.json))
        }
        (false, Some(spec)) => match rdma_fabric::sm::fabric_transport::emulated(spec) {
            Ok(t) => run(t, cfg, cli.json),
            Err(e) => Err(e),
        },
        _ => {
            eprintln!("rdma-sm: give exactly one of --ibsim and --emulated TOPOLOGY");
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

/// RUST_LOG=rdma_fabric=debug shows the sweep, on stderr.
fn tracing_subscriber_init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}
