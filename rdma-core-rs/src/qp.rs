//! Queue pairs (`ibv_qp`), shared receive queues (`ibv_srq`) and address
//! handles (`ibv_ah`).

use crate::context::{Context, State};
use crate::cq::CompletionQueue;
use crate::device::Gid;
use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
use rdma_transport::endpoint::SrqTable;
use rdma_transport::{AddressVector, QpAttr, QpCap, QpState, QpType, RecvWr, SendWr, SrqId, UdDest};
use std::sync::Arc;

/// What [`ProtectionDomain::create_qp`] takes (`ibv_qp_init_attr`).
#[derive(Debug, Clone)]
pub struct QpInitAttr<'a> {
    pub qp_type: QpType,
    pub send_cq: &'a CompletionQueue,
    pub recv_cq: &'a CompletionQueue,
    pub srq: Option<&'a SharedReceiveQueue>,
    pub cap: QpCap,
    /// Every send generates a completion, signaled or not.
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    /// A QP of `qp_type` on one CQ, default capacities, no SRQ.
    pub fn new(qp_type: QpType, cq: &'a CompletionQueue) -> QpInitAttr<'a> {
        QpInitAttr { qp_type, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap::default(), sq_sig_all: false }
    }
}

/// A queue pair. Dropping it destroys it.
#[derive(Debug)]
pub struct QueuePair {
    pub(crate) ctx: Context,
    qpn: u32,
    qp_type: QpType,
}

fn same_device(ctx: &Context, other: &Context, what: &'static str) -> Result<()> {
    if Arc::ptr_eq(&ctx.inner, &other.inner) {
        Ok(())
    } else {
        Err(Error::WrongDevice(what))
    }
}

impl ProtectionDomain {
    /// `ibv_create_qp`. The QP starts in RESET; bring it up with
    /// [`QueuePair::modify`] (INIT, RTR, RTS).
    pub fn create_qp(&self, attr: &QpInitAttr<'_>) -> Result<QueuePair> {
        same_device(&self.ctx, &attr.send_cq.ctx, "the send CQ")?;
        same_device(&self.ctx, &attr.recv_cq.ctx, "the receive CQ")?;
        if let Some(srq) = attr.srq {
            same_device(&self.ctx, &srq.ctx, "the shared receive queue")?;
        }
        let init = rdma_transport::QpInitAttr {
            qp_type: attr.qp_type,
            pd: self.pd,
            send_cq: attr.send_cq.id,
            recv_cq: attr.recv_cq.id,
            srq: attr.srq.map(|s| s.id),
            cap: attr.cap,
            sq_sig_all: attr.sq_sig_all,
        };
        let mut st = self.ctx.inner.place_qp().lock();
        // An XRC_SEND QP (a send queue only; each request names the remote
        // XRC SRQ, `SendWr::xrc_srqn`): `recv_cq` and `srq` are unused.
        let qpn = match attr.qp_type {
            QpType::XrcSend => st.ep.create_xrc_qp(init, None)?,
            _ => st.ep.create_qp(init)?,
        };
        {
            let mut hub = self.ctx.inner.hub();
            hub.cqs.note_engine(attr.send_cq.id, st.engine());
            hub.cqs.note_engine(attr.recv_cq.id, st.engine());
        }
        drop(st);
        QueuePair::attach(&self.ctx, qpn, attr.qp_type)
    }
}

impl QueuePair {
    /// Gives the engine's QP `qpn` its UDP source port and a handle.
    pub(crate) fn attach(ctx: &Context, qpn: u32, qp_type: QpType) -> Result<QueuePair> {
        let mut st = ctx.inner.lock_qp(qpn);
        let want = st.ep.qp_src_port(qpn)?;
        let port = match st.io.reserve_port(want) {
            Ok(p) => p,
            Err(e) => {
                let _ = st.ep.destroy_qp(qpn);
                return Err(e.into());
            }
        };
        st.ep.set_qp_src_port(qpn, port)?;
        if qp_type == QpType::Ud {
            // A UD receive's GRH area shows the hop limit a packet came with.
            st.io.want_hop_limits();
        }
        tracing::debug!(qpn, port, ?qp_type, "QP created");
        Ok(QueuePair { ctx: ctx.clone(), qpn, qp_type })
    }
}

