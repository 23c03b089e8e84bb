//! Congestion control for RoCE v2 behind one seam: a per-QP
//! [`Controller`] made by a [`ControllerFactory`], fed events and
//! answering a rate and a deadline (see [`controller`]). DCQCN and TIMELY
//! sit behind it as pure, I/O-free state machines.
//!
//! The engine owns one [`NotificationPoint`] per RC/UC QP that has received
//! CE-marked data, and, with a controller configured
//! ([`crate::Endpoint::set_controller`], or
//! [`crate::Endpoint::set_congestion_control`] for DCQCN), one controller
//! and one [`Pacer`] per RC/UC QP (`wired`); their deadlines are in the
//! QP's timer table. The DCQCN algorithms, parameter values and oracles are
//! those of `shared/reference/congestion-control.md` (sections cited as §n).
//!
//! | module | what it models |
//! |---|---|
//! | [`controller`] | the seam: the controller and factory traits, the events |
//! | [`fixed`] | α and g in fixed point, so every run is bit-for-bit the same |
//! | [`params`] | every DCQCN knob, with the paper, NVIDIA firmware and HPCC presets |
//! | [`reaction`] | DCQCN's reaction point (sender): cuts on CNPs, timer and byte-counter increases |
//! | [`dcqcn`] | the reaction point behind the seam; `DcqcnParams` as its factory |
//! | [`notification`] | the notification point (receiver): CNP pacing and the CNP's headers |
//! | [`timely`] | TIMELY: rate from RTT samples, nothing asked of switches |
//! | [`swift`] | Swift: a window from delay against a target that flow scaling raises |
//! | [`hpcc`] | HPCC: a window from in-band telemetry that switches stamp and receivers echo |
//! | [`rtt`] | RTT samples from the engine's clock: send times of packets that ask for an ACK |
//! | `settings` | a device's settings: the factory, the notification point's, ECN-capable data |
//! | [`pacer`] | when the next packet may leave at the current rate, in exact nanoseconds |

pub mod controller;
pub mod dcqcn;
pub mod fixed;
pub mod hpcc;
pub mod notification;
pub mod pacer;
pub mod params;
pub mod reaction;
pub mod rtt;
pub(crate) mod settings;
pub mod swift;
pub mod timely;
pub(crate) mod wired;

pub use controller::{Controller, ControllerFactory, Event, HopTelemetry};
pub use dcqcn::Dcqcn;
pub use fixed::{Alpha, Gain};
pub use hpcc::{Hpcc, HpccParams};
pub use notification::{cnp_repr, cnp_transport_bytes, NotificationPoint, CNP_TRANSPORT_LEN};
pub use pacer::Pacer;
pub use params::{DcqcnParams, NpMode, RpVariant};
pub use reaction::ReactionPoint;
pub use rtt::RttSampler;
pub use swift::{Swift, SwiftParams};
pub use timely::{Timely, TimelyParams};
