//! DCQCN behind the [`Controller`] seam: the reaction point as it was
//! wired before the seam, event for event (CNPs cut, bytes sent drive the
//! byte counter, timers increase), so trajectories stay bit-for-bit the
//! same. [`DcqcnParams`] is its factory.

use core::any::Any;
use core::time::Duration;
use std::sync::Arc;

use super::controller::{Controller, ControllerFactory, Event};
use super::params::DcqcnParams;
use super::reaction::ReactionPoint;
use crate::Instant;

/// A QP's DCQCN reaction point as a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dcqcn {
    pub rp: ReactionPoint,
}

impl Controller for Dcqcn {
    fn on_event(&mut self, now: Instant, event: Event<'_>) {
        match event {
            Event::Sent { bytes } => self.rp.on_bytes_sent(bytes, now),
            Event::Cnp => self.rp.on_cnp(now),
            // DCQCN reads neither ACKs nor delay; the receiver's CE marks
            // go to the notification point, not here.
            Event::Ack { .. } | Event::CeMarked | Event::Telemetry { .. } => {}
        }
    }

    fn on_timer(&mut self, now: Instant) {
        self.rp.on_timer(now);
    }

    fn next_timer(&self) -> Option<Instant> {
        self.rp.next_timer()
    }

    fn next_timer_on_time(&self) -> Option<Instant> {
        self.rp.next_cut_check()
    }

    fn rate_bps(&self) -> u64 {
        self.rp.rate()
    }

    fn rate_cuts(&self) -> u64 {
        self.rp.rate_cuts()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl ControllerFactory for DcqcnParams {
    /// A flow starts at line rate (the reaction point's own start).
    fn build(&self) -> Box<dyn Controller> {
        Box::new(Dcqcn { rp: ReactionPoint::new(*self) })
    }

    fn build_shared(self: Arc<Self>) -> Box<dyn Controller> {
        Box::new(Dcqcn { rp: ReactionPoint::shared(self) })
    }

    fn name(&self) -> &'static str {
        "dcqcn"
    }

    fn pacer_burst(&self) -> Duration {
        self.pacer_burst
    }

    fn notification_point(&self) -> Option<DcqcnParams> {
        Some(*self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Controllers built from one `Arc` of parameters hold that `Arc`
    /// (one copy for every QP of a device), and let go of it when dropped.
    #[test]
    fn controllers_built_from_one_arc_share_its_parameters() {
        let params = Arc::new(DcqcnParams::nvidia(100_000_000_000));
        let built: Vec<_> = (0..3).map(|_| Arc::clone(&params).build_shared()).collect();
        assert_eq!(Arc::strong_count(&params), 4, "each controller holds the one Arc");
        for ctl in &built {
            let rp = &ctl.as_any().downcast_ref::<Dcqcn>().expect("DCQCN").rp;
            assert!(std::ptr::eq(rp.params(), &*params), "the parameters read are the shared ones");
        }
        drop(built);
        assert_eq!(Arc::strong_count(&params), 1);
    }

    /// The controller answers exactly what the bare reaction point does
    /// for the same events: the seam adds nothing to DCQCN.
    #[test]
    fn the_controller_is_the_reaction_point_event_for_event() {
        for params in [DcqcnParams::paper(40_000_000_000), DcqcnParams::nvidia(100_000_000_000)] {
            let mut rp = ReactionPoint::new(params);
            let mut ctl = params.build();
            let at = |us: u64| Instant::from_nanos(us * 1_000);
            for (t, ev) in [(0, Event::Cnp), (3, Event::Sent { bytes: 4_000_000 }), (10, Event::Cnp)] {
                match ev {
                    Event::Cnp => rp.on_cnp(at(t)),
                    Event::Sent { bytes } => rp.on_bytes_sent(bytes, at(t)),
                    _ => unreachable!(),
                }
                ctl.on_event(at(t), ev);
                assert_eq!(
                    (ctl.rate_bps(), ctl.next_timer(), ctl.rate_cuts()),
                    (rp.rate(), rp.next_timer(), rp.rate_cuts())
                );
            }
            rp.on_timer(at(5_000));
            ctl.on_timer(at(5_000));
            assert_eq!(ctl.rate_bps(), rp.rate());
            let inner = ctl.as_any().downcast_ref::<Dcqcn>().expect("a DCQCN controller");
            assert_eq!(inner.rp, rp);
            assert!(!ctl.wants_rtt());
        }
    }
}