impl ProtectionDomain {
    /// `ibv_create_srq` with room for `max_wr` receives; `limit` arms the
    /// SRQ limit event (0: not armed).
    pub fn create_srq(&self, max_wr: u32, limit: u32) -> Result<SharedReceiveQueue> {
        let mut st = self.ctx.inner.lock();
        let id = st.ep.create_srq(self.pd, max_wr, limit);
        Ok(SharedReceiveQueue::from_id(&self.ctx, &st, id))
    }

    /// `ibv_create_ah`. On native IB the DLID is the one the port's path
    /// table has for the GID (resolved by the RDMA CM, or learned from the
    /// peer's MADs), as a path record would give it.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle> {
        self.ctx.device().gid(attr.sgid_index)?;
        if attr.dgid.is_zero() {
            return Err(Error::InvalidArgument("address handle: the destination GID is zero".into()));
        }
        let mut av = attr.to_av();
        if self.ctx.link_kind() == rdma_transport::LinkKind::Ib {
            av.dlid = self.ctx.inner.lock().ep.path_lid(av.dest).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "address handle: no LID is known for GID {} on native IB (give one with create_ah_av)",
                    attr.dgid
                ))
            })?;
        }
        Ok(AddressHandle { av })
    }

    /// An address handle from a whole address vector: for native IB, a
    /// LID route (`AddressVector::lid`, DLID and SL, no GRH) or a global
    /// one (a GID in `dest` as well), which [`AhAttr`] cannot say.
    pub fn create_ah_av(&self, av: AddressVector) -> Result<AddressHandle> {
        let ib = self.ctx.link_kind() == rdma_transport::LinkKind::Ib;
        // A multicast LID is a destination too: the group's (docs/multicast.md).
        if ib && !(1..=0xbfff).contains(&av.dlid) && !rdma_transport::mcast::is_multicast_lid(av.dlid) {
            return Err(Error::InvalidArgument(format!(
                "address handle: DLID {} is neither a unicast nor a multicast LID",
                av.dlid
            )));
        }
        if !ib && av.dest.is_unspecified() {
            return Err(Error::InvalidArgument("address handle: RoCE needs a destination GID".into()));
        }
        Ok(AddressHandle { av })
    }
}

impl QueuePair {
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The UDP source port this QP's packets leave from (the engine's,
    /// which the backend reserved when the QP was made).
    pub fn src_port(&self) -> u16 {
        // The engine's QP lives as long as this handle (destroyed on drop).
        self.ctx.inner.lock_qp(self.qpn).ep.qp_src_port(self.qpn).expect("a live QP has a source port")
    }

