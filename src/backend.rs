//! The backend flags every tool takes (`--backend udp|roce1|ib`,
//! `--netdev`, `--lid`, `--pcap`), and how a tool makes its device from
//! them.
//!
//! - `udp` (the default): RoCE v2 over UDP sockets on `--bind`.
//! - `roce1`, `ib`: raw frames. With `--netdev IFACE` on that interface
//!   (AF_PACKET, root); without it on an in-process link, for runs whose
//!   two sides share the process (`--loopback`, the tests). The device's
//!   MAC is then made from its `--bind` address, and its GID from the MAC.
//!
//! `--lid` sets an IB port's LID. By default, on `--netdev`, it is the
//! LID `rdma-sm` assigned the port (published by the port's agent,
//! `rdma-sm --agent`; the device refuses to open a port the SM has not
//! made ACTIVE); without an agent, and in-process, it comes from the low
//! 14 bits of the MAC (1 for 127.0.0.1, 2 for 127.0.0.2, ...; never 0).

use clap::{Args, ValueEnum};
pub use rdma_core_rs::link::default_lid;
use rdma_core_rs::link::Mac;
use rdma_core_rs::{Device, DeviceConfig, LinkKind};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How long address resolution on --netdev waits for an ARP answer.
const ARP_WAIT: Duration = Duration::from_secs(2);

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum BackendKind {
    /// RoCE v2 over UDP (port 4791).
    #[default]
    Udp,
    /// RoCE v1: GRH in Ethernet frames of EtherType 0x8915.
    Roce1,
    /// Native InfiniBand: LRH..VCRC in Ethernet frames of EtherType 0x88B5.
    Ib,
}

impl BackendKind {
    pub fn link(self) -> LinkKind {
        match self {
            BackendKind::Udp => LinkKind::RoceV2,
            BackendKind::Roce1 => LinkKind::RoceV1,
            BackendKind::Ib => LinkKind::Ib,
        }
    }
}

/// The backend flags.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkArgs {
    /// What the packets travel over: udp (RoCE v2), roce1 or ib (raw
    /// frames; on --netdev, or in-process without it).
    #[arg(long, value_enum, default_value_t = BackendKind::Udp)]
    pub backend: BackendKind,
    /// The network interface of the raw backends (needs root).
    #[arg(long)]
    pub netdev: Option<String>,
    /// The port's LID (--backend ib) [default: the SM's, from the port
    /// agent's record on --netdev; else from the MAC].
    #[arg(long)]
    pub lid: Option<u16>,
    /// Record every frame the device sends and receives (udp and roce1:
    /// Ethernet pcap; ib: pcap of ERF type-21 records, as ibdump writes).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
}

