//! The transmit scheduler: which QP sends next. QPs take turns of up to
//! [`TX_BURST`] packets in QPN order (round robin); within a QP,
//! responses go before requests; held lone ACKs leave at the end of a
//! round that sent anything, or when released. Congestion control
//! attaches in `transmit_from`, the one place that sees both request
//! packets and READ responses: a QP's owed CNPs leave first, and with
//! DCQCN on its pacer gates its data packets.

use super::transmit::{Transmit, TX_BURST};
use super::Endpoint;
use crate::events::AsyncEvent;
use crate::qp::{AddressVector, QpParams};
use crate::requester::ReqOutcome;
use crate::time::Instant;
use crate::timers::Timer;
use core::time::Duration;

impl Endpoint {
    /// Lets a lone positive ACK wait up to `delay` for company: it leaves
    /// with the next packet this endpoint sends (after it, in the same
    /// round of `poll_transmit` calls), or covers later requests too, or
    /// leaves alone when `delay` has passed ([`Endpoint::poll_timeout`]
    /// says when). Only a QP that sent a request itself within the last
    /// millisecond holds ACKs (a ping-pong, or traffic both ways): the
    /// passive side of a one-way stream ACKs at once, so a requester that
    /// waits for each completion is never slowed. Zero (the default of the
    /// engine, as rxe) sends every ACK at once. NAKs, READ responses and
    /// atomic ACKs never wait.
    pub fn set_ack_delay(&mut self, delay: Duration) {
        self.touch();
        // An ACK already held is due `delay` after it was first held.
        let old = u64::try_from(self.sched.ack_delay.as_nanos()).unwrap_or(u64::MAX);
        for qp in self.qps.values_mut() {
            if let Some(due) = qp.timers.get(Timer::HeldAck) {
                let since = Instant::from_nanos(due.as_nanos().saturating_sub(old));
                qp.timers.set(Timer::HeldAck, since + delay);
            }
        }
        self.sched.ack_delay = delay;
    }

    /// With an ACK delay, whether a held ACK leaves ahead of its QP's next
    /// request (`true`) or right after it (`false`, the default: the
    /// reply's latency does not include the ACK). Hardware ACKs at once,
    /// so its peers see the ACK of their request before the next request
    /// that answers it, and some applications count on that order:
    /// perftest's latency tests with events take the first completion
    /// event after a send for that send's. The drop-in libibverbs turns it
    /// on.
    pub fn set_ack_before_requests(&mut self, on: bool) {
        self.touch();
        self.sched.ack_before_requests = on;
    }

    /// Lets every held ACK leave in the next round of `poll_transmit`
    /// without waiting for its delay: for a driver about to destroy a QP,
    /// or to stop driving the endpoint for a while.
    pub fn release_acks(&mut self) {
        self.touch();
        self.sched.release = true;
    }

    /// Whether some QP holds a lone ACK back for company (see
    /// [`Endpoint::set_ack_delay`]): a driver that may stop calling must
    /// then make sure that `poll_timeout` is honoured, or call
    /// [`Endpoint::release_acks`]. Walks every QP.
    pub fn holds_acks(&self) -> bool {
        self.qps.values().any(|q| q.timers.is_armed(Timer::HeldAck))
    }

