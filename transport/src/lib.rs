//! The IBTA transport engine: RC, UC and UD queue pairs as sans-IO state
//! machines, driven by received packets, posted work requests and an
//! explicit clock.
//!
//! | module | what it holds |
//! |---|---|
//! | [`endpoint`] | the device façade: the sans-IO API and the verbs; its child modules `rx` (receive checks and dispatch) and `sched` (round-robin transmit scheduler, bursts, ACK release) |
//! | `cq` | completion queues, their error state and overflow events |
//! | `pool` | recycled scatter/gather lists and inline buffers of finished work requests |
//! | `srq` | shared receive queues and their limit events |
//! | `stats` | the endpoint's counters ([`Stats`]), drop reasons ([`Drop`]), per-QP counters ([`QpStats`]) |
//! | `events` | asynchronous events ([`AsyncEvent`]) |
//! | [`qp`] | the QP state machine and attributes (`ibv_modify_qp` rules) |
//! | [`requester`] | work requests to packets: PSNs, segmentation, AckReq, the go-back-N cursor |
//! | `send_queue` | the send queue the requester and the completer share: WQEs, the cursor, the PSN window |
//! | `retry` | the retry budgets (`retry_cnt`, `rnr_retry`) the completer spends and progress refills |
//! | [`completer`] | ACKs, NAKs and responses to completions, retries and timers |
//! | [`responder`] | incoming requests: checks, execution, ACK/NAK, READ and atomic responses |
//! | [`mcast`] | multicast groups: which UD QPs are attached to which MGID, rxe's limits |
//! | [`memory`] | memory regions, their table by key and access checks |
//! | `protection` | protection domains ([`Pd`]) and access rights ([`Access`]), which `memory` re-exports |
//! | [`odp`] | fault-safe copies of on-demand (ODP) regions (docs/odp.md) |
//! | [`framing`] | framing per link kind (RoCE v2, RoCE v1, native IB) and scatter/gather copies |
//! | [`gsi`] | the GSI (QP1): the MAD agent (transaction IDs, retransmission, response matching, receive checks) and its packet framing |
//! | [`wr`] | work requests and completions (libibverbs names and values) |
//! | [`sim`] | a deterministic simulated link with faults and a pcap writer |
//! | [`time`] | virtual time |

pub mod capture;
pub mod cc;
pub mod cm;
pub mod completer;
mod cq;
pub mod endpoint;
pub mod error;
mod events;
pub mod framing;
#[doc(hidden)]
pub mod fuzzing;
pub mod gsi;
pub mod mcast;
pub mod memory;
mod net_header;
pub mod odp;
pub mod paths;
mod pool;
#[doc(hidden)]
pub mod prefetch;
mod protection;
pub mod qp;
mod qpn_alloc;
pub mod requester;
mod resources;
pub mod responder;
mod retry;
pub mod rng;
mod send_queue;
pub mod sim;
mod srq;
mod stats;
pub mod time;
pub mod timers;
pub mod window;
pub mod wr;

pub use endpoint::{AsyncEvent, Endpoint, Transmit, MAX_PACKET};
pub use error::{DeregError, VerbsError};
pub use framing::{LinkKind, PayloadRef};
pub use mcast::{is_multicast_gid, McastError, MULTICAST_QPN};
pub use memory::{Access, MemoryFault, Pd, RegionGuard, RegionMemory};
pub use qp::{AddressVector, CqId, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpType, SrqId, XrcdId};
pub use stats::{Drop, QpStats, Stats};
pub use time::Instant;
pub use window::{is_window_key, BindArgs, BindError, InvalidateError, MemoryWindow, MwId, MwType, WindowBinding};
pub use wr::{roce_packet_type, wc_flags, RecvWr, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion};
