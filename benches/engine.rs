//! The transport engine's packet rate on one core: two endpoints on the
//! simulated link (no latency, no faults), RC, MTU 4096. Every packet is
//! built with its ICRC, parsed, verified and executed; ACKs included.
//! Reported as packets per second (criterion's "elements").

use core::time::Duration;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Sim};
use rdma_transport::*;

const MESSAGES: u64 = 256;

fn setup(op: &str) -> (Sim, u64) {
    let link = LinkConfig { latency: Duration::ZERO, bandwidth_bps: 0, ..LinkConfig::default() };
    let mut sim = Sim::new(1, link);
    let (a, b) = connect(&mut sim, PairConfig { mtu: Mtu::Mtu4096, mem_len: 1 << 21, ..PairConfig::default() });
    for i in 0..MESSAGES {
        let (wr_op, len) = match op {
            "write_4k" => (SendOp::RdmaWrite { remote_addr: b.va + (i % 256) * 4096, rkey: b.rkey }, 4096),
            _ => {
                sim.ep(b.ep)
                    .post_recv(b.qpn, RecvWr { wr_id: i, sg_list: vec![Sge { addr: b.va, length: 64, lkey: b.lkey }] })
                    .unwrap();
                (SendOp::Send, 8)
            }
        };
        sim.ep(a.ep)
            .post_send(
                a.qpn,
                SendWr::new(i, wr_op, vec![Sge { addr: a.va + (i % 256) * 4096, length: len, lkey: a.lkey }]),
            )
            .unwrap();
    }
    (sim, MESSAGES)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    for op in ["write_4k", "send_8b"] {
        // Count the packets one run takes (requests and coalesced ACKs).
        let (mut sim, _) = setup(op);
        sim.run_idle(Duration::from_secs(1));
        g.throughput(Throughput::Elements(sim.stats.sent));
        g.bench_function(op, |bench| {
            bench.iter_batched(
                || setup(op),
                |(mut sim, n)| {
                    sim.run_idle(Duration::from_secs(1));
                    assert_eq!(sim.ep(0).poll_cq(CqId(0), usize::MAX).len() as u64, n, "every request completed");
                    n
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