    /// `ibv_modify_qp`: the fields set in `attr` are the attribute mask.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let mut st = self.ctx.inner.lock_qp(self.qpn);
        if let Some(mtu) = attr.path_mtu {
            // A frame link cannot carry frames over its interface's MTU:
            // refuse a path MTU that would make every full packet vanish.
            let need = rdma_link::frame_for_mtu(mtu);
            if let Some(max) = st.io.max_frame().filter(|&max| need > max) {
                return Err(Error::InvalidArgument(format!(
                    "QP {:#x}: path MTU {} makes {need}-byte frames; the link carries at most {max} \
                     (raise the interface's MTU, or use a smaller -m)",
                    self.qpn,
                    mtu.bytes()
                )));
            }
        }
        self.ctx.inner.before_transition(&mut st, attr)?;
        let to_reset = attr.qp_state == Some(QpState::Reset) && st.ep.query_qp(self.qpn)?.0 != QpState::Reset;
        st.ep.modify_qp(self.qpn, attr)?;
        if to_reset {
            // The engine cleaned its own CQs of the QP's completions (as
            // mlx5 does on RESET); those the device holds go too. The
            // others the engine held move (and raise their events) first.
            self.ctx.inner.announce_completions(&mut st);
            let (send_cq, recv_cq) = st.ep.qp_cqs(self.qpn)?;
            let removed = self.ctx.inner.hub().cqs.remove_qp(self.qpn, &[send_cq, recv_cq]);
            if removed > 0 {
                tracing::debug!(qpn = self.qpn, removed, "QP reset: its queued completions removed from its CQs");
            }
        }
        // Moving to ERR flushes: the doorbell lets waiters see the completions.
        self.ctx.inner.doorbell(&mut st)
    }

    /// `ibv_query_qp`: the state and the attributes in force.
    pub fn query(&self) -> Result<(QpState, rdma_transport::qp::QpParams)> {
        Ok(self.ctx.inner.lock_qp(self.qpn).ep.query_qp(self.qpn)?)
    }

    /// The PSNs `ibv_query_qp` reports: `(sq_psn, rq_psn)`, the next this
    /// QP sends and the next it expects, as rxe reports them.
    pub fn psns(&self) -> Result<(u32, u32)> {
        Ok(self.ctx.inner.lock_qp(self.qpn).ep.qp_psns(self.qpn)?)
    }

    /// This QP's counters: CE-marked packets received
    /// ([`crate::Context::stats`] counts them for the whole device).
    pub fn stats(&self) -> Result<rdma_transport::qp::QpStats> {
        Ok(self.ctx.inner.lock_qp(self.qpn).ep.qp_stats(self.qpn)?)
    }

    /// `ibv_post_send` of a list of work requests, in order; the packets go
    /// out before this returns. On a refusal, the requests before it stay
    /// posted and the error says which one failed, like `bad_wr`.
    pub fn post_send(&self, wrs: &[SendWr]) -> Result<()> {
        let mut st = self.ctx.inner.lock_qp(self.qpn);
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(source) = st.ep.post_send_copy(self.qpn, wr) {
                result = Err(Error::Post { index, wr_id: wr.wr_id, source });
                break;
            }
        }
        self.ctx.inner.receive_before_send(&mut st)?;
        self.ctx.inner.doorbell(&mut st)?;
        result
    }

    /// `ibv_post_recv` of a list of work requests, in order.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<()> {
        let mut st = self.ctx.inner.lock_qp(self.qpn);
        let posted = wrs.iter().enumerate().try_for_each(|(index, wr)| {
            st.ep.post_recv_copy(self.qpn, wr).map_err(|source| Error::Post { index, wr_id: wr.wr_id, source })
        });
        // A receive gives the engine nothing to send (an RNR-waiting peer
        // finds it when it retries), so the common case costs no transmit
        // pass; in ERR a receive completes at once, flushed, and whoever
        // waits must hear of it.
        if st.completions_pending() {
            self.ctx.inner.doorbell(&mut st)?;
        }
        posted
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        let mut st = self.ctx.inner.lock_qp(self.qpn);
        self.ctx.inner.release_acks(&mut st);
        // The backend leaves the multicast groups the QP held (the engine
        // forgets its memberships with the QP).
        for (gid, _) in st.ep.mcast_groups_of(self.qpn) {
            st.io.leave_group(gid);
        }
        let port = st.ep.qp_src_port(self.qpn);
        let _ = st.ep.destroy_qp(self.qpn);
        if let Ok(port) = port {
            st.io.release_port(port);
        }
    }
}

/// A shared receive queue.
#[derive(Clone)]
pub struct SharedReceiveQueue {
    pub(crate) ctx: Context,
    pub(crate) id: SrqId,
    /// The device's SRQs, shared by its engines: posting takes only their
    /// lock, not an engine's, so it never waits for a progress round.
    table: SrqTable,
}

