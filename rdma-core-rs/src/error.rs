//! Errors of the verbs API.

use rdma_transport::{McastError, VerbsError};
use std::io;

/// What went wrong in a verbs call. Every variant names the object or the
/// value at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The transport refused the request (bad state, queue full, ...).
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// A multicast attach or detach was refused (not a UD QP, not a
    /// multicast GID, not attached, a limit).
    #[error(transparent)]
    Mcast(#[from] McastError),
    /// A posted list failed at one work request; those before it were posted.
    #[error("work request {index} of the list (wr_id {wr_id}) was refused: {source}")]
    Post { index: usize, wr_id: u64, source: VerbsError },
    /// A socket call failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Objects of two different devices were combined.
    #[error("{0} belongs to another device")]
    WrongDevice(&'static str),
    /// An access outside a memory region through its local accessors.
    #[error("{len} bytes at offset {offset} are outside the {size}-byte memory region")]
    OutOfBounds { offset: usize, len: usize, size: usize },
    /// `reg_mr` could not have the memory it was asked for (the size may be
    /// a peer's choice: this is an error to report, never an abort).
    #[error("cannot allocate a {len}-byte memory region: {source}")]
    OutOfMemory { len: usize, source: std::collections::TryReserveError },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`Error::Io`] with this errno: what the ODP calls answer
    /// (`EFAULT` for memory that is not mapped or not accessible, `EPERM`,
    /// `EOPNOTSUPP`), so that a caller mapping errors to errno values gets
    /// them unchanged (`io::Error::raw_os_error`).
    pub(crate) fn errno(errno: i32, what: std::fmt::Arguments<'_>) -> Error {
        tracing::debug!(errno, "{what}");
        Error::Io(io::Error::from_raw_os_error(errno))
    }
}
