//! Completion queues: their completions, the error state a CQ enters
//! when it overflows, and the overflows the endpoint has yet to raise as
//! events.

use crate::qp::CqId;
use crate::wr::{Sge, WorkCompletion};
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
    delivered: u64,
    /// Scatter/gather lists of finished work requests, for the engine's
    /// copies of new ones: posting then allocates nothing in steady state.
    spare_sges: Vec<Vec<Sge>>,
    /// The same for the inline data of finished requests.
    spare_inline: Vec<Vec<u8>>,
}

/// Spare scatter/gather lists kept, and the longest list kept.
const SPARE_SGES: usize = 4096;
const SPARE_SGE_CAPACITY: usize = 16;
/// Spare inline buffers kept, and the largest kept.
const SPARE_INLINE: usize = 1024;
const SPARE_INLINE_CAPACITY: usize = 1024;

impl CqTable {
    /// A copy of `sges` in a spare list if there is one.
    pub(crate) fn copy_sges(&mut self, sges: &[Sge]) -> Vec<Sge> {
        let mut v = self.spare_sges.pop().unwrap_or_default();
        v.extend_from_slice(sges);
        v
    }

    /// A copy of inline data in a spare buffer if there is one.
    pub(crate) fn copy_inline(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = self.spare_inline.pop().unwrap_or_default();
        v.extend_from_slice(data);
        v
    }

    /// Keeps the list of a finished work request for reuse.
    pub(crate) fn recycle(&mut self, mut sges: Vec<Sge>) {
        if self.spare_sges.len() < SPARE_SGES && sges.capacity() <= SPARE_SGE_CAPACITY {
            sges.clear();
            self.spare_sges.push(sges);
        }
    }

    /// Keeps the inline data buffer of a finished work request for reuse.
    pub(crate) fn recycle_inline(&mut self, mut data: Vec<u8>) {
        if self.spare_inline.len() < SPARE_INLINE && data.capacity() <= SPARE_INLINE_CAPACITY {
            data.clear();
            self.spare_inline.push(data);
        }
    }

    pub(crate) fn push(&mut self, cq: CqId, wc: WorkCompletion) {
        let errored = self.in_error.get(cq.0).copied().unwrap_or(true);
        match self.cqs.get_mut(cq.0) {
            Some((depth, q)) if q.len() < *depth && !errored => {
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
        CqId(self.cqs.len() - 1)
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

    /// Completions waiting in `cq`.
    pub(crate) fn queued(&self, cq: CqId) -> usize {
        self.cqs.get(cq.0).map_or(0, |(_, q)| q.len())
    }

    /// Completions lost to full or errored CQs.
    pub(crate) fn overruns(&self) -> u64 {
        self.overruns
    }

    /// Completions delivered.
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }

    /// A CQ that overflowed and whose event the endpoint has not raised yet.
    pub(crate) fn take_overflowed(&mut self) -> Option<CqId> {
        self.overflowed.pop()
    }
}
