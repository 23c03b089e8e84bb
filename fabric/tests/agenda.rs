//! The engine keeps an agenda on a device with many QPs (it asks only the
//! QPs that may have a packet, `transport/src/endpoint/agenda.rs`) and
//! walks every QP on one with few. Which one it does must not change a
//! run: the same QPs send in the same turns either way. Each case here
//! runs with the agenda always in use and never, and the two reports must
//! be identical (they differed, before the scheduler's cursor followed the
//! walk's, by 15 % of a 16-rank ring all-reduce's JCT).

use rdma_fabric::collective::report::Kind;
use rdma_fabric::collective::{self, Algorithm, CollectiveOptions};
use rdma_fabric::scenarios::{self, Cc, Options, TopologyKind};

/// The JSON of one run with the agenda always (threshold 0) and never.
fn both(o: &Options, run: impl Fn(&Options) -> String) -> (String, String) {
    let with = |t| run(&Options { agenda_threshold: Some(t), ..*o });
    (with(0), with(usize::MAX))
}

fn collective(kind: Kind, algorithm: Algorithm, hosts: usize, size_bytes: u64, o: &Options) -> String {
    let c = CollectiveOptions { kind, algorithm, hosts, size_bytes, cross_nic: false };
    serde_json::to_string(&collective::run(&c, o, &mut |_, _| {}).unwrap()).unwrap()
}

fn scenario(name: &str, o: &Options) -> String {
    serde_json::to_string(&scenarios::run(name, o, &mut |_, _| {}).unwrap()).unwrap()
}

#[test]
fn a_ring_all_reduce_over_leaves_is_the_same_with_and_without_the_agenda() {
    // Two QPs a host, one sending and one answering: a round that finds
    // nothing must leave the cursor where the walk leaves it.
    let leaf_spine = TopologyKind::LeafSpine { leaves: 4, spines: 2, hosts_per_leaf: 4 };
    for dcqcn in [true, false] {
        let o = Options { topology: leaf_spine, cc: Cc::from_dcqcn(dcqcn), ..Options::default() };
        let (agenda, walk) = both(&o, |o| collective(Kind::AllReduce, Algorithm::Ring, 16, 256 << 10, o));
        assert_eq!(agenda, walk, "dcqcn {dcqcn}");
    }
}

#[test]
fn a_lossy_tree_all_reduce_is_the_same_with_and_without_the_agenda() {
    let o = Options { cc: Cc::None, buffer_bytes: Some(20_000), seed: 2, ..Options::default() };
    let (agenda, walk) = both(&o, |o| collective(Kind::AllReduce, Algorithm::Tree, 7, 512 << 10, o));
    assert!(agenda.contains("\"retransmits\":") && !agenda.contains("\"retransmits\":0,"), "lossy: {agenda}");
    assert_eq!(agenda, walk);
}

#[test]
fn all_to_all_and_incast_are_the_same_with_and_without_the_agenda() {
    let leaf_spine = TopologyKind::LeafSpine { leaves: 2, spines: 2, hosts_per_leaf: 4 };
    for dcqcn in [true, false] {
        let o = Options {
            topology: leaf_spine,
            flow_bytes: 32 << 10,
            buffer_bytes: Some(40_000),
            cc: Cc::from_dcqcn(dcqcn),
            ..Options::default()
        };
        let (agenda, walk) = both(&o, |o| scenario("all-to-all", o));
        assert_eq!(agenda, walk, "all-to-all, dcqcn {dcqcn}");
        let o = Options { fanin: 6, flow_bytes: 64 << 10, cc: Cc::from_dcqcn(dcqcn), ..Options::default() };
        let (agenda, walk) = both(&o, |o| scenario("incast", o));
        assert_eq!(agenda, walk, "incast, dcqcn {dcqcn}");
    }
}
