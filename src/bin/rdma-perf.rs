//! rdma-perf: perftest-style RDMA bandwidth and latency tests over the
//! software RoCE v2 stack.

use clap::Parser;
use rdma_core_rs::{DeviceConfig, FaultConfig, IoDriver, Mtu};
use softroce::perf::{self, AtomicType, Config, Exchange, Role, TestKind};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

/// Run a perftest-style test over RoCE v2 on UDP port 4791.
///
/// Server: `rdma-perf write-bw` (waits for a client). Client: `rdma-perf
/// write-bw SERVER`. Both in one process on 127.0.0.1 and 127.0.0.2:
/// `rdma-perf write-bw --loopback`.
#[derive(Parser, Debug)]
#[command(
    name = "rdma-perf",
    version,
    after_help = "Exit status: 0 on success; 1 when the test could not run; 3 when --verify found wrong data.\n\
Latency figures are full round trips (perftest prints half of them)."
)]
struct Args {
    /// The test.
    #[arg(value_enum)]
    test: TestKind,
    /// The server to connect to (client mode). Without it: server mode.
    peer: Option<String>,
    /// Message size in bytes [default: 65536 for bandwidth, 2 for latency, 8 for atomics].
    #[arg(short = 's', long)]
    size: Option<usize>,
    /// Iterations per QP [default: 5000 for bandwidth, 1000 for latency].
    #[arg(short = 'n', long = "iters")]
    iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    duration: Option<f64>,
    /// Queue pairs (bandwidth tests).
    #[arg(short = 'q', long, default_value_t = 1)]
    qps: usize,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: 4096 on loopback, else 1024].
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// GID index (a soft device has one GID, index 0).
    #[arg(short = 'x', long = "gid-index", default_value_t = 0)]
    gid_index: u32,
    /// Messages in flight per QP.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: usize,
    /// Atomic operation of the atomic tests.
    #[arg(short = 'A', long = "atomic-type", value_enum, default_value_t = AtomicType::FetchAndAdd)]
    atomic: AtomicType,
    /// The port of the exchange: TCP, or with -R the RDMA CM's (RDMA_PS_TCP).
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Out-of-band exchange: perftest's (pairs with ib_write_bw and the
    /// other perftest tools) or rdma-perf's own (both sides rdma-perf; the
    /// server takes the client's options and --verify checks every byte).
    /// rdma-cm is perftest's over the RDMA CM, as -R.
    #[arg(long = "oob", value_enum, default_value_t = Exchange::Perftest)]
    oob: Exchange,
    /// Connect over the RDMA CM, as perftest's -R (--rdma_cm): the exchange
    /// goes over a control RC connection the CM sets up on --port (a SEND
    /// per message, no TCP), and the test QPs are connected by the CM
    /// (REQ/REP/RTU on QP1) instead of by hand. Pairs with `ib_write_bw -R`
    /// and the other perftest tools given -R; both sides need it. RC only
    /// (perftest refuses UC with -R); IPv4 with perftest 4.5, whose -R
    /// resolves IPv4 addresses only.
    #[arg(short = 'R', long = "rdma_cm", visible_alias = "rdma-cm")]
    rdma_cm: bool,
    /// The test QPs' transport, as perftest's -c: RC (UC and UD run in the
    /// ping-pong examples; with -R, UC is refused as perftest refuses it).
    #[arg(short = 'c', long = "connection", default_value = "RC", value_parser = ["RC", "UC", "UD"])]
    connection: String,
    /// Local address of the soft device (its RoCE v2 GID).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Run the server in this process too, on --loopback-peer.
    #[arg(long, conflicts_with = "peer")]
    loopback: bool,
    /// The server's address in --loopback runs.
    #[arg(long, default_value = "127.0.0.2", requires = "loopback")]
    loopback_peer: IpAddr,
    /// Check every byte that arrived (and the final value of atomic targets).
    /// Every message in flight then has a buffer of its own; without it a
    /// bandwidth test uses perftest's buffers (one per QP for messages over
    /// half a page).
    #[arg(long)]
    verify: bool,
    /// One JSON object per test on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
    /// Fault injection on the packets this side sends: probability that one is lost.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Fault injection: probability that a packet is swapped with the next.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// The test QPs' local ACK timeout, 4.096 us x 2^N (perftest's -u): how
    /// long a request waits for its ACK before it is sent again, 7 times at
    /// most. 14 (67 ms) is perftest's and the RDMA CM's; on a machine with
    /// more busy processes than cores, a peer that gets no core for longer
    /// than 8 such timeouts ends the run with RetryExcErr.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(1..=31))]
    qp_timeout: u8,
    /// Fault injection: probability that a packet is sent twice.
    #[arg(long, default_value_t = 0.0)]
    duplicate: f64,
    /// Fault injection: probability that a packet gets one bit flipped (its ICRC then fails).
    #[arg(long, default_value_t = 0.0)]
    corrupt: f64,
    /// Seed of the fault injection.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Latency tests wait for completions (spin, then sleep on the socket)
    /// instead of polling: send-lat, read-lat, atomic-lat (perftest's -e).
    #[arg(short = 'e', long)]
    events: bool,
    /// Microseconds a blocking wait spins, while packets keep moving, before it sleeps.
    #[arg(long = "spin-us", default_value_t = DeviceConfig::DEFAULT_SPIN.as_micros() as u64)]
    spin_us: u64,
    /// One datagram per packet: no UDP GSO on send, no GRO on receive.
    #[arg(long = "no-offload")]
    no_offload: bool,
    /// Send every packet with sendto from unconnected sockets, as before
    /// connected sends (for comparison).
    #[arg(long = "unconnected")]
    unconnected: bool,
    /// Drive the UDP backend through the link driver, one packet a system
    /// call, like every other link (the link wrappers take --loss and
    /// --pcap); no GSO, GRO or io_uring (for comparison).
    #[arg(long = "udp-as-link")]
    udp_as_link: bool,
    /// A simulated longer link: every packet this side sends arrives this
    /// many microseconds later (in real time, over any backend; the UDP
    /// backend then runs as a link, as --udp-as-link).
    #[arg(long = "link-delay-us", default_value_t = 0)]
    link_delay_us: u64,
    /// A simulated slower link: this side's packets leave at this rate, in
    /// order, behind a queue of 4 MiB that drops when full (0: no limit).
    #[arg(long = "link-rate-mbps", default_value_t = 0)]
    link_rate_mbps: u64,
    /// Share each device's UDP port with the host's other processes, as
    /// the drop-in libibverbs does (no GRO; see docs/shared-device.md).
    #[arg(long = "shared")]
    shared: bool,
    /// Engines per device, each on a core of its own, the QPs spread over
    /// them (`DeviceConfig::threads`; docs/multi-core-device.md). Without
    /// it: SOFTROCE_THREADS if set, else 1, one engine driven from the
    /// benchmark's own thread, the lowest latency. More serve many QPs
    /// (-q) on many cores.
    #[arg(long = "threads", value_parser = clap::value_parser!(u16).range(1..=rdma_core_rs::MAX_THREADS as i64))]
    threads: Option<u16>,
    /// Microseconds a lone ACK may wait to leave with the next packet sent,
    /// so that a reply carries it (0: every ACK at once, as rxe does).
    /// Only QPs that send themselves hold ACKs.
    #[arg(long = "ack-delay-us", default_value_t = rdma_core_rs::DeviceConfig::DEFAULT_ACK_DELAY.as_micros() as u64)]
    ack_delay_us: u64,
    /// The system calls that move packets: sockets (recvmmsg/sendmmsg) or
    /// io-uring (multishot receive into registered buffers; falls back to
    /// sockets where the kernel lacks it). SOFTROCE_IO_DRIVER overrides it.
    #[arg(long = "io", default_value = "sockets", value_parser = parse_io_driver)]
    io: IoDriver,
    /// The most memory this side registers (and lets its queued requests
    /// take), whatever the peer asks for: bytes, or with K, M, G or T.
    /// A server refuses a client that asks for more.
    #[arg(long = "mem-budget", default_value = "1G", value_parser = perf::budget::parse_size)]
    mem_budget: u64,
    /// The traffic class of this side's QPs (IP TOS / IPv6 traffic class:
    /// DSCP << 2 | ECN), as perftest's --tos. Data packets whose ECN bits
    /// are 00 leave ECN-capable (ECT(0)) unless --no-ecn is given.
    #[arg(short = 'T', long = "tos", default_value_t = 0)]
    tos: u8,
    /// The entry of the port's P_Key table this side's QPs use, as
    /// perftest's --pkey_index: their partition, on native IB ports a
    /// subnet manager put in several (`rdma-sm --partition`).
    #[arg(long = "pkey_index", alias = "pkey-index", default_value_t = 0, value_name = "INDEX")]
    pkey_index: u16,
    /// Data packets leave not ECN-capable (ECN bits as --tos gives them).
    #[arg(long = "no-ecn")]
    no_ecn: bool,
    /// DCQCN congestion control on this side's device: paper (Zhu et al.
    /// 2015) or nvidia (CX-4+ firmware defaults), starting from --line-rate,
    /// or off. CNPs for CE-marked data are sent either way.
    #[arg(long = "dcqcn", value_parser = parse_dcqcn)]
    dcqcn: Option<Dcqcn>,
    /// The congestion controller on this side's device: dcqcn (the
    /// --dcqcn preset, paper if none is given), timely or swift (from RTT
    /// samples alone: nothing asked of the network) or none (the default);
    /// hpcc needs switches that stamp telemetry: rdma-fabric only.
    #[arg(long = "cc", value_parser = parse_cc)]
    cc: Option<CcChoice>,
    /// TIMELY and Swift: the path's RTT without queues, µs (TIMELY's
    /// gradient unit; Swift's target starts 25 % above it).
    #[arg(long = "min-rtt-us", default_value_t = 50)]
    min_rtt_us: u64,
    /// The line rate the controller starts from and never exceeds, Gb/s: the NIC's
    /// speed (set it near the path's when a slow bottleneck is under study).
    #[arg(long = "line-rate", default_value_t = 100.0, value_parser = parse_line_rate)]
    line_rate: f64,
    #[command(flatten)]
    link: softroce::backend::LinkArgs,
}