    /// Writes the next packet to send into `buf` (at least [`MAX_PACKET`](super::MAX_PACKET)
    /// bytes). QPs take turns of up to [`TX_BURST`] packets; within a QP,
    /// responses go before requests. Call it until it returns `None`: that
    /// ends a round, and held ACKs leave at the end of a round that sent
    /// anything.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.idle_until_later(now) {
            return None;
        }
        let first = if std::mem::take(&mut self.sched.fresh_done) {
            None
        } else {
            self.next_packet(now, buf, self.sched.release)
        };
        let t = first.or_else(|| {
            if self.sched.sending && !self.sched.ack_delay.is_zero() {
                self.next_packet(now, buf, true)
            } else {
                None
            }
        });
        self.sched.sending = t.is_some();
        self.sched.tx_idle = t.is_none();
        if t.is_none() {
            self.sched.release = false;
        }
        self.settle_cq_errors();
        t
    }

    /// [`Endpoint::poll_transmit`] without the held ACKs that a round
    /// releases: `None` here means that only those may be left, and the
    /// `poll_transmit` calls after it give them. A driver calls this first
    /// to send a lone reply before those ACKs are even built.
    pub fn poll_transmit_fresh(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.idle_until_later(now) {
            return None;
        }
        // The round is not over: `sending` stays as it is for the release.
        let t = self.next_packet(now, buf, self.sched.release);
        if t.is_some() {
            self.sched.sending = true;
        }
        // Every QP was just asked: the next `poll_transmit` need not ask again.
        self.sched.fresh_done = t.is_none();
        self.settle_cq_errors();
        t
    }

    /// Whether the last round found nothing and no timer is due yet: a
    /// poll then costs this comparison. Otherwise the QPs are about to be
    /// asked, and sending arms timers (a QP that fails stops its own), so
    /// the cached deadline is dropped (with the agenda, each asked QP's
    /// deadline is computed again).
    pub(super) fn idle_until_later(&mut self, now: Instant) -> bool {
        if self.sched.tx_idle && self.poll_timeout().is_none_or(|d| now < d) {
            return true;
        }
        self.sched.deadline.set(None);
        false
    }

    /// Whether the endpoint keeps its agenda (more than
    /// [`super::agenda::WALK_MAX_QPS`] QPs, or what [`Endpoint::set_agenda_threshold`]
    /// set) rather than walking every QP.
    #[inline]
    pub(super) fn agenda_on(&self) -> bool {
        self.qps.len() > self.sched.walk_max_qps
    }

    /// Walks every QP while the device has at most `qps` QPs, and keeps
    /// the agenda past that (the engine's own threshold unless set): the
    /// same packets leave in the same order either way, only the cost
    /// differs. For tests that check that (0: always the agenda;
    /// `usize::MAX`: never) and for measuring the cost. Safe at any time:
    /// the agenda starts over.
    #[doc(hidden)]
    pub fn set_agenda_threshold(&mut self, qps: usize) {
        self.sched.walk_max_qps = qps;
        self.touch();
    }

    /// Moves the round robin on after QP `qpn` was asked for a packet: one
    /// that sent keeps its turn for a burst of [`TX_BURST`] packets, one
    /// that had nothing passes the turn on at once.
    #[inline]
    fn turn_taken(&mut self, qpn: u32, sent: bool) {
        if sent {
            self.sched.burst += 1;
            if self.sched.burst < TX_BURST {
                self.sched.rr = qpn;
                return;
            }
        }
        (self.sched.rr, self.sched.burst) = (qpn.wrapping_add(1), 0);
    }

    /// Records that something happened which may give a QP packets to send
    /// or change a timer: the next `poll_transmit` looks at every QP again,
    /// and `poll_timeout` recomputes. Every `&mut self` entry point that
    /// can do either calls it; posting a receive and polling a CQ cannot.
    /// It marks every QP in the agenda, even without one in use: that is
    /// how the agenda starts over when QP creation puts it in use.
    pub(super) fn touch(&mut self) {
        self.touch_some();
        self.sched.agenda.get_mut().mark_all();
    }

    /// [`Endpoint::touch`] for an entry point that changed QP `qpn` only.
    pub(super) fn touch_qp(&mut self, qpn: u32) {
        let agenda_on = self.agenda_on();
        self.sched.touched_qp(qpn, agenda_on);
    }

    /// [`Endpoint::touch`] for an entry point that marks the QPs it
    /// changes in the agenda itself (a received packet, a timer).
    pub(super) fn touch_some(&mut self) {
        self.sched.touched();
    }

    /// Asks for the state of the QP the next transmit is likely from
    /// (the first ready at the cursor): for a simulator that knows this
    /// device's port comes free soon. On a host
    /// of hundreds of QPs each turn goes to a QP gone cold since its last;
    /// the ask at a turn's start (`next_packet_agenda`) comes
    /// too early to last until then. A hint like [`Endpoint::prefetch_for`],
    /// `deep` as there (`Qp::prefetch`): shallow when the port frees the
    /// event after next, deep when it frees next.
    pub fn prefetch_transmit(&self, deep: bool) {
        if !self.agenda_on() {
            return; // few QPs: they stay in the cache
        }
        let Ok(agenda) = self.sched.agenda.try_borrow() else { return };
        if let Some(qp) = agenda.peek_ready(self.sched.rr).and_then(|qpn| self.qps.get(qpn)) {
            qp.prefetch(deep);
        }
    }

    fn next_packet(&mut self, now: Instant, buf: &mut [u8], flush: bool) -> Option<Transmit> {
        // The ACKs that QPs moved to ERR owe go before anything else.
        while let Some(&qpn) = self.sched.last_words.last() {
            if self.qps.contains_key(qpn) {
                if let Some(t) = self.transmit_from(qpn, now, buf, true) {
                    return Some(t);
                }
            }
            self.sched.last_words.pop();
        }
        // MADs go before every QP, as CNPs go before their QP's data: they
        // are few and small, and connection set-up and the subnet manager
        // must not wait behind a burst of bulk data (their timeouts are
        // what a slow MAD costs). Without a GSI this is one `Option` test.
        if let Some(g) = self.gsi.made_mut() {
            if let Some((len, dest)) = g.poll_transmit(now, &self.port.framer, &self.port.paths, buf, &mut self.stats) {
                let src_port = g.src_port();
                return Some(Transmit { len, dest, src_port, released_ack: false, payload: None });
            }
        }
        if self.agenda_on() {
            return self.next_packet_agenda(now, buf, flush);
        }
        // Every QP in turn from the cursor: a device with few QPs (see
        // `agenda::WALK_MAX_QPS`) has no agenda to say which may send.
        for _ in 0..self.qps.len() {
            let qpn = self.qps.first_from_wrapping(self.sched.rr)?;
            match self.transmit_from(qpn, now, buf, flush) {
                Some(t) => {
                    self.turn_taken(qpn, true);
                    return Some(t);
                }
                None => self.turn_taken(qpn, false),
            }
        }
        None
    }

    /// [`Endpoint::next_packet`] with the agenda: only the QPs that may
    /// have something are asked, those touched since they last had
    /// nothing and those whose deadline has passed. The others would
    /// answer `None`, so the turns come out as a walk over all. A round
    /// that releases held ACKs (`flush`) asks every QP: any may hold one.
    /// (Not inlined: the walk above stays as lean as before the agenda.)
    #[inline(never)]
    fn next_packet_agenda(&mut self, now: Instant, buf: &mut [u8], flush: bool) -> Option<Transmit> {
        let agenda = self.sched.agenda.get_mut();
        if !flush {
            agenda.refresh(&self.qps);
            agenda.wake_due(now);
        }
        let (mut left, start) = (self.qps.len(), self.sched.rr);
        loop {
            let qpn = if flush {
                if left == 0 {
                    return None;
                }
                left -= 1;
                self.qps.first_from_wrapping(self.sched.rr)?
            } else {
                let Some(qpn) = self.sched.agenda.get_mut().next_ready(self.sched.rr, &self.qps) else {
                    // Nothing: the walk would have asked every QP, from the
                    // first at or after the cursor the round began with
                    // round to the one before it (the last below that
                    // cursor, or the last of all), and left the cursor past
                    // that one, so that the next round begins there again.
                    if let Some(before) = self.qps.last_before_wrapping(start) {
                        (self.sched.rr, self.sched.burst) = (before.wrapping_add(1), 0);
                    }
                    return None;
                };
                // The walk would have asked the QPs skipped on the way, and
                // each answer `None` ends the turn in progress: so does
                // skipping them. (A QP in its turn stays ready until it
                // answers `None`, so this is for one destroyed in its turn.)
                if self.sched.burst > 0
                    && qpn != self.sched.rr
                    && self.qps.first_from_wrapping(self.sched.rr).is_some_and(|k| k != qpn)
                {
                    self.sched.burst = 0;
                }
                qpn
            };
            if self.sched.burst == 0 && !flush {
                // A new turn begins: the QP after this one in the ready
                // set is likely the next turn's, and in a device of many
                // QPs its state has gone cold; it is asked for now.
                let agenda = self.sched.agenda.get_mut();
                if let Some(next) = agenda.ready_after(qpn) {
                    if let Some(q) = self.qps.get(next) {
                        q.prefetch(false);
                    }
                }
            }
            let t = self.transmit_from(qpn, now, buf, flush);
            // Its deadline may have changed; one that sent may have more,
            // one of the ready that had nothing leaves them.
            let agenda = self.sched.agenda.get_mut();
            agenda.mark_stale(qpn);
            match t {
                Some(t) => {
                    if flush {
                        agenda.sent(qpn);
                    }
                    self.turn_taken(qpn, true);
                    return Some(t);
                }
                None => {
                    if !flush {
                        agenda.idle(qpn);
                    }
                    self.turn_taken(qpn, false);
                }
            }
        }
    }

    /// The next packet of one QP: a response first, else a request.
    /// Inlined into both of its callers: the walk of a device with few
    /// QPs is the per-packet path that must stay as fast as before the
    /// agenda (a call here cost a one-QP device about 50 instructions a
    /// packet, `scripts/callgrind.sh`), and the agenda's is the fabric's.
    #[inline(always)]
    fn transmit_from(&mut self, qpn: u32, now: Instant, buf: &mut [u8], flush: bool) -> Option<Transmit> {
        let qp = self.qps.get_mut(qpn).expect("key from the map");
        // Congestion control: owed CNPs first, then the pacer's gate on
        // data. Without CE marks and with it off, this `Option` is all it costs.
        let mut paced = None;
        if let Some(cc) = qp.cc.as_mut() {
            if cc.cnps_due > 0 {
                cc.cnps_due -= 1;
                if let Some(t) = cnp_transmit(&qp.params, qp.src_port, &self.port.framer, self.cc.np.cnp_dscp, buf) {
                    self.stats.packets_sent += 1;
                    self.stats.cnps_sent += 1;
                    qp.stats.cnps_sent += 1;
                    return Some(t);
                }
            }
            if cc.rate.is_some() {
                paced = Some((cc.data_may_leave(now, &mut qp.timers), qp.resp.read_first()));
            }
        }
        // A READ response waiting for the pacer holds the responses behind it (they are in order).
        let held = paced.is_some_and(|(may, read_first)| read_first && !may);
        // Asked for, a held ACK leaves ahead of a request about to go (not
        // one the window, an RNR wait or the pacer holds).
        let ack_first = flush
            || (self.sched.ack_before_requests
                && qp.timers.is_armed(Timer::HeldAck)
                && paced.is_none_or(|(may, _)| may)
                && qp.request_ready(now));
        let response = if held {
            None
        } else {
            qp.responder_transmit(now, (self.sched.ack_delay, ack_first), &self.mrs, &self.port.framer, buf)
        };
        if let Some((len, dest, payload)) = response {
            if let (Some((_, true)), Some(cc)) = (paced, qp.cc.as_mut()) {
                let bytes = len + payload.as_ref().map_or(0, |p| p.len);
                cc.on_data_sent(now, bytes, None, &mut qp.stats, &mut self.stats, &mut qp.timers);
            }
            self.stats.packets_sent += 1;
            if qp.fail_after_fatal_response(&mut self.cqs) {
                // The NAK that ends a READ whose region went is out.
                self.events.push_back(AsyncEvent::QpFatal(qpn));
            }
            // Past the first pass of a round only held lone ACKs are left
            // (anything else left in that pass); a release sends anything.
            let released_ack = flush && !self.sched.release;
            return Some(Transmit { len, dest, src_port: qp.src_port, released_ack, payload });
        }
        if paced.is_some_and(|(may, _)| !may) {
            return None;
        }
        // A window (HPCC's): no new request packet while a window's worth
        // is unacknowledged. Counted to the cursor, so that a go-back-N
        // pass, which moves the cursor back, is never held by it; the ACK
        // that opens the window touches the QP again.
        let window = paced.and(qp.cc.as_ref()).and_then(|cc| cc.window_bytes());
        qp.req.ack_each = window.is_some();
        if let Some(w) = window {
            if let Some((_, _, _, psn)) = qp.req.sq.at_cursor() {
                let unacked = u64::from(psn.distance_from(qp.req.sq.comp_psn()));
                if unacked * u64::from(qp.params.mtu.bytes()) >= w.max(1) {
                    return None;
                }
            }
        }
        loop {
            // A delay-based controller times the packet: its PSN, read
            // before the requester moves the cursor past it.
            let timed_psn = match (paced, qp.cc.as_ref()) {
                (Some(_), Some(cc)) if cc.times_packets() => qp.req.sq.at_cursor().map(|c| c.3),
                _ => None,
            };
            return match qp.requester_transmit(now, &self.mrs, &self.port.framer, buf) {
                ReqOutcome::Idle => None,
                ReqOutcome::Local(op) => {
                    match crate::window::verbs::execute_local(&mut self.mrs, qp.init.pd, qpn, &op) {
                        Ok(()) => {
                            qp.local_done(&mut self.cqs);
                            continue; // the requests behind it may go now
                        }
                        // Requests before it still wait for their ACKs:
                        // they complete first (as they turn out), then it
                        // fails (`Requester::transmit` sees it at the front).
                        Err(status) if qp.req.sq.before_cursor() > 0 => {
                            qp.req.sq.fail_local_at_cursor_later(status);
                            None
                        }
                        Err(status) => {
                            qp.fail_at_cursor(status, &mut self.cqs);
                            self.events.push_back(AsyncEvent::QpFatal(qpn));
                            None
                        }
                    }
                }
                ReqOutcome::LocalError(status) => {
                    // What was before the failing request completes first.
                    qp.fail_at_cursor(status, &mut self.cqs);
                    self.events.push_back(AsyncEvent::QpFatal(qpn));
                    None
                }
                ReqOutcome::Sent { len, dest, payload } => {
                    // UC and UD requests complete once sent.
                    qp.complete_sent(&mut self.cqs);
                    if let (Some(_), Some(cc)) = (paced, qp.cc.as_mut()) {
                        let bytes = len + payload.as_ref().map_or(0, |p| p.len);
                        let timed = timed_psn.map(|psn| (psn, qp.req.asked_for_ack()));
                        cc.on_data_sent(now, bytes, timed, &mut qp.stats, &mut self.stats, &mut qp.timers);
                    }
                    self.stats.packets_sent += 1;
                    Some(Transmit { len, dest, src_port: qp.src_port, released_ack: false, payload })
                }
            };
        }
    }
}

/// A CNP for the data sender of a QP (`params`, `src_port`): BTH opcode 0x81 with BECN to the
/// QP's remote QPN and peer address, from its UDP source port, with the
/// CNP DSCP and ECN bits 00 (not ECN-capable: a CNP must not be marked
/// away). `None` if the QP has no peer yet.
fn cnp_transmit(
    params: &QpParams,
    src_port: u16,
    framer: &crate::framing::Framer,
    dscp: u8,
    buf: &mut [u8],
) -> Option<Transmit> {
    let av = params.av?;
    let av = AddressVector { traffic_class: (dscp & 0x3f) << 2, ..av };
    let tr = crate::cc::cnp_repr(params.dest_qp, params.pkey).to_transport();
    let len = framer.frame(buf, &av, src_port, &tr, 0, |_| Ok::<(), ()>(())).ok()?;
    Some(Transmit { len, dest: av.dest, src_port, released_ack: false, payload: None })
}
