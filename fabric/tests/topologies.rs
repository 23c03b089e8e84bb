//! The topologies of real clusters: a leaf-spine with a chosen
//! oversubscription, a rail-optimized fabric and its NCCL-style channels,
//! and the per-packet multipath options (spraying, adaptive routing) on
//! RoCE and IB: every host reaches every other, the ratios are as asked,
//! spraying spreads one flow over every spine (and reorders it, which the
//! go-back-N receiver pays for), and a seed replays byte for byte.

use core::time::Duration;
use rdma_fabric::collective::report::{CollectiveReport, Kind};
use rdma_fabric::collective::{run as run_collective, Algorithm, CollectiveOptions};
use rdma_fabric::ib::IbConfig;
use rdma_fabric::multipath::Multipath;
use rdma_fabric::report::Report;
use rdma_fabric::scenarios::{run, Cc, LinkKind, Options, TopologyKind};
use rdma_fabric::topology::{spines_for_oversubscription, Node, Topology};

use rdma_fabric::sm::fabric_transport::default_settings as settings;

/// Every path a packet from host `src` to host `dst` may take, following
/// each switch's route or any port of its equal-cost group (or, on IB,
/// the LFT entry and any port of the AR group): each must reach `dst`
/// within `max_links` links.
fn all_paths_reach(t: &Topology, src: usize, dst: usize, max_links: usize) -> bool {
    let (from, to) = (t.host_nodes[src], t.host_nodes[dst]);
    let addr = t.hosts[dst].addr;
    let dlid = t.lids.get(to).copied().unwrap_or(0);
    let mut frontier = vec![(t.ports[from][0].peer, 1)];
    while let Some((node, links)) = frontier.pop() {
        if node == to {
            continue;
        }
        let Node::Switch(sw) = t.nodes[node] else { return false };
        if links >= max_links {
            return false;
        }
        let s = &t.switches[sw];
        let next: Vec<usize> = match &s.ib {
            Some(ib) => ib.ar_group(dlid).map(<[usize]>::to_vec).or_else(|| ib.route(dlid).map(|p| vec![p])),
            None => s.routes.group(addr).map(<[usize]>::to_vec).or_else(|| s.routes.port(addr).map(|p| vec![p])),
        }
        .unwrap_or_default();
        if next.is_empty() {
            return false;
        }
        frontier.extend(next.iter().map(|&p| (t.ports[node][p].peer, links + 1)));
    }
    true
}

#[test]
fn every_host_pair_is_reachable_over_every_equal_cost_path() {
    let s = settings();
    let fabrics = [
        ("leaf-spine 4x8, 2:1", Topology::leaf_spine(4, spines_for_oversubscription(8, 2.0).unwrap(), 8, &s)),
        ("rail-optimized 5 servers x 4 rails", Topology::rail_optimized(5, 4, 3, &s)),
    ];
    for (what, mut t) in fabrics {
        let n = t.hosts.len();
        for ib in [false, true] {
            if ib {
                t.make_ib(&IbConfig::default());
            }
            for a in 0..n {
                for b in (0..n).filter(|&b| b != a) {
                    assert!(all_paths_reach(&t, a, b, 4), "{what} (ib {ib}): host {a} -> host {b}");
                }
            }
        }
    }
}

