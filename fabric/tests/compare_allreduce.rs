//! `rdma-fabric compare allreduce`: the same ring all-reduce on InfiniBand
//! with credits and on RoCE with PFC, PFC + DCQCN, and neither, where the
//! ring contends for uplinks: each channel crosses rails (NCCL_CROSS_NIC=1)
//! on a rail-optimized fabric with 2:1 uplinks and 30 KB switch buffers.
//! The orderings the physics implies: credits and PFC lose nothing; lossy
//! RoCE drops, retransmits, and has the longest tail across ranks.

use rdma_fabric::collective::CollectiveOptions;
use rdma_fabric::compare::{collective_table, compare_collective, CONFIGS};
use rdma_fabric::scenarios::{Options, TopologyKind};

#[test]
fn credits_and_pfc_lose_nothing_and_lossy_roce_has_the_longest_tail() {
    let o = Options {
        topology: TopologyKind::RailOptimized { servers: 4, rails: 4, spines: 2 },
        buffer_bytes: Some(30_000),
        ..Options::default()
    };
    let c = CollectiveOptions { hosts: 16, size_bytes: 2 << 20, cross_nic: true, ..CollectiveOptions::default() };
    let rows = compare_collective(&c, &o, &mut |_, _, _| {}).expect("valid options");
    assert_eq!(rows.iter().map(|r| r.config).collect::<Vec<_>>(), CONFIGS);
    let by = |name: &str| &rows.iter().find(|r| r.config == name).unwrap().report;
    for r in &rows {
        assert_eq!((r.report.ranks_unfinished, r.report.failed), (0, false), "{}: {:?}", r.config, r.report);
    }
    let (ib, pfc, dcqcn, lossy) = (by("ib"), by("roce-pfc"), by("roce-pfc-dcqcn"), by("roce-lossy"));
    for (what, r) in [("ib", ib), ("roce-pfc", pfc), ("roce-pfc-dcqcn", dcqcn)] {
        assert_eq!((r.drops, r.retransmits), (0, 0), "{what}: lossless: {r:?}");
    }
    // Lossless by different means: credits wait, PFC pauses.
    assert!(ib.credit_stalls.unwrap() > 0 && ib.pauses == 0, "{ib:?}");
    assert!(pfc.pauses > 0 && pfc.credit_stalls.is_none(), "{pfc:?}");
    assert!(lossy.drops > 0 && lossy.retransmits > 0 && lossy.pauses == 0, "{lossy:?}");
    let tail = |r: &rdma_fabric::collective::report::CollectiveReport| r.rank_completion_us_max.unwrap();
    for (what, r) in [("ib", ib), ("roce-pfc", pfc), ("roce-pfc-dcqcn", dcqcn)] {
        assert!(tail(lossy) > tail(r), "lossy {} us is not behind {what} {} us", tail(lossy), tail(r));
        assert!(lossy.jct_us.unwrap() > r.jct_us.unwrap());
    }
    // The table has a row per fabric.
    let t = collective_table(&rows);
    assert!(CONFIGS.iter().all(|c| t.contains(c)), "{t}");
}
