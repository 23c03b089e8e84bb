//! RoCE v2 multicast over IP multicast.
//!
//! A multicast GID maps to an IP group as rxe and the kernel's RDMA CM map
//! it: an IPv4-mapped MGID `::ffff:a.b.c.d` is the IPv4 group `a.b.c.d`,
//! any other (`ff00::/8`) is the IPv6 group of the same bytes.
//!
//! Sending needs nothing new: the engine writes the group as the packet's
//! destination and the send sockets reach it, leaving through the device's
//! interface (`IP_MULTICAST_IF`), looped back to this host's members too
//! (`IP_MULTICAST_LOOP`), with the engine's hop limit rather than the
//! multicast default of 1 ([`send_options`]).
//!
//! Receiving does: the device's socket is bound to its unicast address,
//! and the kernel hands such a socket no datagram sent to a group. So each
//! group a device joins gets a socket bound to the group's address and
//! port 4791, member of the group on the device's interface
//! (`IP_ADD_MEMBERSHIP` / `IPV6_JOIN_GROUP`), with SO_REUSEADDR and
//! SO_REUSEPORT: every device of every process on the host that joins the
//! group binds the same address, and the kernel gives each a copy of each
//! datagram (multicast delivery is to every matching socket, not one of a
//! reuseport group). `IP_MULTICAST_ALL` off keeps a socket to the groups
//! it joined itself. The group sockets sit in one epoll set, whose fd is
//! the device's second wait fd (with io_uring, the ring is in the set
//! too), so that a sleeping device wakes for them.

use super::rx::{deliver, recv_datagram, Control};
use super::sys::DEFAULT_HOP_LIMIT;
use crate::io_stats::IoStats;
use crate::wait::EpollSet;
use rdma_transport::{Endpoint, Instant, MAX_PACKET};
use rdma_wire::ROCE_V2_PORT;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

/// Datagrams taken from one group socket per receive call.
const PER_CALL: usize = 32;

/// The IP group of a multicast GID (`None` for a GID that is not one).
pub fn group_ip(mgid: IpAddr) -> Option<IpAddr> {
    let ip = mgid.to_canonical();
    rdma_transport::is_multicast_gid(ip).then_some(ip)
}

/// One joined group: its socket and how many QPs of the device use it.
struct Group {
    socket: Socket,
    users: usize,
}

/// The groups of one device and the epoll set a wait sleeps on.
pub(super) struct Groups {
    groups: HashMap<IpAddr, Group>,
    epoll: EpollSet,
    buf: Box<[u8]>,
}

impl Groups {
    /// No group yet; `extra` (the io_uring ring, or -1) joins the epoll set
    /// so that one fd stands for both.
    pub(super) fn new(extra: RawFd) -> io::Result<Groups> {
        let epoll = EpollSet::new(&[extra])?;
        Ok(Groups { groups: HashMap::new(), epoll, buf: vec![0u8; MAX_PACKET].into_boxed_slice() })
    }

    /// Readable when a datagram waits on a group socket (or the ring has completions).
    pub(super) fn fd(&self) -> RawFd {
        self.epoll.fd()
    }

    /// Hands the engine what waits on the group sockets, each datagram
    /// with its headers as sent to the group. Returns the number
    /// of datagrams.
    pub(super) fn receive(
        &mut self,
        ep: &mut Endpoint,
        now: Instant,
        stats: &mut IoStats,
        tap: &mut Option<crate::capture::IpTap>,
    ) -> usize {
        let mut n = 0;
        for (&group, g) in &self.groups {
            for _ in 0..PER_CALL {
                let (len, src, control) = match recv_datagram(g.socket.as_raw_fd(), &mut self.buf, stats) {
                    Ok(Some(d)) => d,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(%group, error = %e, "multicast receive failed");
                        break;
                    }
                };
                n += 1;
                let headers = control.headers(src, group);
                // Group sockets take no GRO.
                deliver(ep, now, &self.buf, 0, len, None, false, &headers, stats, tap);
            }
        }
        n
    }
}

/// The index of the interface that holds `local` (0 if none does: the
/// kernel then picks one by its routes).
fn ifindex_of(local: IpAddr) -> u32 {
    let mut found = 0;
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we walk read-only and free once.
    unsafe {
        if libc::getifaddrs(&mut ifa) != 0 {
            return 0;
        }
        let mut p = ifa;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() {
                let ip = match i32::from((*a).sa_family) {
                    libc::AF_INET => {
                        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be((*a.cast::<libc::sockaddr_in>()).sin_addr.s_addr))))
                    }
                    libc::AF_INET6 => {
                        Some(IpAddr::V6(Ipv6Addr::from((*a.cast::<libc::sockaddr_in6>()).sin6_addr.s6_addr)))
                    }
                    _ => None,
                };
                if ip == Some(local) {
                    found = libc::if_nametoindex((*p).ifa_name);
                    break;
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(ifa);
    }
    found
}

/// The interface a device's multicast goes out of and joins on: its
/// scope for a link-local IPv6 address, else the one holding its address.
fn interface(local: IpAddr, scope_id: u32) -> u32 {
    if scope_id != 0 {
        scope_id
    } else {
        ifindex_of(local)
    }
}