#[test]
fn oversubscription_is_host_links_over_uplinks() {
    assert_eq!(spines_for_oversubscription(8, 2.0), Ok(4));
    assert_eq!(spines_for_oversubscription(8, 1.0), Ok(8));
    assert_eq!(spines_for_oversubscription(6, 1.5), Ok(4));
    assert!(spines_for_oversubscription(8, 3.0).is_err(), "8/3 spines");
    assert!(spines_for_oversubscription(8, 0.0).is_err());
    assert!(spines_for_oversubscription(2, 4.0).is_err(), "fewer than one spine");
    let s = settings();
    let t = Topology::leaf_spine(3, 2, 8, &s);
    assert!(t.leaves.iter().all(|&l| t.oversubscription(l) == Some(4.0)), "8 down, 2 up");
    let r = Topology::rail_optimized(8, 4, 4, &s);
    assert!(r.leaves.iter().all(|&l| r.oversubscription(l) == Some(2.0)), "8 servers down, 4 spines up");
    // Through a collective's report, as the command line sets it.
    let o = Options {
        topology: TopologyKind::LeafSpine {
            leaves: 2,
            spines: spines_for_oversubscription(4, 2.0).unwrap(),
            hosts_per_leaf: 4,
        },
        ..Options::default()
    };
    let c = CollectiveOptions { hosts: 8, size_bytes: 64 << 10, ..CollectiveOptions::default() };
    let rep = run_collective(&c, &o, &mut |_, _| {}).unwrap();
    assert_eq!((rep.oversubscription, rep.topology.as_str()), (Some(2.0), "leaf-spine"));
}

#[test]
fn rail_optimized_puts_nic_i_of_every_server_on_rail_switch_i() {
    let t = Topology::rail_optimized(3, 4, 2, &settings());
    assert_eq!((t.hosts.len(), t.leaves.len(), t.spines.len(), t.rails), (12, 4, 2, 4));
    for h in 0..12 {
        let leaf_node = t.ports[t.host_nodes[h]][0].peer;
        assert_eq!(t.nodes[leaf_node], Node::Switch(h % 4), "host {h} is NIC {} of server {}", h % 4, h / 4);
    }
    // A rail switch: its servers below, one uplink to each spine above.
    assert!(t.leaves.iter().all(|&l| t.oversubscription(l) == Some(1.5)));
}

fn collective(o: &Options, c: &CollectiveOptions) -> CollectiveReport {
    let r = run_collective(c, o, &mut |_, _| {}).expect("a valid collective");
    assert_eq!((r.ranks_unfinished, r.failed), (0, false), "{r:?}");
    r
}

/// NCCL's channel c stays on rail c: the ring never leaves its rail
/// switch, so no spine carries a packet. Crossing NICs (NCCL_CROSS_NIC=1)
/// sends the same bytes through the spines, which costs time.
#[test]
fn rail_aligned_channels_never_touch_a_spine() {
    let o = Options { topology: TopologyKind::RailOptimized { servers: 4, rails: 4, spines: 2 }, ..Options::default() };
    for kind in [Kind::AllReduce, Kind::AllGather, Kind::ReduceScatter] {
        let c = CollectiveOptions { kind, hosts: 16, size_bytes: 1 << 20, ..CollectiveOptions::default() };
        let aligned = collective(&o, &c);
        assert_eq!(aligned.spine_data_packets, Some(vec![0, 0]), "{kind:?}: {aligned:?}");
        assert_eq!(aligned.rails, Some(4));
        let crossed = collective(&o, &CollectiveOptions { cross_nic: true, ..c });
        assert!(crossed.spine_data_packets.unwrap().iter().all(|&p| p > 0), "{kind:?}");
        assert!(crossed.jct_us.unwrap() > aligned.jct_us.unwrap(), "{kind:?}: 2:1 uplinks slow the crossed rings");
    }
    // The tree runs one tree per rail, too.
    let c = CollectiveOptions {
        algorithm: Algorithm::Tree,
        hosts: 16,
        size_bytes: 1 << 20,
        ..CollectiveOptions::default()
    };
    assert_eq!(collective(&o, &c).spine_data_packets, Some(vec![0, 0]));
    // --hosts must be servers x rails.
    let bad = CollectiveOptions { hosts: 15, ..c };
    assert!(run_collective(&bad, &o, &mut |_, _| {}).is_err());
    // all-to-all runs on rails (every NIC to every other: cross-rail pairs through the spines).
    let a2a =
        Options { flow_bytes: 8 << 10, topology: TopologyKind::RailOptimized { servers: 2, rails: 4, spines: 2 }, ..o };
    let r = run("all-to-all", &a2a, &mut |_, _| {}).unwrap();
    assert_eq!(r.flows_unfinished, 0);
    assert!(r.spine_data_packets.unwrap().iter().all(|&p| p > 0));
}