/// The MAC an in-process device bound to `addr` gets: locally administered,
/// the address's last four bytes.
pub fn mac_of_addr(addr: IpAddr) -> Mac {
    let o = match addr {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => v6.octets()[12..].try_into().expect("4 bytes"),
    };
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

impl LinkArgs {
    /// Checks the combination of flags.
    pub fn validate(&self) -> Result<(), String> {
        if self.backend == BackendKind::Udp {
            if let Some(n) = &self.netdev {
                return Err(format!("--netdev {n} is for --backend roce1 or ib (udp binds --bind)"));
            }
        }
        if let Some(l) = self.lid {
            if self.backend != BackendKind::Ib {
                return Err("--lid is for --backend ib".into());
            }
            if !(1..=0xbfff).contains(&l) {
                return Err(format!("--lid {l}: a unicast LID is 1 to 49151 (0xBFFF)"));
            }
        }
        Ok(())
    }

    /// The address the RDMA CM knows the peer at `addr` by. On udp the
    /// address itself. On roce1 and ib the peer's EUI-64 GID: `addr` if it
    /// is one, else the GID of the MAC behind `addr` (on --netdev by the
    /// kernel's neighbour table, IPv4 only; in-process by the rule the
    /// in-process devices follow, [`mac_of_addr`]).
    pub fn cm_peer(&self, addr: IpAddr) -> Result<IpAddr, String> {
        use rdma_core_rs::link::{gid_of_mac, mac_of_gid, neigh::neighbour_mac};
        if self.backend == BackendKind::Udp || mac_of_gid(addr).is_some() {
            return Ok(addr);
        }
        let mac = match (&self.netdev, addr) {
            (None, _) => mac_of_addr(addr),
            (Some(n), IpAddr::V4(v4)) => neighbour_mac(n, v4, ARP_WAIT).map_err(|e| e.to_string())?,
            (Some(n), IpAddr::V6(_)) => {
                return Err(format!(
                    "{addr}: on --netdev {n}, name an IPv6 peer by its link-local EUI-64 address (its GID, fe80::…)"
                ))
            }
        };
        Ok(gid_of_mac(mac))
    }

    /// The address the RDMA CM knows this end by, on a device whose
    /// address is `device` (a raw device's is its GID), for the address
    /// `addr` the tool was given. On udp `addr`. On roce1 and ib the
    /// device's GID, once `addr` is found to name it: the GID itself, or
    /// one of --netdev's addresses (in-process: the address the device's
    /// MAC was made from).
    pub fn cm_local(&self, device: IpAddr, addr: IpAddr) -> Result<IpAddr, String> {
        if self.backend == BackendKind::Udp || addr == device {
            return Ok(addr);
        }
        let names_it = match &self.netdev {
            Some(n) => rdma_core_rs::link::raw::interface_addrs(n).map_err(|e| e.to_string())?.contains(&addr),
            None => rdma_core_rs::link::gid_of_mac(mac_of_addr(addr)) == device,
        };
        if !names_it {
            let on = self.netdev.as_deref().map_or("the in-process link".to_string(), |n| format!("--netdev {n}"));
            return Err(format!("{addr} is not an address of {on} (its device's GID is {device})"));
        }
        Ok(device)
    }

    /// Makes the device `name` for a side bound to `addr`, with `config`
    /// and the backend of these flags; `fabric` names the in-process link
    /// when no --netdev is given. Of the two sides of a one-process run
    /// only the `primary` one writes --pcap (it sees every frame both
    /// ways) and takes --lid; the other takes --lid + 1.
    pub fn device(
        &self,
        name: &str,
        addr: IpAddr,
        fabric: &str,
        primary: bool,
        config: DeviceConfig,
    ) -> rdma_core_rs::Result<Device> {
        let link = self.backend.link();
        let pcap = if primary { self.pcap.clone() } else { None };
        if link == LinkKind::RoceV2 {
            return Device::with_config(name, addr, DeviceConfig { pcap, ..config });
        }
        let config = DeviceConfig { link, pcap, ..config };
        match &self.netdev {
            Some(netdev) => {
                // No --lid: the LID a subnet manager gave the port (its
                // agent's record), else the LID plan (see Device::on_netdev).
                let lid = self.lid.unwrap_or(0);
                Device::on_netdev(name, netdev, DeviceConfig { lid, ..config })
            }
            None => {
                let mac = mac_of_addr(addr);
                let lid = match self.lid {
                    Some(l) if primary => l,
                    Some(l) => l.wrapping_add(1).clamp(1, 0xbfff),
                    None => default_lid(mac),
                };
                Device::in_process(name, fabric, mac, DeviceConfig { lid, ..config })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_process_macs_and_lids_follow_the_bind_address() {
        let a = mac_of_addr("127.0.0.1".parse().unwrap());
        let b = mac_of_addr("127.0.0.2".parse().unwrap());
        assert_eq!(a, [2, 0, 127, 0, 0, 1]);
        assert_eq!((default_lid(a), default_lid(b)), (1, 2));
        assert_eq!(default_lid([2, 0, 0, 0, 0, 0]), 1, "never LID 0");
        let bad = LinkArgs { lid: Some(0), backend: BackendKind::Ib, ..LinkArgs::default() };
        assert!(bad.validate().unwrap_err().contains("unicast LID"));
        let bad = LinkArgs { netdev: Some("eth0".into()), ..LinkArgs::default() };
        assert!(bad.validate().unwrap_err().contains("--netdev eth0 is for"));
    }
}
