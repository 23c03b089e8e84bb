//! The congestion-control state the engine keeps per RC/UC QP: its
//! notification point (made on the first CE-marked data packet), the CNPs
//! it owes, and, with congestion control on, its reaction point and pacer.
//! A QP that has seen no CE mark and runs without congestion control has
//! none of it (`Qp::cc` is `None`): the send path then checks one `Option`.

use super::{DcqcnParams, NotificationPoint, Pacer, ReactionPoint};
use crate::stats::{QpStats, Stats};
use crate::Instant;

/// The reaction point and the pacer that holds the QP to its rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateControl {
    pub rp: ReactionPoint,
    pub pacer: Pacer,
}

impl RateControl {
    pub fn new(params: DcqcnParams) -> RateControl {
        let rp = ReactionPoint::new(params);
        let pacer = Pacer::with_burst(rp.rate(), params.pacer_burst);
        RateControl { rp, pacer }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QpCc {
    pub np: Option<NotificationPoint>,
    /// CNPs decided and not yet handed to `poll_transmit`.
    pub cnps_due: u32,
    pub rate: Option<RateControl>,
    /// A data packet was held by the pacer until then: a wake-up for the driver.
    pub paced_until: Option<Instant>,
}

impl QpCc {
    /// A CE-marked data packet arrived: the NP decides whether a CNP is due.
    pub fn on_ce_marked(&mut self, now: Instant, params: &DcqcnParams) {
        let np = self.np.get_or_insert_with(|| NotificationPoint::new(params));
        if np.on_ce_marked(now) {
            self.cnps_due = self.cnps_due.saturating_add(1);
        }
    }

    /// A CNP for this QP arrived (counted by the caller).
    pub fn on_cnp(&mut self, now: Instant, qp: &mut QpStats, dev: &mut Stats) {
        if let Some(rc) = self.rate.as_mut() {
            rc.rp.on_cnp(now);
            Self::follow(rc, now, qp, dev);
        }
    }

    /// Whether a data packet may leave now; if not, remembers when it may.
    pub fn data_may_leave(&mut self, now: Instant) -> bool {
        let Some(rc) = self.rate.as_ref() else { return true };
        let at = rc.pacer.next_send_at(now);
        if at <= now {
            return true;
        }
        self.paced_until = Some(at);
        false
    }

    /// A data packet of `bytes` (IP header through ICRC) left at `now`.
    pub fn on_data_sent(&mut self, now: Instant, bytes: usize, qp: &mut QpStats, dev: &mut Stats) {
        if let Some(rc) = self.rate.as_mut() {
            rc.pacer.on_sent(now, bytes);
            rc.rp.on_bytes_sent(bytes as u64, now);
            Self::follow(rc, now, qp, dev);
        }
    }

    /// The next time [`QpCc::on_timer`] has work.
    pub fn next_timer(&self) -> Option<Instant> {
        let np = self.np.as_ref().and_then(NotificationPoint::next_timer);
        let rp = self.rate.as_ref().and_then(|rc| rc.rp.next_timer());
        [np, rp, self.paced_until].into_iter().flatten().min()
    }

    /// Fires what is due at `now`: a deferred CNP, the RP's timers, the
    /// end of a pacing wait (the caller then looks at the QP again).
    pub fn on_timer(&mut self, now: Instant, qp: &mut QpStats, dev: &mut Stats) {
        if let Some(np) = self.np.as_mut().filter(|np| np.next_timer().is_some_and(|t| t <= now)) {
            if np.on_timer(now) {
                self.cnps_due = self.cnps_due.saturating_add(1);
            }
        }
        if let Some(rc) = self.rate.as_mut().filter(|rc| rc.rp.next_timer().is_some_and(|t| t <= now)) {
            rc.rp.on_timer(now);
            Self::follow(rc, now, qp, dev);
        }
        if self.paced_until.is_some_and(|t| t <= now) {
            self.paced_until = None;
        }
    }

    /// The pacer takes the RP's rate; new cuts are counted.
    fn follow(rc: &mut RateControl, now: Instant, qp: &mut QpStats, dev: &mut Stats) {
        if rc.pacer.rate() != rc.rp.rate() {
            rc.pacer.set_rate(now, rc.rp.rate());
        }
        let cuts = rc.rp.rate_cuts();
        dev.rate_cuts += cuts.saturating_sub(qp.rate_cuts);
        qp.rate_cuts = cuts;
    }
}
