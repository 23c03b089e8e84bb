//! Long streams of RC READs and SENDs, 128 in flight, over a link that
//! loses and reorders 2% of packets each (the soak's conditions,
//! `scripts/soak.sh`, in simulated time): every request completes
//! successfully and none runs out of retries, since forward progress
//! refills the retry budget. 60,000 requests over three seeds per verb.

mod common;

use common::*;
use core::time::Duration;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Sim};
use rdma_transport::*;

/// `n` requests of 4 KiB, `depth` in flight; the completions' statuses.
fn stream(seed: u64, read: bool, n: u64, depth: u64) -> Vec<(u64, WcStatus)> {
    let link =
        LinkConfig { loss: 0.02, reorder: 0.02, reorder_delay: Duration::from_micros(20), ..LinkConfig::default() };
    let cfg = PairConfig {
        mtu: Mtu::Mtu4096,
        cap: QpCap { max_send_wr: 256, max_recv_wr: 256, ..QpCap::default() },
        max_rd_atomic: 16,
        ..PairConfig::default()
    };
    let mut sim = Sim::new(seed, link);
    let (a, b) = connect(&mut sim, cfg);
    let (mut posted, mut done) = (0u64, Vec::new());
    while (done.len() as u64) < n {
        while posted < n && posted - (done.len() as u64) < depth {
            let off = (posted % 64) * 4096;
            let wr = if read {
                SendWr::new(posted, SendOp::RdmaRead { remote_addr: b.va + off, rkey: b.rkey }, sge(&a, off, 4096))
            } else {
                sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: posted, sg_list: sge(&b, off, 4096) }).unwrap();
                SendWr::new(posted, SendOp::Send, sge(&a, off, 4096))
            };
            sim.ep(a.ep).post_send(a.qpn, wr).unwrap();
            posted += 1;
        }
        let mut moved = false;
        for _ in 0..64 {
            moved |= sim.step();
        }
        let wcs = sim.ep(a.ep).poll_cq(a.send_cq, 256);
        if !read {
            let _ = sim.ep(b.ep).poll_cq(b.recv_cq, 256);
        }
        done.extend(statuses(&wcs));
        if done.iter().any(|(_, s)| *s != WcStatus::Success) || (!moved && wcs.is_empty()) {
            break;
        }
    }
    done
}

#[test]
fn reads_and_sends_survive_two_percent_loss_and_reordering() {
    for read in [true, false] {
        for seed in 1..=3 {
            let done = stream(seed, read, 10_000, 128);
            let bad: Vec<_> = done.iter().filter(|(_, s)| *s != WcStatus::Success).take(3).collect();
            let what = if read { "READ" } else { "SEND" };
            assert!(bad.is_empty(), "{what} seed {seed}: {bad:?} after {} completions", done.len());
            assert_eq!(done.len(), 10_000, "{what} seed {seed}: every request completes");
        }
    }
}
