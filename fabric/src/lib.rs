//! A deterministic discrete-event fabric for RoCE v2 congestion control
//! and, with `--link ib`, InfiniBand links and switches (see [`ib`] and
//! `docs/infiniband.md`):
//! hosts running the real `rdma_transport::Endpoint`, links with rate and
//! propagation delay, switches with byte-counted egress queues, drop-tail,
//! RED/ECN marking and PFC on ingress; scenarios and their reports for
//! `rdma-fabric`.
//!
//! | module | what it holds |
//! |---|---|
//! | [`clock`] | the event queue on the virtual clock |
//! | [`calendar`] | the event queue's order: buckets of the near future |
//! | [`link`] | a link direction: rate and delay |
//! | [`pfc`] | the 802.1Qbb frame, quanta, the headroom formula, PFC settings |
//! | [`multipath`] | `--multipath ecmp\|spray\|adaptive`: how a switch picks among equal-cost next hops |
//! | [`switch`] | routing and ECMP, egress queues, drop-tail, RED/ECN marking, PFC ingress accounting |
//! | [`routes`] | a switch's routing table: next hop and equal-cost group by destination |
//! | [`host`] | an endpoint behind a NIC port, and flows of RDMA WRITEs |
//! | [`ib`] | `--link ib`: credits per VL, VL15, SL2VL, VL arbitration, LFT forwarding |
//! | [`topology`] | incast, victim, ring, leaf-spine (ECMP, oversubscription), rail-optimized and dumbbell, routes by destination IP; ports' pause state |
//! | [`fabric`] | the event loop, its samples and deadlock detection |
//! | `site`, `handlers` | what an event does, written once for both loops over what a handler reaches |
//! | [`parallel`] | `--threads N`: the same loop partitioned by pod, run on N threads in windows of the link delay |
//! | [`workload`] | work besides flows that reacts to completions (collectives) |
//! | [`collective`] | `run allreduce|allgather|reduce-scatter`: ring and tree collectives driven by WRITE completions |
//! | [`progress`] | the progress line of long runs on stderr |
//! | [`scenario_file`] | `run --file F.toml`: a scenario described in a file (keys are the flags) |
//! | [`scenarios`] | the named runs of `rdma-fabric run` |
//! | [`compare`] | `rdma-fabric compare`: one workload on IB and three RoCE fabrics |
//! | `fuzzing` | the fuzz targets' bodies (the port agent's wire input) |
//! | [`sm`] | `rdma-sm`: discovery, LIDs, routing, configuration over ibsim or the emulated fabric |
//! | [`report`] | the JSON report, its statistics and the plotted series |
//! | [`plot`] | `--plot FILE.svg`: rates and queue over time |

pub mod calendar;
pub mod clock;
pub mod collective;
pub mod compare;
pub mod counters;
pub mod fabric;
#[doc(hidden)]
pub mod fuzzing;
mod handlers;
pub mod host;
pub mod huge_pages;
pub mod ib;
pub mod int;
pub mod lines;
pub mod link;
pub mod multipath;
pub mod packet;
pub mod parallel;
pub mod pfc;
pub mod plot;
pub mod progress;
pub mod report;
pub mod routes;
pub mod scenario_file;
pub mod scenarios;
mod site;
pub mod sm;
pub mod switch;
pub mod topology;
pub mod workload;
