//! What went wrong in an RDMA CM call.

/// What went wrong in an RDMA CM call. Every variant names the call or
/// the value at fault.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    #[error(transparent)]
    Verbs(#[from] crate::Error),
    /// The call does not fit where the ID is (e.g. `connect` before
    /// `resolve_route`).
    #[error("{call} needs a CM ID {needs}, but this one is {state}")]
    WrongState { call: &'static str, needs: &'static str, state: &'static str },
    #[error("private data of {len} bytes is more than the {max} a {what} carries")]
    PrivateDataTooLong { len: usize, max: usize, what: &'static str },
    #[error("{0} is not a local address this stack can use: {1}")]
    NoDevice(std::net::IpAddr, String),
    /// No route to the peer (`rdma_resolve_route`).
    #[error("no route to {0}: {1}")]
    NoRoute(std::net::IpAddr, String),
    #[error("the source {src} and destination {dst} are of different address families")]
    FamilyMismatch { src: std::net::IpAddr, dst: std::net::IpAddr },
    #[error("port {port} of {addr} is already bound by another CM ID")]
    AddrInUse { addr: std::net::IpAddr, port: u16 },
    #[error("{0}")]
    Unsupported(&'static str),
    /// `join_multicast` of an address that is not an IPv4 multicast one.
    #[error("{0} is not a multicast address")]
    NotMulticast(std::net::IpAddr),
    /// The kernel's RDMA CM does not join IPv6 groups on RoCE v2 (ENOTSUPP).
    #[error("multicast group {0}: IPv6 groups are not supported on RoCE v2 (as the kernel's RDMA CM)")]
    Ipv6Multicast(std::net::IpAddr),
    /// The CM state machine refused the call.
    #[error("the connection manager refused {call}: {detail}")]
    Cm { call: &'static str, detail: String },
    /// Waiting for an event ran out of time.
    #[error("no CM event within {0:?}")]
    Timeout(std::time::Duration),
}

pub type Result<T> = std::result::Result<T, CmError>;
