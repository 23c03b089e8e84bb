//! The congestion-control state the engine keeps per RC/UC QP: its
//! notification point (made on the first CE-marked data packet), the CNPs
//! it owes, and, with a controller configured, the controller, the pacer
//! that holds the QP to the controller's rate and, for a controller that
//! reads delay, the RTT sampler. A QP that has seen no CE mark and runs
//! without a controller has none of it (`Qp::cc` is `None`): the send
//! path then checks one `Option`.
//!
//! Every method that changes a deadline re-arms the QP's timer table
//! ([`QpCc::arm`]), so the table alone says when the QP has work; the one
//! exception is the controller's rate-only timers while the pacer is
//! idle, which run at the QP's next event instead
//! ([`Controller::next_timer_on_time`]).

use std::sync::Arc;

use rdma_wire::Psn;

use super::controller::{Controller, ControllerFactory, Event};
use super::dcqcn::Dcqcn;
use super::{DcqcnParams, NotificationPoint, Pacer, RttSampler};
use crate::stats::{QpStats, Stats};
use crate::timers::{Timer, Timers};
use crate::Instant;

/// A QP's controller. DCQCN (the fabric's default) is kept in the QP's own
/// memory: its state is read at every paced packet and rate timer, and
/// behind the box its factory made it was one more line to wait for on a
/// QP gone cold among thousands (docs/performance.md). Any other
/// controller stays in its box.
#[derive(Debug)]
pub(crate) enum QpController {
    Dcqcn(Dcqcn),
    Boxed(Box<dyn Controller>),
}

impl QpController {
    /// Takes a controller out of its factory's box if it is DCQCN's (a
    /// copy: its parameters stay shared, behind their `Arc`).
    fn new(built: Box<dyn Controller>) -> QpController {
        match built.as_any().downcast_ref::<Dcqcn>() {
            Some(d) => QpController::Dcqcn(d.clone()),
            None => QpController::Boxed(built),
        }
    }
}

impl core::ops::Deref for QpController {
    type Target = dyn Controller;

    fn deref(&self) -> &(dyn Controller + 'static) {
        match self {
            QpController::Dcqcn(d) => d,
            QpController::Boxed(b) => &**b,
        }
    }
}

impl core::ops::DerefMut for QpController {
    fn deref_mut(&mut self) -> &mut (dyn Controller + 'static) {
        match self {
            QpController::Dcqcn(d) => d,
            QpController::Boxed(b) => &mut **b,
        }
    }
}

/// The controller and the pacer that holds the QP to its rate.
#[derive(Debug)]
pub(crate) struct RateControl {
    pub ctl: QpController,
    pub pacer: Pacer,
    /// Send times of timed packets, when the controller reads RTTs.
    pub rtt: Option<Box<RttSampler>>,
}

impl RateControl {
    /// When the controller's timers must run: on time if the pacer is
    /// still busy then (a rate change re-paces the packets it holds),
    /// else only those the controller says must
    /// ([`Controller::next_timer_on_time`]); the rest wait for the QP's
    /// next event, which runs them first. An idle QP below line rate so
    /// costs no wake-ups while it recovers.
    fn next_timer(&self) -> Option<Instant> {
        match self.ctl.next_timer() {
            Some(t) if !self.pacer.idle_at(t) => Some(t),
            Some(_) => self.ctl.next_timer_on_time(),
            None => None,
        }
    }

    pub fn new(factory: &Arc<dyn ControllerFactory>) -> RateControl {
        let ctl = QpController::new(Arc::clone(factory).build_shared());
        let pacer = Pacer::with_burst(ctl.rate_bps(), factory.pacer_burst());
        let rtt = ctl.wants_rtt().then(Box::default);
        RateControl { ctl, pacer, rtt }
    }
}

#[derive(Debug, Default)]
pub(crate) struct QpCc {
    pub np: Option<NotificationPoint>,
    /// CNPs decided and not yet handed to `poll_transmit`.
    pub cnps_due: u32,
    pub rate: Option<RateControl>,
    /// A data packet was held by the pacer until then: a wake-up for the driver.
    pub paced_until: Option<Instant>,
}

