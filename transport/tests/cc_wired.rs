//! Congestion control wired into the engine, on the simulated link: the
//! notification point answers CE-marked data with CNPs (at its spacing,
//! byte-exact), and with DCQCN on the reaction point cuts the sender's
//! rate on CNPs, the pacer spaces its data packets at that rate, and the
//! rate recovers once CNPs stop. With DCQCN off CNPs are only counted.

mod common;

use common::*;
use core::time::Duration;
use rdma_transport::cc::{self, cnp_transport_bytes, Controller, ControllerFactory, DcqcnParams};
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Side, Sim, Verdict};
use rdma_transport::*;
use rdma_wire::{Opcode, RoceV2Packet};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

const LINE: u64 = 100_000_000_000;
/// A's QP posts this many 64 KiB WRITEs (1 KiB MTU: 64 packets each).
const WRITES: u64 = 24;

/// A departure seen on the link: (virtual ns, sender index, packet).
type Departure = (u64, usize, Vec<u8>);

struct Run {
    sim: Sim,
    a: Side,
    b: Side,
    departures: Vec<Departure>,
    /// A's QP rate after every step in which it changed: (ns, b/s).
    rates: Vec<(u64, u64)>,
}

/// A streams WRITEs to B over a 100 Gb/s link with 2 µs latency; the
/// tap marks CE the data packets A sends for which `mark(ns)` holds.
fn run(seed: u64, cc: Option<DcqcnParams>, mark: fn(u64) -> bool, limit: Duration) -> Run {
    run_on(seed, cc, mark, limit, LINE)
}

/// [`run`] over links of `bandwidth_bps` (0: infinitely fast).
fn run_on(seed: u64, cc: Option<DcqcnParams>, mark: fn(u64) -> bool, limit: Duration, bandwidth_bps: u64) -> Run {
    let link = LinkConfig { latency: Duration::from_micros(2), bandwidth_bps, ..LinkConfig::default() };
    let mut sim = Sim::new(seed, link);
    let (a, b) = connect(&mut sim, PairConfig { mem_len: 2 << 20, ..PairConfig::default() });
    // Both ends: B's notification point takes its interval from the same parameters.
    sim.ep(a.ep).set_congestion_control(cc);
    sim.ep(b.ep).set_congestion_control(cc);
    let departures = Rc::new(RefCell::new(Vec::new()));
    let log = departures.clone();
    let a_ep = a.ep;
    sim.set_tap(move |t, i, p| {
        log.borrow_mut().push((t.as_nanos(), i, p.to_vec()));
        if i == a_ep && mark(t.as_nanos()) {
            Verdict::MarkCe
        } else {
            Verdict::Deliver
        }
    });
    for k in 0..WRITES {
        let wr =
            SendWr::new(k, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, sge(&a, (k % 16) * 65536, 65536));
        sim.ep(a.ep).post_send(a.qpn, wr).unwrap();
    }
    let mut rates = Vec::new();
    let end = sim.now + limit;
    while sim.now < end && sim.step() {
        if let Some(r) = sim.ep(a.ep).qp_rate(a.qpn) {
            if rates.last().is_none_or(|&(_, last)| last != r) {
                rates.push((sim.now.as_nanos(), r));
            }
        }
    }
    let departures = departures.borrow().clone();
    Run { sim, a, b, departures, rates }
}

fn is_cnp(p: &[u8]) -> bool {
    opcode_of(p) == Opcode::CNP
}

/// Data packets A sent: (ns, bytes).
fn data_of(r: &Run) -> Vec<(u64, usize)> {
    r.departures.iter().filter(|d| d.1 == r.a.ep).map(|d| (d.0, d.2.len())).collect()
}

fn cnps_of(r: &Run) -> Vec<(u64, Vec<u8>)> {
    r.departures.iter().filter(|d| d.1 == r.b.ep && is_cnp(&d.2)).map(|d| (d.0, d.2.clone())).collect()
}

fn never(_: u64) -> bool {
    false
}

fn always(_: u64) -> bool {
    true
}

/// Marks what A sends in its first 20 µs.
fn first_20us(t: u64) -> bool {
    t < 20_000
}

