//! XRC, the eXtended Reliable Connected transport (IBTA annex A14; what
//! ConnectX has and kernel rxe does not): XRC domains, XRC SRQs and the
//! XRC_SEND / XRC_RECV queue pairs (docs/xrc.md).
//!
//! | libibverbs | here |
//! |---|---|
//! | `ibv_open_xrcd` (fd -1) | [`Context::open_xrcd`] |
//! | `ibv_close_xrcd` | [`Xrcd::close`] (EBUSY while in use), or dropping the [`Xrcd`] |
//! | `ibv_create_srq_ex` with `IBV_SRQT_XRC` | [`ProtectionDomain::create_xrc_srq`] |
//! | `ibv_get_srq_num` | [`XrcSrq::srq_num`] |
//! | `ibv_create_qp_ex`, `IBV_QPT_XRC_SEND` | [`ProtectionDomain::create_qp`] with [`QpType::XrcSend`] |
//! | `ibv_create_qp_ex`, `IBV_QPT_XRC_RECV` + `IBV_QP_INIT_ATTR_XRCD` | [`Xrcd::create_recv_qp`] |
//! | `ibv_open_qp` | [`Xrcd::open_qp`] |
//! | `wr.qp_type.xrc.remote_srqn`, `ibv_wr_set_xrc_srqn` | [`SendWr::xrc_srqn`](rdma_transport::SendWr) |

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
use crate::qp::{QueuePair, SharedReceiveQueue};
use rdma_transport::{QpCap, QpType, XrcdId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An XRC domain. Dropping it closes it if nothing is in it any more.
#[derive(Debug)]
pub struct Xrcd {
    ctx: Context,
    id: XrcdId,
    closed: AtomicBool,
}

impl Context {
    /// `ibv_open_xrcd` of a new, process-private domain (`fd` -1).
    pub fn open_xrcd(&self) -> Result<Xrcd> {
        let id = self.inner.lock().ep.open_xrcd();
        Ok(Xrcd { ctx: self.clone(), id, closed: AtomicBool::new(false) })
    }
}

impl Xrcd {
    /// The device's number of this domain (the same in every engine).
    pub fn id(&self) -> XrcdId {
        self.id
    }

    /// `ibv_close_xrcd`: refused with [`rdma_transport::VerbsError::XrcdInUse`]
    /// (EBUSY) while an XRC SRQ or XRC_RECV QP is in it.
    pub fn close(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        // Every engine's lock, in order: no XRC_RECV QP of the domain can
        // be made on another engine while the first closes it.
        let mut all = self.ctx.inner.lock_all();
        if all[1..].iter().any(|st| st.ep.xrcd_has_qps(self.id)) {
            return Err(rdma_transport::VerbsError::XrcdInUse(self.id.0).into());
        }
        all[0].ep.close_xrcd(self.id)?;
        drop(all);
        self.closed.store(true, Ordering::Release);
        Ok(())
    }

    /// `ibv_create_qp_ex` of an `IBV_QPT_XRC_RECV` QP in this domain: the
    /// receive side only, with no PD, CQ or queue of its own. A request
    /// lands in the XRC SRQ it names (of this domain, else NAK Invalid
    /// Request) and completes on that SRQ's CQ.
    pub fn create_recv_qp(&self) -> Result<QueuePair> {
        let init = rdma_transport::QpInitAttr::new(QpType::XrcRecv, rdma_transport::Pd(0), rdma_transport::CqId(0));
        let init =
            rdma_transport::QpInitAttr { cap: QpCap { max_send_wr: 0, max_recv_wr: 0, ..QpCap::default() }, ..init };
        // On the engines in turn, as other QPs: they share the domains and
        // the XRC SRQs.
        let qpn = self.ctx.inner.place_qp().lock().ep.create_xrc_qp(init, Some(self.id))?;
        QueuePair::attach(&self.ctx, qpn, QpType::XrcRecv)
    }

    /// `ibv_open_qp`: a handle to the existing XRC_RECV QP `qpn` of this
    /// domain. The QP is destroyed when every handle is.
    pub fn open_qp(&self, qpn: u32) -> Result<QueuePair> {
        self.ctx.inner.lock_qp(qpn).ep.open_xrc_qp(qpn, self.id)?;
        QueuePair::attach(&self.ctx, qpn, QpType::XrcRecv)
    }
}

impl Drop for Xrcd {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::debug!(error = %e, "XRC domain dropped while in use: left open");
        }
    }
}

/// An XRC SRQ (`ibv_create_srq_ex`, `IBV_SRQT_XRC`). Dropping it destroys
/// it: no request can name it any more and its domain is free of it.
#[derive(Debug)]
pub struct XrcSrq {
    srq: SharedReceiveQueue,
    num: u32,
}

impl ProtectionDomain {
    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ of `xrcd` whose
    /// receives complete on `cq`. Its buffers belong to this PD, and so do
    /// the RDMA WRITE/READ/atomic targets of requests naming it (annex A14:
    /// the XRC SRQ's PD).
    pub fn create_xrc_srq(&self, xrcd: &Xrcd, cq: &CompletionQueue, max_wr: u32, limit: u32) -> Result<XrcSrq> {
        for (ctx, what) in [(&xrcd.ctx, "the XRC domain"), (&cq.ctx, "the CQ")] {
            if !Arc::ptr_eq(&self.ctx.inner, &ctx.inner) {
                return Err(Error::WrongDevice(what));
            }
        }
        let mut st = self.ctx.inner.lock();
        let id = st.ep.create_xrc_srq(self.pd, xrcd.id, cq.id, max_wr, limit)?;
        let num = st.ep.srq_num(id).expect("an XRC SRQ has a number");
        let srq = SharedReceiveQueue::from_id(&self.ctx, &st, id);
        drop(st);
        // Its receives complete on `cq` from whichever engine's XRC_RECV QP
        // took the message: any.
        let mut hub = self.ctx.inner.hub();
        for engine in 0..self.ctx.inner.engines() {
            hub.cqs.note_engine(cq.id, engine);
        }
        drop(hub);
        Ok(XrcSrq { srq, num })
    }
}

impl XrcSrq {
    /// `ibv_get_srq_num`: the number XRC senders name in `SendWr::xrc_srqn`.
    pub fn srq_num(&self) -> u32 {
        self.num
    }

    /// The SRQ, to post receives to.
    pub fn srq(&self) -> &SharedReceiveQueue {
        &self.srq
    }
}

impl Drop for XrcSrq {
    fn drop(&mut self) {
        self.srq.ctx.inner.lock().ep.destroy_xrc_srq(self.srq.id);
    }
}
