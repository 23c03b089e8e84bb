//! The GSI (QP1) and its MAD layer, sans-IO: the part of the Linux MAD
//! stack (`ib_mad`) that a CM or a subnet manager's QP0 agent sits on.
//!
//! - [`agent`]: sends (transaction IDs, retransmission, timeouts) and
//!   receives (checks, response matching, the queue for the consumer);
//! - [`frame`]: the RoCE v2 UD SEND a MAD leaves in.
//!
//! The endpoint owns one [`Gsi`], created on first use, so that a device
//! that never speaks MADs pays nothing for it but one comparison (dest QP
//! == 1) on receive; see `Endpoint::gsi_send` and `Endpoint::poll_mad`.

pub mod agent;
pub mod frame;

pub use agent::{Gsi, MadTimeout, OutgoingMad, ReceivedMad};
