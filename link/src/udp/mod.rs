//! The RoCE v2 backend over UDP sockets.
//!
//! The engine builds whole IP packets because the ICRC covers the IP and
//! UDP headers; through a UDP socket the kernel writes those headers
//! itself, so this backend sends only the part after the UDP header and
//! makes the kernel write what the engine assumed:
//!
//! - IPv4 with DF (`IP_PMTUDISC_DO`), no IP options, and the
//!   Identification Linux writes: 0 for an unconnected socket, and for a
//!   connected one the number the send path has learned ([`connected`];
//!   checked on captured packets by the `wire_capture` test);
//! - the QP's UDP source port (rxe's 0xC000..0xFFFF hash of the QPN): one
//!   send socket per source port, bound to the device address;
//! - destination port 4791;
//! - the TOS (IPv6: traffic class) byte the engine wrote: the QP's traffic
//!   class, DSCP and ECN, with ECT(0) on data packets by default
//!   (`DeviceConfig::ecn_capable`). A source port has one send socket per
//!   TOS it sends with ([`TxPort`], up to [`TOS_PER_PORT`]), each set to
//!   that TOS, so that neither data packets (ECT) nor ACKs (not ECT) need
//!   an `IP_TOS` / `IPV6_TCLASS` control message: one makes Linux's UDP
//!   send skip the connected socket's cached route (`udp_sendmsg` clears
//!   `connected` for IP-level control messages), which cost a busy round
//!   trip 0.2-0.3 us. A TOS past those takes the control message. A GSO
//!   message only groups packets of one TOS. The ICRC masks the byte, so a
//!   wrong one would go unnoticed: the `wire_capture` test checks it.
//! - the IPv4 TTL / IPv6 hop limit the engine wrote (the address vector's)
//!   travels the same way, both ways: an `IP_TTL` / `IPV6_HOPLIMIT` control
//!   message on send (none for 64, which every send socket is set to; IPv4
//!   TTL 0, which Linux refuses, leaves as 1) and `IP_RECVTTL` /
//!   `IPV6_RECVHOPLIMIT` on receive, so that the header a UD receive
//!   shows in its GRH area has the TTL the packet came with.
//!   The receive side asks for it once the device has a UD QP, or a
//!   capture (`UdpIo::want_hop_limits`): before, the header says 64.
//!
//! Receiving, one socket bound to the device address and port 4791 takes
//! every packet; each packet goes to the engine from its BTH on, with what
//! the socket reports of the headers the kernel took off as typed values
//! (`rdma_wire::DatagramHeaders`: addresses, ports, and the TOS that
//! `IP_RECVTOS` / `IPV6_RECVTCLASS` hand up with each datagram, in a control
//! message next to UDP_GRO's, with either driver; nothing is rebuilt to be
//! parsed again): the engine takes the ECN bits from them and counts CE
//! marks per device and per QP
//! (`Stats::ecn_ce_received`, `QueuePair::stats`). The one covered
//! field the socket hides, the sender's IPv4 Identification, is recovered
//! from the ICRC (`rdma_wire::ident`); the engine is told so with
//! `Endpoint::set_ipv4_ident_unknown`.
//!
//! System calls are batched and offloaded ([`send`], [`recv`]): runs of
//! equal-sized packets leave as one UDP_SEGMENT (GSO) send each, several
//! per `sendmmsg`; the receive socket takes UDP_GRO super-datagrams and
//! plain datagrams alike, [`BATCH`] per `recvmmsg`. The io_uring driver
//! (`uring`, [`IoDriver::IoUring`]) moves the same messages with a
//! multishot receive into registered buffers and one `io_uring_enter`
//! per round of sending.

// The parts, each a leaf or above leaves only: `config` and `sys` (what
// every part shares), `rx` and `batch` (the receive buffers and a round
// of sends), `connected`, `multicast`, `shared_port`, `uring` and
// `merged_window` (whether a datagram may be merged unsaid). This
// file holds the device's sockets (`UdpIo`) and uses those parts; `recv`
// and `send` extend `UdpIo` with receiving and sending, `link` makes it a
// `Link` (one packet a call), and nothing here uses them, so the modules form no cycle (docs/design.md, "Modules").
mod batch;
mod config;
mod connected;
mod link;
mod merged_window;
mod multicast;
mod recv;
mod rx;
mod send;
mod shared_port;
mod sys;
mod uring;