/// Multicast options of a send socket: out of the device's interface,
/// looped back to this host, with the default hop limit of unicast sends.
pub(super) fn send_options(s: &Socket, local: IpAddr, scope_id: u32) -> io::Result<()> {
    match local {
        IpAddr::V4(v4) => {
            s.set_multicast_if_v4(&v4)?;
            s.set_multicast_loop_v4(true)?;
            s.set_multicast_ttl_v4(u32::from(DEFAULT_HOP_LIMIT))
        }
        IpAddr::V6(_) => {
            let index = interface(local, scope_id);
            if index != 0 {
                s.set_multicast_if_v6(index)?;
            }
            s.set_multicast_loop_v6(true)?;
            s.set_multicast_hops_v6(u32::from(DEFAULT_HOP_LIMIT))
        }
    }
}

/// A socket that receives `group`'s datagrams to port 4791 on the
/// interface of `local`.
fn open_group(group: IpAddr, local: IpAddr, scope_id: u32) -> io::Result<Socket> {
    let domain = if local.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    // As deep as the device's own receive socket: a burst of UD sends
    // to the group must not overflow it (UD does not resend).
    super::sys::grow_recv_buffer(&s);
    let fd = s.as_raw_fd();
    match (group, local) {
        (IpAddr::V4(g), IpAddr::V4(l)) => {
            super::sys::setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_ALL, 0)?;
            super::sys::setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
            super::sys::setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)?;
            s.bind(&SocketAddr::new(g.into(), ROCE_V2_PORT).into())?;
            s.join_multicast_v4(&g, &l)?;
        }
        (IpAddr::V6(g), IpAddr::V6(_)) => {
            s.set_only_v6(true)?;
            // Not every kernel has it (4.20+): a socket then also hears
            // the host's other joins of the group, which the engine drops.
            let _ = super::sys::setsockopt_int(fd, libc::IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0);
            super::sys::setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
            super::sys::setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)?;
            super::sys::setsockopt_int(fd, libc::IPPROTO_UDP, super::sys::UDP_NO_CHECK6_RX, 1)?;
            let index = interface(local, scope_id);
            s.bind(&SocketAddrV6::new(g, ROCE_V2_PORT, 0, index).into())?;
            s.join_multicast_v6(&g, index)?;
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("multicast group {group} is not of the family of the device address {local}"),
            ))
        }
    }
    Ok(s)
}

/// Linux's `IPV6_MULTICAST_ALL` (not in every libc crate).
const IPV6_MULTICAST_ALL: i32 = 29;

impl Groups {
    /// Joins the IP group of `mgid` on the interface of `local`, or counts
    /// one more user of it.
    pub(super) fn join(&mut self, mgid: IpAddr, local: IpAddr, scope_id: u32) -> io::Result<()> {
        let group = group_ip(mgid)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{mgid} is not a multicast GID")))?;
        if let Some(g) = self.groups.get_mut(&group) {
            g.users += 1;
            return Ok(());
        }
        let socket = open_group(group, local, scope_id)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot join multicast group {group} on {local}: {e}")))?;
        self.epoll.add(socket.as_raw_fd())?;
        tracing::debug!(%group, %local, "joined IP multicast group");
        self.groups.insert(group, Group { socket, users: 1 });
        Ok(())
    }

    /// One user fewer of the IP group of `mgid`; the last leaves it.
    pub(super) fn leave(&mut self, mgid: IpAddr, local: IpAddr) {
        let Some(group) = group_ip(mgid) else { return };
        let Some(g) = self.groups.get_mut(&group) else { return };
        g.users -= 1;
        if g.users == 0 {
            if let Some(g) = self.groups.remove(&group) {
                let _ = self.epoll.remove(g.socket.as_raw_fd());
            }
            tracing::debug!(%group, %local, "left IP multicast group");
        }
    }

    /// The IP groups joined.
    pub(super) fn list(&self) -> Vec<IpAddr> {
        self.groups.keys().copied().collect()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Takes one datagram waiting on a group socket into `buf` (the UDP
    /// backend as a link): its length, sender, control messages and group.
    pub(super) fn recv_one(
        &mut self,
        buf: &mut [u8],
        stats: &mut IoStats,
    ) -> Option<(usize, SocketAddr, Control, IpAddr)> {
        for (&group, g) in &self.groups {
            match recv_datagram(g.socket.as_raw_fd(), buf, stats) {
                Ok(Some((len, src, control))) => return Some((len, src, control, group)),
                Ok(None) => {}
                Err(e) => tracing::warn!(%group, error = %e, "multicast receive failed"),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mgids_map_to_groups_as_rxe_maps_them() {
        assert_eq!(group_ip("::ffff:239.21.0.1".parse().unwrap()), Some("239.21.0.1".parse().unwrap()));
        assert_eq!(group_ip("239.21.0.1".parse().unwrap()), Some("239.21.0.1".parse().unwrap()));
        assert_eq!(group_ip("ff0e::21:1".parse().unwrap()), Some("ff0e::21:1".parse().unwrap()));
        assert_eq!(group_ip("::ffff:127.0.21.1".parse().unwrap()), None);
    }

    #[test]
    fn loopback_holds_its_address_and_an_unknown_address_has_no_interface() {
        assert_ne!(ifindex_of("127.0.0.1".parse().unwrap()), 0);
        assert_eq!(ifindex_of("192.0.2.77".parse().unwrap()), 0);
    }
}
