//! The IBTA transport engine: RC, UC and UD queue pairs as sans-IO state
//! machines, driven by received packets, posted work requests and an
//! explicit clock.
//!
//! | module | what it holds |
//! |---|---|
//! | [`endpoint`] | the device: the sans-IO API, packet dispatch, CQs, SRQs, counters |
//! | [`qp`] | the QP state machine and attributes (`ibv_modify_qp` rules) |
//! | [`requester`] | work requests to packets: PSNs, segmentation, AckReq, the go-back-N cursor |
//! | [`completer`] | ACKs, NAKs and responses to completions, retries and timers |
//! | [`responder`] | incoming requests: checks, execution, ACK/NAK, READ and atomic responses |
//! | [`memory`] | protection domains, memory regions and access checks |
//! | [`framing`] | RoCE v2 framing and scatter/gather copies |
//! | [`wr`] | work requests and completions (libibverbs names and values) |
//! | [`sim`] | a deterministic simulated link with faults and a pcap writer |
//! | [`time`] | virtual time |

pub mod cc;
pub mod completer;
pub mod endpoint;
pub mod error;
pub mod framing;
#[doc(hidden)]
pub mod fuzzing;
pub mod memory;
pub mod qp;
pub mod requester;
mod resources;
pub mod responder;
pub mod rng;
pub mod sim;
pub mod time;
pub mod wr;

pub use endpoint::{AsyncEvent, Drop, Endpoint, Stats, Transmit, MAX_PACKET};
pub use error::VerbsError;
pub use framing::PayloadRef;
pub use memory::{Access, Pd, RegionGuard, RegionMemory};
pub use qp::{AddressVector, CqId, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpStats, QpType, SrqId};
pub use time::Instant;
pub use wr::{wc_flags, RecvWr, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion};