/// (a) Every data packet arrives CE-marked: B's notification point
/// (default: NVIDIA's, one CNP at once then none for 4 µs) sends the first
/// CNP as soon as the first marked packet arrives, then one per 4 µs
/// while marks keep coming; each CNP is byte-exact and counted.
#[test]
fn ce_marked_data_gets_cnps_at_the_np_spacing() {
    let mut r = run(1, None, always, Duration::from_millis(2));
    let cnps = cnps_of(&r);
    let data = data_of(&r);
    assert!(cnps.len() >= 10, "{} CNPs", cnps.len());
    // The first data packet arrives after its serialisation and the latency.
    let first_arrival = data[0].0 + (data[0].1 as u64 * 8 * 1_000_000_000).div_ceil(LINE) + 2_000;
    assert_eq!(cnps[0].0, first_arrival, "the first mark is answered at once");
    let last_data = data.last().unwrap().0;
    for w in cnps.windows(2) {
        let gap = w[1].0 - w[0].0;
        assert!(gap >= 4_000, "CNPs {gap} ns apart, under the 4 µs interval");
        // While data streams in (one packet per ~90 ns), the next mark after the interval gets one.
        if w[1].0 < last_data {
            assert!(gap < 4_000 + 1_000, "CNPs {gap} ns apart while marks keep coming");
        }
    }
    let pkey = 0xffff;
    let want = cnp_transport_bytes(r.a.qpn, pkey).unwrap();
    let b_port = r.sim.ep(r.b.ep).qp_src_port(r.b.qpn).unwrap();
    for (_, p) in &cnps {
        assert_eq!(p.len(), 20 + 8 + 28 + 4, "IPv4, UDP, BTH, 16 reserved bytes, ICRC");
        assert_eq!(p[1], 48 << 2, "DSCP 48 and not ECN-capable");
        assert_eq!(&p[16..20], &[127, 0, 0, 1], "to the data sender");
        assert_eq!(u16::from_be_bytes([p[20], p[21]]), b_port, "from the QP's UDP source port");
        assert_eq!(u16::from_be_bytes([p[22], p[23]]), 4791);
        assert_eq!(p[28], 0x81, "opcode CNP");
        assert_eq!(p[32] & 0x40, 0x40, "BECN");
        assert_eq!(&p[33..36], &r.a.qpn.to_be_bytes()[1..], "dest QP = the data sender's QP");
        assert_eq!(&p[28..56], &want[..]);
        assert!(RoceV2Packet::new_checked(&p[..]).unwrap().icrc_ok());
    }
    let n = cnps.len() as u64;
    let (b, bq) = (r.sim.ep(r.b.ep).stats(), r.sim.ep(r.b.ep).qp_stats(r.b.qpn).unwrap());
    assert_eq!((b.cnps_sent, bq.cnps_sent), (n, n));
    assert_eq!(bq.ecn_ce_received, data.len() as u64, "every data packet arrived marked");
    let (a, aq) = (r.sim.ep(r.a.ep).stats(), r.sim.ep(r.a.ep).qp_stats(r.a.qpn).unwrap());
    assert_eq!((a.cnps_received, aq.cnps_received), (n, n));
    assert_eq!((a.rate_cuts, aq.rate_cuts, a.drops.values().sum::<u64>()), (0, 0, 0), "off: only counted");
    assert_eq!(r.sim.ep(r.a.ep).qp_rate(r.a.qpn), None);
    assert_eq!(r.sim.ep(r.a.ep).completions_delivered(), WRITES, "the stream completes");
}

/// The rate A's QP had at `t` (the last change at or before it).
fn rate_at(rates: &[(u64, u64)], t: u64) -> u64 {
    rates.iter().take_while(|&&(at, _)| at <= t).last().map_or(LINE, |&(_, r)| r)
}

