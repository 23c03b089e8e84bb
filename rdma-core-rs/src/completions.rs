//! The device's completion queues and channels: what `ibv_poll_cq` takes
//! from and `ibv_get_cq_event` waits on, behind a lock of their own
//! ([`Hub`]), apart from the engine's.
//!
//! The engine queues each completion in its own CQ as it happens; after
//! every round of progress and every call that may complete requests (a
//! post, a doorbell, a send of held ACKs, a QP's state change, the CM's
//! work) the device moves them here ([`DeviceCqs::collect`], through
//! `Inner::announce_completions`, which raises the channels' events for
//! what moved). The device, not the engine, keeps a CQ's completions, its
//! depth and its counts, so that a CQ takes completions from every engine
//! of a device of several (docs/multi-core-device.md). Each QP belongs to
//! one engine, so its completions keep their order.
//!
//! A CQ's depth is checked here when completions come in: those that find
//! it full are lost, and the engine is told ([`Endpoint::cq_overrun`]),
//! which puts the CQ in error, raises its event and moves its QPs to ERR
//! (IBTA 11.4.2.1).

use rdma_transport::{CqId, Endpoint, VerbsError, WcStatus, WorkCompletion};
use std::collections::VecDeque;
use std::os::fd::RawFd;

/// What the application's CQ and channel calls reach, under the hub's
/// lock. An engine's lock is taken before it when both are held.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    pub(crate) cqs: DeviceCqs,
    pub(crate) channels: Vec<ChannelState>,
    /// CQs armed with `req_notify`, in the order they were armed.
    armed: Vec<Arming>,
}

/// A completion channel's pending events and the CQs armed on it.
#[derive(Debug, Default)]
pub(crate) struct ChannelState {
    pub(crate) events: VecDeque<CqId>,
    /// An eventfd that gets 1 per event (see `CompChannel::set_notify_fd`).
    pub(crate) notify: Option<RawFd>,
}

/// A CQ armed with `req_notify`: the channel its event goes to, and how
/// many completions the CQ had received when it was armed. Only a
/// completion received after that raises the event (libibverbs: the
/// *next* completion), whatever the CQ still holds from before and
/// whatever other CQs receive.
///
/// Armed for solicited completions only, the count is of those the engine
/// marks so (solicited receives and errors): an unsolicited completion
/// raises no event.
#[derive(Debug, Clone, Copy)]
struct Arming {
    cq: CqId,
    channel: usize,
    received: u64,
    solicited_only: bool,
}

impl Arming {
    /// What this arming counts on `cq` now (see [`Arming`]).
    fn count(&self, cqs: &DeviceCqs) -> u64 {
        if self.solicited_only {
            cqs.solicited(self.cq)
        } else {
            cqs.received(self.cq)
        }
    }
}

impl Hub {
    /// Arms `cq` for one event on `channel`, raised by the next completion
    /// it receives, or with `solicited_only` the next solicited or failed
    /// one (`ibv_req_notify_cq`). Arming an armed CQ changes nothing,
    /// except that asking for any completion widens a solicited-only
    /// arming (as the kernel's "next completion" supersedes "solicited").
    pub(crate) fn arm(&mut self, cq: CqId, channel: usize, solicited_only: bool) {
        let cqs = &self.cqs;
        match self.armed.iter_mut().find(|a| a.cq == cq) {
            Some(a) if a.solicited_only && !solicited_only => {
                *a = Arming { cq, channel: a.channel, received: 0, solicited_only: false };
                a.received = a.count(cqs);
            }
            Some(_) => {}
            None => {
                let mut a = Arming { cq, channel, received: 0, solicited_only };
                a.received = a.count(cqs);
                self.armed.push(a);
            }
        }
    }

    /// Raises the event of every armed CQ that received a completion since
    /// it was armed, and disarms it (an arming is good for one event).
    pub(crate) fn fire_channels(&mut self) {
        let Hub { cqs, armed, channels } = self;
        armed.retain(|a| {
            let now = a.count(cqs);
            if now == a.received {
                return true;
            }
            tracing::debug!(cq = a.cq.0, channel = a.channel, new = now - a.received, "CQ event");
            channels[a.channel].events.push_back(a.cq);
            if let Some(fd) = channels[a.channel].notify {
                let one = 1u64;
                // SAFETY: writes 8 bytes to the eventfd the channel's owner gave.
                unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
            }
            false
        });
    }
}

