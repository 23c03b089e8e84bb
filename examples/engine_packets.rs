//! Runs the transport engine alone on the simulated link (no latency, no
//! faults) for a number of messages and prints how many packets that took:
//! the workload `scripts/callgrind.sh` counts instructions of, twice, to
//! get the engine's instructions per packet without the set-up.
//!
//! With QPS (default 1), the two endpoints have that many connected QP
//! pairs and message i goes on pair i mod QPS: what a device with several
//! busy QPs costs per packet (the engine's scheduling, timers and
//! deadline bookkeeping grow with its QPs).
//!
//! Usage: engine_packets send_8b|write_4k MESSAGES [QPS]

use core::time::Duration;
use rdma_transport::sim::{self, connect, LinkConfig, PairConfig, Sim};
use rdma_transport::*;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: engine_packets send_8b|write_4k MESSAGES [QPS]";
    let qps = args.get(3).map_or(Some(1), |q| q.parse::<u64>().ok().filter(|&q| q > 0));
    let (op, n, qps) = match (args.get(1).map(String::as_str), args.get(2).and_then(|n| n.parse::<u64>().ok()), qps) {
        (Some(op @ ("send_8b" | "write_4k")), Some(n), Some(qps)) if n > 0 => (op, n, qps),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let link = LinkConfig { latency: Duration::ZERO, bandwidth_bps: 0, ..LinkConfig::default() };
    let mut sim = Sim::new(1, link);
    let cfg = PairConfig { mtu: Mtu::Mtu4096, mem_len: 1 << 21, ..PairConfig::default() };
    let (a, b) = connect(&mut sim, cfg);
    // QP pairs: (a's QPN, b's QPN).
    let mut pairs = vec![(a.qpn, b.qpn)];
    let (ip_a, ip_b): (core::net::IpAddr, core::net::IpAddr) = ([127, 0, 0, 1].into(), [127, 0, 0, 2].into());
    for _ in 1..qps {
        let mut side = |s: &sim::Side| {
            let init = QpInitAttr { cap: cfg.cap, ..QpInitAttr::new(QpType::Rc, s.pd, s.send_cq) };
            sim.ep(s.ep).create_qp(QpInitAttr { recv_cq: s.recv_cq, ..init }).unwrap()
        };
        let (qa, qb) = (side(&a), side(&b));
        sim::bring_up(sim.ep(a.ep), qa, ip_b, qb, cfg.b_psn, cfg.a_psn, &cfg);
        sim::bring_up(sim.ep(b.ep), qb, ip_a, qa, cfg.a_psn, cfg.b_psn, &cfg);
        pairs.push((qa, qb));
    }
    // One QP pair: the loop as it was before QPS, so that the counts of
    // `scripts/callgrind.sh` compare with those of older builds.
    if qps == 1 {
        run(&mut sim, op, n, &a, &b, |_| (a.qpn, b.qpn));
    } else {
        run(&mut sim, op, n, &a, &b, |i| pairs[(i % qps) as usize]);
    }
    println!("{{\"op\":\"{op}\",\"messages\":{n},\"packets\":{}}}", sim.stats.sent);
}

/// Posts `n` messages of `op` from `a` to `b`, message i on the QP pair
/// `pair(i)`, and runs the link until they completed.
fn run(sim: &mut Sim, op: &str, n: u64, a: &sim::Side, b: &sim::Side, pair: impl Fn(u64) -> (u32, u32)) {
    // In windows of 64 messages, as an application with a send queue would.
    let mut done = 0;
    while done < n {
        let k = (n - done).min(64);
        for i in done..done + k {
            let (qa, qb) = pair(i);
            let (wr_op, len) = if op == "write_4k" {
                (SendOp::RdmaWrite { remote_addr: b.va + (i % 256) * 4096, rkey: b.rkey }, 4096)
            } else {
                let sge = vec![Sge { addr: b.va, length: 64, lkey: b.lkey }];
                sim.ep(b.ep).post_recv(qb, RecvWr { wr_id: i, sg_list: sge }).unwrap();
                (SendOp::Send, 8)
            };
            let sge = vec![Sge { addr: a.va + (i % 256) * 4096, length: len, lkey: a.lkey }];
            sim.ep(a.ep).post_send(qa, SendWr::new(i, wr_op, sge)).unwrap();
        }
        sim.run_idle(Duration::from_secs(1));
        let wcs = sim.ep(a.ep).poll_cq(a.send_cq, usize::MAX);
        assert!(wcs.len() as u64 == k && wcs.iter().all(|w| w.status == WcStatus::Success), "a request failed");
        sim.ep(b.ep).poll_cq(b.recv_cq, usize::MAX);
        done += k;
    }
}
