//! Completion queues: their completions, the error state a CQ enters
//! when it overflows, and the overflows the endpoint has yet to raise as
//! events.

use crate::error::VerbsError;
use crate::pool::WrPool;
use crate::qp::attr::CqId;
use crate::wr::WorkCompletion;
use std::collections::VecDeque;

/// Completion queues.
#[derive(Debug, Default)]
pub struct CqTable {
    cqs: Vec<(usize, VecDeque<WorkCompletion>)>,
    /// Per CQ: it overflowed, and is in error from then on (IBTA 11.4.2.1:
    /// a CQ overrun is a CQ error; its QPs go to the error state).
    in_error: Vec<bool>,
    /// CQs that overflowed since the endpoint last raised their events.
    overflowed: Vec<CqId>,
    overruns: u64,
    /// Completions queued here, lost or not by a layer that takes them
    /// out and bounds the depth itself ([`CqTable::overrun`]).
    delivered: u64,
    /// Completions that such a layer lost to a full or errored CQ.
    lost_above: u64,
    /// Per CQ: completions delivered that a solicited-only arming waits
    /// for (solicited receives and errors), counted from its creation.
    solicited: Vec<u64>,
    /// The buffers of finished work requests, for reuse (see [`WrPool`]):
    /// here because the completer and responder, which finish requests,
    /// reach the endpoint's state through this table.
    pub(crate) pool: WrPool,
}

impl CqTable {
    pub(crate) fn push(&mut self, cq: CqId, wc: WorkCompletion) {
        let errored = self.in_error.get(cq.0).copied().unwrap_or(true);
        match self.cqs.get_mut(cq.0) {
            Some((depth, q)) if q.len() < *depth && !errored => {
                if wc.solicited || wc.status != crate::WcStatus::Success {
                    self.solicited[cq.0] += 1;
                }
                q.push_back(wc);
                self.delivered += 1;
            }
            _ => {
                self.overruns += 1;
                tracing::warn!(cq = cq.0, wr_id = wc.wr_id, "completion queue overrun: completion lost");
                if !errored {
                    self.in_error[cq.0] = true;
                    self.overflowed.push(cq);
                }
            }
        }
    }
}

impl CqTable {
    /// A new CQ holding up to `depth` completions (at least one).
    pub(crate) fn create(&mut self, depth: usize) -> CqId {
        self.cqs.push((depth.max(1), VecDeque::new()));
        self.in_error.push(false);
        self.solicited.push(0);
        CqId(self.cqs.len() - 1)
    }

    /// Gives `cq` room for `depth` completions, unless more than
    /// `at_least` wait in it ([`crate::Endpoint::resize_cq`]).
    pub(crate) fn resize(&mut self, cq: CqId, depth: usize, at_least: usize) -> Result<(), VerbsError> {
        let (d, q) = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchCq(cq.0))?;
        if q.len() > at_least {
            return Err(VerbsError::CqTooSmall { cq: cq.0, waiting: q.len(), asked: at_least });
        }
        *d = depth.max(1);
        Ok(())
    }

    /// How many completions `cq` holds (0: no such CQ).
    pub(crate) fn depth(&self, cq: CqId) -> usize {
        self.cqs.get(cq.0).map_or(0, |(d, _)| *d)
    }

    /// Whether `cq` was created.
    pub(crate) fn exists(&self, cq: CqId) -> bool {
        cq.0 < self.cqs.len()
    }

    /// Appends up to `max` completions of `cq`, oldest first, to `out`; returns how many.
    pub(crate) fn poll_into(&mut self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let Some((_, q)) = self.cqs.get_mut(cq.0) else { return 0 };
        let n = max.min(q.len());
        out.extend(q.drain(..n));
        n
    }

    /// Takes every completion waiting in `cq`, oldest first.
    pub(crate) fn drain(&mut self, cq: CqId) -> impl Iterator<Item = WorkCompletion> + '_ {
        self.cqs.get_mut(cq.0).into_iter().flat_map(|(_, q)| q.drain(..))
    }

    /// `lost` completions taken out of `cq` found no room above (see
    /// [`crate::Endpoint::cq_overrun`]): counted as overruns, and the CQ is
    /// in error from then on, as if it had overflowed here.
    pub(crate) fn overrun(&mut self, cq: CqId, lost: u64) {
        if !self.exists(cq) {
            return;
        }
        self.overruns += lost;
        self.lost_above += lost;
        if !self.in_error[cq.0] {
            self.in_error[cq.0] = true;
            self.overflowed.push(cq);
        }
    }

    /// Removes the completions of QP `qpn` waiting in `cq`; returns how many.
    pub(crate) fn remove_qp(&mut self, cq: CqId, qpn: u32) -> usize {
        let Some((_, q)) = self.cqs.get_mut(cq.0) else { return 0 };
        let before = q.len();
        q.retain(|wc| wc.qp_num != qpn);
        before - q.len()
    }

    /// Completions waiting in `cq`.
    pub(crate) fn queued(&self, cq: CqId) -> usize {
        self.cqs.get(cq.0).map_or(0, |(_, q)| q.len())
    }

    /// Completions lost to full or errored CQs.
    pub(crate) fn overruns(&self) -> u64 {
        self.overruns
    }

    /// Solicited receives and errors delivered to `cq` since its creation.
    pub(crate) fn solicited(&self, cq: CqId) -> u64 {
        self.solicited.get(cq.0).copied().unwrap_or(0)
    }

    /// Completions queued so far: a change says there are some to take.
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Completions delivered and not lost above ([`CqTable::overrun`]).
    pub(crate) fn kept(&self) -> u64 {
        self.delivered.saturating_sub(self.lost_above)
    }

    /// A CQ that overflowed and whose event the endpoint has not raised yet.
    pub(crate) fn take_overflowed(&mut self) -> Option<CqId> {
        self.overflowed.pop()
    }
}
