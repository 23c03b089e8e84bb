//! The management state of an emulated native-IB port on a network
//! interface, as its port agent publishes it.
//!
//! On a real HCA the port's LID, SM LID and state live in the HCA and its
//! firmware's SMA answers the subnet manager whether or not an
//! application runs. Here a small process does that (`rdma-sm --agent
//! --netdev IFACE`): it answers the SM's SMPs for the port and writes the
//! port's state to `<run dir>/ib-port-<GUID>.json`, which a device opened
//! on that interface reads, as a verbs provider reads its port from the
//! HCA. The run directory is `$SOFTROCE_RUN_DIR`, else `/run/softroce`
//! (shared by network namespaces, so the agents of both ends of a veth
//! pair publish where either can read). The port GUID is the EUI-64 of
//! the interface's MAC, the same identifier as in the port's GID.
//!
//! No file: nobody manages the port, and the device takes its LID from
//! the LID plan ([`crate::default_lid`]) or `--lid`, as before.

use crate::Mac;
use std::io;
use std::path::{Path, PathBuf};

/// The environment variable naming the run directory.
pub const RUN_DIR_ENV: &str = "SOFTROCE_RUN_DIR";
/// The run directory without [`RUN_DIR_ENV`].
pub const DEFAULT_RUN_DIR: &str = "/run/softroce";

/// PortInfo.PortState (IBA 14.2.5.6; reference §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PortState {
    Down = 1,
    Init = 2,
    Armed = 3,
    Active = 4,
}

impl PortState {
    /// The PortInfo code (1 to 4).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The state of a PortInfo code; None for 0 (NoChange) and reserved codes.
    pub fn from_code(c: u8) -> Option<PortState> {
        [PortState::Down, PortState::Init, PortState::Armed, PortState::Active].into_iter().find(|s| s.code() == c)
    }
}

/// What the port agent publishes about its port.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IbPortRecord {
    /// The interface the port is on.
    pub netdev: String,
    /// The port GUID, `0x` and 16 hex digits.
    pub port_guid: String,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub state: PortState,
    /// The active MTU in bytes (PortInfo NeighborMTU).
    pub mtu: u32,
    /// The P_KeyTable's first block, zeros left out.
    pub pkeys: Vec<u16>,
    /// The agent's process (a record whose agent is gone is stale).
    pub pid: u32,
}

/// Why a device on an interface cannot use the port's published state.
#[derive(Debug, thiserror::Error)]
pub enum IbPortError {
    #[error(
        "the IB port on {netdev} (GUID {guid}) is {state:?}, not ACTIVE: a port agent manages it but no subnet \
         manager has configured it; run `rdma-sm --once --backend ib --netdev IFACE` at one end of the link"
    )]
    NotActive { netdev: String, guid: String, state: PortState },
    #[error("the IB port record {path}: {why}")]
    Unreadable { path: PathBuf, why: String },
}

impl From<IbPortError> for io::Error {
    fn from(e: IbPortError) -> io::Error {
        let kind = match e {
            IbPortError::NotActive { .. } => io::ErrorKind::NotConnected,
            IbPortError::Unreadable { .. } => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

/// The run directory ([`RUN_DIR_ENV`] or [`DEFAULT_RUN_DIR`]).
pub fn run_dir() -> PathBuf {
    std::env::var_os(RUN_DIR_ENV).map_or_else(|| PathBuf::from(DEFAULT_RUN_DIR), PathBuf::from)
}

/// The port GUID of the port on an interface with MAC `mac`: modified
/// EUI-64, the interface identifier of its link-local GID.
pub fn port_guid(mac: Mac) -> u64 {
    u64::from_be_bytes([mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]])
}

/// `0x` and 16 hex digits.
pub fn guid_text(guid: u64) -> String {
    format!("{guid:#018x}")
}

/// Where the record of port `guid` is published.
pub fn record_path(guid: u64) -> PathBuf {
    run_dir().join(format!("ib-port-{guid:016x}.json"))
}

/// The agent's local socket (a datagram socket taking SMPs for its own
/// port: what umad is to a real HCA, for the SM on the same port).
pub fn agent_socket_path(guid: u64) -> PathBuf {
    run_dir().join(format!("ib-port-{guid:016x}.sock"))
}

fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl IbPortRecord {
    /// The record of port `guid`, if an agent that still runs published one.
    pub fn read(guid: u64) -> Result<Option<IbPortRecord>, IbPortError> {
        Self::read_from(&record_path(guid))
    }

    fn read_from(path: &Path) -> Result<Option<IbPortRecord>, IbPortError> {
        let bad = |why: String| IbPortError::Unreadable { path: path.to_path_buf(), why };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(e.to_string())),
        };
        let r: IbPortRecord = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if !process_alive(r.pid) {
            tracing::warn!(path = %path.display(), pid = r.pid, "stale IB port record (its agent is gone): ignored");
            return Ok(None);
        }
        Ok(Some(r))
    }

    /// Writes the record where devices look (atomically: a reader never
    /// sees half of it).
    pub fn publish(&self, guid: u64) -> io::Result<()> {
        let path = record_path(guid);
        let dir = run_dir();
        std::fs::create_dir_all(&dir).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let tmp = path.with_extension(format!("json.{}", std::process::id()));
        let text = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        std::fs::write(&tmp, text + "\n")?;
        std::fs::rename(&tmp, &path)
    }

    /// The LID a device on this port uses: the record's, if ACTIVE.
    pub fn usable_lid(&self) -> Result<u16, IbPortError> {
        if self.state != PortState::Active {
            return Err(IbPortError::NotActive {
                netdev: self.netdev.clone(),
                guid: self.port_guid.clone(),
                state: self.state,
            });
        }
        Ok(self.lid)
    }
}

/// Removes the record of port `guid` (its agent exits).
pub fn unpublish(guid: u64) {
    let _ = std::fs::remove_file(record_path(guid));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_is_the_gid_interface_id_and_records_round_trip() {
        let mac = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
        let g = port_guid(mac);
        assert_eq!(guid_text(g), "0x505400fffe123456");
        let gid = crate::gid_of_mac(mac).to_string();
        assert_eq!(gid, "fe80::5054:ff:fe12:3456", "the GUID is the GID's interface identifier");
        let dir = std::env::temp_dir().join(format!("ib-port-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.json");
        let mut r = IbPortRecord {
            netdev: "veth0".into(),
            port_guid: guid_text(g),
            lid: 5,
            sm_lid: 1,
            lmc: 0,
            state: PortState::Armed,
            mtu: 1024,
            pkeys: vec![0xffff],
            pid: std::process::id(),
        };
        std::fs::write(&path, serde_json::to_string(&r).unwrap()).unwrap();
        let back = IbPortRecord::read_from(&path).unwrap().unwrap();
        assert_eq!(back, r);
        let e = back.usable_lid().unwrap_err().to_string();
        assert!(e.contains("veth0") && e.contains("Armed") && e.contains("rdma-sm"), "{e}");
        r.state = PortState::Active;
        assert_eq!(r.usable_lid().unwrap(), 5);
        // A record whose agent is gone is ignored.
        r.pid = u32::MAX - 1;
        std::fs::write(&path, serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(IbPortRecord::read_from(&path).unwrap(), None);
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(IbPortRecord::read_from(&path), Err(IbPortError::Unreadable { .. })));
        assert_eq!(IbPortRecord::read_from(&dir.join("none.json")).unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
