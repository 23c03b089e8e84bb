//! What the RDMA CM examples (rping, ucmatose, udaddy) share.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// `host` (an address or a name) and `port` as a socket address, as
/// librdmacm's tools resolve them with getaddrinfo; each tool words the
/// error its own way.
pub fn resolve(host: &str, port: u16) -> std::io::Result<SocketAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no address for {host}")))
}
