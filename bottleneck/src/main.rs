//! `rdma-bottleneck`: a rate-limited, ECN-marking router between two
//! network namespaces, for DCQCN between real processes (see the crate docs).

use clap::Parser;
use rdma_bottleneck::netns::Prefix;
use rdma_bottleneck::router::{Router, RouterConfig, Side};
use rdma_fabric::switch::Red;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "rdma-bottleneck",
    about = "A userspace router with a rate-limited RED/ECN queue between two network namespaces",
    long_about = "Creates a TUN device in each of two existing network namespaces (ip netns add), gives them \
                  the addresses named, routes each side to the other through the router, and forwards: \
                  left-to-right traffic through a rate-limited queue that marks ECN-capable packets CE with \
                  RED and drops at its tail; right-to-left traffic straight back. Runs until --duration or \
                  SIGINT/SIGTERM, then prints what it saw (per-flow rates, Jain's index, queue, marks, drops, \
                  CNPs). Needs root. scripts/live-bottleneck.sh sets up namespaces and rdma-perf flows around it."
)]
struct Args {
    /// The senders' side: NETNS=ADDR/PREFIX[,ADDR/PREFIX...], e.g. bnl=10.77.1.1/24,10.77.1.2/24.
    #[arg(long, value_parser = parse_side)]
    left: SideArg,
    /// The receivers' side, as --left.
    #[arg(long, value_parser = parse_side)]
    right: SideArg,
    /// TUN device name in both namespaces.
    #[arg(long, default_value = "bneck0")]
    dev: String,
    /// Bottleneck rate, Mb/s.
    #[arg(long = "rate-mbps", default_value_t = 500.0)]
    rate_mbps: f64,
    /// Queue size (drop-tail), KB (1000 bytes).
    #[arg(long = "buffer-kb", default_value_t = 1000)]
    buffer_kb: u64,
    /// RED: no marking below this queue, KB. Defaults are the DCQCN paper's (5 KB, 200 KB, 1 %), as in rdma-fabric.
    #[arg(long = "kmin-kb", default_value_t = 5)]
    kmin_kb: u64,
    /// RED: every ECN-capable packet is marked above this queue, KB.
    #[arg(long = "kmax-kb", default_value_t = 200)]
    kmax_kb: u64,
    /// RED: the marking probability at Kmax.
    #[arg(long, default_value_t = 0.01)]
    pmax: f64,
    /// No ECN marking: drop-tail only.
    #[arg(long = "no-ecn")]
    no_ecn: bool,
    /// Stop after this long (e.g. 12s, 500ms); default: at SIGINT/SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Measure rates and fairness from this long after the first RoCE packet
    /// (at most half the flows' lifetime) to the last one.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    warmup: Duration,
    /// Width of one rate sample, ms.
    #[arg(long = "window-ms", default_value_t = 10)]
    window_ms: u64,
    /// Seed of the marking decisions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// MTU of the TUN devices (4096-byte RoCE payloads need more than 1500).
    #[arg(long, default_value_t = 9000)]
    mtu: u32,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Write per-flow rates and the queue over time to FILE.svg.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Create this file once the devices are up (for scripts to wait on).
    #[arg(long = "ready-file")]
    ready_file: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Clone)]
struct SideArg {
    netns: String,
    addrs: Vec<Prefix>,
}

fn parse_side(s: &str) -> Result<SideArg, String> {
    let (netns, addrs) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected NETNS=ADDR/PREFIX[,...]"))?;
    if netns.is_empty() || netns.contains('/') {
        return Err(format!("{netns:?}: not a namespace name"));
    }
    let addrs =
        addrs.split(',').map(|a| a.parse::<Prefix>().map_err(|e| e.to_string())).collect::<Result<Vec<_>, _>>()?;
    Ok(SideArg { netns: netns.into(), addrs })
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.find(|c: char| c.is_ascii_alphabetic()).map_or((s, "s"), |i| s.split_at(i));
    let v: f64 = num.parse().map_err(|_| format!("{s:?}: expected a duration such as 10s or 500ms"))?;
    let secs = match unit {
        "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        _ => return Err(format!("{s:?}: unit must be s, ms or us")),
    };
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(format!("{s:?}: must be a non-negative duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let a = Args::parse();
    match run(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-bottleneck: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: Args) -> Result<(), String> {
    if !(a.rate_mbps > 0.0 && a.rate_mbps.is_finite()) {
        return Err(format!("--rate-mbps {}: must be positive", a.rate_mbps));
    }
    if a.kmin_kb > a.kmax_kb || !(0.0..=1.0).contains(&a.pmax) {
        return Err("RED needs --kmin-kb <= --kmax-kb and 0 <= --pmax <= 1".into());
    }
    if let Some(p) = &a.plot {
        rdma_fabric::plot::check_path(p).map_err(|e| e.to_string())?;
    }
    let red = (!a.no_ecn).then_some(Red { kmin_bytes: a.kmin_kb * 1000, kmax_bytes: a.kmax_kb * 1000, pmax: a.pmax });
    let cfg = RouterConfig {
        left: Side { netns: a.left.netns, dev: a.dev.clone(), addrs: a.left.addrs },
        right: Side { netns: a.right.netns, dev: a.dev, addrs: a.right.addrs },
        rate_bps: (a.rate_mbps * 1e6) as u64,
        buffer_bytes: a.buffer_kb * 1000,
        red,
        seed: a.seed,
        window: Duration::from_millis(a.window_ms.max(1)),
        mtu: a.mtu,
    };
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let router = Router::new(cfg).map_err(|e| e.to_string())?;
    if let Some(f) = &a.ready_file {
        std::fs::write(f, "ready\n").map_err(|e| format!("--ready-file {}: {e}", f.display()))?;
    }
    if !a.quiet {
        eprintln!(
            "rdma-bottleneck: up; forwarding {}",
            a.duration.map_or("until SIGINT".into(), |d| format!("for {d:?}"))
        );
    }
    let quiet = a.quiet;
    let (report, series) = router
        .run(&STOP, a.duration, a.warmup, |t, line| {
            if !quiet {
                eprintln!("  t={:>3}s  {line}", t.as_secs());
            }
        })
        .map_err(|e| e.to_string())?;
    if let Some(p) = &a.plot {
        let caption = format!("live bottleneck, {} Mb/s: per-flow delivered rate", a.rate_mbps);
        rdma_fabric::plot::write_series(&caption, &series, p).map_err(|e| e.to_string())?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}