/// One long flow from leaf 1 to host 0 over four spines.
fn one_flow(multipath: Multipath, link: LinkKind, seed: u64) -> Report {
    let o = Options {
        flows: 1,
        seed,
        link,
        multipath,
        cc: Cc::None,
        topology: TopologyKind::LeafSpine { leaves: 2, spines: 4, hosts_per_leaf: 2 },
        duration: Some(Duration::from_micros(300)),
        ..Options::default()
    };
    run("dcqcn-fairness", &o, &mut |_, _| {}).expect("a valid run")
}

#[test]
fn spraying_spreads_one_flow_over_every_spine() {
    for link in [LinkKind::Roce, LinkKind::Ib] {
        let ecmp = one_flow(Multipath::Ecmp, link, 1);
        // One path carries the flow (on IB the counts include the ACKs
        // coming back, which take the sender's DLID's spine).
        let one_path = |s: &[u64]| s.iter().max().unwrap() * 10 >= s.iter().sum::<u64>() * 9;
        let spines = ecmp.spine_data_packets.clone().unwrap();
        assert!(one_path(&spines), "{link:?}: one flow, one path: {spines:?}");
        assert_eq!(ecmp.out_of_sequence, Some(0));
        let spray = one_flow(Multipath::Spray, link, 1);
        let spines = spray.spine_data_packets.clone().unwrap();
        let total: u64 = spines.iter().sum();
        assert!(total > 400, "{link:?}: {spines:?}");
        assert!(spines.iter().all(|&p| p * 8 > total), "{link:?}: each spine near a quarter: {spines:?}");
        assert_eq!(spray.multipath, Some("spray"));
        // Four idle paths of equal length: the packets still arrive in
        // order (reordering needs paths whose queues differ; next test).
        assert_eq!((spray.out_of_sequence, spray.retransmits), (Some(0), 0), "{link:?}");
        // Adaptive on an idle path keeps the flow's own port.
        let adaptive = one_flow(Multipath::Adaptive, link, 1);
        let spines = adaptive.spine_data_packets.clone().unwrap();
        assert!(one_path(&spines), "{link:?}: {spines:?}");
    }
}

/// Under contention the paths' queues differ, so packets of one QP
/// overtake each other: the go-back-N receiver drops what comes after a
/// gap, NAKs it (PSN sequence error) and the sender resends from there.
/// Per flow, nothing is reordered; adaptive reorders far less than
/// spraying since it moves a packet only to a shorter queue.
#[test]
fn per_packet_paths_reorder_under_contention_and_go_back_n_pays() {
    let c = CollectiveOptions { hosts: 16, size_bytes: 1 << 20, cross_nic: true, ..CollectiveOptions::default() };
    for link in [LinkKind::Roce, LinkKind::Ib] {
        let o = |multipath| Options {
            link,
            multipath,
            topology: TopologyKind::RailOptimized { servers: 4, rails: 4, spines: 4 },
            ..Options::default()
        };
        let ecmp = collective(&o(Multipath::Ecmp), &c);
        let spray = collective(&o(Multipath::Spray), &c);
        let adaptive = collective(&o(Multipath::Adaptive), &c);
        assert_eq!((ecmp.out_of_sequence, ecmp.naks, ecmp.retransmits), (0, 0, 0), "{link:?}: {ecmp:?}");
        assert_eq!(spray.drops, 0, "{link:?}: nothing lost, only reordered");
        assert!(spray.out_of_sequence > 0 && spray.naks > 0 && spray.retransmits > 0, "{link:?}: {spray:?}");
        assert!(adaptive.out_of_sequence < spray.out_of_sequence, "{link:?}: {adaptive:?} {spray:?}");
        assert!(spray.jct_us.unwrap() > ecmp.jct_us.unwrap(), "{link:?}: resends cost more than balance gains");
    }
}