/// One CQ as the application sees it.
#[derive(Debug)]
struct DeviceCq {
    depth: usize,
    queue: VecDeque<WorkCompletion>,
    /// Completions this CQ has received since its creation (polled or not):
    /// what an arming counts from.
    received: u64,
    /// Of those, the solicited receives and the errors: what a
    /// solicited-only arming counts from.
    solicited: u64,
    /// It overflowed: it takes no completion from then on.
    in_error: bool,
    /// Its CQ error event went to the application: every engine raises
    /// one, the device passes the first on.
    error_reported: bool,
    /// The engines (a bit each) that have had a QP on it: where a busy
    /// poll that finds it empty makes progress (a device of several).
    engines: u32,
}

// A bit per engine in `DeviceCq::engines`.
const _: () = assert!(crate::MAX_THREADS <= 32);

/// The device's CQs, numbered as the engine numbers them.
#[derive(Debug, Default)]
pub(crate) struct DeviceCqs {
    cqs: Vec<DeviceCq>,
    /// The CQs in error, in the order they overflowed: each engine is told
    /// of each (a device of several engines), so that its QPs on the CQ
    /// fail too ([`DeviceCqs::errored_since`]).
    errored: Vec<CqId>,
}

impl DeviceCqs {
    /// Adds CQ `id` of `depth` completions (at least one), which the
    /// device's engines created unbounded (`Endpoint::create_cq(usize::MAX)`):
    /// the depth is kept here.
    pub(crate) fn add(&mut self, id: CqId, depth: usize) {
        debug_assert_eq!(id.0, self.cqs.len(), "the device creates every CQ of its engines");
        self.cqs.push(DeviceCq {
            depth: depth.max(1),
            queue: VecDeque::new(),
            received: 0,
            solicited: 0,
            in_error: false,
            error_reported: false,
            engines: 0,
        });
    }

    /// Engine `engine` (below [`crate::MAX_THREADS`]) has a QP on CQ `cq`,
    /// for as long as the CQ lives (a bit a destroyed QP left costs a round
    /// that finds nothing).
    pub(crate) fn note_engine(&mut self, cq: CqId, engine: usize) {
        if let Some(c) = self.cqs.get_mut(cq.0) {
            c.engines |= 1u32 << engine;
        }
    }

    /// The engines that have had a QP on CQ `cq`, a bit each.
    pub(crate) fn engines_of(&self, cq: CqId) -> u32 {
        self.cqs.get(cq.0).map_or(0, |c| c.engines)
    }

    /// Moves every completion the engine has queued into its CQ here;
    /// `seen` is the engine's completion count as of the last collection
    /// (kept with the engine): while it is unchanged, the engine holds none
    /// to move. Returns whether any moved. Those that find their CQ full or
    /// in error are lost, and the engine is told, which flushes the CQ's
    /// QPs: their flushes are collected (and lost) in the same call.
    pub(crate) fn collect(&mut self, ep: &mut Endpoint, seen: &mut u64) -> bool {
        let any = ep.completions_delivered() != *seen;
        while ep.completions_delivered() != *seen {
            *seen = ep.completions_delivered();
            for (i, cq) in self.cqs.iter_mut().enumerate() {
                let id = CqId(i);
                if ep.cq_len(id) == 0 {
                    continue;
                }
                let mut lost = 0u64;
                for wc in ep.drain_cq(id) {
                    if cq.in_error || cq.queue.len() >= cq.depth {
                        lost += 1;
                        tracing::warn!(cq = i, wr_id = wc.wr_id, "completion queue overrun: completion lost");
                        continue;
                    }
                    if wc.solicited || wc.status != WcStatus::Success {
                        cq.solicited += 1;
                    }
                    cq.received += 1;
                    cq.queue.push_back(wc);
                }
                if lost > 0 {
                    if !cq.in_error {
                        cq.in_error = true;
                        self.errored.push(id);
                    }
                    ep.cq_overrun(id, lost);
                }
            }
        }
        any
    }

    /// Appends up to `max` completions of `cq`, oldest first, to `out`;
    /// returns how many.
    pub(crate) fn take(&mut self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let Some(c) = self.cqs.get_mut(cq.0) else { return 0 };
        let n = max.min(c.queue.len());
        out.extend(c.queue.drain(..n));
        n
    }

    /// Completions waiting in `cq` (0: no such CQ).
    pub(crate) fn len(&self, cq: CqId) -> usize {
        self.cqs.get(cq.0).map_or(0, |c| c.queue.len())
    }

    /// How many completions `cq` holds (0: no such CQ).
    pub(crate) fn depth(&self, cq: CqId) -> usize {
        self.cqs.get(cq.0).map_or(0, |c| c.depth)
    }