/// `--cc`'s value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CcChoice {
    Dcqcn,
    Timely,
    Swift,
    None,
}

fn parse_cc(s: &str) -> Result<CcChoice, String> {
    match s {
        "dcqcn" => Ok(CcChoice::Dcqcn),
        "timely" => Ok(CcChoice::Timely),
        "swift" => Ok(CcChoice::Swift),
        "none" => Ok(CcChoice::None),
        // HPCC's input is telemetry that switches stamp into packets: no
        // socket path has it. Said here rather than run without input.
        "hpcc" => Err("hpcc needs in-band telemetry from the switches on the path, which real sockets do not \
                       carry: run it in the simulated fabric (rdma-fabric run NAME --cc hpcc); here use dcqcn, \
                       timely, swift or none"
            .into()),
        _ => Err(format!("{s:?}: expected dcqcn, timely, swift or none (hpcc: rdma-fabric only)")),
    }
}

/// The controller `--cc` and `--dcqcn` ask for together: `--dcqcn` alone
/// keeps its meaning; with `--cc` it may only name DCQCN's preset (or be
/// off when `--cc` is not dcqcn).
fn controller(
    cc: Option<CcChoice>,
    dcqcn: Option<Dcqcn>,
    line_rate_gbps: f64,
    min_rtt: std::time::Duration,
) -> Result<Option<std::sync::Arc<dyn rdma_core_rs::ControllerFactory>>, String> {
    use std::sync::Arc;
    let bps = (line_rate_gbps * 1e9) as u64;
    Ok(match (cc, dcqcn) {
        (Some(CcChoice::Dcqcn), Some(Dcqcn::Off)) => return Err("--cc dcqcn and --dcqcn off contradict".into()),
        (Some(CcChoice::Timely | CcChoice::Swift | CcChoice::None), Some(Dcqcn::Paper | Dcqcn::Nvidia)) => {
            return Err("--dcqcn names a preset, --cc another algorithm: give one of them".into())
        }
        (Some(CcChoice::Dcqcn), d) => d.unwrap_or(Dcqcn::Paper).params(line_rate_gbps).map(|p| Arc::new(p) as Arc<_>),
        (Some(CcChoice::Timely), _) => Some(Arc::new(rdma_core_rs::TimelyParams {
            // Real sockets wake late: as DCQCN's (see `PACER_BURST`).
            pacer_burst: PACER_BURST,
            ..rdma_core_rs::TimelyParams::new(bps, min_rtt)
        })),
        // Windows in 1024-byte packets: the smallest path MTU a RoCE
        // device offers, so the window in bytes is right whatever the MTU.
        (Some(CcChoice::Swift), _) => Some(Arc::new(rdma_core_rs::SwiftParams::new(bps, min_rtt, 1024))),
        (Some(CcChoice::None), _) => None,
        (None, d) => d.unwrap_or(Dcqcn::Off).params(line_rate_gbps).map(|p| Arc::new(p) as Arc<_>),
    })
}

