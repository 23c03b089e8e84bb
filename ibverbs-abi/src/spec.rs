//! The device list: `SOFTROCE_DEVICES="rxe0=127.0.0.1,rxe1=127.0.0.2"`.
//!
//! Syntax: a comma-separated list of `NAME=ADDRESS` or `NAME=ib:IFNAME[:LID]`.
//! NAME is 1 to 63 characters of letters, digits, `_`, `-` and `.`.
//!
//! - `NAME=ADDRESS`: a RoCE v2 device. ADDRESS is an IPv4 or IPv6 address
//!   the device binds its UDP socket to (port 4791), with an optional
//!   `%SCOPE` (interface index) for IPv6 link-local.
//! - `NAME=ib:IFNAME[:LID]`: a native InfiniBand device on the network
//!   interface IFNAME (raw frames, EtherType 0x88B5; root or CAP_NET_RAW
//!   to open it). Its port has a LID: LID (1 to 0xBFFF, decimal or `0x`
//!   hex) if given, else the one a subnet manager (`rdma-sm`) gave the
//!   port, else the LID plan's (the low 14 bits of the interface's MAC).
//!
//! Spaces around entries are ignored. Unset or empty: one device,
//! `rxe0=127.0.0.1`.

use std::net::IpAddr;

/// The variable the library and `softroce-run` read.
pub const ENV: &str = "SOFTROCE_DEVICES";
/// The device list when the variable is unset or empty.
pub const DEFAULT: &str = "rxe0=127.0.0.1";
/// The prefix of a native InfiniBand device's value.
pub const IB_PREFIX: &str = "ib:";

/// What a device sends its packets over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceLink {
    /// RoCE v2 over UDP, bound to `addr` (`%scope_id` for IPv6 link-local).
    RoceV2 { addr: IpAddr, scope_id: u32 },
    /// Native InfiniBand frames on the network interface `netdev`, at the
    /// port LID `lid` (None: the subnet manager's, else the LID plan's).
    Ib { netdev: String, lid: Option<u16> },
}

/// One device of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    pub name: String,
    pub link: DeviceLink,
}

impl DeviceSpec {
    /// A RoCE v2 device on `addr`.
    pub fn roce_v2(name: &str, addr: IpAddr) -> DeviceSpec {
        DeviceSpec { name: name.to_string(), link: DeviceLink::RoceV2 { addr, scope_id: 0 } }
    }

    /// The IP address of a RoCE v2 device (None for native IB).
    pub fn ip(&self) -> Option<IpAddr> {
        match self.link {
            DeviceLink::RoceV2 { addr, .. } => Some(addr),
            DeviceLink::Ib { .. } => None,
        }
    }

    /// The network interface of a native IB device.
    pub fn netdev(&self) -> Option<&str> {
        match &self.link {
            DeviceLink::Ib { netdev, .. } => Some(netdev),
            DeviceLink::RoceV2 { .. } => None,
        }
    }

    pub fn is_ib(&self) -> bool {
        matches!(self.link, DeviceLink::Ib { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("device entry {0:?} is not NAME=ADDRESS or NAME=ib:IFNAME[:LID]")]
    NoEquals(String),
    #[error("device name {0:?} must be 1 to 63 letters, digits, '_', '-' or '.'")]
    BadName(String),
    #[error("device {name}: {addr:?} is not an IPv4 or IPv6 address (nor ib:IFNAME[:LID])")]
    BadAddress { name: String, addr: String },
    #[error("device {name}: scope {scope:?} is not an interface index")]
    BadScope { name: String, scope: String },
    #[error("device {name}: {addr} cannot be a device address (unspecified or multicast)")]
    Unusable { name: String, addr: IpAddr },
    #[error("device name {0:?} is given twice")]
    Duplicate(String),
    #[error(
        "device {name}: unknown link kind {kind:?} (the kinds are an IP address for RoCE v2, and ib:IFNAME[:LID])"
    )]
    UnknownKind { name: String, kind: String },
    #[error(
        "device {name}: {netdev:?} is not a network interface name (1 to 15 characters, none of them '/', ':', \
         ',' or a space)"
    )]
    BadNetdev { name: String, netdev: String },
    #[error("device {name}: LID {lid:?} is not a unicast LID (1 to 0xBFFF, decimal or 0x hex)")]
    BadLid { name: String, lid: String },
}

