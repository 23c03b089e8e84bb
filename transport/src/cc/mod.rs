//! Congestion control for RoCE v2: DCQCN as pure, I/O-free state machines.
//!
//! The engine owns one [`NotificationPoint`] per RC/UC QP that has received
//! CE-marked data, and, with congestion control on
//! ([`crate::Endpoint::set_congestion_control`]), one [`ReactionPoint`] and
//! one [`Pacer`] per RC/UC QP (`wired`); their timers join the endpoint's
//! `poll_timeout`. The algorithms, parameter values and oracles are those of
//! `shared/reference/congestion-control.md` (sections cited as §n).
//!
//! | module | what it models |
//! |---|---|
//! | [`fixed`] | α and g in fixed point, so every run is bit-for-bit the same |
//! | [`params`] | every knob, with the paper, NVIDIA firmware and HPCC presets |
//! | [`reaction`] | the reaction point (sender): cuts on CNPs, timer and byte-counter increases |
//! | [`notification`] | the notification point (receiver): CNP pacing and the CNP's headers |
//! | [`pacer`] | when the next packet may leave at the current rate, in exact nanoseconds |

pub mod fixed;
pub mod notification;
pub mod pacer;
pub mod params;
pub mod reaction;
pub(crate) mod wired;

pub use fixed::{Alpha, Gain};
pub use notification::{cnp_repr, cnp_transport_bytes, NotificationPoint, CNP_TRANSPORT_LEN};
pub use pacer::Pacer;
pub use params::{DcqcnParams, NpMode, RpVariant};
pub use reaction::ReactionPoint;
