//! Runs the transport engine alone on the simulated link (no latency, no
//! faults) for a number of messages and prints how many packets that took:
//! the workload `scripts/callgrind.sh` counts instructions of, twice, to
//! get the engine's instructions per packet without the set-up.
//!
//! Usage: engine_packets send_8b|write_4k MESSAGES

use core::time::Duration;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Sim};
use rdma_transport::*;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: engine_packets send_8b|write_4k MESSAGES";
    let (op, n) = match (args.get(1).map(String::as_str), args.get(2).and_then(|n| n.parse::<u64>().ok())) {
        (Some(op @ ("send_8b" | "write_4k")), Some(n)) if n > 0 => (op, n),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let link = LinkConfig { latency: Duration::ZERO, bandwidth_bps: 0, ..LinkConfig::default() };
    let mut sim = Sim::new(1, link);
    let (a, b) = connect(&mut sim, PairConfig { mtu: Mtu::Mtu4096, mem_len: 1 << 21, ..PairConfig::default() });
    // In windows of 64 messages, as an application with a send queue would.
    let mut done = 0;
    while done < n {
        let k = (n - done).min(64);
        for i in done..done + k {
            let (wr_op, len) = if op == "write_4k" {
                (SendOp::RdmaWrite { remote_addr: b.va + (i % 256) * 4096, rkey: b.rkey }, 4096)
            } else {
                let sge = vec![Sge { addr: b.va, length: 64, lkey: b.lkey }];
                sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: i, sg_list: sge }).unwrap();
                (SendOp::Send, 8)
            };
            let sge = vec![Sge { addr: a.va + (i % 256) * 4096, length: len, lkey: a.lkey }];
            sim.ep(a.ep).post_send(a.qpn, SendWr::new(i, wr_op, sge)).unwrap();
        }
        sim.run_idle(Duration::from_secs(1));
        let wcs = sim.ep(a.ep).poll_cq(a.send_cq, usize::MAX);
        assert!(wcs.len() as u64 == k && wcs.iter().all(|w| w.status == WcStatus::Success), "a request failed");
        sim.ep(b.ep).poll_cq(b.recv_cq, usize::MAX);
        done += k;
    }
    println!("{{\"op\":\"{op}\",\"messages\":{n},\"packets\":{}}}", sim.stats.sent);
}
