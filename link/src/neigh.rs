//! The peer's MAC address from an IPv4 address on a raw link, by the
//! kernel's neighbour table (ARP), as RoCE's address resolution does: the
//! RDMA CM names peers by IP address, a frame link needs their MAC (and
//! from it their EUI-64 GID).

use crate::Mac;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// The MAC the kernel's neighbour table has for `ip` on `netdev`. When it
/// has none, one empty UDP datagram to `ip` (discard port 9) makes the
/// kernel ask with ARP, and the table is read again until `wait` is over.
pub fn neighbour_mac(netdev: &str, ip: Ipv4Addr, wait: Duration) -> io::Result<Mac> {
    let start = Instant::now();
    let mut asked = false;
    loop {
        let table = std::fs::read_to_string("/proc/net/arp")?;
        if let Some(mac) = arp_entry(&table, netdev, ip) {
            return Ok(mac);
        }
        if !asked {
            asked = true;
            let s = UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))?;
            if let Err(e) = s.send_to(&[], SocketAddr::from((ip, 9))) {
                tracing::debug!(%ip, error = %e, "could not send the datagram that starts ARP");
            }
        }
        if start.elapsed() >= wait {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{ip} has no MAC address on {netdev} (no ARP answer within {wait:?})"),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The complete entry for `ip` on `netdev` in `/proc/net/arp`'s text
/// ("IP address  HW type  Flags  HW address  Mask  Device").
fn arp_entry(table: &str, netdev: &str, ip: Ipv4Addr) -> Option<Mac> {
    const ATF_COM: u32 = 0x2;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [addr, _, flags, hw, _, dev] = f[..] else { return None };
        let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16).ok()?;
        if addr.parse::<Ipv4Addr>().ok()? != ip || dev != netdev || flags & ATF_COM == 0 {
            return None;
        }
        let mut mac = [0u8; 6];
        let mut parts = hw.split(':');
        for b in &mut mac {
            *b = u8::from_str_radix(parts.next()?, 16).ok()?;
        }
        Some(mac)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "IP address       HW type     Flags       HW address            Mask     Device
10.0.0.2         0x1         0x2         aa:bb:cc:dd:ee:01     *        veth0
10.0.0.3         0x1         0x0         00:00:00:00:00:00     *        veth0
10.0.0.4         0x1         0x2         aa:bb:cc:dd:ee:04     *        eth9
";

    #[test]
    fn reads_complete_entries_of_the_interface_only() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(arp_entry(TABLE, "veth0", ip("10.0.0.2")), Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 1]));
        assert_eq!(arp_entry(TABLE, "veth0", ip("10.0.0.3")), None, "incomplete: ARP still asking");
        assert_eq!(arp_entry(TABLE, "veth0", ip("10.0.0.4")), None, "another interface's");
        assert_eq!(arp_entry(TABLE, "eth9", ip("10.0.0.4")), Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 4]));
        assert_eq!(arp_entry("garbage\nnot a table at all\n", "veth0", ip("10.0.0.2")), None);
    }
}
