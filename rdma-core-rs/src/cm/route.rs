//! Address resolution on RoCE: the source address the kernel's routing
//! would pick, ephemeral ports, and the random numbers the CM needs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};

/// The local address the kernel routes `dst` from (what `rdma_resolve_addr`
/// with no source takes): a connected UDP socket's address, no packet sent.
pub(crate) fn source_for(dst: IpAddr) -> std::io::Result<IpAddr> {
    let any: IpAddr = if dst.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
    let s = UdpSocket::bind(SocketAddr::new(any, 0))?;
    s.connect(SocketAddr::new(dst, 4791))?;
    Ok(s.local_addr()?.ip())
}

static SEED: AtomicU64 = AtomicU64::new(0);

/// A random 32-bit number (splitmix64 over time, process and a counter):
/// communication IDs, PSNs and ports must differ between runs, not be secret.
pub(crate) fn random_u32() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut z = SEED.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) ^ t ^ (u64::from(std::process::id()) << 32);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

/// An ephemeral port for an active ID's `cma_hdr` (Linux's default range).
pub(crate) fn ephemeral_port() -> u16 {
    32768 + (random_u32() % (60999 - 32768 + 1)) as u16
}