impl QpCc {
    /// Congestion control for a QP under `factory` (`None`: none).
    pub fn attach(slot: &mut Option<QpCc>, factory: Option<&Arc<dyn ControllerFactory>>, timers: &mut Timers) {
        let rate = factory.map(RateControl::new);
        match slot.as_mut() {
            Some(c) => (c.rate, c.paced_until) = (rate, None),
            None if rate.is_some() => *slot = Some(QpCc { rate, ..QpCc::default() }),
            None => {}
        }
        if let Some(cc) = slot.as_ref() {
            cc.arm(timers);
        }
    }

    /// Puts this state's deadlines into the QP's timer table.
    pub fn arm(&self, timers: &mut Timers) {
        timers.set_opt(Timer::Cnp, self.np.as_ref().and_then(NotificationPoint::next_timer));
        timers.set_opt(Timer::RateControl, self.rate.as_ref().and_then(RateControl::next_timer));
        timers.set_opt(Timer::Paced, self.paced_until);
    }

    /// A CE-marked data packet arrived: the NP decides whether a CNP is due.
    pub fn on_ce_marked(&mut self, now: Instant, params: &DcqcnParams, timers: &mut Timers) {
        let np = self.np.get_or_insert_with(|| NotificationPoint::new(params));
        if np.on_ce_marked(now) {
            self.cnps_due = self.cnps_due.saturating_add(1);
        }
        if let Some(rc) = self.rate.as_mut() {
            rc.ctl.on_event(now, Event::CeMarked);
        }
        self.arm(timers);
    }

    /// A CNP for this QP arrived (counted by the caller).
    pub fn on_cnp(&mut self, now: Instant, qp: &mut QpStats, dev: &mut Stats, timers: &mut Timers) {
        if let Some(rc) = self.rate.as_mut() {
            rc.ctl.on_event(now, Event::Cnp);
            Self::follow(rc, now, qp, dev);
            self.arm(timers);
        }
    }

    /// A response naming `psn` acknowledged `packets` more PSNs.
    pub fn on_ack(&mut self, now: Instant, psn: Psn, packets: u32, qp: &mut QpStats, dev: &mut Stats, t: &mut Timers) {
        if let Some(rc) = self.rate.as_mut() {
            let rtt = rc.rtt.as_mut().and_then(|s| s.on_response(psn, now));
            rc.ctl.on_event(now, Event::Ack { packets, rtt });
            Self::follow(rc, now, qp, dev);
            self.arm(t);
        }
    }

    /// In-band telemetry a response naming `acked` echoed, while the QP's
    /// next PSN is `next` (HPCC's input).
    pub fn on_telemetry(
        &mut self,
        now: Instant,
        hops: &[super::HopTelemetry],
        (acked, next): (Psn, Psn),
        qp: &mut QpStats,
        dev: &mut Stats,
        t: &mut Timers,
    ) {
        if let Some(rc) = self.rate.as_mut() {
            rc.ctl.on_event(now, Event::Telemetry { hops, acked, next });
            Self::follow(rc, now, qp, dev);
            self.arm(t);
        }
    }

    /// Whether a data packet may leave now; if not, remembers when it may.
    pub fn data_may_leave(&mut self, now: Instant, timers: &mut Timers) -> bool {
        let Some(rc) = self.rate.as_ref() else { return true };
        let at = rc.pacer.next_send_at(now);
        if at <= now {
            return true;
        }
        self.paced_until = Some(at);
        timers.set(Timer::Paced, at);
        false
    }

    /// Whether the requester's packets should be timed for RTT samples.
    pub fn times_packets(&self) -> bool {
        self.rate.as_ref().is_some_and(|rc| rc.rtt.is_some())
    }

    /// A data packet of `bytes` (IP header through ICRC) left at `now`;
    /// `timed`: a request's PSN, and whether it asks for an ACK.
    pub fn on_data_sent(
        &mut self,
        now: Instant,
        bytes: usize,
        timed: Option<(Psn, bool)>,
        qp: &mut QpStats,
        dev: &mut Stats,
        timers: &mut Timers,
    ) {
        if let Some(rc) = self.rate.as_mut() {
            rc.pacer.on_sent(now, bytes);
            if let (Some(s), Some((psn, ack_req))) = (rc.rtt.as_mut(), timed) {
                s.on_sent(psn, ack_req, now);
            }
            rc.ctl.on_event(now, Event::Sent { bytes: bytes as u64 });
            Self::follow(rc, now, qp, dev);
            timers.set_opt(Timer::RateControl, rc.next_timer());
        }
    }

