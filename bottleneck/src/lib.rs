//! A live bottleneck for RoCE v2 congestion control on one machine.
//!
//! This host's kernel has no RED or netem qdisc, so nothing on a real path
//! here would ever mark CE. `rdma-bottleneck` is a userspace router between
//! two network namespaces: TUN devices on each side, a rate-limited queue
//! with RED/ECN marking (it sets CE in the real IP header; the ICRC masks
//! those bits) and drop-tail for the senders' traffic. Real `rdma-perf`
//! processes over real UDP sockets then run DCQCN end to end through it,
//! and the router reports what it saw with the same keys as the simulated
//! fabric (`rdma-fabric run --json`).
//!
//! | module | what it holds |
//! |---|---|
//! | [`queue`] | the bottleneck: rate, RED marking, drop-tail (no I/O, exact in virtual time) |
//! | [`meter`] | per-flow rates, queue samples, CNPs, and the report |
//! | [`tun`] | TUN devices created inside a named network namespace |
//! | [`netns`] | addresses and routes on them (`ip -n`) |
//! | [`router`] | the threads that move packets through the queue |

pub mod meter;
pub mod netns;
pub mod queue;
pub mod router;
pub mod tun;
