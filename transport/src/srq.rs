//! Shared receive queues (`ibv_create_srq`), and the limit events they raise.

use crate::error::VerbsError;
use crate::memory::Pd;
use crate::qp::attr::{CqId, SrqId, XrcdId};
use crate::wr::RecvWr;
use std::collections::VecDeque;

/// A shared receive queue.
#[derive(Debug)]
struct Srq {
    pd: Pd,
    queue: VecDeque<RecvWr>,
    max_wr: u32,
    /// When the queue drops below this many WQEs, one limit event fires (0 = disarmed).
    limit: u32,
    /// An XRC SRQ: its domain and the CQ its receives complete on.
    xrc: Option<(XrcdId, CqId)>,
}

/// Shared receive queues, and the limit events they raised.
#[derive(Debug, Default)]
pub struct SrqTable {
    srqs: Vec<Srq>,
    limit_events: VecDeque<SrqId>,
}

impl SrqTable {
    /// Puts back a WQE taken for a message that was then abandoned.
    pub(crate) fn give_back(&mut self, id: SrqId, wr: RecvWr) {
        if let Some(srq) = self.srqs.get_mut(id.0) {
            srq.queue.push_front(wr);
        }
    }

    /// The next receive WQE and the PD its buffers belong to.
    pub(crate) fn take(&mut self, id: SrqId) -> Option<(RecvWr, Pd)> {
        let srq = self.srqs.get_mut(id.0)?;
        let r = srq.queue.pop_front()?;
        if srq.limit > 0 && (srq.queue.len() as u32) < srq.limit {
            srq.limit = 0; // the event disarms itself, as in ibv_modify_srq(3)
            self.limit_events.push_back(id);
        }
        Some((r, srq.pd))
    }
}

impl SrqTable {
    /// A new SRQ of up to `max_wr` WQEs (at least one) whose buffers belong to `pd`.
    pub(crate) fn create(&mut self, pd: Pd, max_wr: u32, limit: u32) -> SrqId {
        self.srqs.push(Srq { pd, queue: VecDeque::new(), max_wr: max_wr.max(1), limit, xrc: None });
        SrqId(self.srqs.len() - 1)
    }

    /// A new XRC SRQ (`ibv_create_srq_ex`, `IBV_SRQT_XRC`) in `xrcd`,
    /// completing on `cq`.
    pub(crate) fn create_xrc(&mut self, pd: Pd, xrcd: XrcdId, cq: CqId, max_wr: u32, limit: u32) -> SrqId {
        let id = self.create(pd, max_wr, limit);
        self.srqs[id.0].xrc = Some((xrcd, cq));
        id
    }

    /// The XRC domain and CQ of an XRC SRQ (`None` for another SRQ).
    pub(crate) fn xrc_of(&self, id: SrqId) -> Option<(XrcdId, CqId)> {
        self.srqs.get(id.0)?.xrc
    }

    /// The target of an XRC request naming SRQ number `srqn` at a QP of
    /// `xrcd`: the SRQ, its PD and its CQ, if it is an XRC SRQ of that domain.
    pub(crate) fn xrc_target(&self, srqn: u32, xrcd: XrcdId) -> Option<(SrqId, Pd, CqId)> {
        let id = SrqId(usize::try_from(srqn).ok()?);
        let s = self.srqs.get(id.0)?;
        match s.xrc {
            Some((d, cq)) if d == xrcd => Some((id, s.pd, cq)),
            _ => None,
        }
    }

    /// An SRQ destroyed: its WQEs go, it leaves its XRC domain, and no
    /// request can name it.
    pub(crate) fn release(&mut self, id: SrqId) {
        if let Some(s) = self.srqs.get_mut(id.0) {
            s.queue.clear();
            s.xrc = None;
            s.max_wr = 0;
        }
    }

    /// Whether an XRC SRQ of `xrcd` exists.
    pub(crate) fn uses_xrcd(&self, xrcd: XrcdId) -> bool {
        self.srqs.iter().any(|s| s.xrc.is_some_and(|(d, _)| d == xrcd))
    }

    /// Whether `id` was created.
    pub(crate) fn exists(&self, id: SrqId) -> bool {
        id.0 < self.srqs.len()
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    pub(crate) fn arm(&mut self, id: SrqId, limit: u32) -> Result<(), VerbsError> {
        self.srqs.get_mut(id.0).ok_or(VerbsError::NoSuchSrq(id.0))?.limit = limit;
        Ok(())
    }

    /// `ibv_post_srq_recv`.
    pub(crate) fn post(&mut self, id: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        let s = self.srqs.get_mut(id.0).ok_or(VerbsError::NoSuchSrq(id.0))?;
        if s.queue.len() as u32 >= s.max_wr {
            return Err(VerbsError::QueueFull { qpn: 0, queue: "shared receive", depth: s.max_wr });
        }
        s.queue.push_back(wr);
        Ok(())
    }

    /// The oldest limit event not yet raised.
    pub(crate) fn take_limit_event(&mut self) -> Option<SrqId> {
        self.limit_events.pop_front()
    }
}
