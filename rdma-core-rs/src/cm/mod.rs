//! The RDMA connection manager (`librdmacm`): connections named by IP
//! addresses and ports, set up with the IB CM's MADs on QP1 (REQ, REP,
//! RTU, REJ, MRA, DREQ, DREP) as kernel Soft-RoCE and RoCE NICs speak it.
//!
//! | librdmacm | here |
//! |---|---|
//! | `rdma_create_event_channel` | [`EventChannel::new`] |
//! | `rdma_create_id(ch, &id, ctx, RDMA_PS_TCP)` | [`EventChannel::create_id`]`(`[`PortSpace::Tcp`]`)` |
//! | `rdma_resolve_addr`, `rdma_resolve_route` | [`CmId::resolve_addr`], [`CmId::resolve_route`] |
//! | `rdma_bind_addr`, `rdma_listen` | [`CmId::bind_addr`], [`CmId::listen`] |
//! | `id->verbs`, `rdma_create_qp`, `id->qp` | [`CmId::context`], [`CmId::create_qp`], [`CmId::qp`] |
//! | `rdma_connect`, `rdma_accept`, `rdma_reject` | [`CmId::connect`], [`CmId::accept`], [`CmId::reject`] |
//! | `rdma_disconnect` | [`CmId::disconnect`] |
//! | `rdma_get_cm_event`, `rdma_ack_cm_event` | [`EventChannel::get_cm_event`], [`CmEvent::ack`] (or drop) |
//! | `struct rdma_conn_param` | [`ConnParam`] |
//!
//! # How it maps onto the stack
//!
//! - **Devices.** An ID is bound to the soft device of its local IP
//!   address ([`crate::Device`]); the first ID on an address opens it (or
//!   takes the [`crate::Context`] given to [`attach_context`]), and every
//!   later ID on that address shares it: one UDP socket on port 4791
//!   carries the CM's MADs and the data of all its QPs.
//! - **Routes** come from the IP addresses, as RoCE does: GIDs are the
//!   addresses (IPv4-mapped), no path record is asked for.
//! - **The CM** is `rdma_transport::cm::Cm`, driven by the device's engine;
//!   this layer adds what `rdma_cm` adds: service IDs (port space << 16 |
//!   port), the 36-byte `cma_hdr` in the REQ, matching a REQ to a listener
//!   by service ID then by address, and the events.
//! - **QPs** made with [`CmId::create_qp`] start in INIT; the CM moves them
//!   to RTR and RTS (and to ERR on disconnect), as librdmacm does.
//! - **Progress.** CM messages are handled whenever the application waits
//!   on the device (events, completions) and by a small per-device thread
//!   every few milliseconds, so a peer's DREQ or repeated REQ is answered
//!   while the application is busy with its data.

mod connect;
mod device;
mod dispatch;
mod event;
mod id;
mod multicast;
mod route;

pub use device::{attach_context, set_options, CmOptions};
pub use event::{CmEvent, EventChannel, EventParam, EventType};
pub use id::{CmId, ConnParam, PortSpace};
pub use multicast::mgid_of;
pub use rdma_wire::cm::RejReason;

/// `RDMA_UDP_QKEY`: the Q_Key of every UD QP the RDMA CM sets up.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// User private data a REQ carries after the 36-byte `cma_hdr`.
pub const REQ_USER_DATA_LEN: usize = rdma_wire::cm::REQ_PRIVATE_DATA_LEN - rdma_wire::cma::CMA_HDR_LEN;

/// User private data a SIDR_REQ (RDMA_PS_UDP connect) carries after the `cma_hdr`.
pub const SIDR_USER_DATA_LEN: usize = rdma_wire::cm::SIDR_REQ_PRIVATE_DATA_LEN - rdma_wire::cma::CMA_HDR_LEN;

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

#[cfg(test)]
mod tests;
