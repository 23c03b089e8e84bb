//! The congestion-control seam: a per-QP [`Controller`] made by a
//! [`ControllerFactory`], in the way of quinn-proto's `congestion` module.
//!
//! The engine owns the controller of each RC/UC QP and tells it what
//! happened ([`Event`]); the controller answers a sending rate, which the
//! QP's pacer enforces on its data packets, and the next instant its own
//! timers have work, which goes into the QP's timer table
//! ([`crate::timers::Timer::RateControl`]). A controller owns no clock and
//! does no I/O: every call carries `now`, so a run is the same wherever
//! it runs.
//!
//! Adding an algorithm: a type implementing [`Controller`], a parameter
//! type implementing [`ControllerFactory`] (`DcqcnParams` and
//! `TimelyParams` are the examples), and a name in the tools' `--cc`
//! choices. The engine needs no change unless the algorithm needs an
//! event it does not send yet (docs/design.md, "Congestion control").

use core::any::Any;
use core::fmt::Debug;
use core::time::Duration;
use std::sync::Arc;

use super::params::DcqcnParams;
use crate::Instant;
use rdma_wire::Psn;

/// What happened to a QP that its controller may react to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A data packet (a request or a READ response) of `bytes`, IP header
    /// through ICRC, left the QP.
    Sent { bytes: u64 },
    /// A response acknowledged `packets` more PSNs (an ACK, a READ
    /// response or an atomic ACK); `rtt` is the time from sending the
    /// packet it answers to its arrival, when that packet was timed (see
    /// [`Controller::wants_rtt`]; retransmitted packets never are).
    Ack { packets: u32, rtt: Option<Duration> },
    /// A CNP for this QP arrived: a switch on the path marked its data.
    Cnp,
    /// A CE-marked data packet arrived at this QP (its receiving side;
    /// the notification point answers it with a CNP whatever runs here).
    CeMarked,
    /// In-band network telemetry that a response echoed, one entry per
    /// hop (HPCC: switches stamp data packets, receivers echo the stamps;
    /// the simulated fabric does both, see `rdma_fabric::int`). `acked`
    /// is the PSN the response names, `next` the next PSN the QP will
    /// send: HPCC moves its reference window once per round trip, when
    /// an ACK passes the `next` of the last move.
    Telemetry { hops: &'a [HopTelemetry], acked: Psn, next: Psn },
}

/// One hop's in-band telemetry as HPCC (Li et al., SIGCOMM 2019) defines
/// it: what the egress port had queued and had sent when the packet left,
/// when, and at what line rate. `tx_bytes` and `timestamp` are compared
/// between two echoes only, so a narrow wire encoding may wrap them
/// (see `rdma_fabric::int`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HopTelemetry {
    pub queue_bytes: u64,
    pub tx_bytes: u64,
    pub timestamp: Instant,
    pub rate_bps: u64,
}

/// One QP's congestion controller.
pub trait Controller: Debug + Send {
    /// Something happened at `now` (never earlier than the last call's).
    fn on_event(&mut self, now: Instant, event: Event<'_>);

    /// Runs the controller's timers due at or before `now`.
    fn on_timer(&mut self, now: Instant);

    /// When [`Controller::on_timer`] next has work; `None`: nothing pending.
    fn next_timer(&self) -> Option<Instant>;

    /// The first of those timers that must run on time. Work before it
    /// that only raises the rate (DCQCN's increase timer) changes no
    /// departure while the QP's pacer is idle: the engine lets it wait for
    /// the QP's next send or CNP, or a timer that is due, which run it
    /// first, each step at its own time, so the packets leave as if it had
    /// run on time. Until then [`Controller::rate_bps`] (and so
    /// `Endpoint::qp_rate`) gives the rate as of the last of those.
    /// Default: all of them.
    fn next_timer_on_time(&self) -> Option<Instant> {
        self.next_timer()
    }

    /// The rate the QP's data packets may leave at, bits per second.
    fn rate_bps(&self) -> u64;

    /// How many times the rate was cut so far (the engine's `rate_cuts`).
    fn rate_cuts(&self) -> u64;

    /// A cap on the bytes a QP may have sent and not yet seen
    /// acknowledged, besides the rate (HPCC's window); `None`: no cap.
    /// The engine counts whole packets of the path MTU from the oldest
    /// unacknowledged PSN to the next one it would send.
    fn window_bytes(&self) -> Option<u64> {
        None
    }

    /// Whether [`Event::Ack`] should carry RTT samples: timing the
    /// packets costs a little on every data packet, so only controllers
    /// that read the samples ask for them.
    fn wants_rtt(&self) -> bool {
        false
    }

    /// For inspection (tests, tools): the concrete controller.
    fn as_any(&self) -> &dyn Any;
}

/// Makes a QP's controller; the algorithm's parameters are the factory.
pub trait ControllerFactory: Debug + Send + Sync {
    /// A controller for a QP; its first event or timer call brings the
    /// time (the engine has no clock of its own to offer here).
    fn build(&self) -> Box<dyn Controller>;

    /// [`ControllerFactory::build`] for a factory the device holds behind
    /// an `Arc` (the engine's way): a controller may keep the `Arc` rather
    /// than a copy of the parameters, so that all QPs read one copy,
    /// which stays in cache, instead of each its own, cold whenever a
    /// QP among thousands has an event (docs/performance.md).
    fn build_shared(self: Arc<Self>) -> Box<dyn Controller> {
        self.build()
    }

    /// The algorithm's name, as the tools' `--cc` spell it.
    fn name(&self) -> &'static str;

    /// Link time a QP's pacer may let a late or idle sender make up for
    /// (see [`super::Pacer::with_burst`]).
    fn pacer_burst(&self) -> Duration {
        Duration::ZERO
    }

    /// The notification point's settings (CNP interval, mode, DSCP) when
    /// the algorithm brings its own; `None` keeps the device default.
    fn notification_point(&self) -> Option<DcqcnParams> {
        None
    }

    /// For inspection: the concrete parameters.
    fn as_any(&self) -> &dyn Any;
}