    /// Fires what is due at `now`: a deferred CNP, the controller's
    /// timers, the end of a pacing wait (the caller then looks at the QP
    /// again).
    pub fn on_timer(&mut self, now: Instant, qp: &mut QpStats, dev: &mut Stats, timers: &mut Timers) {
        if let Some(np) = self.np.as_mut().filter(|np| np.next_timer().is_some_and(|t| t <= now)) {
            if np.on_timer(now) {
                self.cnps_due = self.cnps_due.saturating_add(1);
            }
        }
        if let Some(rc) = self.rate.as_mut().filter(|rc| rc.ctl.next_timer().is_some_and(|t| t <= now)) {
            rc.ctl.on_timer(now);
            Self::follow(rc, now, qp, dev);
        }
        if self.paced_until.is_some_and(|t| t <= now) {
            self.paced_until = None;
        }
        self.arm(timers);
    }

    /// The controller's cap on unacknowledged bytes, if it has one.
    pub fn window_bytes(&self) -> Option<u64> {
        self.rate.as_ref().and_then(|rc| rc.ctl.window_bytes())
    }

    /// The controller's current rate, if one runs.
    pub fn rate_bps(&self) -> Option<u64> {
        self.rate.as_ref().map(|rc| rc.ctl.rate_bps())
    }

    /// The pacer takes the controller's rate; new cuts are counted.
    fn follow(rc: &mut RateControl, now: Instant, qp: &mut QpStats, dev: &mut Stats) {
        let rate = rc.ctl.rate_bps();
        if rc.pacer.rate() != rate {
            rc.pacer.set_rate(now, rate);
        }
        let cuts = rc.ctl.rate_cuts();
        dev.rate_cuts += cuts.saturating_sub(qp.rate_cuts);
        qp.rate_cuts = cuts;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::ReactionPoint;
    use core::time::Duration;

    const LINE: u64 = 100_000_000_000;
    const PACKET: usize = 1_000;

    /// DCQCN's controller sits in the QP's own state, still reading the
    /// device's one copy of its parameters; another algorithm's stays in
    /// the box its factory made, and both answer through the seam.
    #[test]
    fn dcqcn_is_kept_in_the_qp_and_others_in_their_box() {
        let params = Arc::new(DcqcnParams::nvidia(LINE));
        let shared: Arc<dyn ControllerFactory> = params.clone();
        let rc = RateControl::new(&shared);
        let QpController::Dcqcn(d) = &rc.ctl else { panic!("DCQCN boxed: {:?}", rc.ctl) };
        assert!(std::ptr::eq(d.rp.params(), &*params), "the parameters read are the shared ones");
        assert_eq!(Arc::strong_count(&params), 3, "the factory's box let go of its Arc");
        assert_eq!(rc.ctl.rate_bps(), LINE);
        let timely: Arc<dyn ControllerFactory> =
            Arc::new(crate::cc::TimelyParams::new(LINE, Duration::from_micros(20)));
        let other = RateControl::new(&timely);
        assert!(matches!(other.ctl, QpController::Boxed(_)), "{:?}", other.ctl);
        assert!(other.ctl.as_any().is::<crate::cc::Timely>());
    }

    fn factory(params: DcqcnParams) -> Arc<dyn ControllerFactory> {
        Arc::new(params)
    }

    fn us(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000)
    }

    /// A QP under the paper's DCQCN that sent one packet at 0 and took a
    /// CNP at 1 µs (rate halved); and the same controller on its own, to
    /// be stepped timer by timer.
    fn cut() -> (QpCc, Timers, ReactionPoint) {
        let params = DcqcnParams::paper(LINE);
        let mut cc = QpCc { rate: Some(RateControl::new(&factory(params))), ..QpCc::default() };
        let (mut timers, mut q, mut dev) = (Timers::default(), QpStats::default(), Stats::default());
        cc.on_data_sent(Instant::ZERO, PACKET, None, &mut q, &mut dev, &mut timers);
        cc.on_cnp(us(1), &mut q, &mut dev, &mut timers);
        let mut rp = ReactionPoint::new(params);
        rp.on_bytes_sent(PACKET as u64, Instant::ZERO);
        rp.on_cnp(us(1));
        assert_eq!(cc.rate_bps(), Some(rp.rate()));
        assert!(rp.rate() < LINE);
        (cc, timers, rp)
    }

