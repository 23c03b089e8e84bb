//! Shared receive queues (`ibv_create_srq`), and the limit events they raise.

use crate::error::VerbsError;
use crate::memory::Pd;
use crate::qp::attr::{CqId, SrqId, XrcdId};
use crate::wr::RecvWr;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

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

/// Shared receive queues, the limit events they raised, and the XRC
/// domains their XRC SRQs are in: a handle that
/// the engines of a device of several share ([`crate::Endpoint::share_srqs`]),
/// so that QPs on every engine take receives from one SRQ. Each call takes
/// the table's lock for its own work; none holds it across another.
#[derive(Debug, Clone, Default)]
pub struct SrqTable(Arc<Mutex<Srqs>>);

#[derive(Debug, Default)]
struct Srqs {
    srqs: Vec<Srq>,
    limit_events: VecDeque<SrqId>,
    /// The XRC domains (open or closed), which XRC SRQs name: kept with
    /// the SRQs, so that engines sharing the SRQs agree on what a domain
    /// number means.
    xrcds: Vec<bool>,
}

impl Srqs {
    fn xrcd_is_open(&self, xrcd: XrcdId) -> bool {
        self.xrcds.get(xrcd.0 as usize).copied().unwrap_or(false)
    }

    fn push(&mut self, pd: Pd, max_wr: u32, limit: u32, xrc: Option<(XrcdId, CqId)>) -> SrqId {
        self.srqs.push(Srq { pd, queue: VecDeque::new(), max_wr: max_wr.max(1), limit, xrc });
        SrqId(self.srqs.len() - 1)
    }
}

impl SrqTable {
    fn lock(&self) -> MutexGuard<'_, Srqs> {
        // Every change is complete before the lock is let go, so a panic
        // elsewhere leaves nothing half done.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether no SRQ and no XRC domain was ever made in it.
    pub(crate) fn is_empty(&self) -> bool {
        let t = self.lock();
        t.srqs.is_empty() && t.xrcds.is_empty()
    }

    /// `ibv_open_xrcd`: a new domain.
    pub(crate) fn open_xrcd(&self) -> XrcdId {
        let mut t = self.lock();
        t.xrcds.push(true);
        XrcdId(t.xrcds.len() as u32 - 1)
    }

    /// Whether `xrcd` is open.
    pub(crate) fn xrcd_open(&self, xrcd: XrcdId) -> bool {
        self.lock().xrcd_is_open(xrcd)
    }

    /// `ibv_close_xrcd`: closes `xrcd` unless it is not open or an XRC SRQ
    /// is in it, or `in_use` (its QPs) says so, all under the lock. The
    /// caller counts `in_use` under the locks that keep QPs from being
    /// made in the domain meanwhile (every sharing engine's).
    pub(crate) fn close_xrcd(&self, xrcd: XrcdId, in_use: bool) -> Result<(), VerbsError> {
        let mut t = self.lock();
        if !t.xrcd_is_open(xrcd) {
            return Err(VerbsError::NoSuchXrcd(xrcd.0));
        }
        if in_use || t.srqs.iter().any(|s| s.xrc.is_some_and(|(d, _)| d == xrcd)) {
            return Err(VerbsError::XrcdInUse(xrcd.0));
        }
        t.xrcds[xrcd.0 as usize] = false;
        Ok(())
    }

    /// Puts back a WQE taken for a message that was then abandoned.
    pub(crate) fn give_back(&self, id: SrqId, wr: RecvWr) {
        if let Some(srq) = self.lock().srqs.get_mut(id.0) {
            srq.queue.push_front(wr);
        }
    }

    /// The next receive WQE and the PD its buffers belong to.
    pub(crate) fn take(&self, id: SrqId) -> Option<(RecvWr, Pd)> {
        let mut t = self.lock();
        let srq = t.srqs.get_mut(id.0)?;
        let r = srq.queue.pop_front()?;
        let pd = srq.pd;
        if srq.limit > 0 && (srq.queue.len() as u32) < srq.limit {
            srq.limit = 0; // the event disarms itself, as in ibv_modify_srq(3)
            t.limit_events.push_back(id);
        }
        Some((r, pd))
    }

