//! The requester's retry budgets (IBTA 9.7.5.2, C9-141 and C9-143):
//! transport retries (`retry_cnt`: spent on a PSN sequence error NAK, an
//! implied NAK or the local ACK timeout) and RNR retries (`rnr_retry`,
//! 7 = forever). They count failed attempts in a row, not over the QP's
//! life: forward progress refills them.

use crate::qp::attr::QpParams;
use rdma_wire::Psn;

#[derive(Debug, Clone)]
pub(crate) struct RetryBudget {
    transport_left: u8,
    rnr_left: u8,
    /// The PSN a response gap already sent the requester back to: later
    /// responses past the same gap must not send it back again.
    recovering_at: Option<Psn>,
}

impl Default for RetryBudget {
    fn default() -> RetryBudget {
        RetryBudget { transport_left: 7, rnr_left: 7, recovering_at: None }
    }
}

impl RetryBudget {
    /// Full budgets from the QP's attributes; no recovery under way.
    pub(crate) fn refill(&mut self, p: &QpParams) {
        *self = RetryBudget { transport_left: p.retry_cnt, rnr_left: p.rnr_retry, recovering_at: None };
    }

    /// Spends one transport retry; false when none was left.
    pub(crate) fn spend_transport(&mut self) -> bool {
        let had = self.transport_left > 0;
        self.transport_left = self.transport_left.saturating_sub(1);
        had
    }

    /// Spends one RNR retry (7 means "forever" and is never spent); false
    /// when none was left.
    pub(crate) fn spend_rnr(&mut self) -> bool {
        match self.rnr_left {
            0 => false,
            7 => true,
            _ => {
                self.rnr_left -= 1;
                true
            }
        }
    }

    /// Starts recovering from a gap at `psn`; false when it already did
    /// for this PSN and nothing has arrived since.
    pub(crate) fn start_recovery(&mut self, psn: Psn) -> bool {
        if self.recovering_at == Some(psn) {
            return false;
        }
        self.recovering_at = Some(psn);
        true
    }

    pub(crate) fn transport_left(&self) -> u8 {
        self.transport_left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_run_out_refill_and_seven_rnr_retries_mean_forever() {
        let mut b = RetryBudget::default();
        b.refill(&QpParams { retry_cnt: 2, rnr_retry: 1, ..QpParams::default() });
        assert!(b.spend_transport() && b.spend_transport());
        assert!(!b.spend_transport(), "the third retry of retry_cnt 2 fails");
        assert!(b.spend_rnr() && !b.spend_rnr());
        b.refill(&QpParams { retry_cnt: 2, rnr_retry: 7, ..QpParams::default() });
        assert_eq!(b.transport_left(), 2);
        assert!((0..100).all(|_| b.spend_rnr()), "rnr_retry 7 never runs out");
        assert!(b.start_recovery(Psn::new(5)));
        assert!(!b.start_recovery(Psn::new(5)), "the same gap is not recovered twice");
        assert!(b.start_recovery(Psn::new(9)));
        b.refill(&QpParams::default());
        assert!(b.start_recovery(Psn::new(9)), "progress forgets the gap");
    }
}
