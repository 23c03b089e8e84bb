//! The local address the kernel's routing picks for a destination (what
//! `rdma_resolve_addr` without a source takes on RoCE): the address of a
//! UDP socket connected to it. No packet is sent.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// The source address the kernel routes `dst` from.
pub fn source_for(dst: IpAddr) -> io::Result<IpAddr> {
    let any: IpAddr = if dst.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
    let s = UdpSocket::bind(SocketAddr::new(any, 0))?;
    s.connect(SocketAddr::new(dst, rdma_wire::ROCE_V2_PORT))?;
    Ok(s.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_routed_from_loopback() {
        assert_eq!(source_for("127.0.0.1".parse().unwrap()).unwrap().to_string(), "127.0.0.1");
        assert_eq!(source_for("127.9.8.7".parse().unwrap()).unwrap().to_string(), "127.0.0.1");
    }
}