pub use config::{IoDriver, Offloads, UdpConfig, BATCH, MAX_TX_SOCKETS, TX_BATCH, TX_BATCHES_PER_CALL};
pub use multicast::group_ip;
pub(crate) use rx::{segment_size as rx_segment_size, split_datagram};

use crate::faults::DatagramFaults;
use crate::io_stats::IoStats;
use crate::share::Member;
use batch::TxSocket;
use rdma_transport::{Endpoint, Instant, RegionMemory, Transmit, MAX_PACKET};
use socket2::{Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use sys::{
    common_options, domain, grow_buffers, grow_send_buffer, refuse_datagrams, setsockopt_int, sock_addr, IpMarks,
    SocketId, DEFAULT_HOP_LIMIT, UDP_NO_CHECK6_RX,
};

/// The largest datagram UDP_GRO hands up.
const GRO_MAX: usize = 65536;

/// The driver in use and its state.
enum Driver {
    Sockets(rx::RxRing),
    Uring(Box<uring::Uring>),
}

/// Send sockets per source port, one per TOS (see the module's comment):
/// data packets' and ACKs' of two traffic classes fit.
pub(super) const TOS_PER_PORT: usize = 4;

/// One UDP source port: how many QPs use it, and its send sockets, the
/// first set to the device's data TOS (opened when the port is reserved)
/// and the others opened as other TOS values come, all bound to the port
/// with SO_REUSEPORT. Packets of one QP keep their order across them:
/// a round's messages go in order, socket after socket.
struct TxPort {
    users: usize,
    sockets: Vec<TxSocket>,
}

/// The sockets and buffers of one device.
pub struct UdpIo {
    // Declared first, dropped first: an io_uring ring ends its requests
    // before the sockets, buffers and batch they point at go.
    driver: Driver,
    local: IpAddr,
    scope_id: u32,
    /// The TOS / traffic class of each port's first send socket: that of
    /// data packets of a QP with traffic class 0 (ECT(0) by default).
    sock_tos: u8,
    rx: Socket,
    /// The port's membership when the host's processes share it.
    member: Option<Member>,
    /// Whether received datagrams bring their TTL / hop limit
    /// ([`UdpIo::want_hop_limits`]).
    hop_limits: bool,
    tx: HashMap<u16, TxPort>,
    /// Whether ports may open sockets for other TOS values (cleared when
    /// the kernel refuses one).
    more_sockets: bool,
    tx_bufs: Vec<Box<[u8]>>,
    tx_meta: Vec<Transmit>,
    /// The regions a round's packets send their payloads from, and where
    /// their bytes are while locked (kept to avoid an allocation per round).
    tx_regions: Vec<RegionMemory>,
    tx_spans: Vec<(usize, usize)>,
    /// Destination addresses of a send (kept to avoid an allocation per send).
    tx_addrs: Vec<SockAddr>,
    shifts: batch::ShiftCache,
    /// The messages of a round of sending (see `batch::Batch`).
    batch: Option<Box<batch::Batch>>,
    /// The fault injector (rdma-link's, the frame links' dice), when one is configured.
    faults: Option<DatagramFaults<(IpAddr, IpMarks)>>,
    /// `DeviceConfig::pcap`: every packet sent and received, recorded.
    capture: Option<crate::capture::IpTap>,
    offloads: Offloads,
    /// Whether send sockets connect to their first peer (see [`connected`]).
    connect: bool,
    /// Where IPv4 probes go (see `connected::probe`).
    sink: Option<(Socket, SockAddr)>,
    /// The last `transmit` stopped on its budget with packets left.
    tx_left: bool,
    /// The IP multicast groups joined, and their sockets ([`multicast`]).
    mcast: multicast::Groups,
    /// Whether a datagram read now may be merged without saying so (a
    /// shared port's member turned GRO off since the socket was drained).
    merged_window: merged_window::MergedWindow,
    pub stats: IoStats,
}

fn driver_kind(d: &Driver) -> IoDriver {
    match d {
        Driver::Sockets(_) => IoDriver::Sockets,
        Driver::Uring(_) => IoDriver::IoUring,
    }
}

/// Sets up the driver `want` asks for (or `SOFTROCE_IO_DRIVER` names):
/// io_uring falls back to sockets, with the reason traced.
fn open_driver(want: IoDriver, rx: &Socket, capacity: usize) -> io::Result<Driver> {
    let want = match std::env::var("SOFTROCE_IO_DRIVER") {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map_err(|e: String| io::Error::new(io::ErrorKind::InvalidInput, format!("SOFTROCE_IO_DRIVER: {e}")))?,
        _ => want,
    };
    if want == IoDriver::IoUring {
        match uring::Uring::new(rx.as_raw_fd(), capacity) {
            Ok(u) => return Ok(Driver::Uring(Box::new(u))),
            Err(e) => tracing::warn!(error = %e, "io_uring is unavailable: using the socket driver"),
        }
    }
    Ok(Driver::Sockets(rx::RxRing::new(capacity)))
}

impl UdpIo {
    /// Binds `local`:4791 with the options of `cfg`: its `scope_id` (an
    /// IPv6 link-local address), faults, offloads (UDP GSO and GRO, each
    /// used only where the kernel takes it), connected sends and driver.
    pub fn bind(local: IpAddr, cfg: &UdpConfig) -> io::Result<UdpIo> {
        if cfg.as_link && (cfg.shared || cfg.faults.is_active() || cfg.pcap.is_some()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the UDP backend as a link shares no port, and takes faults and capture from the link wrappers",
            ));
        }
        let (scope_id, offload) = (cfg.scope_id, !cfg.plain_datagrams && !cfg.as_link);
        let rx = Socket::new(domain(local), Type::DGRAM, Some(Protocol::UDP))?;
        common_options(&rx, local)?;
        if local.is_ipv6() {
            setsockopt_int(rx.as_raw_fd(), libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
        }
        grow_buffers(&rx);
        rx.set_nonblocking(true)?;
        let merged = offload && !cfg.plain_receive;
        let member = shared_port::bind_rx(&rx, local, scope_id, cfg.shared, merged)?;
        // A shared port's member takes GRO only while alone (it sets it).
        let gro =
            merged && (member.is_some() || setsockopt_int(rx.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok());
        // Every datagram's TOS comes up as a control message: its ECN bits
        // reach the engine in the datagram's headers.
        let (level, name) = if local.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_RECVTOS)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS)
        };
        if let Err(e) = setsockopt_int(rx.as_raw_fd(), level, name, 1) {
            tracing::warn!(error = %e, "cannot receive the TOS of datagrams: ECN marks will not be seen");
        }
        let faults = Some(cfg.faults).filter(|f| f.is_active()).map(DatagramFaults::new);
        // Injected faults act on single packets, so they send one by one.
        let offloads = Offloads { gso: offload && faults.is_none(), gro };
        let capacity = if gro { GRO_MAX } else { MAX_PACKET };
        // A shared socket must close when its member leaves (io_uring's
        // armed receive holds it open until the ring's teardown ends).
        let driver = if cfg.as_link {
            // `Link::recv` reads the socket itself.
            Driver::Sockets(rx::RxRing::new(capacity))
        } else if member.is_some() {
            shared_port::note_socket_driver(cfg.io_driver);
            Driver::Sockets(rx::RxRing::new(capacity))
        } else {
            open_driver(cfg.io_driver, &rx, capacity)?
        };
        let capture = cfg.pcap.as_deref().map(crate::capture::IpTap::create).transpose()?;
        // The epoll set of the group sockets also stands for the ring, or,
        // as a link, for the receive socket: one fd to wait on.
        let mcast = multicast::Groups::new(match &driver {
            Driver::Uring(u) => u.fd(),
            Driver::Sockets(_) if cfg.as_link => rx.as_raw_fd(),
            Driver::Sockets(_) => -1,
        })?;
        // A capture needs the IPv4 Identification the engine wrote (0): unconnected sends.
        let mut connect = !cfg.unconnected_sends
            && !cfg.as_link
            && faults.is_none()
            && capture.is_none()
            && matches!(driver, Driver::Sockets(_));
        // IPv4 probes go to a sink of the device's own (made here, in the
        // caller's network namespace, like every other socket of the device).
        let mut sink = None;
        if connect && local.is_ipv4() {
            match batch::open_sink(local) {
                Ok(s) => sink = Some(s),
                Err(e) => {
                    tracing::info!(error = %e, "cannot open the probe sink: sending from unconnected sockets");
                    connect = false;
                }
            }
        }
        tracing::debug!(%local, gso = offloads.gso, gro = offloads.gro, connect, driver = driver_kind(&driver).name(), "UDP backend bound");
        let mut io = UdpIo {
            local,
            scope_id,
            // Data packets of a QP with traffic class 0, the common case.
            sock_tos: if cfg.ecn_capable { rdma_transport::qp::ECN_ECT0 } else { 0 },
            driver,
            batch: Some(Box::new(batch::Batch::new())),
            rx,
            member,
            hop_limits: false,
            tx: HashMap::new(),
            more_sockets: true,
            tx_bufs: (0..TX_BATCH).map(|_| vec![0u8; MAX_PACKET].into_boxed_slice()).collect(),
            tx_meta: Vec::with_capacity(TX_BATCH),
            tx_regions: Vec::new(),
            tx_spans: Vec::new(),
            tx_addrs: Vec::with_capacity(TX_BATCH),
            shifts: batch::ShiftCache::default(),
            faults,
            capture,
            offloads,
            connect,
            sink,
            tx_left: false,
            mcast,
            merged_window: merged_window::MergedWindow::default(),
            stats: IoStats::default(),
        };
        if io.capture.is_some() || cfg.as_link {
            // A capture shows received packets as they came (as a link,
            // its capture is a wrapper's).
            io.want_hop_limits();
        }
        Ok(io)
    }

    /// The receive socket: readable when a datagram arrives (with either
    /// driver), for readiness notification.
    #[inline]
    pub fn rx_fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }

    /// What a blocking wait sleeps on in `poll(2)`: the receive socket and
    /// an epoll set of the multicast group sockets and, with io_uring, the
    /// ring (readable when completions wait).
    #[inline]
    pub fn wait_fds(&self) -> [RawFd; 2] {
        [self.rx.as_raw_fd(), self.mcast.fd()]
    }

    /// Whether this device sends payloads straight from their memory
    /// regions ([`rdma_transport::Endpoint::set_payload_by_reference`]).
    /// Both drivers do, holding the regions locked until the kernel has
    /// read them: the socket driver across its `sendmmsg`, io_uring until
    /// every send of the round has completed. Fault injection does not (it
    /// works on whole packets). On io_uring, payloads in the caller's own
    /// memory (`reg_mr_raw`) are copied all the same: see
    /// [`UdpIo::payload_by_reference`].
    #[inline]
    pub fn sends_by_reference(&self) -> bool {
        // A capture records whole packets.
        self.faults.is_none() && self.capture.is_none()
    }

    /// Whether this payload leaves by reference. io_uring copies the
    /// caller's own memory: if its ring broke with sends still queued, the
    /// driver keeps the regions those sends read alive for as long as the
    /// kernel may read them (see `Uring::send`), which it can do for memory
    /// it owns but not for the caller's.
    fn payload_by_reference(&self, memory: &RegionMemory) -> bool {
        self.sends_by_reference() && !(matches!(self.driver, Driver::Uring(_)) && memory.is_callers())
    }

    /// The driver in use ([`IoDriver::IoUring`] or [`IoDriver::Sockets`]).
    #[inline]
    pub fn driver(&self) -> IoDriver {
        driver_kind(&self.driver)
    }

    /// Whether received packets may wait for [`UdpIo::receive`] without a
    /// new readiness event (io_uring: completions taken while sending, or
    /// the kernel's deferred receive work).
    // Called on every poll, from the verbs crate.
    #[inline]
    pub fn receives_pending(&mut self) -> bool {
        match &mut self.driver {
            Driver::Sockets(_) => false,
            Driver::Uring(u) => u.has_work(),
        }
    }

    /// Whether the last [`UdpIo::transmit`] stopped on its budget
    /// ([`TX_BATCHES_PER_CALL`]) with packets left to send.
    #[inline]
    pub fn sends_left(&self) -> bool {
        self.tx_left
    }

    /// Whether work waits that no readiness event announces: received
    /// packets ([`UdpIo::receives_pending`]) or sends left by the transmit
    /// budget ([`UdpIo::sends_left`]). The caller must not sleep first.
    // Called on every poll, from the verbs crate.
    #[inline]
    pub fn has_pending(&mut self) -> bool {
        self.tx_left || self.receives_pending()
    }

    /// The offloads in use (GSO turns itself off if the kernel refuses it).
    #[inline]
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// Makes sure a socket sends from UDP port `want` (or the next free
    /// port of 0xC000..0xFFFF) and returns the port it got. Past
    /// [`MAX_TX_SOCKETS`] QPs share the least used socket: the source port
    /// is flow entropy for ECMP, not an identity (peers demultiplex by
    /// QPN), and shared sockets let one `sendmmsg` carry many QPs.
    pub fn reserve_port(&mut self, want: u16) -> io::Result<u16> {
        if let Some(t) = self.tx.get_mut(&want) {
            t.users += 1;
            return Ok(want);
        }
        if self.tx.len() >= MAX_TX_SOCKETS {
            if let Some((&port, t)) = self.tx.iter_mut().min_by_key(|(&p, t)| (t.users, p)) {
                t.users += 1;
                return Ok(port);
            }
        }
        let mut port = want;
        let mut last_err = None;
        for _ in 0..0x4000 {
            if let Some(t) = self.tx.get_mut(&port) {
                t.users += 1;
                return Ok(port);
            }
            match self.open_tx(port, self.sock_tos) {
                Ok(socket) => {
                    let first = TxSocket { socket, tos: self.sock_tos, conn: connected::Connection::default() };
                    self.tx.insert(port, TxPort { users: 1, sockets: vec![first] });
                    return Ok(port);
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => return Err(e),
            }
            port = 0xc000 | (port.wrapping_add(1) & 0x3fff);
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("no free UDP source port in 0xC000..0xFFFF")))
    }

    /// Opens a send socket on exactly `port` (the Link path: the engine
    /// chose the port, and the ICRC covers it), whatever the number of
    /// ports open.
    fn open_port(&mut self, port: u16) -> io::Result<()> {
        let socket = self.open_tx(port, self.sock_tos)?;
        let first = TxSocket { socket, tos: self.sock_tos, conn: connected::Connection::default() };
        self.tx.insert(port, TxPort { users: 1, sockets: vec![first] });
        Ok(())
    }

    /// Gives back a port taken with [`UdpIo::reserve_port`].
    pub fn release_port(&mut self, port: u16) {
        if let Some(t) = self.tx.get_mut(&port) {
            t.users -= 1;
            if t.users == 0 {
                self.tx.remove(&port);
            }
        }
    }

    /// From now on, received datagrams bring their TTL / hop limit. Only
    /// a UD receive shows it (in its GRH
    /// area), so the device asks for it when its first UD QP is created:
    /// the control message costs every received datagram about 0.1 us
    /// of a busy round trip. Until then it is taken as 64.
    pub fn want_hop_limits(&mut self) {
        if self.hop_limits {
            return;
        }
        self.hop_limits = true;
        let (level, name) = if self.local.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_RECVTTL)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT)
        };
        if let Err(e) = setsockopt_int(self.rx.as_raw_fd(), level, name, 1) {
            tracing::warn!(error = %e, "cannot receive the TTL of datagrams: received headers will say 64");
        }
    }

    /// The send socket of `port` for packets with `tos`: the one set to
    /// it, opened now if the port has room for another, else the first
    /// (the packet then carries its TOS in a control message). `None` for
    /// a port not reserved.
    fn socket_for(&mut self, port: u16, tos: u8) -> Option<SocketId> {
        let p = self.tx.get(&port)?;
        if let Some(lane) = p.sockets.iter().position(|t| t.tos == tos) {
            return Some(SocketId { port, lane });
        }
        if p.sockets.len() >= TOS_PER_PORT || !self.more_sockets {
            return Some(SocketId { port, lane: 0 });
        }
        match self.open_tx(port, tos) {
            Ok(socket) => {
                let p = self.tx.get_mut(&port)?;
                p.sockets.push(TxSocket { socket, tos, conn: connected::Connection::default() });
                tracing::debug!(port, tos, "send socket opened for a TOS of its own");
                Some(SocketId { port, lane: p.sockets.len() - 1 })
            }
            Err(e) => {
                // Correct all the same, with a control message per packet.
                tracing::info!(port, tos, error = %e, "cannot open a send socket per TOS: other TOS values take a control message");
                self.more_sockets = false;
                Some(SocketId { port, lane: 0 })
            }
        }
    }

    fn tx_socket_mut(&mut self, id: SocketId) -> Option<&mut TxSocket> {
        self.tx.get_mut(&id.port)?.sockets.get_mut(id.lane)
    }

    /// A send socket bound to `port`, set to `tos`.
    fn open_tx(&self, port: u16, tos: u8) -> io::Result<Socket> {
        let s = Socket::new(domain(self.local), Type::DGRAM, Some(Protocol::UDP))?;
        common_options(&s, self.local)?;
        // A TTL of our own, not the system's: packets with it need no
        // control message (`set_ip_marks`).
        let (level, name) = if self.local.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_TTL)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS)
        };
        setsockopt_int(s.as_raw_fd(), level, name, i32::from(DEFAULT_HOP_LIMIT))?;
        // And a TOS of our own: that of data packets, by default.
        let (level, name) = if self.local.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_TOS)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        };
        setsockopt_int(s.as_raw_fd(), level, name, i32::from(tos))?;
        multicast::send_options(&s, self.local, self.scope_id)?;
        // A port's sockets share it (each before its bind); a port another
        // user or program holds without the option stays refused.
        s.set_reuse_port(true)?;
        grow_send_buffer(&s);
        refuse_datagrams(&s)?;
        s.bind(&sock_addr(self.local, port, self.scope_id))?;
        Ok(s)
    }

    /// The device's membership of its shared port, if it shares it.
    #[inline]
    pub fn member(&self) -> Option<&Member> {
        self.member.as_ref()
    }

    /// The device receives the RoCE v2 packets sent to the IP group of
    /// `mgid` (a QP of it attached to the group). Counted: each join needs
    /// one [`UdpIo::leave_group`].
    pub fn join_group(&mut self, mgid: IpAddr) -> io::Result<()> {
        self.mcast.join(mgid, self.local, self.scope_id)
    }

    /// Gives back one [`UdpIo::join_group`]; the last leaves the IP group
    /// (closing its socket drops the membership).
    pub fn leave_group(&mut self, mgid: IpAddr) {
        self.mcast.leave(mgid, self.local)
    }

    /// The IP groups the device is a member of.
    pub fn groups(&self) -> Vec<IpAddr> {
        self.mcast.list()
    }

    /// Receives what waits on the group sockets (see `Groups::receive`).
    fn receive_groups(&mut self, ep: &mut Endpoint, now: Instant) -> usize {
        if self.mcast.is_empty() {
            return 0;
        }
        self.mcast.receive(ep, now, &mut self.stats, &mut self.capture)
    }
}

impl Drop for UdpIo {
    fn drop(&mut self) {
        // Leaves while the socket is still open: the member closes it in
        // step with the record (see `Member::leave`).
        if let Some(m) = self.member.take() {
            m.leave();
        }
    }
}
