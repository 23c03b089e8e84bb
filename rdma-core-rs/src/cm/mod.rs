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
//! - **The CM** is `rdma_transport::cm::Cm`, beside the device's first
//!   engine's QP1, moving each connection's QP on the engine that holds it;
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
mod constants;
mod device;
mod dispatch;
mod engines;
mod error;
mod event;
mod id;
mod multicast;
mod objects;
mod route;

pub use constants::{RDMA_UDP_QKEY, REQ_USER_DATA_LEN, SIDR_USER_DATA_LEN};
pub use device::{attach_context, set_options, CmOptions};
pub use error::{CmError, Result};
pub use event::EventChannel;
pub use multicast::mgid_of;
pub use objects::{CmEvent, CmId, ConnParam, EventParam, EventType, PortSpace};
pub use rdma_wire::cm::RejReason;

#[cfg(test)]
mod tests;