/// (b) With DCQCN on (paper preset at 100 Gb/s), the CNPs B sends for the
/// data marked in the first 20 µs cut A's rate; every data packet after
/// that leaves `bytes * 8 / rate` after the one before it (never sooner,
/// and no later while A has data queued); once CNPs stop, the timer and
/// byte-counter increases bring the rate back up toward line rate (those
/// due while A is idle run when it next sends).
#[test]
fn dcqcn_cuts_on_cnps_paces_data_and_recovers() {
    let mut r = run(7, Some(DcqcnParams::paper(LINE)), first_20us, Duration::from_millis(4));
    let a = r.sim.ep(r.a.ep).stats();
    let aq = r.sim.ep(r.a.ep).qp_stats(r.a.qpn).unwrap();
    let cnps = cnps_of(&r);
    assert!(!cnps.is_empty());
    assert_eq!(aq.cnps_received, cnps.len() as u64);
    assert!(aq.rate_cuts > 0 && a.rate_cuts == aq.rate_cuts, "{aq:?}");
    let first_cut = r.rates.iter().find(|&&(_, x)| x < LINE).expect("a cut").0;
    let min = r.rates.iter().map(|&(_, x)| x).min().unwrap();
    assert!(min <= LINE / 2, "the paper's first cut halves the rate (alpha = 1): {min}");
    let data = data_of(&r);
    let (mut checked, mut tight) = (0, 0);
    for w in data.windows(2) {
        let ((t1, len), (t2, _)) = (w[0], w[1]);
        let rate = rate_at(&r.rates, t1);
        // Only where the rate held from one departure to the next.
        if t1 < first_cut || r.rates.iter().any(|&(at, _)| at > t1 && at <= t2) {
            continue;
        }
        let want = (len as u128 * 8 * 1_000_000_000) as f64 / rate as f64;
        let gap = (t2 - t1) as f64;
        assert!(gap >= want - 1.0, "{gap} ns after {len} bytes at {rate} b/s: faster than the rate");
        checked += 1;
        if gap <= want + 1.0 {
            tight += 1;
        }
    }
    // A is backlogged for all but the tail of the stream: nearly every gap is the rate's.
    assert!(checked > 500 && tight * 100 >= checked * 95, "{tight} of {checked} gaps at the rate");
    // Recovery: after the last cut the rate only rises, and ends near line rate.
    let last_cut = r.rates.windows(2).filter(|w| w[1].1 < w[0].1).map(|w| w[1].0).next_back().unwrap_or(first_cut);
    let after: Vec<u64> = r.rates.iter().filter(|&&(t, _)| t >= last_cut).map(|&(_, x)| x).collect();
    assert!(after.windows(2).all(|w| w[1] > w[0]), "{after:?}");
    // Fast recovery halves the distance to the target (the rate before the
    // last cut) five times; then additive increase (40 Mb/s a step) goes on.
    assert_eq!(r.sim.ep(r.a.ep).completions_delivered(), WRITES);
    // A is idle once its WRITEs are done; one more, 4 ms in, leaves at the
    // rate the increases due since have reached.
    r.sim.now = Instant::ZERO + Duration::from_millis(4);
    let wr = SendWr::new(WRITES, SendOp::RdmaWrite { remote_addr: r.b.va, rkey: r.b.rkey }, sge(&r.a, 0, 1024));
    r.sim.ep(r.a.ep).post_send(r.a.qpn, wr).unwrap();
    let a = r.a.ep;
    assert!(r.sim.run_until(Duration::from_millis(1), |s| s.ep(a).completions_delivered() == WRITES + 1));
    let end = r.sim.ep(r.a.ep).qp_rate(r.a.qpn).unwrap();
    assert!(end > min * 19 / 10 && end < LINE, "rate {end} at a WRITE 4 ms in, from {min}");
}

