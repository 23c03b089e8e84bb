//! The verbs API of the software RoCE v2 stack: the libibverbs object model
//! and names, over the transport engine of `rdma-transport`, with packets on
//! real UDP sockets (port 4791) that kernel Soft-RoCE and RoCE NICs accept,
//! or, through the [`link`] seam, RoCE v1 and native InfiniBand frames on a
//! network interface (AF_PACKET) or between the devices of one process
//! ([`Backend`], `docs/backends.md`).
//!
//! | libibverbs | here |
//! |---|---|
//! | `rdma link add rxe0 type rxe netdev eth0` | [`Device::new`]`("rxe0", addr)` |
//! | `ibv_get_device_list`, `ibv_open_device` | [`devices`], [`Device::open`] → [`Context`] |
//! | `ibv_query_gid` | [`Context::query_gid`] (index 0: the RoCE v2 GID of the address; RoCE v1 / IB: the EUI-64 GID of the MAC) |
//! | `ibv_query_port` | [`Context::query_port`] (LID, SM LID, state, MTU), [`Context::lid`] (native IB; [`DeviceConfig::lid`] or the subnet manager's) |
//! | `ibv_alloc_pd` | [`Context::alloc_pd`] → [`ProtectionDomain`] |
//! | `ibv_reg_mr` | [`ProtectionDomain::reg_mr`], [`ProtectionDomain::reg_mr_raw`] (unsafe) → [`MemoryRegion`] |
//! | `ibv_create_cq`, `ibv_poll_cq` | [`Context::create_cq`] → [`CompletionQueue::poll`], [`CompletionQueue::wait`], [`CompletionQueue::wait_async`] |
//! | `ibv_create_comp_channel`, `ibv_req_notify_cq`, `ibv_get_cq_event` | [`Context::create_comp_channel`], [`CompletionQueue::req_notify`], [`CompChannel::get_cq_event`] |
//! | `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp` | [`ProtectionDomain::create_qp`], [`QueuePair::modify`], [`QueuePair::query`] |
//! | `ibv_post_send`, `ibv_post_recv` | [`QueuePair::post_send`], [`QueuePair::post_recv`] |
//! | `ibv_create_srq`, `ibv_post_srq_recv` | [`ProtectionDomain::create_srq`], [`SharedReceiveQueue::post_recv`] |
//! | `ibv_create_ah` | [`ProtectionDomain::create_ah`], [`ProtectionDomain::create_ah_av`] (IB LID routes) → [`AddressHandle::ud_dest`] |
//! | `ibv_get_async_event` | [`Context::get_async_event`] |
//! | `ibv_attach_mcast`, `ibv_detach_mcast` | [`QueuePair::attach_mcast`], [`QueuePair::detach_mcast`] (UD; docs/multicast.md) |
//! | `ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw` | [`ProtectionDomain::alloc_mw`] → [`MemoryWindow::bind`] (type 1), [`MemoryWindow::bind_wr`] / [`SendOp::BindMw`] (type 2), drop |
//!
//! Work requests, completions, attributes and status codes are the
//! engine's types, re-exported here with libibverbs' names and values
//! ([`SendWr`], [`RecvWr`], [`Sge`], [`WorkCompletion`], [`WcStatus`], ...).
//!
//! # Soundness: who may touch registered memory
//!
//! A peer can write a registered region at any moment (an RDMA WRITE, a
//! READ response, a received SEND), so no safe call hands out a `&[u8]` or
//! `&mut [u8]` into it while the engine could write:
//!
//! - [`ProtectionDomain::reg_mr`] regions are owned by the library. Their
//!   bytes are reached by copying ([`MemoryRegion::read`],
//!   [`MemoryRegion::write`]) or through [`MemoryRegion::lock`], whose guard
//!   keeps the engine out until it is dropped.
//! - [`ProtectionDomain::reg_mr_raw`] registers the caller's memory in
//!   place and is `unsafe`: the caller promises that the memory outlives
//!   the region and is not touched except through those same accessors.
//! - Posting is safe: a work request names memory by key and address, and
//!   every access is checked against the region's bounds, protection domain
//!   and access flags, by the engine, under the region's lock.
//!
//! # Progress
//!
//! There is no NIC: the engine runs inside the application's calls (posts
//! send at once; polls and waits receive and fire timers). Blocking waits
//! sleep on the socket. [`Progress::Thread`] adds a background thread that
//! answers peers while the application does something else; in
//! [`Progress::Manual`] mode (the default), a passive side calls
//! [`Context::progress`] or a wait in its loops.

pub mod cm;
mod completions;
mod connect;
mod context;
mod cq;
mod device;
mod error;
mod frames;
#[doc(hidden)]
pub mod fuzzing;
mod io;
mod mcast;
mod mw;
mod pd;
mod qp;
mod xrc;

pub use connect::{ConnectOptions, PeerInfo};
pub use context::{poll_readable, Context, ProgressGaps, SATISFIED_POLLS};
pub use cq::{CompChannel, CompletionQueue};
pub use device::{
    device_cap, device_cap_ex, devices, odp, Backend, Device, DeviceConfig, Gid, OdpCaps, PortAttr, Progress,
    MAX_THREADS,
};
pub use error::{Error, Result};
pub use mw::{inc_rkey, MemoryWindow, MwBindInfo};
pub use pd::{AdviseMr, MemoryRegion, ProtectionDomain};
pub use qp::{AddressHandle, AhAttr, QpInitAttr, QueuePair, SharedReceiveQueue};
/// The links, every backend behind one seam (the crate `rdma-link`).
pub use rdma_link as link;
pub use rdma_link::faults::FaultConfig;
pub use rdma_link::io_stats::IoStats;
pub use rdma_link::udp::{IoDriver, Offloads};
/// The UDP backend and the sharing of its port between processes (in the
/// link crate; here under their old paths).
pub use rdma_link::{share, udp};
pub use rdma_transport::cc::{ControllerFactory, DcqcnParams, SwiftParams, TimelyParams};
/// Multicast: why an attach or detach was refused, the multicast QPN.
pub use rdma_transport::mcast::{MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH, MAX_TOTAL_MCAST_QP_ATTACH};
pub use rdma_transport::qp::{QpParams, QpStats};
/// The operands of [`SendOp::Flush`] (`IBV_FLUSH_GLOBAL`, `IBV_FLUSH_RANGE`, ...).
pub use rdma_transport::wr::flush;
/// Why the engine dropped a packet (a key of [`Stats::drops`]).
pub use rdma_transport::Drop as DropReason;
pub use rdma_transport::LinkKind;
pub use rdma_transport::XrcdId;
pub use rdma_transport::{
    roce_packet_type, wc_flags, Access, AddressVector, AsyncEvent, CqId, Mtu, QpAttr, QpCap, QpState, QpType, RecvWr,
    SendOp, SendWr, Sge, SrqId, Stats, UdDest, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
pub use rdma_transport::{McastError, MULTICAST_QPN};
/// Memory windows' types and what a bound one reaches.
pub use rdma_transport::{MwId, MwType, WindowBinding};
pub use xrc::{XrcSrq, Xrcd};
