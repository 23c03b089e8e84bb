//! What the UDP backend is configured with and its fixed sizes: a leaf
//! that every part of the backend may use.

use crate::faults::FaultConfig;

/// Datagrams per `recvmmsg`.
pub const BATCH: usize = 32;

/// Packets built per round of sending: four GSO runs of 4 KiB packets.
pub const TX_BATCH: usize = 64;

/// Full rounds of [`TX_BATCH`] packets one [`UdpIo::transmit`](super::UdpIo::transmit) call may
/// send (about 1 MiB at a 4 KiB MTU). The device lock is held while it
/// sends, and a QP can have megabytes of READ responses queued: without a
/// bound, receive, timers and the application (an unrelated QP's ACK)
/// waited for all of them. The caller comes back at once for the rest
/// ([`UdpIo::sends_left`](super::UdpIo::sends_left)).
pub const TX_BATCHES_PER_CALL: usize = 4;

/// Send sockets (UDP source ports) per device; more QPs share them.
pub const MAX_TX_SOCKETS: usize = 16;

/// What the kernel offloads for this backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    /// Runs of equal-sized packets leave as one UDP_SEGMENT send.
    pub gso: bool,
    /// The receive socket takes UDP_GRO super-datagrams.
    pub gro: bool,
}

/// Which system calls move the packets. Both drivers use the same
/// sockets, offloads and packet layout, and pass the same tests.
///
/// The environment variable `SOFTROCE_IO_DRIVER` (`io-uring` or
/// `sockets`), when set, overrides the configured choice, so that a whole
/// test suite or an unchanged application runs on either driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoDriver {
    /// `recvmmsg` / `sendmmsg` on the sockets: the default, because on
    /// loopback it measured faster than io_uring (README, Performance).
    #[default]
    Sockets,
    /// io_uring: a multishot `recvmsg` over a ring of registered buffers,
    /// and every send of a round in one `io_uring_enter`. Where the kernel
    /// lacks it (multishot `recvmsg` and provided-buffer rings came in
    /// Linux 6.0) or forbids it, the device falls back to sockets with a
    /// warning; `rdma_core_rs::Context::io_driver` says which one runs.
    IoUring,
}

impl IoDriver {
    /// The name used by `SOFTROCE_IO_DRIVER`, rdma-perf's `--io` and reports.
    pub fn name(self) -> &'static str {
        match self {
            IoDriver::IoUring => "io-uring",
            IoDriver::Sockets => "sockets",
        }
    }
}

impl std::str::FromStr for IoDriver {
    type Err = String;
    fn from_str(s: &str) -> Result<IoDriver, String> {
        match s {
            "io-uring" | "io_uring" | "uring" => Ok(IoDriver::IoUring),
            "sockets" | "socket" => Ok(IoDriver::Sockets),
            other => Err(format!("unknown I/O driver '{other}' (expected io-uring or sockets)")),
        }
    }
}

/// What the UDP backend is told when it binds: the part of a device's
/// configuration (`rdma_core_rs::DeviceConfig`, which says what each field
/// means for a device) that concerns its sockets.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// The scope of an IPv6 link-local address (an interface index).
    pub scope_id: u32,
    /// One datagram per packet: no UDP GSO on send, no GRO on receive.
    pub plain_datagrams: bool,
    /// No UDP GRO on receive, while sends may still use GSO: for the
    /// members of a port that are never alone there, the engines of one
    /// device (a member alone takes GRO, and one that stops must not be
    /// holding merged datagrams: [`crate::share`]).
    pub plain_receive: bool,
    /// Share port 4791 of the address with the other processes of the
    /// host that open the same device ([`crate::share`]).
    pub shared: bool,
    /// Faults injected on every packet sent.
    pub faults: FaultConfig,
    /// The system calls that move packets.
    pub io_driver: IoDriver,
    /// Records every packet sent and received (pcap).
    pub pcap: Option<std::path::PathBuf>,
    /// Every packet with `sendto` from unconnected sockets.
    pub unconnected_sends: bool,
    /// Data packets leave ECT(0) where their traffic class leaves the ECN
    /// bits at 00 (the send sockets' TOS).
    pub ecn_capable: bool,
    /// The device drives the backend through its [`crate::Link`] interface,
    /// one packet a call, with the frame driver of every link: plain
    /// datagrams, the socket driver, unconnected sends, no port shared,
    /// and faults and capture left to the link wrappers; IP multicast
    /// through [`crate::Link::join_group`].
    pub as_link: bool,
}

impl Default for UdpConfig {
    /// A device's defaults: ECN-capable data packets, the rest off.
    fn default() -> UdpConfig {
        UdpConfig {
            scope_id: 0,
            plain_datagrams: false,
            plain_receive: false,
            shared: false,
            faults: FaultConfig::default(),
            io_driver: IoDriver::Sockets,
            pcap: None,
            unconnected_sends: false,
            ecn_capable: true,
            as_link: false,
        }
    }
}
