//! The device list: `SOFTROCE_DEVICES="rxe0=127.0.0.1,rxe1=127.0.0.2"`.
//!
//! Syntax: a comma-separated list of `NAME=ADDRESS`. NAME is 1 to 63
//! characters of letters, digits, `_`, `-` and `.`; ADDRESS is an IPv4 or
//! IPv6 address the device binds its RoCE v2 UDP socket to (port 4791),
//! with an optional `%SCOPE` (interface index) for IPv6 link-local. Spaces
//! around entries are ignored. Unset or empty: one device, `rxe0=127.0.0.1`.

use std::net::IpAddr;

/// The variable the library and `softroce-run` read.
pub const ENV: &str = "SOFTROCE_DEVICES";
/// The device list when the variable is unset or empty.
pub const DEFAULT: &str = "rxe0=127.0.0.1";

/// One device of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    pub name: String,
    pub addr: IpAddr,
    pub scope_id: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("device entry {0:?} is not NAME=ADDRESS")]
    NoEquals(String),
    #[error("device name {0:?} must be 1 to 63 letters, digits, '_', '-' or '.'")]
    BadName(String),
    #[error("device {name}: {addr:?} is not an IPv4 or IPv6 address")]
    BadAddress { name: String, addr: String },
    #[error("device {name}: scope {scope:?} is not an interface index")]
    BadScope { name: String, scope: String },
    #[error("device {name}: {addr} cannot be a device address (unspecified or multicast)")]
    Unusable { name: String, addr: IpAddr },
    #[error("device name {0:?} is given twice")]
    Duplicate(String),
}

/// Parses one `NAME=ADDRESS[%SCOPE]` entry.
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
    let (ip, scope) = match addr.split_once('%') {
        Some((ip, s)) => {
            let scope =
                s.parse::<u32>().map_err(|_| SpecError::BadScope { name: name.to_string(), scope: s.to_string() })?;
            (ip, scope)
        }
        None => (addr, 0),
    };
    let ip: IpAddr = ip
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| SpecError::BadAddress { name: name.to_string(), addr: addr.to_string() })?;
    if ip.is_unspecified() || ip.is_multicast() {
        return Err(SpecError::Unusable { name: name.to_string(), addr: ip });
    }
    Ok(DeviceSpec { name: name.to_string(), addr: ip, scope_id: scope })
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

/// Writes a list back in the syntax [`parse_list`] reads.
pub fn to_list(devs: &[DeviceSpec]) -> String {
    devs.iter()
        .map(|d| {
            if d.scope_id != 0 {
                format!("{}={}%{}", d.name, d.addr, d.scope_id)
            } else {
                format!("{}={}", d.name, d.addr)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_back() {
        let l = parse_list(" rxe0=127.0.0.1, rxe1=127.0.0.2 ,v6=fe80::1%3").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].addr, "127.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(l[2].scope_id, 3);
        assert_eq!(to_list(&l), "rxe0=127.0.0.1,rxe1=127.0.0.2,v6=fe80::1%3");
        assert_eq!(parse_list("").unwrap()[0].name, "rxe0");
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        assert_eq!(parse_list("rxe0"), Err(SpecError::NoEquals("rxe0".into())));
        assert!(matches!(parse_list("a b=127.0.0.1"), Err(SpecError::BadName(_))));
        assert!(matches!(parse_list("x=300.0.0.1"), Err(SpecError::BadAddress { .. })));
        assert!(matches!(parse_list("x=0.0.0.0"), Err(SpecError::Unusable { .. })));
        assert!(matches!(parse_list("x=fe80::1%eth0"), Err(SpecError::BadScope { .. })));
        assert_eq!(parse_list("x=127.0.0.1,x=127.0.0.2"), Err(SpecError::Duplicate("x".into())));
    }
}