/// Not the table: it holds every SRQ's queued receives.
impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue").field("ctx", &self.ctx).field("id", &self.id).finish()
    }
}

impl SharedReceiveQueue {
    /// The SRQ `id` of the device of `ctx`, whose first engine's state is `st`.
    pub(crate) fn from_id(ctx: &Context, st: &State, id: SrqId) -> SharedReceiveQueue {
        SharedReceiveQueue { ctx: ctx.clone(), id, table: st.ep.srq_table() }
    }

    /// A number naming this SRQ, as in [`rdma_transport::AsyncEvent::SrqLimitReached`].
    pub fn id(&self) -> usize {
        self.id.0
    }

    /// `ibv_post_srq_recv`.
    ///
    /// A receive gives the engines nothing to do until a message comes (an
    /// RNR-waiting peer finds it when it retries), so no engine is woken.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<()> {
        self.table.post_copy(self.id, wrs).map_err(|(index, source)| Error::Post {
            index,
            wr_id: wrs[index].wr_id,
            source,
        })
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event (under
    /// the SRQ table's lock alone, as posts are).
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        Ok(self.table.arm(self.id, limit)?)
    }
}

/// What [`ProtectionDomain::create_ah`] takes (`ibv_ah_attr` with its GRH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhAttr {
    pub dgid: Gid,
    pub sgid_index: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

impl AhAttr {
    /// To `dgid` from GID index 0, hop limit 64, traffic class 0.
    pub fn new(dgid: Gid) -> AhAttr {
        AhAttr { dgid, sgid_index: 0, hop_limit: 64, traffic_class: 0 }
    }

    /// The address vector a connected QP takes in its RTR attributes.
    pub fn to_av(&self) -> AddressVector {
        AddressVector {
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            ..AddressVector::new(self.dgid.to_ip())
        }
    }
}

/// An address handle: where UD sends go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressHandle {
    av: AddressVector,
}

impl AddressHandle {
    /// The destination of a UD send through this handle to `remote_qpn`
    /// with `remote_qkey` (for [`SendWr::ud`]).
    pub fn ud_dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest {
            dest: self.av.dest,
            hop_limit: self.av.hop_limit,
            traffic_class: self.av.traffic_class,
            dlid: self.av.dlid,
            sl: self.av.sl,
            remote_qpn,
            remote_qkey,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Device;
    use rdma_transport::{Access, RecvWr};
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    /// An application's post to an SRQ takes only the SRQ table's lock:
    /// it goes through while an engine (here the first, whose lock SRQ
    /// posts took before) holds its own lock for a round.
    #[test]
    fn posting_to_an_srq_does_not_wait_for_an_engine() {
        let dev = Device::new("rxe-srq-nolock", "127.53.17.3".parse().unwrap()).unwrap();
        let pd = dev.open().unwrap().alloc_pd().unwrap();
        let mr = pd.reg_mr(4096, Access::ALL).unwrap();
        let srq = pd.create_srq(16, 0).unwrap();
        let inner = pd.ctx.inner.clone();
        let (held, is_held) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let holder = thread::spawn(move || {
            let _engine = inner.lock();
            held.send(()).unwrap();
            let _ = released.recv_timeout(Duration::from_secs(30));
        });
        is_held.recv().unwrap();
        let (done, posted) = mpsc::channel();
        let wrs = vec![RecvWr { wr_id: 5, sg_list: vec![mr.sge(0, 64).unwrap()] }];
        let poster = {
            let srq = srq.clone();
            thread::spawn(move || done.send(srq.post_recv(&wrs)).unwrap())
        };
        let result = posted.recv_timeout(Duration::from_secs(5));
        release.send(()).unwrap();
        holder.join().unwrap();
        poster.join().unwrap();
        assert!(matches!(result, Ok(Ok(()))), "the post waited for the engine's lock: {result:?}");
    }
}