/// (c) With DCQCN off, A sends exactly when it sends without any marks
/// (no pacing, the CNPs change nothing), and the CNPs are only counted.
#[test]
fn without_dcqcn_cnps_are_counted_and_departures_unchanged() {
    // Infinitely fast links, so that the CNPs take no link time from the ACKs.
    let mut plain = run_on(7, None, never, Duration::from_millis(1), 0);
    let mut marked = run_on(7, None, first_20us, Duration::from_millis(1), 0);
    assert!(cnps_of(&plain).is_empty() && !cnps_of(&marked).is_empty());
    assert_eq!(data_of(&plain), data_of(&marked), "the same departures, marks or not");
    let aq = marked.sim.ep(marked.a.ep).qp_stats(marked.a.qpn).unwrap();
    assert_eq!((aq.cnps_received, aq.rate_cuts), (cnps_of(&marked).len() as u64, 0));
    assert_eq!(plain.sim.ep(plain.a.ep).qp_stats(plain.a.qpn).unwrap().cnps_received, 0);
    assert_eq!(marked.sim.ep(marked.a.ep).qp_rate(marked.a.qpn), None);
    // The contrast: the same marks with DCQCN on do change the departures.
    let on = run_on(7, Some(DcqcnParams::paper(LINE)), first_20us, Duration::from_millis(1), 0);
    assert!(data_of(&on) != data_of(&plain));
}

/// (d) The same seed gives the same departures and the same trajectory,
/// bit for bit; the NVIDIA preset is exercised too.
#[test]
fn same_seed_same_trajectory() {
    for params in [DcqcnParams::paper(LINE), DcqcnParams::nvidia(LINE)] {
        let x = run(11, Some(params), first_20us, Duration::from_millis(1));
        let y = run(11, Some(params), first_20us, Duration::from_millis(1));
        assert!(x.rates.len() > 2, "{:?}", x.rates);
        assert_eq!(x.rates, y.rates);
        assert!(x.departures == y.departures);
    }
}

/// DCQCN of `params` with every timer on time, as the engine ran it before
/// it let an idle QP's increases wait for its next event: the oracle for
/// that shortcut.
#[derive(Debug)]
struct OnTime(DcqcnParams);

#[derive(Debug)]
struct OnTimeController(Box<dyn Controller>);

