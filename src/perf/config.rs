//! The options of a run: the test ([`TestKind`]), the atomic operation,
//! the out-of-band exchange, this process's role, and [`Config`], which
//! holds them all, with the checks of their combination.

use super::error::PerfError;
use rdma_core_rs::{FaultConfig, Mtu};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The tests, named as the perftest binaries are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TestKind {
    WriteBw,
    ReadBw,
    SendBw,
    AtomicBw,
    WriteLat,
    ReadLat,
    SendLat,
    AtomicLat,
}

impl TestKind {
    pub const ALL: [TestKind; 8] = [
        TestKind::WriteBw,
        TestKind::ReadBw,
        TestKind::SendBw,
        TestKind::AtomicBw,
        TestKind::WriteLat,
        TestKind::ReadLat,
        TestKind::SendLat,
        TestKind::AtomicLat,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TestKind::WriteBw => "write-bw",
            TestKind::ReadBw => "read-bw",
            TestKind::SendBw => "send-bw",
            TestKind::AtomicBw => "atomic-bw",
            TestKind::WriteLat => "write-lat",
            TestKind::ReadLat => "read-lat",
            TestKind::SendLat => "send-lat",
            TestKind::AtomicLat => "atomic-lat",
        }
    }

    pub fn from_name(s: &str) -> Option<TestKind> {
        TestKind::ALL.into_iter().find(|t| t.name() == s)
    }

    pub fn is_latency(self) -> bool {
        matches!(self, TestKind::WriteLat | TestKind::ReadLat | TestKind::SendLat | TestKind::AtomicLat)
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, TestKind::AtomicBw | TestKind::AtomicLat)
    }

    /// perftest's default message size.
    pub fn default_size(self) -> usize {
        match self {
            _ if self.is_atomic() => 8,
            _ if self.is_latency() => 2,
            _ => 65536,
        }
    }

    /// perftest's default iteration count.
    pub fn default_iters(self) -> u64 {
        if self.is_latency() {
            1000
        } else {
            5000
        }
    }
}

impl fmt::Display for TestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which atomic operation the atomic tests use (perftest's `-A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AtomicType {
    #[default]
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

impl AtomicType {
    pub fn name(self) -> &'static str {
        match self {
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
        }
    }
}

/// Which out-of-band exchange a client and server speak over TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Exchange {
    /// perftest's (ib_write_bw and friends): pairs with perftest peers.
    #[default]
    Perftest,
    /// rdma-perf's own: both sides rdma-perf; the client's options rule
    /// and `--verify` checks every byte on both sides.
    RdmaPerf,
    /// perftest's with `-R` (`--rdma_cm`): the exchange over a control
    /// connection of the RDMA CM on the port, the test QPs connected over
    /// the RDMA CM. Pairs with `ib_write_bw -R` and friends.
    #[value(name = "rdma-cm")]
    RdmaCm,
}

/// Where this process sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Waits for a client on `bind`:port.
    Server,
    /// Connects to the server's out-of-band port at this address.
    Client(SocketAddr),
    /// Both sides in this process: the client on `bind`, the server on `peer`.
    Loopback { peer: IpAddr },
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub test: TestKind,
    pub size: usize,
    pub iters: u64,
    pub duration: Option<Duration>,
    pub qps: usize,
    pub mtu: Mtu,
    pub gid_index: u32,
    pub tx_depth: usize,
    /// The test QPs' local ACK timeout exponent (`-u/--qp-timeout`).
    pub qp_timeout: u8,
    pub atomic: AtomicType,
    pub verify: bool,
    pub faults: FaultConfig,
    pub bind: IpAddr,
    pub role: Role,
    /// The out-of-band TCP port.
    pub port: u16,
    /// The out-of-band exchange over TCP (`--loopback` uses rdma-perf's own).
    pub exchange: Exchange,
    /// Progress lines on stderr during long runs.
    pub progress: bool,
    /// Latency tests wait for completions in `CompletionQueue::wait`
    /// (spin, then sleep on the socket) instead of polling (perftest's `-e`).
    pub events: bool,
    /// How long blocking waits spin before they sleep (`DeviceConfig::spin`).
    pub spin: Duration,
    /// One datagram per packet: no UDP GSO/GRO (`DeviceConfig::plain_datagrams`).
    pub plain_datagrams: bool,
    /// Send from unconnected sockets (`DeviceConfig::unconnected_sends`).
    pub unconnected_sends: bool,
    /// Drive the UDP backend as a link, one packet a call
    /// (`DeviceConfig::udp_as_link`; `--udp-as-link`).
    pub udp_as_link: bool,
    /// A simulated longer, slower link (`DeviceConfig::delay`;
    /// `--link-delay-us`, `--link-rate-mbps`).
    pub delay: rdma_core_rs::link::delay::DelayConfig,
    /// Share the device's port with the host's other processes, as the
    /// drop-in library does (`DeviceConfig::shared`; `--shared`).
    pub shared: bool,
    /// Engines per device (`DeviceConfig::threads`; `--threads`).
    pub threads: usize,
    /// How long a lone ACK may wait for company (`DeviceConfig::ack_delay`).
    pub ack_delay: Duration,
    /// The system calls that move packets (`DeviceConfig::io_driver`).
    pub io_driver: rdma_core_rs::IoDriver,
    /// The most memory a side registers, and the most its queued requests
    /// may take, whoever asks ([`budget`](super::budget); `--mem-budget`).
    pub mem_budget: u64,
    /// The traffic class of this side's QPs (`-T/--tos`).
    pub tos: u8,
    /// The P_Key table entry (partition) of this side's QPs (`--pkey_index`).
    pub pkey_index: u16,
    /// Data packets leave ECN-capable (`DeviceConfig::ecn_capable`; `--no-ecn`).
    pub ecn_capable: bool,
    /// The congestion controller of this side's device
    /// (`DeviceConfig::controller`; `--cc`, `--dcqcn`); `None`: none.
    pub cc: Option<std::sync::Arc<dyn rdma_core_rs::ControllerFactory>>,
    /// The backend (`--backend`, `--netdev`, `--lid`, `--pcap`).
    pub link: crate::backend::LinkArgs,
}

