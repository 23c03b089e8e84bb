//! A deterministic discrete-event fabric for RoCE v2 congestion control:
//! hosts running the real `rdma_transport::Endpoint`, links with rate and
//! propagation delay, switches with byte-counted egress queues, drop-tail
//! and RED/ECN marking; scenarios and their reports for `rdma-fabric`.
//!
//! | module | what it holds |
//! |---|---|
//! | [`clock`] | the event queue on the virtual clock |
//! | [`link`] | a link direction: rate and delay |
//! | [`switch`] | routing, egress queues, drop-tail, RED/ECN marking |
//! | [`host`] | an endpoint behind a NIC port, and flows of RDMA WRITEs |
//! | [`topology`] | incast and dumbbell, routes by destination IP |
//! | [`fabric`] | the event loop and its samples |
//! | [`scenarios`] | the named runs of `rdma-fabric run` |
//! | [`report`] | the JSON report and its statistics |

pub mod clock;
pub mod fabric;
pub mod host;
pub mod link;
pub mod pfc;
pub mod report;
pub mod scenarios;
pub mod switch;
pub mod topology;
