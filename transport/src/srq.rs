//! Shared receive queues (`ibv_create_srq`), and the limit events they raise.

use crate::error::VerbsError;
use crate::memory::Pd;
use crate::pool::SgePool;
use crate::qp::attr::{CqId, SrqId, XrcdId};
use crate::wr::{RecvWr, Sge};
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
/// the table's lock for its own work; none holds it across another, and
/// none needs an engine's lock: the application posts to an SRQ
/// ([`SrqTable::post_copy`]) beside every engine's progress.
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
    /// Spare scatter lists for the copies of posted receives. A receive
    /// taken from an SRQ gives its list back here (at its engine's next
    /// [`SrqTable::take`]), whichever engine took it. (Before, with one
    /// pool per engine, the lists posted from the first engine's pool went
    /// back to the pools of the others, and posts allocated once it ran
    /// dry.)
    spare: SgePool,
}

impl Srqs {
    fn xrcd_is_open(&self, xrcd: XrcdId) -> bool {
        self.xrcds.get(xrcd.0 as usize).copied().unwrap_or(false)
    }

    /// Whether SRQ `id` has room for one more receive.
    fn check_room(&self, id: SrqId) -> Result<(), VerbsError> {
        let s = self.srqs.get(id.0).ok_or(VerbsError::NoSuchSrq(id.0))?;
        if s.queue.len() as u32 >= s.max_wr {
            return Err(VerbsError::QueueFull { qpn: 0, queue: "shared receive", depth: s.max_wr });
        }
        Ok(())
    }

    fn post(&mut self, id: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        self.check_room(id)?;
        self.srqs[id.0].queue.push_back(wr);
        Ok(())
    }

    fn add(&mut self, pd: Pd, max_wr: u32, limit: u32, xrc: Option<(XrcdId, CqId)>) -> SrqId {
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

    /// The next receive WQE and the PD its buffers belong to. `finished`,
    /// the scatter lists of this engine's SRQ receives finished since its
    /// last take, go back to the spare lists under the same lock (one take
    /// of the lock per receive, not two).
    pub(crate) fn take(&self, id: SrqId, finished: &mut Vec<Vec<Sge>>) -> Option<(RecvWr, Pd)> {
        let mut t = self.lock();
        for sges in finished.drain(..) {
            t.spare.recycle(sges);
        }
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
        self.lock().add(pd, max_wr, limit, None)
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
        Ok(t.add(pd, max_wr, limit, Some((xrcd, cq))))
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
    pub fn arm(&self, id: SrqId, limit: u32) -> Result<(), VerbsError> {
        self.lock().srqs.get_mut(id.0).ok_or(VerbsError::NoSuchSrq(id.0))?.limit = limit;
        Ok(())
    }

    /// `ibv_post_srq_recv`.
    pub(crate) fn post(&self, id: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        self.lock().post(id, wr)
    }

    /// `ibv_post_srq_recv` of a list: copies of `wrs` (their scatter lists
    /// in spare ones, so that posting allocates nothing in steady state),
    /// in order, under one take of the lock. On a refusal, the index of
    /// the request refused: those before it are posted.
    pub fn post_copy(&self, id: SrqId, wrs: &[RecvWr]) -> Result<(), (usize, VerbsError)> {
        let mut t = self.lock();
        for (i, wr) in wrs.iter().enumerate() {
            // Checked first, so that a refusal takes no spare list.
            t.check_room(id).map_err(|e| (i, e))?;
            let sg_list = t.spare.copy(&wr.sg_list);
            t.srqs[id.0].queue.push_back(RecvWr { wr_id: wr.wr_id, sg_list });
        }
        Ok(())
    }

    /// The oldest limit event not yet raised (raised once, by whichever
    /// engine sharing the table asks first).
    pub(crate) fn take_limit_event(&self) -> Option<SrqId> {
        self.lock().limit_events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(wr_id: u64) -> RecvWr {
        RecvWr { wr_id, sg_list: vec![Sge { addr: 0x1000 * wr_id, length: 64, lkey: 7 }] }
    }

    /// The engines of a device share the table and its spare lists: a
    /// receive posted through one handle and finished on another engine
    /// gives its list back for the next post, which allocates nothing.
    #[test]
    fn a_receive_finished_on_another_engine_gives_its_list_to_the_next_post() {
        let first = SrqTable::default();
        let other = first.clone();
        let srq = first.create(Pd(1), 4, 0);
        first.post_copy(srq, &[recv(1)]).unwrap();
        let mut finished = Vec::new();
        let (taken, pd) = other.take(srq, &mut finished).expect("the receive posted");
        assert_eq!((taken.wr_id, pd), (1, Pd(1)));
        let list = taken.sg_list.as_ptr();
        // Finished on the other engine, handed back at its next take (of
        // nothing, here).
        finished.push(taken.sg_list);
        assert!(other.take(srq, &mut finished).is_none());
        assert!(finished.is_empty());
        first.post_copy(srq, &[recv(2)]).unwrap();
        let (again, _) = first.take(srq, &mut Vec::new()).expect("the second receive");
        assert_eq!(again.sg_list, recv(2).sg_list);
        assert_eq!(again.sg_list.as_ptr(), list, "the finished receive's list is reused");
    }

    /// A list posted into a full SRQ stops at the first request refused,
    /// naming it; those before it are posted, in order.
    #[test]
    fn a_post_past_the_depth_names_the_request_refused() {
        let t = SrqTable::default();
        let srq = t.create(Pd(1), 2, 0);
        let (index, err) = t.post_copy(srq, &[recv(1), recv(2), recv(3)]).unwrap_err();
        assert_eq!(index, 2);
        assert!(matches!(err, VerbsError::QueueFull { depth: 2, .. }), "{err:?}");
        let mut finished = Vec::new();
        assert_eq!(t.take(srq, &mut finished).map(|(r, _)| r.wr_id), Some(1));
        assert_eq!(t.take(srq, &mut finished).map(|(r, _)| r.wr_id), Some(2));
        assert!(t.take(srq, &mut finished).is_none());
        assert!(matches!(t.post_copy(SrqId(9), &[recv(4)]), Err((0, VerbsError::NoSuchSrq(9)))));
    }
}
