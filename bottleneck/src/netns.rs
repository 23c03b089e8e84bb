//! Addresses and routes on the router's TUN devices, set with `ip -n`.

use std::net::IpAddr;
use std::process::Command;

/// `ip` failed, or an address did not parse.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("`ip {0}`: {1}")]
    Ip(String, String),
    #[error("{0:?}: expected ADDRESS/PREFIX, e.g. 10.77.1.1/24")]
    Prefix(String),
}

/// An interface address with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl std::str::FromStr for Prefix {
    type Err = NetnsError;
    fn from_str(s: &str) -> Result<Prefix, NetnsError> {
        let bad = || NetnsError::Prefix(s.into());
        let (a, l) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let len: u8 = l.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(bad());
        }
        Ok(Prefix { addr, len })
    }
}

impl Prefix {
    /// The network this address is in, as `ip route` wants it.
    pub fn network(&self) -> String {
        match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - self.len as u32).unwrap_or(0);
                format!("{}/{}", std::net::Ipv4Addr::from(u32::from(a) & mask), self.len)
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - self.len as u32).unwrap_or(0);
                format!("{}/{}", std::net::Ipv6Addr::from(u128::from(a) & mask), self.len)
            }
        }
    }
}

/// Runs `ip -n NETNS ARGS...`.
pub fn ip(netns: &str, args: &[&str]) -> Result<(), NetnsError> {
    let out = Command::new("ip")
        .arg("-n")
        .arg(netns)
        .args(args)
        .output()
        .map_err(|e| NetnsError::Ip(format!("-n {netns} {}", args.join(" ")), e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NetnsError::Ip(
            format!("-n {netns} {}", args.join(" ")),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// Brings `dev` up in `netns` with `addrs`, and routes the `remote`
/// networks through it. The MTU is large so that 4096-byte RoCE payloads
/// (which leave with DF set) fit.
pub fn configure(netns: &str, dev: &str, addrs: &[Prefix], remote: &[Prefix], mtu: u32) -> Result<(), NetnsError> {
    ip(netns, &["link", "set", "dev", "lo", "up"])?;
    ip(netns, &["link", "set", "dev", dev, "mtu", &mtu.to_string(), "up"])?;
    for a in addrs {
        let s = format!("{}/{}", a.addr, a.len);
        // IPv6: no duplicate address detection, so the address is usable at once.
        let mut args = vec!["addr", "add", &s, "dev", dev];
        if a.addr.is_ipv6() {
            args.push("nodad");
        }
        ip(netns, &args)?;
    }
    let mut routed = Vec::new();
    for r in remote {
        let net = r.network();
        if !routed.contains(&net) && !addrs.iter().any(|a| a.network() == net) {
            ip(netns, &["route", "add", &net, "dev", dev])?;
            routed.push(net);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_give_their_network() {
        let p: Prefix = "10.77.1.9/24".parse().unwrap();
        assert_eq!(p.network(), "10.77.1.0/24");
        let p: Prefix = "fd00:77::5/64".parse().unwrap();
        assert_eq!(p.network(), "fd00:77::/64");
        let p: Prefix = "10.1.2.3/0".parse().unwrap();
        assert_eq!(p.network(), "0.0.0.0/0");
        for bad in ["10.0.0.1", "10.0.0.1/33", "x/24", "fd00::1/129"] {
            assert!(bad.parse::<Prefix>().is_err(), "{bad}");
        }
    }
}
