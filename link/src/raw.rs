//! The raw-frame link: Ethernet frames on a named network interface
//! through an AF_PACKET socket, by way of `pnet`'s datalink channel.
//!
//! The socket is made here and handed to `pnet` (`Config::socket_fd`) so
//! that it can be set up as this link needs and polled for blocking waits:
//! non-blocking reads (`pnet`'s read timeout 0), no copies of the frames
//! this socket sends (`PACKET_IGNORE_OUTGOING`), no promiscuous mode (the
//! frames are addressed to the interface's MAC, or broadcast), and 8 MiB
//! socket buffers. Opening one needs `CAP_NET_RAW` (root).

use crate::{FrameMeta, Link, LinkCaps, Mac, ETH_HEADER};
use pnet_datalink::{Channel, DataLinkReceiver, DataLinkSender, NetworkInterface};
use rdma_transport::LinkKind;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, SystemTime};

const SOCKET_BUFFER: libc::c_int = 8 << 20;
/// `PACKET_IGNORE_OUTGOING` (Linux 4.20), not in every libc crate version.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// An AF_PACKET link on one interface.
pub struct RawLink {
    tx: Box<dyn DataLinkSender>,
    rx: Box<dyn DataLinkReceiver>,
    /// The socket, owned by `pnet`'s channel (closed with it).
    fd: RawFd,
    mac: Mac,
    max_frame: usize,
    kind: LinkKind,
    netdev: String,
}

impl std::fmt::Debug for RawLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawLink").field("netdev", &self.netdev).field("mac", &self.mac).finish_non_exhaustive()
    }
}

/// The interface `name`, or an error that lists the ones there are.
pub fn interface(name: &str) -> io::Result<NetworkInterface> {
    let all = pnet_datalink::interfaces();
    let names: Vec<String> = all.iter().map(|i| i.name.clone()).collect();
    all.into_iter().find(|i| i.name == name).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no network interface {name:?} (there are: {})", names.join(", ")),
        )
    })
}

/// The MAC address of the interface `name`.
pub fn interface_mac(name: &str) -> io::Result<Mac> {
    let i = interface(name)?;
    i.mac.map(|m| m.octets()).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("network interface {name:?} has no MAC address"))
    })
}

/// The IP addresses of the interface `name`.
pub fn interface_addrs(name: &str) -> io::Result<Vec<std::net::IpAddr>> {
    Ok(interface(name)?.ips.iter().map(|n| n.ip()).collect())
}

/// The interface's MTU (bytes of a frame after its Ethernet header).
fn interface_mtu(name: &str) -> usize {
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1500)
}

fn setsockopt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as _,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl RawLink {
    /// Opens the link on `netdev` for packets of `kind`.
    pub fn open(netdev: &str, kind: LinkKind) -> io::Result<RawLink> {
        let iface = interface(netdev)?;
        let mac = interface_mac(netdev)?;
        let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
        // SAFETY: plain syscall; on success pnet's channel owns the fd.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("AF_PACKET socket for {netdev} (needs CAP_NET_RAW): {e}")));
        }
        let setup = || -> io::Result<()> {
            // Without it every frame we send would come back to our receiver.
            if let Err(e) = setsockopt(fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1) {
                tracing::debug!(error = %e, "PACKET_IGNORE_OUTGOING refused: own frames are filtered by MAC");
            }
            // As the UDP backend's sockets: the FORCE variants pass
            // net.core.[rw]mem_max (4 MiB here, and a fresh network
            // namespace's own default is smaller) for whoever has
            // CAP_NET_ADMIN, as root opening a raw link does; the plain
            // ones, capped there, for anyone else.
            for (force, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
                if setsockopt(fd, libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
                    setsockopt(fd, libc::SOL_SOCKET, plain, SOCKET_BUFFER)?;
                }
            }
            Ok(())
        };
        if let Err(e) = setup() {
            // SAFETY: the fd is ours until pnet takes it.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let max_frame = ETH_HEADER + interface_mtu(netdev);
        let config = pnet_datalink::Config {
            read_buffer_size: max_frame.max(rdma_transport::MAX_PACKET + ETH_HEADER),
            write_buffer_size: max_frame.max(rdma_transport::MAX_PACKET + ETH_HEADER),
            read_timeout: Some(Duration::ZERO),
            promiscuous: false,
            socket_fd: Some(fd),
            ..Default::default()
        };
        let (tx, rx) = match pnet_datalink::channel(&iface, config)? {
            Channel::Ethernet(tx, rx) => (tx, rx),
            _ => return Err(io::Error::other(format!("{netdev}: not an Ethernet channel"))),
        };
        tracing::info!(netdev, mac = ?mac, kind = kind.name(), max_frame, "raw link up");
        Ok(RawLink { tx, rx, fd, mac, max_frame, kind, netdev: netdev.to_string() })
    }
}

impl RawLink {
    /// Lets the kernel pass this socket only native IB frames on VL15
    /// (SMPs), by a classic BPF filter: for a port agent, whose socket
    /// would otherwise wake (and take a copy) for every data frame the
    /// devices on the same interface exchange.
    pub fn only_vl15(&self) -> io::Result<()> {
        const LD_H_ABS: u16 = 0x28;
        const LD_B_ABS: u16 = 0x30;
        const AND_K: u16 = 0x54;
        const JEQ_K: u16 = 0x15;
        const RET_K: u16 = 0x06;
        let ins = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
        let prog = [
            ins(LD_H_ABS, 0, 0, 12), // the EtherType
            ins(JEQ_K, 0, 4, u32::from(rdma_wire::ethernet::ETHERTYPE_IB)),
            ins(LD_B_ABS, 0, 0, ETH_HEADER as u32), // the LRH's VL nibble
            ins(AND_K, 0, 0, 0xf0),
            ins(JEQ_K, 0, 1, 0xf0),
            ins(RET_K, 0, 0, 0x4_0000), // the whole frame
            ins(RET_K, 0, 0, 0),        // nothing
        ];
        let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr().cast_mut() };
        // SAFETY: the program outlives the call, which copies it.
        let r = unsafe {
            libc::setsockopt(
                self.fd,
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&fprog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{}: a VL15 filter: {e}", self.netdev)));
        }
        Ok(())
    }
}

impl Link for RawLink {
    fn caps(&self) -> LinkCaps {
        LinkCaps { kind: self.kind, max_frame: self.max_frame, segmentation_offload: false, by_reference: false }
    }

    fn mac(&self) -> Mac {
        self.mac
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        match self.tx.send_to(frame, None) {
            Some(r) => r,
            None => Err(io::Error::other("pnet: send_to gave no result")),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<FrameMeta>> {
        loop {
            let frame = match self.rx.next() {
                Ok(f) => f,
                Err(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if frame.len() < ETH_HEADER || frame[6..12] == self.mac {
                continue; // a runt, or our own frame (kernels without PACKET_IGNORE_OUTGOING)
            }
            let n = frame.len().min(buf.len());
            buf[..n].copy_from_slice(&frame[..n]);
            let src: Mac = frame[6..12].try_into().expect("checked length");
            return Ok(Some(FrameMeta {
                len: n,
                src,
                arrival: SystemTime::now(),
                traffic_class: None,
                datagram: None,
            }));
        }
    }

    fn fd(&self) -> RawFd {
        self.fd
    }
}