    #[test]
    fn an_idle_qp_recovers_without_wake_ups_and_sends_at_the_rate_it_would_have_had() {
        let (mut cc, mut timers, mut rp) = cut();
        // The increase timer is due at 56 µs, long after the link went idle.
        assert_eq!(rp.next_timer(), Some(us(56)));
        assert_eq!(timers.get(Timer::RateControl), None, "no wake-up for an idle QP");
        // Run on time, the increases would go on every 55 µs.
        let late = us(1_000);
        while let Some(t) = rp.next_timer().filter(|&t| t <= late) {
            rp.on_timer(t);
        }
        assert!(rp.stages().0 > 10, "{:?}", rp.stages());
        rp.on_bytes_sent(PACKET as u64, late);
        // The QP sends again at 1 ms: the increases run first, in order.
        let (mut q, mut dev) = (QpStats::default(), Stats::default());
        assert!(cc.data_may_leave(late, &mut timers));
        cc.on_data_sent(late, PACKET, None, &mut q, &mut dev, &mut timers);
        assert_eq!(cc.rate_bps(), Some(rp.rate()));
        let pacer = &cc.rate.as_ref().unwrap().pacer;
        let gap = (PACKET as u64 * 8 * 1_000_000_000).div_ceil(rp.rate());
        assert_eq!(pacer.next_send_at(late), late + Duration::from_nanos(gap), "paced at the caught-up rate");
    }

    #[test]
    fn a_qp_the_pacer_still_holds_gets_its_increase_on_time() {
        let (mut cc, mut timers, rp) = cut();
        let (mut q, mut dev) = (QpStats::default(), Stats::default());
        // 1 MB handed to the pacer at 2 µs at the cut rate: busy past 56 µs.
        for _ in 0..1_000 {
            cc.on_data_sent(us(2), PACKET, None, &mut q, &mut dev, &mut timers);
        }
        assert!(!cc.rate.as_ref().unwrap().pacer.idle_at(us(56)));
        assert_eq!(timers.get(Timer::RateControl), rp.next_timer(), "the increase re-paces what waits");
    }

    #[test]
    fn with_burst_credit_or_a_cut_due_the_timer_runs_on_time_though_the_pacer_is_idle() {
        let (mut q, mut dev) = (QpStats::default(), Stats::default());
        // Credit accrues at the rate: a late increase would give another.
        let mut burst = DcqcnParams::paper(LINE);
        burst.pacer_burst = Duration::from_micros(100);
        let mut cc = QpCc { rate: Some(RateControl::new(&factory(burst))), ..QpCc::default() };
        let mut timers = Timers::default();
        cc.on_data_sent(Instant::ZERO, PACKET, None, &mut q, &mut dev, &mut timers);
        cc.on_cnp(us(1), &mut q, &mut dev, &mut timers);
        assert_eq!(timers.get(Timer::RateControl), Some(us(56)));
        // NVIDIA: a second CNP asks for a decrease check, which counts a cut.
        let nvidia = DcqcnParams::nvidia(LINE);
        let mut cc = QpCc { rate: Some(RateControl::new(&factory(nvidia))), ..QpCc::default() };
        let mut timers = Timers::default();
        cc.on_data_sent(Instant::ZERO, PACKET, None, &mut q, &mut dev, &mut timers);
        cc.on_cnp(us(1), &mut q, &mut dev, &mut timers);
        cc.on_cnp(us(2), &mut q, &mut dev, &mut timers);
        let rc = cc.rate.as_ref().unwrap();
        let check = rc.ctl.next_timer_on_time().expect("a decrease check is due");
        assert!(rc.pacer.idle_at(check));
        assert_eq!(timers.get(Timer::RateControl), Some(check));
        let cuts = rc.ctl.rate_cuts();
        cc.on_timer(check, &mut q, &mut dev, &mut timers);
        assert_eq!(cc.rate.as_ref().unwrap().ctl.rate_cuts(), cuts + 1, "the cut counted on time");
    }
}
