//! Address resolution: the peer's LID on native IB, ephemeral ports, and
//! the random numbers the CM needs (from the engine's generator, seeded by
//! the operating system). The source address the kernel's routing would
//! pick on RoCE is `rdma_link::route`'s (a socket's).

use super::{CmError, Result};
use rdma_transport::rng::Rng;
use rdma_transport::{Endpoint, LinkKind};
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};

/// Native IB: makes sure the engine knows the LID of the peer `gid`
/// (a learned or given one stays). RoCE needs none. Without a subnet
/// administrator to ask for a path record, the peer's LID is the one its
/// port agent published, when the peer's port is managed by an agent on
/// this host (the other end of a veth pair in another namespace: see
/// [`rdma_link::ib_port`]) and ACTIVE; else the LID plan's.
pub(crate) fn resolve_lid(ep: &mut Endpoint, gid: IpAddr) -> Result<()> {
    if ep.link() != LinkKind::Ib || ep.path_lid(gid).is_some() {
        return Ok(());
    }
    let mac = rdma_link::mac_of_gid(gid).ok_or_else(|| {
        CmError::NoRoute(gid, "on native IB the peer must be named by its EUI-64 GID (fe80::…), whose MAC gives its LID; this stack has no subnet administrator to ask for a path".into())
    })?;
    use rdma_link::ib_port::{port_guid, IbPortRecord, PortState};
    let lid = match IbPortRecord::read(port_guid(mac)) {
        Ok(Some(r)) if r.state == PortState::Active => r.lid,
        _ => rdma_link::default_lid(mac),
    };
    ep.set_path(gid, lid);
    Ok(())
}

/// The CM's generator, seeded once from the operating system's randomness
/// (`Rng::from_os`): communication IDs and starting PSNs are what a blind
/// attacker would need to guess to spoof CM messages or inject data.
/// Kept with the pid that seeded it: a forked child reseeds, or it would
/// draw the same ports, communication IDs and PSNs as its parent and its
/// siblings (two forked processes binding port 0 on one shared device got
/// the same port).
static RNG: OnceLock<Mutex<(u32, Rng)>> = OnceLock::new();

/// A random 32-bit number for communication IDs, PSNs and ports.
pub(crate) fn random_u32() -> u32 {
    let pid = std::process::id();
    let rng = RNG.get_or_init(|| Mutex::new((pid, Rng::from_os())));
    let mut g = rng.lock().unwrap_or_else(|p| p.into_inner());
    if g.0 != pid {
        *g = (pid, Rng::from_os());
    }
    (g.1.next_u64() >> 32) as u32
}

/// An ephemeral port for an active ID's `cma_hdr` (Linux's default range).
pub(crate) fn ephemeral_port() -> u16 {
    32768 + (random_u32() % (60999 - 32768 + 1)) as u16
}
