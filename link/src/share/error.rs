//! What can go wrong in sharing a device's port: its own module, below
//! the registry and the members that return it.

use super::steer::{self, SteerError};
use std::io;

/// What went wrong in sharing a device's port. Each names the step.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    #[error("shared-port registry: cannot {what}: {source}")]
    Registry {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("all {} slots of the shared port of {addr} are taken", steer::SLOTS)]
    SlotsFull { addr: std::net::IpAddr },
    #[error("cannot bind UDP {addr} port 4791 shared (SO_REUSEPORT): {source}")]
    Bind {
        addr: std::net::IpAddr,
        #[source]
        source: io::Error,
    },
    #[error("cannot attach the steering program to the shared port: {0}")]
    Attach(#[source] io::Error),
    #[error(transparent)]
    Steer(#[from] SteerError),
    #[error("CM service {key:#010x} is already bound by the process in slot {slot} of this device")]
    ServiceTaken { key: u32, slot: u8 },
}

impl From<ShareError> for io::Error {
    fn from(e: ShareError) -> io::Error {
        let kind = match &e {
            ShareError::Registry { source, .. } | ShareError::Bind { source, .. } | ShareError::Attach(source) => {
                source.kind()
            }
            ShareError::SlotsFull { .. } | ShareError::ServiceTaken { .. } => io::ErrorKind::AddrInUse,
            ShareError::Steer(_) => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}