impl Controller for OnTimeController {
    fn on_event(&mut self, now: Instant, event: cc::Event<'_>) {
        self.0.on_event(now, event)
    }
    fn on_timer(&mut self, now: Instant) {
        self.0.on_timer(now)
    }
    fn next_timer(&self) -> Option<Instant> {
        self.0.next_timer()
    }
    // `next_timer_on_time` left to its default: every timer.
    fn rate_bps(&self) -> u64 {
        self.0.rate_bps()
    }
    fn rate_cuts(&self) -> u64 {
        self.0.rate_cuts()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl ControllerFactory for OnTime {
    fn build(&self) -> Box<dyn Controller> {
        Box::new(OnTimeController(self.0.build()))
    }
    fn name(&self) -> &'static str {
        "dcqcn, every timer on time"
    }
    fn pacer_burst(&self) -> Duration {
        self.0.pacer_burst
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A's QP under `factory`, B's notification point under `params`: bursts
/// of two 64 KiB WRITEs every 150 µs, A idle in between, A's data marked
/// CE in every third 40 µs window. Every departure, A's rate cuts, and
/// how many steps the simulator took.
fn bursts(factory: Arc<dyn ControllerFactory>, params: DcqcnParams) -> (Vec<Departure>, u64, usize) {
    let link = LinkConfig { latency: Duration::from_micros(2), bandwidth_bps: LINE, ..LinkConfig::default() };
    let mut sim = Sim::new(9, link);
    let (a, b) = connect(&mut sim, PairConfig { mem_len: 2 << 20, ..PairConfig::default() });
    sim.ep(a.ep).set_controller(Some(factory));
    sim.ep(b.ep).set_congestion_control(Some(params));
    let departures = Rc::new(RefCell::new(Vec::new()));
    let log = departures.clone();
    sim.set_tap(move |t, i, p| {
        log.borrow_mut().push((t.as_nanos(), i, p.to_vec()));
        if i == a.ep && (t.as_nanos() / 40_000) % 3 == 0 {
            Verdict::MarkCe
        } else {
            Verdict::Deliver
        }
    });
    let (mut steps, mut posted) = (0, 0u64);
    for burst in 0..12u64 {
        let at = Instant::ZERO + Duration::from_micros(150 * burst);
        while sim.next_event().is_some_and(|t| t < at) {
            sim.step();
            steps += 1;
        }
        sim.now = sim.now.max(at);
        for _ in 0..2 {
            let wr = SendWr::new(
                posted,
                SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey },
                sge(&a, (posted % 16) * 65536, 65536),
            );
            sim.ep(a.ep).post_send(a.qpn, wr).unwrap();
            posted += 1;
        }
    }
    while sim.step() {
        steps += 1;
    }
    assert_eq!(sim.ep(a.ep).completions_delivered(), posted);
    let cuts = sim.ep(a.ep).stats().rate_cuts;
    let departures = departures.borrow().clone();
    (departures, cuts, steps)
}

/// (e) An idle QP's increase timers wait for its next event, and nothing
/// on the wire shows it: the same departures, byte for byte and to the
/// nanosecond, and the same rate cuts as with every timer on time, for
/// the paper's DCQCN and NVIDIA's (whose decrease checks stay on time),
/// in fewer steps.
#[test]
fn increases_left_for_the_next_event_change_no_departure() {
    for params in [DcqcnParams::paper(LINE), DcqcnParams::nvidia(LINE)] {
        let (lazy, lazy_cuts, lazy_steps) = bursts(Arc::new(params), params);
        let (on_time, on_time_cuts, on_time_steps) = bursts(Arc::new(OnTime(params)), params);
        assert!(lazy_cuts > 2, "{:?}: {lazy_cuts} cuts", params.variant);
        assert_eq!(lazy_cuts, on_time_cuts, "{:?}", params.variant);
        assert_eq!(lazy.len(), on_time.len(), "{:?}", params.variant);
        assert!(lazy == on_time, "{:?}: the departures differ", params.variant);
        assert!(lazy_steps < on_time_steps, "{:?}: {lazy_steps} steps against {on_time_steps}", params.variant);
    }
}

/// Rewrites the BTH dest QP of an IPv4 RoCE packet and fixes its ICRC.
fn retarget(p: &[u8], qpn: u32) -> Vec<u8> {
    let mut p = p.to_vec();
    p[33..36].copy_from_slice(&qpn.to_be_bytes()[1..]);
    let n = p.len();
    let icrc = rdma_wire::icrc::roce_v2(&p[..n - 4]).unwrap();
    p[n - 4..].copy_from_slice(&rdma_wire::Icrc::wire_bytes(icrc));
    p
}

/// A CNP for no QP, for a UD QP, or from an address that is not the QP's
/// peer is counted as a drop and changes no rate; nothing panics.
#[test]
fn stray_cnps_are_dropped() {
    let mut r = run(3, Some(DcqcnParams::paper(LINE)), |t| t < 1_000, Duration::from_micros(100));
    let cnp = cnps_of(&r)[0].1.clone();
    let ep = r.sim.ep(r.a.ep);
    let (cuts, rate) = (ep.stats().rate_cuts, ep.qp_rate(r.a.qpn));
    let cq = ep.create_cq(4);
    let pd = ep.alloc_pd();
    let ud = ep
        .create_qp(QpInitAttr {
            qp_type: QpType::Ud,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap();
    let now = Instant::from_nanos(200_000);
    ep.handle_packet(now, &retarget(&cnp, r.a.qpn ^ 0x100));
    ep.handle_packet(now, &retarget(&cnp, ud));
    // From 127.0.0.3: the ICRC covers the address, so it is recomputed too.
    let mut spoofed = cnp.clone();
    spoofed[15] = 3;
    spoofed[10..12].copy_from_slice(&[0, 0]);
    let sum = rdma_wire::ipv4::checksum(&spoofed[..20]);
    spoofed[10..12].copy_from_slice(&sum.to_be_bytes());
    ep.handle_packet(now, &retarget(&spoofed, r.a.qpn));
    let s = ep.stats();
    assert_eq!(
        (s.drops_for(Drop::UnknownQp), s.drops_for(Drop::WrongTransport), s.drops_for(Drop::AddressMismatch)),
        (1, 1, 1)
    );
    assert_eq!((s.rate_cuts, ep.qp_rate(r.a.qpn)), (cuts, rate), "no rate changed");
    // The genuine one still acts.
    ep.handle_packet(now, &cnp);
    assert_eq!(ep.stats().rate_cuts, cuts + 1);
}
