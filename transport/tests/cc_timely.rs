//! TIMELY wired into the engine, on the simulated link: RTT samples come
//! from the engine's own clock (a request that asks for an ACK, timed to
//! the response that covers it), reach the controller, and its rate holds
//! the sender's data packets; no switch marks anything.

mod common;

use common::*;
use core::time::Duration;
use rdma_transport::cc::TimelyParams;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Side, Sim};
use rdma_transport::*;
use std::sync::Arc;

const LINE: u64 = 100_000_000_000;
const WRITES: u64 = 24;

/// A streams 24 64 KiB WRITEs to B over links of `bandwidth_bps` with
/// 2 µs latency under TIMELY `p`; A's rate after each step it changed.
fn run(p: TimelyParams, bandwidth_bps: u64) -> (Sim, Side, Vec<u64>) {
    let link = LinkConfig { latency: Duration::from_micros(2), bandwidth_bps, ..LinkConfig::default() };
    let mut sim = Sim::new(3, link);
    let (a, b) = connect(&mut sim, PairConfig { mem_len: 2 << 20, ..PairConfig::default() });
    sim.ep(a.ep).set_controller(Some(Arc::new(p)));
    for k in 0..WRITES {
        let wr =
            SendWr::new(k, SendOp::RdmaWrite { remote_addr: b.va, rkey: b.rkey }, sge(&a, (k % 16) * 65536, 65536));
        sim.ep(a.ep).post_send(a.qpn, wr).unwrap();
    }
    let mut rates = Vec::new();
    let end = sim.now + Duration::from_millis(20);
    while sim.now < end && sim.step() {
        let r = sim.ep(a.ep).qp_rate(a.qpn).expect("a controller runs");
        if rates.last() != Some(&r) {
            rates.push(r);
        }
    }
    (sim, a, rates)
}

fn completed(sim: &mut Sim, a: &Side) -> Vec<(u64, WcStatus)> {
    let cq = a.send_cq;
    statuses(&sim.ep(a.ep).poll_cq(cq, 64))
}

/// With T_high at 1 ns every sample is "too high": the first one cuts the
/// rate to line · (1 − 0.8 · (1 − 1 ns / rtt)), just above a fifth of the
/// line. That it happens at all says a real sample reached the controller.
/// Later samples cut on down to the floor, a tenth of the line here.
#[test]
fn the_first_rtt_sample_reaches_the_controller() {
    let p = TimelyParams {
        t_high: Duration::from_nanos(1),
        min_rate_bps: LINE / 10,
        ..TimelyParams::new(LINE, Duration::from_micros(5))
    };
    let (mut sim, a, rates) = run(p, LINE);
    assert_eq!(rates[0], LINE, "a flow starts at line rate");
    let first = rates[1];
    // An RTT of at least the two 2 µs latencies: 0.8 ns / 4 µs adds at most 0.02 %.
    assert!(first > LINE / 5 && first < LINE / 5 + LINE / 5000, "{first}");
    assert_eq!(rates.last(), Some(&(LINE / 10)), "down to the floor: {rates:?}");
    let st = sim.ep(a.ep).qp_stats(a.qpn).unwrap();
    assert!(st.rate_cuts >= 2 && st.cnps_received == 0, "{st:?}");
    assert_eq!(completed(&mut sim, &a), (0..WRITES).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>());
}

/// A 100 Gb/s sender on a 10 Gb/s link: the link's queue grows, the RTT
/// rises, the gradient turns positive and TIMELY cuts, from delay alone;
/// every WRITE still completes.
#[test]
fn a_growing_queue_cuts_the_rate_without_any_mark() {
    let (mut sim, a, rates) = run(TimelyParams::new(LINE, Duration::from_micros(5)), 10_000_000_000);
    let min = *rates.iter().min().unwrap();
    assert!(min < LINE / 2, "the rate came down from the line: {min}");
    let st = sim.ep(a.ep).qp_stats(a.qpn).unwrap();
    assert!(st.rate_cuts > 0 && st.cnps_received == 0 && st.ecn_ce_received == 0, "{st:?}");
    assert_eq!(completed(&mut sim, &a).len(), WRITES as usize);
}