/// Parses one `NAME=ADDRESS[%SCOPE]` or `NAME=ib:IFNAME[:LID]` entry.
pub fn parse_entry(entry: &str) -> Result<DeviceSpec, SpecError> {
    let entry = entry.trim();
    let (name, addr) = entry.split_once('=').ok_or_else(|| SpecError::NoEquals(entry.to_string()))?;
    let name = name.trim();
    let ok_name = !name.is_empty()
        && name.len() < 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !ok_name {
        return Err(SpecError::BadName(name.to_string()));
    }
    let addr = addr.trim();
    if let Some(rest) = addr.strip_prefix(IB_PREFIX) {
        return parse_ib(name, rest);
    }
    let (ip, scope) = match addr.split_once('%') {
        Some((ip, s)) => {
            let scope =
                s.parse::<u32>().map_err(|_| SpecError::BadScope { name: name.to_string(), scope: s.to_string() })?;
            (ip, scope)
        }
        None => (addr, 0),
    };
    let ip: IpAddr = ip.trim_start_matches('[').trim_end_matches(']').parse().map_err(|_| {
        // `WORD:...` whose WORD cannot begin an IPv6 address names a kind
        // of link this list does not have (roce1:, eth:, ...).
        match addr.split_once(':') {
            Some((kind, _))
                if !kind.is_empty()
                    && kind.bytes().all(|b| b.is_ascii_alphanumeric())
                    && !kind.bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                SpecError::UnknownKind { name: name.to_string(), kind: kind.to_string() }
            }
            _ => SpecError::BadAddress { name: name.to_string(), addr: addr.to_string() },
        }
    })?;
    if ip.is_unspecified() || ip.is_multicast() {
        return Err(SpecError::Unusable { name: name.to_string(), addr: ip });
    }
    Ok(DeviceSpec { name: name.to_string(), link: DeviceLink::RoceV2 { addr: ip, scope_id: scope } })
}

/// `IFNAME[:LID]` of a native IB device `name`.
fn parse_ib(name: &str, rest: &str) -> Result<DeviceSpec, SpecError> {
    let (netdev, lid) = match rest.split_once(':') {
        Some((n, l)) => (n, Some(l)),
        None => (rest, None),
    };
    // The kernel's dev_valid_name, and no ',' (the list's separator).
    let ok_netdev = !netdev.is_empty()
        && netdev.len() < 16
        && netdev != "."
        && netdev != ".."
        && !netdev.bytes().any(|b| b == b'/' || b == b':' || b == b',' || b.is_ascii_whitespace());
    if !ok_netdev {
        return Err(SpecError::BadNetdev { name: name.to_string(), netdev: netdev.to_string() });
    }
    let lid = match lid {
        None => None,
        Some(l) => {
            let bad = || SpecError::BadLid { name: name.to_string(), lid: l.to_string() };
            let v = match l.strip_prefix("0x").or_else(|| l.strip_prefix("0X")) {
                Some(hex) => u16::from_str_radix(hex, 16),
                None => l.parse::<u16>(),
            }
            .map_err(|_| bad())?;
            if !(1..=0xbfff).contains(&v) {
                return Err(bad());
            }
            Some(v)
        }
    };
    Ok(DeviceSpec { name: name.to_string(), link: DeviceLink::Ib { netdev: netdev.to_string(), lid } })
}

/// Parses a whole list; empty means [`DEFAULT`].
pub fn parse_list(list: &str) -> Result<Vec<DeviceSpec>, SpecError> {
    let list = if list.trim().is_empty() { DEFAULT } else { list };
    let mut out: Vec<DeviceSpec> = Vec::new();
    for entry in list.split(',').filter(|e| !e.trim().is_empty()) {
        let d = parse_entry(entry)?;
        if out.iter().any(|o| o.name == d.name) {
            return Err(SpecError::Duplicate(d.name));
        }
        out.push(d);
    }
    Ok(out)
}

/// The list of this process: [`ENV`], or [`DEFAULT`].
pub fn from_env() -> Result<Vec<DeviceSpec>, SpecError> {
    parse_list(&std::env::var(ENV).unwrap_or_default())
}

/// One entry in the syntax [`parse_entry`] reads.
pub fn to_entry(d: &DeviceSpec) -> String {
    match &d.link {
        DeviceLink::RoceV2 { addr, scope_id: 0 } => format!("{}={addr}", d.name),
        DeviceLink::RoceV2 { addr, scope_id } => format!("{}={addr}%{scope_id}", d.name),
        DeviceLink::Ib { netdev, lid: None } => format!("{}={IB_PREFIX}{netdev}", d.name),
        DeviceLink::Ib { netdev, lid: Some(l) } => format!("{}={IB_PREFIX}{netdev}:{l:#x}", d.name),
    }
}