/// `--dcqcn`'s value: a preset, or off.
#[derive(Debug, Clone, Copy)]
enum Dcqcn {
    Off,
    Paper,
    Nvidia,
}

impl Dcqcn {
    fn params(self, line_rate_gbps: f64) -> Option<rdma_core_rs::DcqcnParams> {
        use rdma_core_rs::DcqcnParams;
        let bps = (line_rate_gbps * 1e9) as u64;
        let preset = match self {
            Dcqcn::Off => return None,
            Dcqcn::Paper => DcqcnParams::paper(bps),
            Dcqcn::Nvidia => DcqcnParams::nvidia(bps),
        };
        // Real sockets wake late: let the pacer make up for it (see the field).
        Some(DcqcnParams { pacer_burst: PACER_BURST, ..preset })
    }
}

/// The pacer's catch-up allowance on real sockets.
const PACER_BURST: std::time::Duration = std::time::Duration::from_micros(250);

fn parse_dcqcn(s: &str) -> Result<Dcqcn, String> {
    match s {
        "off" => Ok(Dcqcn::Off),
        "paper" => Ok(Dcqcn::Paper),
        "nvidia" => Ok(Dcqcn::Nvidia),
        _ => Err(format!("{s:?}: expected paper, nvidia or off")),
    }
}