#[test]
fn a_seed_replays_byte_for_byte_and_another_seed_sprays_differently() {
    let json = |r: &Report| serde_json::to_string(r).unwrap();
    let a = one_flow(Multipath::Spray, LinkKind::Roce, 7);
    assert_eq!(json(&a), json(&one_flow(Multipath::Spray, LinkKind::Roce, 7)));
    let b = one_flow(Multipath::Spray, LinkKind::Roce, 8);
    assert_ne!(a.spine_data_packets, b.spine_data_packets);
    let o = Options {
        multipath: Multipath::Adaptive,
        topology: TopologyKind::RailOptimized { servers: 4, rails: 2, spines: 2 },
        ..Options::default()
    };
    let c = CollectiveOptions { hosts: 8, size_bytes: 256 << 10, cross_nic: true, ..CollectiveOptions::default() };
    let (x, y) = (collective(&o, &c), collective(&o, &c));
    assert_eq!(serde_json::to_string(&x).unwrap(), serde_json::to_string(&y).unwrap());
}

#[test]
fn per_packet_multipath_needs_equal_cost_paths() {
    let o = Options { multipath: Multipath::Spray, ..Options::default() };
    let e = run("incast", &o, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("--multipath spray"), "{e}");
    let o = Options {
        multipath: Multipath::Adaptive,
        link: LinkKind::Ib,
        ib: rdma_fabric::scenarios::IbOptions { sm: true, ..Default::default() },
        topology: TopologyKind::LeafSpine { leaves: 2, spines: 2, hosts_per_leaf: 2 },
        ..Options::default()
    };
    assert!(run("all-to-all", &o, &mut |_, _| {}).is_err());
}

/// What `rdma-fabric ARGS` prints on stdout (it must succeed).
fn cli(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-fabric")).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The flags as documented: --oversubscription sets the spines, --rails
/// and --servers the rail fabric, --multipath the choice per packet; the
/// same seed prints the same JSON; compare draws its plot.
#[test]
fn the_command_line_builds_these_fabrics_and_repeats_itself() {
    let run = ["run", "allreduce", "--topology", "rail-optimized", "--rails", "2", "--servers", "4"];
    let run =
        [&run[..], &["--oversubscription", "2", "--multipath", "spray", "--cross-nic", "--size", "256KiB"]].concat();
    let run = [&run[..], &["--seed", "5", "--json"]].concat();
    let text = cli(&run);
    assert_eq!(text, cli(&run), "the same seed, another JSON");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!((v["hosts"].as_u64(), v["rails"].as_u64()), (Some(8), Some(2)), "{v}");
    assert_eq!((v["oversubscription"].as_f64(), v["multipath"].as_str()), (Some(2.0), Some("spray")), "{v}");
    assert_eq!(v["spine_data_packets"].as_array().map(Vec::len), Some(2), "4 servers / 2:1 = 2 spines: {v}");
    let ls = ["run", "all-to-all", "--topology", "leaf-spine", "--hosts-per-leaf", "4", "--oversubscription", "2"];
    let v: serde_json::Value = serde_json::from_str(&cli(&[&ls[..], &["--flow-kb", "4", "--json"]].concat())).unwrap();
    assert_eq!(v["spine_data_packets"].as_array().map(Vec::len), Some(2), "{v}");
    // A ratio that gives no whole number of spines is refused, as is a clash with --spines.
    for bad in [&["--oversubscription", "3"][..], &["--oversubscription", "2", "--spines", "3"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-fabric"))
            .args([&ls[..], bad].concat())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?}");
    }
    let dir = std::env::temp_dir().join(format!("rdma-fabric-topologies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("allreduce.svg");
    let cmp = ["compare", "allreduce", "--hosts", "4", "--size", "64KiB", "--quiet", "--plot"];
    let table = cli(&[&cmp[..], &[svg.to_str().unwrap()]].concat());
    assert!(["ib", "roce-pfc", "roce-pfc-dcqcn", "roce-lossy"].iter().all(|c| table.contains(c)), "{table}");
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("<svg") && plot.contains("roce-lossy"), "the plot names each fabric");
    std::fs::remove_dir_all(&dir).unwrap();
}
