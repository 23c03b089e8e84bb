//! rdma-perf: perftest-style bandwidth and latency tests over the verbs
//! API. A client and a server exchange QP numbers, PSNs, GIDs and buffer
//! keys out of band ([`oob`]), then the client drives the RDMA traffic
//! ([`client`]) while the server answers or stays passive ([`server`]).
//! `--loopback` runs both in one process, on two loopback addresses.

pub mod budget;
pub mod client;
pub mod config;
pub mod error;
pub mod layout;
pub mod oob;
pub mod perftest;
pub mod rdma_cm;
pub mod report;
pub mod server;
pub mod side;

use std::time::Duration;

pub use config::{AtomicType, Config, Exchange, Role, TestKind};
pub use error::PerfError;
pub use report::Report;

/// Runs a test as the configured role and returns this side's report (in
/// loopback: the client's, with the server's verdict and counters folded in).
pub fn run(cfg: &Config) -> Result<Report, PerfError> {
    cfg.validate()?;
    match &cfg.role {
        Role::Client(addr) if cfg.exchange == Exchange::RdmaCm => {
            let ctx = side::open_context(cfg.bind, cfg, cfg.device())?;
            let control = rdma_cm::Control::connect(&ctx, cfg, *addr).map_err(|e| match e {
                PerfError::Failed(m) => PerfError::Failed(format!("cannot reach the server at {addr}: {m}")),
                other => other,
            })?;
            client::run_perftest(cfg, &mut perftest::Link::over_cm(control, oob::OOB_TIMEOUT))
        }
        Role::Server if cfg.exchange == Exchange::RdmaCm => {
            let ctx = side::open_context(cfg.bind, cfg, cfg.device())?;
            let control = rdma_cm::Control::accept(&ctx, cfg)?;
            server::run_perftest(cfg, &mut perftest::Link::over_cm(control, oob::OOB_TIMEOUT))
        }
        Role::Client(addr) => {
            let stream = std::net::TcpStream::connect_timeout(addr, Duration::from_secs(10)).map_err(|e| {
                PerfError::Oob(std::io::Error::new(e.kind(), format!("cannot reach the server at {addr}: {e}")))
            })?;
            match cfg.exchange {
                Exchange::Perftest | Exchange::RdmaCm => {
                    client::run_perftest(cfg, &mut perftest::Link::new(stream, true, oob::OOB_TIMEOUT)?)
                }
                Exchange::RdmaPerf => client::run(cfg, &mut oob::TcpOob::new(stream)?),
            }
        }
        Role::Server => {
            // Every address, as perftest's server does: its clients speak
            // IPv4 to the exchange even when the GIDs are IPv6.
            let listener = std::net::TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, cfg.port))
                .or_else(|_| std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, cfg.port)))
                .map_err(|e| {
                    PerfError::Oob(std::io::Error::new(
                        e.kind(),
                        format!("cannot listen on TCP port {}: {e}", cfg.port),
                    ))
                })?;
            tracing::info!(port = cfg.port, "waiting for a client");
            if cfg.progress {
                eprintln!("rdma-perf: waiting for a client on TCP port {} (device {})", cfg.port, cfg.bind);
            }
            let (stream, from) = listener.accept()?;
            tracing::info!(%from, "client connected");
            match cfg.exchange {
                Exchange::Perftest | Exchange::RdmaCm => {
                    server::run_perftest(cfg, &mut perftest::Link::new(stream, false, oob::OOB_TIMEOUT)?)
                }
                Exchange::RdmaPerf => server::run(cfg, cfg.bind, &mut oob::TcpOob::new(stream)?),
            }
        }
        Role::Loopback { peer } => {
            let (mut c, mut s) = oob::channel_pair();
            let server_addr = *peer;
            let server_cfg = cfg.clone();
            let server = std::thread::Builder::new()
                .name("rdma-perf-server".into())
                .spawn(move || server::run(&server_cfg, server_addr, &mut s))
                .map_err(PerfError::Oob)?;
            let client_result = client::run(cfg, &mut c);
            drop(c);
            let server_result = server.join().map_err(|_| PerfError::Failed("the server thread panicked".into()))?;
            let mut report = client_result?;
            let server_report = server_result?;
            report.retransmits += server_report.retransmits;
            report.counters.add(&server_report.counters);
            Ok(report)
        }
    }
}