fn parse_line_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.001..=1000.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: expected Gb/s between 0.001 and 1000")),
    }
}

fn parse_io_driver(s: &str) -> Result<IoDriver, String> {
    s.parse()
}

fn config(a: &Args) -> Result<Config, String> {
    match (a.connection.as_str(), a.rdma_cm) {
        ("RC", _) => {}
        ("UC", true) => {
            return Err("UC is not supported in librdmacm (-R connects RC and UD QPs), as perftest says".into())
        }
        (c, _) => {
            return Err(format!("-c {c}: rdma-perf runs RC QPs (examples/uc_pingpong and ud_pingpong cover UC and UD)"))
        }
    }
    let role = match (&a.peer, a.loopback) {
        (_, true) => Role::Loopback { peer: a.loopback_peer },
        (Some(p), false) => {
            let with_port = if p.parse::<IpAddr>().is_ok() || !p.contains(':') {
                format!("{}:{}", p.trim_matches(['[', ']']), a.port)
            } else {
                p.clone()
            };
            let addr: SocketAddr = match p.parse::<IpAddr>() {
                Ok(ip) => SocketAddr::new(ip, a.port),
                Err(_) => with_port
                    .to_socket_addrs()
                    .map_err(|e| format!("cannot resolve the server {p:?}: {e}"))?
                    .next()
                    .ok_or_else(|| format!("the server {p:?} has no address"))?,
            };
            Role::Client(addr)
        }
        (None, false) => Role::Server,
    };
    let mtu = match a.mtu {
        Some(m) => Mtu::from_bytes(m).ok_or_else(|| format!("--mtu {m}: use 256, 512, 1024, 2048 or 4096"))?,
        // Loopback and the in-process link carry 4 KiB packets; a netdev's MTU is 1500 by default.
        None if a.bind.is_loopback() && a.link.netdev.is_none() => Mtu::Mtu4096,
        None => Mtu::Mtu1024,
    };
    let duration = match a.duration {
        Some(d) if !(d > 0.0 && d.is_finite()) => {
            return Err(format!("--duration {d}: must be a positive number of seconds"))
        }
        Some(d) => Some(Duration::from_secs_f64(d)),
        None => None,
    };
    Ok(Config {
        test: a.test,
        size: a.size.unwrap_or(a.test.default_size()),
        iters: a.iters.unwrap_or(a.test.default_iters()),
        duration,
        qps: a.qps,
        mtu,
        gid_index: a.gid_index,
        tx_depth: a.tx_depth,
        qp_timeout: a.qp_timeout,
        atomic: a.atomic,
        verify: a.verify,
        faults: FaultConfig {
            loss: a.loss,
            duplicate: a.duplicate,
            reorder: a.reorder,
            corrupt: a.corrupt,
            seed: a.seed,
        },
        bind: a.bind,
        role,
        port: a.port,
        exchange: match (a.rdma_cm, a.oob) {
            (false, oob) => oob,
            (true, Exchange::Perftest | Exchange::RdmaCm) => Exchange::RdmaCm,
            (true, Exchange::RdmaPerf) => {
                return Err("-R (--rdma_cm) speaks perftest's exchange over the RDMA CM: drop --oob rdma-perf".into())
            }
        },
        progress: !a.quiet,
        events: a.events,
        spin: Duration::from_micros(a.spin_us),
        plain_datagrams: a.no_offload,
        unconnected_sends: a.unconnected,
        udp_as_link: a.udp_as_link,
        delay: rdma_core_rs::link::delay::DelayConfig {
            latency: Duration::from_micros(a.link_delay_us),
            rate_bps: a.link_rate_mbps.saturating_mul(1_000_000),
            queue_bytes: 0,
        },
        shared: a.shared,
        threads: a.threads.map_or(0, usize::from),
        io_driver: a.io,
        ack_delay: Duration::from_micros(a.ack_delay_us),
        mem_budget: a.mem_budget,
        tos: a.tos,
        pkey_index: a.pkey_index,
        ecn_capable: !a.no_ecn,
        cc: controller(a.cc, a.dcqcn, a.line_rate, Duration::from_micros(a.min_rtt_us))?,
        link: a.link.clone(),
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("RDMA_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rdma-perf: {e}");
            return ExitCode::from(1);
        }
    };
    match perf::run(&cfg) {
        Ok(report) => {
            if args.json {
                println!("{}", serde_json::to_string(&report).expect("a report serializes"));
            } else {
                print!("{}", report.table());
            }
            if report.verified == Some(false) {
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("rdma-perf: {} failed: {e}", cfg.test);
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_core_rs::{DcqcnParams, TimelyParams};

    fn pick(cc: Option<CcChoice>, dcqcn: Option<Dcqcn>) -> Result<Option<&'static str>, String> {
        let f = controller(cc, dcqcn, 10.0, Duration::from_micros(40))?;
        Ok(f.map(|f| f.name()))
    }

    /// `--dcqcn` alone keeps its meaning; `--cc` picks the algorithm and
    /// `--dcqcn` may only agree with it.
    #[test]
    fn cc_and_dcqcn_combine_or_refuse() {
        assert_eq!(pick(None, None), Ok(None), "off by default");
        assert_eq!(pick(None, Some(Dcqcn::Paper)), Ok(Some("dcqcn")));
        assert_eq!(pick(Some(CcChoice::Dcqcn), None), Ok(Some("dcqcn")));
        assert_eq!(pick(Some(CcChoice::Timely), Some(Dcqcn::Off)), Ok(Some("timely")));
        assert_eq!(pick(Some(CcChoice::None), None), Ok(None));
        assert!(pick(Some(CcChoice::Dcqcn), Some(Dcqcn::Off)).is_err());
        assert!(pick(Some(CcChoice::Timely), Some(Dcqcn::Nvidia)).is_err());
        assert_eq!(pick(Some(CcChoice::Swift), None), Ok(Some("swift")));
        assert!(pick(Some(CcChoice::Swift), Some(Dcqcn::Paper)).is_err());
        assert_eq!(parse_cc("swift"), Ok(CcChoice::Swift));
        assert!(parse_cc("hpcc").unwrap_err().contains("rdma-fabric"));
        assert!(pick(Some(CcChoice::None), Some(Dcqcn::Paper)).is_err());
        assert!(parse_cc("reno").is_err());
    }

    /// The parameters behind each choice: DCQCN's preset (paper unless
    /// `--dcqcn` names one) and TIMELY's, both at --line-rate with the
    /// sockets' pacer allowance.
    #[test]
    fn each_choice_carries_its_parameters() {
        let f = controller(Some(CcChoice::Dcqcn), Some(Dcqcn::Nvidia), 10.0, Duration::ZERO).unwrap().unwrap();
        let want = DcqcnParams { pacer_burst: PACER_BURST, ..DcqcnParams::nvidia(10_000_000_000) };
        assert_eq!(f.as_any().downcast_ref::<DcqcnParams>(), Some(&want));
        let f = controller(Some(CcChoice::Dcqcn), None, 10.0, Duration::ZERO).unwrap().unwrap();
        assert_eq!(
            f.as_any().downcast_ref::<DcqcnParams>().map(|p| p.variant),
            Some(rdma_transport::cc::RpVariant::Paper)
        );
        let f = controller(Some(CcChoice::Timely), None, 10.0, Duration::from_micros(40)).unwrap().unwrap();
        let want =
            TimelyParams { pacer_burst: PACER_BURST, ..TimelyParams::new(10_000_000_000, Duration::from_micros(40)) };
        assert_eq!(f.as_any().downcast_ref::<TimelyParams>(), Some(&want));
    }
}