/// Writes a list back in the syntax [`parse_list`] reads.
pub fn to_list(devs: &[DeviceSpec]) -> String {
    devs.iter().map(to_entry).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_back() {
        let l = parse_list(" rxe0=127.0.0.1, rxe1=127.0.0.2 ,v6=fe80::1%3").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].ip(), Some("127.0.0.2".parse::<IpAddr>().unwrap()));
        assert_eq!(l[2].link, DeviceLink::RoceV2 { addr: "fe80::1".parse().unwrap(), scope_id: 3 });
        assert_eq!(to_list(&l), "rxe0=127.0.0.1,rxe1=127.0.0.2,v6=fe80::1%3");
        assert_eq!(parse_list("").unwrap()[0].name, "rxe0");
    }

    #[test]
    fn native_ib_devices_name_an_interface_and_maybe_a_lid() {
        let l = parse_list("mlx0=ib:veth0, mlx1 = ib:ibq1a:0x0a02 ,m2=ib:e:17,rxe0=10.0.0.1").unwrap();
        assert_eq!(l[0].link, DeviceLink::Ib { netdev: "veth0".into(), lid: None });
        assert_eq!(l[1].link, DeviceLink::Ib { netdev: "ibq1a".into(), lid: Some(0x0a02) });
        assert_eq!(l[2].link, DeviceLink::Ib { netdev: "e".into(), lid: Some(17) });
        assert!(l[0].is_ib() && l[0].ip().is_none() && l[0].netdev() == Some("veth0"));
        assert_eq!(l[3].netdev(), None);
        assert_eq!(to_list(&l), "mlx0=ib:veth0,mlx1=ib:ibq1a:0xa02,m2=ib:e:0x11,rxe0=10.0.0.1");
        assert_eq!(parse_list(&to_list(&l)).unwrap(), l);
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        assert_eq!(parse_list("rxe0"), Err(SpecError::NoEquals("rxe0".into())));
        assert!(matches!(parse_list("a b=127.0.0.1"), Err(SpecError::BadName(_))));
        assert!(matches!(parse_list("x=300.0.0.1"), Err(SpecError::BadAddress { .. })));
        assert!(matches!(parse_list("x=0.0.0.0"), Err(SpecError::Unusable { .. })));
        assert!(matches!(parse_list("x=fe80::1%eth0"), Err(SpecError::BadScope { .. })));
        assert_eq!(parse_list("x=127.0.0.1,x=127.0.0.2"), Err(SpecError::Duplicate("x".into())));
        assert_eq!(parse_list("x=ib:a,x=ib:b"), Err(SpecError::Duplicate("x".into())));
        // Native IB: the interface and the LID.
        let netdev = |n: &str| SpecError::BadNetdev { name: "x".into(), netdev: n.into() };
        assert_eq!(parse_entry("x=ib:"), Err(netdev("")));
        assert_eq!(parse_entry("x=ib:a/b"), Err(netdev("a/b")));
        assert_eq!(parse_entry("x=ib:sixteen-chars-ab"), Err(netdev("sixteen-chars-ab")));
        assert_eq!(parse_entry("x=ib:a b"), Err(netdev("a b")));
        let lid = |l: &str| SpecError::BadLid { name: "x".into(), lid: l.into() };
        assert_eq!(parse_entry("x=ib:veth0:0"), Err(lid("0")));
        assert_eq!(parse_entry("x=ib:veth0:0xc000"), Err(lid("0xc000")));
        assert_eq!(parse_entry("x=ib:veth0:lid"), Err(lid("lid")));
        assert_eq!(parse_entry("x=ib:veth0:"), Err(lid("")));
        assert_eq!(parse_entry("x=ib:veth0:1:2"), Err(lid("1:2")));
        // A kind this list does not have is named as such, not as a bad address.
        assert_eq!(
            parse_entry("x=roce1:veth0"),
            Err(SpecError::UnknownKind { name: "x".into(), kind: "roce1".into() })
        );
        assert_eq!(parse_entry("x=IB:veth0"), Err(SpecError::UnknownKind { name: "x".into(), kind: "IB".into() }));
        assert!(matches!(parse_entry("x=fe80::zz"), Err(SpecError::BadAddress { .. })));
        // The messages name the device and what was wrong.
        let m = parse_entry("mlx0=ib:veth0:0").unwrap_err().to_string();
        assert!(m.contains("mlx0") && m.contains("\"0\"") && m.contains("0xBFFF"), "{m}");
    }
}