impl Config {
    /// The options of this side's soft device.
    pub fn device(&self) -> rdma_core_rs::DeviceConfig {
        rdma_core_rs::DeviceConfig {
            faults: self.faults,
            spin: self.spin,
            plain_datagrams: self.plain_datagrams,
            unconnected_sends: self.unconnected_sends,
            udp_as_link: self.udp_as_link,
            delay: self.delay,
            shared: self.shared,
            threads: self.threads,
            ack_delay: self.ack_delay,
            io_driver: self.io_driver,
            ecn_capable: self.ecn_capable,
            controller: self.cc.clone(),
            ..rdma_core_rs::DeviceConfig::default()
        }
    }

    /// Checks the combination of options.
    pub fn validate(&self) -> Result<(), PerfError> {
        let bad = |m: String| Err(PerfError::Config(m));
        if self.size == 0 {
            return bad("--size must be at least 1".into());
        }
        if self.size > 1 << 30 {
            return bad(format!("--size {} exceeds 1 GiB", self.size));
        }
        if self.test.is_atomic() && self.size != 8 {
            return bad(format!("atomic tests move 8 bytes; --size {} is not allowed", self.size));
        }
        if self.iters == 0 && self.duration.is_none() {
            return bad("--iters must be at least 1".into());
        }
        if self.qps == 0 || self.qps > 1024 {
            return bad(format!("--qps must be between 1 and 1024, not {}", self.qps));
        }
        if self.test.is_latency() && self.qps != 1 {
            return bad("latency tests use one QP (drop --qps)".into());
        }
        if self.tx_depth == 0 || self.tx_depth > 4096 {
            return bad(format!("--tx-depth must be between 1 and 4096, not {}", self.tx_depth));
        }
        if self.gid_index != 0 {
            return bad(format!(
                "GID index {}: a soft device has one GID, at index 0 (the RoCE v2 GID of --bind)",
                self.gid_index
            ));
        }
        if self.events && !matches!(self.test, TestKind::SendLat | TestKind::ReadLat | TestKind::AtomicLat) {
            return bad(format!(
                "--events is for send-lat, read-lat and atomic-lat; {} polls memory or streams, as perftest's does",
                self.test
            ));
        }
        self.faults.validate().map_err(PerfError::Config)?;
        self.link.validate().map_err(PerfError::Config)?;
        let raw = self.link.backend != crate::backend::BackendKind::Udp;
        if raw && self.link.netdev.is_none() && !matches!(self.role, Role::Loopback { .. }) {
            return bad(format!(
                "--backend {} between processes needs --netdev IFACE (without it: --loopback, in-process)",
                self.link.backend.link().name()
            ));
        }
        let tcp = !matches!(self.role, Role::Loopback { .. });
        if self.exchange == Exchange::RdmaCm && !tcp {
            return bad("-R (--rdma_cm) connects a client and a server process; --loopback runs without it".into());
        }
        let perftest = matches!(self.exchange, Exchange::Perftest | Exchange::RdmaCm);
        if tcp && perftest && self.duration.is_some() && !server_is_passive(self.test) {
            return bad(format!(
                "--duration with {} needs --oob rdma-perf (perftest's exchange ends these tests by count)",
                self.test
            ));
        }
        Ok(())
    }
}

/// The tests in which the server is passive (it only answers the engine).
pub fn server_is_passive(t: TestKind) -> bool {
    matches!(t, TestKind::WriteBw | TestKind::ReadBw | TestKind::AtomicBw | TestKind::ReadLat | TestKind::AtomicLat)
}