    /// `ibv_resize_cq`: room for `depth` completions from now on, unless
    /// more than `at_least` wait in it (rxe compares the size the
    /// application asked for, before rounding, with that count).
    pub(crate) fn resize(&mut self, cq: CqId, depth: usize, at_least: usize) -> Result<(), VerbsError> {
        let c = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchCq(cq.0))?;
        if c.queue.len() > at_least {
            return Err(VerbsError::CqTooSmall { cq: cq.0, waiting: c.queue.len(), asked: at_least });
        }
        c.depth = depth.max(1);
        Ok(())
    }

    /// The CQs that went in error after the first `told` of them, for an
    /// engine told of those: it calls `Endpoint::cq_overrun(cq, 0)` for each.
    pub(crate) fn errored_since(&self, told: usize) -> &[CqId] {
        self.errored.get(told..).unwrap_or(&[])
    }

    /// How many CQs went in error.
    pub(crate) fn errored_count(&self) -> usize {
        self.errored.len()
    }

    /// Whether the application should get this CQ error event: the first
    /// of the engines' for `cq`.
    pub(crate) fn first_error_report(&mut self, cq: CqId) -> bool {
        match self.cqs.get_mut(cq.0) {
            Some(c) => !std::mem::replace(&mut c.error_reported, true),
            None => true,
        }
    }

    /// Completions `cq` has received since its creation (see [`DeviceCq`]).
    pub(crate) fn received(&self, cq: CqId) -> u64 {
        self.cqs.get(cq.0).map_or(0, |c| c.received)
    }

    /// Solicited receives and errors `cq` has received since its creation.
    pub(crate) fn solicited(&self, cq: CqId) -> u64 {
        self.cqs.get(cq.0).map_or(0, |c| c.solicited)
    }

    /// Removes QP `qpn`'s completions from its CQs `cqs` (a QP moved to
    /// RESET, as mlx5 and mlx4 clean its CQs); returns how many. Collect
    /// first: the engine cleaned its own.
    pub(crate) fn remove_qp(&mut self, qpn: u32, cqs: &[CqId]) -> usize {
        let mut removed = 0;
        for (_, c) in self.cqs.iter_mut().enumerate().filter(|(i, _)| cqs.contains(&CqId(*i))) {
            let before = c.queue.len();
            c.queue.retain(|wc| wc.qp_num != qpn);
            removed += before - c.queue.len();
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use crate::*;
    use std::time::Duration;

    /// A completion the engine queued outside the calls that move
    /// completions (here posted to the engine directly), then another QP's
    /// move to RESET, which cleans the CQs: the completion reaches the CQ
    /// and raises the armed CQ's event, not only the CQ.
    #[test]
    fn a_reset_moves_what_the_engine_holds_and_raises_the_event() {
        let dev = Device::new("rxe-reset-event", "127.53.99.1".parse().unwrap()).unwrap();
        let ctx = dev.open().unwrap();
        let ch = ctx.create_comp_channel().unwrap();
        let cq = ctx.create_cq(16, Some(&ch)).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd.reg_mr(64, Access::ALL).unwrap();
        let x = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
        let y = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
        x.modify(&QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() }).unwrap();
        cq.req_notify(false).unwrap();
        let recv = rdma_transport::RecvWr { wr_id: 7, sg_list: vec![mr.sge(0, 8).unwrap()] };
        ctx.inner.lock().ep.post_recv(x.qp_num(), recv).unwrap(); // flushed at once, in the engine
        y.modify(&QpAttr { qp_state: Some(QpState::Reset), ..QpAttr::default() }).unwrap();
        assert_eq!(ch.get_cq_event(Some(Duration::from_millis(300))).unwrap(), Some(cq.id()));
        let mut out = Vec::new();
        assert_eq!(cq.poll(&mut out, 4).unwrap(), 1);
        assert_eq!((out[0].wr_id, out[0].status), (7, WcStatus::WrFlushErr));
    }

    /// `ibv_resize_cq` counts the completions the engine holds and has not
    /// moved to the CQ yet: four waiting refuse a size of two.
    #[test]
    fn a_resize_counts_what_the_engine_holds() {
        let dev = Device::new("rxe-resize-held", "127.53.99.2".parse().unwrap()).unwrap();
        let ctx = dev.open().unwrap();
        let cq = ctx.create_cq(16, None).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd.reg_mr(64, Access::ALL).unwrap();
        let x = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
        x.modify(&QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() }).unwrap();
        for i in 0..4 {
            let recv = rdma_transport::RecvWr { wr_id: i, sg_list: vec![mr.sge(0, 8).unwrap()] };
            ctx.inner.lock().ep.post_recv(x.qp_num(), recv).unwrap();
        }
        assert!(cq.resize(2, 2).is_err(), "four wait: a CQ of two is refused");
        let mut out = Vec::new();
        assert_eq!(cq.poll(&mut out, 8).unwrap(), 4);
        assert_eq!(ctx.stats().cq_overruns, 0);
    }
}