    /// A new SRQ of up to `max_wr` WQEs (at least one) whose buffers belong to `pd`.
    pub(crate) fn create(&self, pd: Pd, max_wr: u32, limit: u32) -> SrqId {
        self.lock().push(pd, max_wr, limit, None)
    }

    /// A new XRC SRQ (`ibv_create_srq_ex`, `IBV_SRQT_XRC`) in `xrcd`,
    /// completing on `cq`. The domain must be open: checked under the same
    /// lock as the SRQ is made, so that a close on another engine cannot
    /// come between.
    pub(crate) fn create_xrc(
        &self,
        pd: Pd,
        xrcd: XrcdId,
        cq: CqId,
        max_wr: u32,
        limit: u32,
    ) -> Result<SrqId, VerbsError> {
        let mut t = self.lock();
        if !t.xrcd_is_open(xrcd) {
            return Err(VerbsError::NoSuchXrcd(xrcd.0));
        }
        Ok(t.push(pd, max_wr, limit, Some((xrcd, cq))))
    }

    /// Whether an XRC SRQ of `xrcd` completes on `cq`: the domain's
    /// XRC_RECV QPs, which have no CQ of their own, then complete there.
    pub(crate) fn xrc_completes_on(&self, xrcd: XrcdId, cq: CqId) -> bool {
        self.lock().srqs.iter().any(|s| s.xrc == Some((xrcd, cq)))
    }

    /// The XRC domain and CQ of an XRC SRQ (`None` for another SRQ).
    pub(crate) fn xrc_of(&self, id: SrqId) -> Option<(XrcdId, CqId)> {
        self.lock().srqs.get(id.0)?.xrc
    }

    /// The target of an XRC request naming SRQ number `srqn` at a QP of
    /// `xrcd`: the SRQ, its PD and its CQ, if it is an XRC SRQ of that domain.
    pub(crate) fn xrc_target(&self, srqn: u32, xrcd: XrcdId) -> Option<(SrqId, Pd, CqId)> {
        let id = SrqId(usize::try_from(srqn).ok()?);
        let t = self.lock();
        let s = t.srqs.get(id.0)?;
        match s.xrc {
            Some((d, cq)) if d == xrcd => Some((id, s.pd, cq)),
            _ => None,
        }
    }

    /// An SRQ destroyed: its WQEs go, it leaves its XRC domain, and no
    /// request can name it.
    pub(crate) fn release(&self, id: SrqId) {
        if let Some(s) = self.lock().srqs.get_mut(id.0) {
            s.queue.clear();
            s.xrc = None;
            s.max_wr = 0;
        }
    }

    /// Whether `id` was created.
    pub(crate) fn exists(&self, id: SrqId) -> bool {
        id.0 < self.lock().srqs.len()
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    pub(crate) fn arm(&self, id: SrqId, limit: u32) -> Result<(), VerbsError> {
        self.lock().srqs.get_mut(id.0).ok_or(VerbsError::NoSuchSrq(id.0))?.limit = limit;
        Ok(())
    }

    /// `ibv_post_srq_recv`.
    pub(crate) fn post(&self, id: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        let mut t = self.lock();
        let s = t.srqs.get_mut(id.0).ok_or(VerbsError::NoSuchSrq(id.0))?;
        if s.queue.len() as u32 >= s.max_wr {
            return Err(VerbsError::QueueFull { qpn: 0, queue: "shared receive", depth: s.max_wr });
        }
        s.queue.push_back(wr);
        Ok(())
    }

    /// The oldest limit event not yet raised (raised once, by whichever
    /// engine sharing the table asks first).
    pub(crate) fn take_limit_event(&self) -> Option<SrqId> {
        self.lock().limit_events.pop_front()
    }
}
