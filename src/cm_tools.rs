//! What the RDMA CM examples (rping, ucmatose, udaddy) share: name
//! resolution and the `--backend` device.

use crate::backend::{BackendKind, LinkArgs};
use rdma_core_rs::{Context, DeviceConfig};
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

/// The device of an RDMA CM tool run with `--backend`, and the names the
/// RDMA CM knows the two ends by.
///
/// On udp (the default) the RDMA CM opens a device per local IP address
/// itself, and the tool's addresses go through unchanged. On roce1 and ib
/// the tool opens the raw device on `--netdev` and gives it to the RDMA
/// CM ([`rdma_core_rs::cm::attach_context`]); the ends are then named by
/// their EUI-64 GIDs, which [`LinkArgs::cm_local`] and
/// [`LinkArgs::cm_peer`] find from the addresses the user gave.
pub struct CmBackend {
    link: LinkArgs,
    ctx: Option<Context>,
}

impl CmBackend {
    /// Opens the device of `link` (none on udp) for the tool `tool`.
    pub fn open(link: &LinkArgs, tool: &str) -> Result<CmBackend, String> {
        link.validate()?;
        if link.backend == BackendKind::Udp {
            if link.pcap.is_some() {
                return Err(format!(
                    "{tool}: --pcap is for --backend roce1|ib here (on udp, capture with: tcpdump -i lo -w F udp port 4791)"
                ));
            }
            return Ok(CmBackend { link: link.clone(), ctx: None });
        }
        let Some(netdev) = &link.netdev else {
            return Err(format!(
                "{tool}: --backend {} between processes needs --netdev IFACE (an in-process link joins one process's devices)",
                link.backend.link().name()
            ));
        };
        // With --netdev the address is unused: the device's GID is its MAC's.
        let any = IpAddr::from([0, 0, 0, 0]);
        let dev = link
            .device(&format!("{tool}-{netdev}"), any, "", true, DeviceConfig::default())
            .map_err(|e| format!("{tool}: opening --backend {} on {netdev}: {e}", link.backend.link().name()))?;
        let ctx = dev.open().map_err(|e| format!("{tool}: opening {netdev}: {e}"))?;
        rdma_core_rs::cm::attach_context(&ctx).map_err(|e| format!("{tool}: {e}"))?;
        tracing::info!(netdev, gid = %dev.addr(), "RDMA CM over raw frames");
        Ok(CmBackend { link: link.clone(), ctx: Some(ctx) })
    }

    /// The client's source address: `given` (-I) on udp; on a raw link
    /// the device's GID (after checking `given`, if any, names it).
    pub fn source(&self, given: Option<IpAddr>) -> Result<Option<IpAddr>, String> {
        match &self.ctx {
            None => Ok(given),
            Some(ctx) => {
                let gid = ctx.device().addr();
                given.map_or(Ok(gid), |a| self.link.cm_local(gid, a)).map(Some)
            }
        }
    }

    /// The address a server binds for the `given` one (-a).
    pub fn bind(&self, given: SocketAddr) -> Result<SocketAddr, String> {
        match &self.ctx {
            None => Ok(given),
            Some(ctx) => Ok(SocketAddr::new(self.link.cm_local(ctx.device().addr(), given.ip())?, given.port())),
        }
    }

    /// The address a client connects to for the `given` one (-a).
    pub fn peer(&self, given: SocketAddr) -> Result<SocketAddr, String> {
        Ok(SocketAddr::new(self.link.cm_peer(given.ip())?, given.port()))
    }
}
