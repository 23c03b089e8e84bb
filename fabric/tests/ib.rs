//! The IB link layer of the fabric (§8.5 of the reference): no overrun,
//! credit conservation, wrap, lost flow-control packets, VL15, and
//! credit-limited throughput, on runs of the real engine.

use core::time::Duration;
use rdma_fabric::fabric::Fabric;
use rdma_fabric::ib::credit::MODULO;
use rdma_fabric::ib::IbConfig;
use rdma_fabric::scenarios::{run, Cc, IbOptions, LinkKind, Options};
use rdma_fabric::topology::Topology;
use rdma_transport::Instant;

fn go(name: &str, o: Options) -> rdma_fabric::report::Report {
    run(name, &o, &mut |_, _| {}).expect("a valid scenario")
}

fn ib(o: Options) -> Options {
    Options { link: LinkKind::Ib, ..o }
}

#[test]
fn incast_16_drops_nothing_on_ib_and_drops_on_roce_without_pfc() {
    let base = Options { fanin: 16, cc: Cc::None, ..Options::default() };
    let r = go("incast", ib(base));
    let i = r.ib.as_ref().expect("an IB report");
    assert_eq!((r.drops, r.retransmits, r.flows_unfinished), (0, 0, 0), "{r:?}");
    assert_eq!(i.overruns, 0);
    assert!(i.credit_stalls > 0, "a 16:1 incast must wait for credit: {i:?}");
    for v in &i.vl_buffer_peaks {
        assert!(v.peak_blocks <= v.advertised_blocks, "{v:?}");
    }
    assert!(i.vl_buffer_peaks[0].peak_blocks > 200, "the incast fills VL0: {i:?}");
    // The bottleneck stays busy: 16 x 256 KiB at close to 40G.
    assert!(r.throughput_fraction.unwrap() > 0.9, "{r:?}");
    let roce = go("incast", base);
    assert!(roce.drops > 100, "{roce:?}");
    assert!(roce.ib.is_none());
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["credit_stalls"].as_u64().unwrap() > 0);
    assert_eq!(json["vl_buffer_peaks"][0]["advertised_blocks"], 256);
    assert!(serde_json::to_value(&roce).unwrap().get("credit_stalls").is_none());
}

#[test]
fn lost_and_corrupted_fc_packets_recover() {
    let o = ib(Options {
        fanin: 8,
        cc: Cc::None,
        ib: IbOptions { fc_loss: 0.3, fc_corrupt: 0.2, ..IbOptions::default() },
        ..Options::default()
    });
    let r = go("incast", o);
    let i = r.ib.as_ref().unwrap();
    assert!(i.fc_lost > 100 && i.fc_bad_lpcrc > 100, "{i:?}");
    assert_eq!((r.drops, i.overruns, r.flows_unfinished), (0, 0, 0), "{r:?}");
}

fn ib_incast(n: usize, cfg: &IbConfig) -> Fabric {
    let s = rdma_fabric::sm::fabric_transport::default_settings();
    let mut t = Topology::incast(n, &s);
    t.make_ib(cfg);
    Fabric::new(t, 1)
}

/// Per link direction and VL: blocks sent minus blocks freed at the
/// receiver never exceeds the receiver's buffer, nor does any buffer overrun.
fn check_conservation(f: &Fabric) {
    for (node, ports) in f.topo.ports.iter().enumerate() {
        for (port, p) in ports.iter().enumerate() {
            let tx = p.ib.as_ref().unwrap();
            let rx = f.topo.ports[p.peer][p.peer_port].ib.as_ref().unwrap();
            for (vl, (t, r)) in tx.vls.iter().zip(&rx.vls).enumerate() {
                let out = t.tx.sent_total - r.rx.freed_total;
                assert!(out <= u64::from(r.rx.capacity), "node {node} port {port} VL{vl}: {out} blocks outstanding");
                assert_eq!(r.rx.overruns, 0);
                assert!(r.rx.used <= r.rx.capacity);
            }
        }
    }
}

#[test]
fn credits_are_conserved_at_every_step_and_counters_wrap() {
    let mut f = ib_incast(4, &IbConfig::new(2, 32));
    for i in 0..4 {
        let (s, d) = (f.topo.senders[i], f.topo.receivers[0]);
        f.add_flow(s, d, Some(2 << 20), Instant::ZERO);
    }
    let mut t = Instant::ZERO;
    while f.flows.iter().any(|x| x.finish.is_none() && !x.failed) && t < Instant::ZERO + Duration::from_millis(20) {
        t += Duration::from_micros(2);
        f.run(t, true, &mut |_| {});
        check_conservation(&f);
    }
    assert!(f.flows.iter().all(|x| x.finish.is_some()), "every flow finished");
    // 8 MiB through the receiver's link on VL0: FCTBS wrapped many times.
    let node = f.topo.host_nodes[f.topo.receivers[0]];
    let rx = f.topo.ports[node][0].ib.as_ref().unwrap();
    let sw_out = &f.topo.ports[rx_peer(&f, node)][f.topo.ports[node][0].peer_port];
    let sent = sw_out.ib.as_ref().unwrap().vls[0].tx.sent_total;
    assert!(sent > 20 * u64::from(MODULO), "{sent} blocks");
    assert_eq!(sent, rx.vls[0].rx.freed_total);
}

fn rx_peer(f: &Fabric, node: usize) -> usize {
    f.topo.ports[node][0].peer
}

#[test]
fn vl15_is_dropped_when_full_and_never_blocks_data() {
    use rdma_wire::smp::{attr, DirectedRoute, SmpRepr, PERMISSIVE_LID};
    let mut f = ib_incast(1, &IbConfig::new(1, 64));
    let (s, d) = (f.topo.senders[0], f.topo.receivers[0]);
    f.add_flow(s, d, Some(1 << 20), Instant::ZERO);
    let host = f.topo.host_nodes[s];
    // 50 directed-route Get(NodeInfo)s at once into the switch, whose SMA
    // takes 500 ns each and whose VL15 buffer holds 4: the rest are dropped.
    for tid in 0..50 {
        let mut dr = DirectedRoute::outbound(&[1]).unwrap();
        dr.hop_ptr = 1;
        let smp = SmpRepr::request(0x01, tid, attr::NODE_INFO, 0, Some(dr));
        f.send_smp(host, 0, &smp, PERMISSIVE_LID, PERMISSIVE_LID);
    }
    f.run(Instant::ZERO + Duration::from_millis(10), true, &mut |_| {});
    let sw = f.topo.ports[host][0].peer;
    let port = f.topo.ports[host][0].peer_port;
    let ib = f.topo.ports[sw][port].ib.as_ref().unwrap();
    let answered = f.sm_inbox.iter().filter(|(n, r)| *n == host && r.status == 0).count() as u64;
    assert!(ib.counters.vl15_dropped > 20, "{:?}", ib.counters);
    assert!(answered >= 4, "{answered}");
    assert_eq!(ib.counters.vl15_dropped + answered, 50, "every SMP dropped or answered");
    assert_eq!(ib.counters.smp_bad, 0);
    // The data flow never waited for VL15.
    assert!(f.flows[0].finish.is_some());
    assert_eq!(f.topo.ports[host][0].ib.as_ref().unwrap().counters.drops, 0);
    check_conservation(&f);
}

/// One flow through one switch with `credits` blocks per VL: goodput in Gb/s.
fn one_flow(credits: u16) -> f64 {
    let o = ib(Options {
        flows: 1,
        cc: Cc::None,
        duration: Some(Duration::from_millis(2)),
        ib: IbOptions { buffer_blocks: credits, ..IbOptions::default() },
        ..Options::default()
    });
    let r = go("dcqcn-fairness", o);
    assert_eq!(r.ib.as_ref().unwrap().overruns, 0);
    r.flows[0]
}

#[test]
fn credit_limited_throughput_is_credits_over_the_round_trip() {
    // A 1024-byte WRITE packet is 1050 bytes on IB: 17 blocks. The credit
    // loop of the host->switch link: the packet's serialisation at the host
    // (store and forward: its buffer frees when the switch starts sending it
    // on, at once here), the FC packet's, and the cable both ways.
    let ser = |b: f64| b * 8.0 / 40.0; // ns at 40G
    let rtt_ns = ser(1050.0) + ser(6.0) + 2.0 * 1000.0;
    for credits in [17u16, 34, 68] {
        let packets = f64::from(credits / 17);
        let want = (packets * 1050.0 * 8.0 / rtt_ns).min(40.0);
        let got = one_flow(credits);
        assert!((got - want).abs() / want < 0.02, "{credits} credits: {got:.2} Gb/s, model {want:.2}");
    }
    // With more credit than the bandwidth-delay product: line rate.
    let got = one_flow(512);
    assert!(got > 0.95 * 40.0 * 1024.0 / 1050.0, "{got}");
}

#[test]
fn five_switch_ring_deadlocks_under_min_hop_and_not_under_updown() {
    use rdma_fabric::scenarios::RoutingKind;
    let o = ib(Options { duration: Some(Duration::from_millis(2)), ..Options::default() });
    let min = go("ib-ring", Options { routing: RoutingKind::MinHop, ..o });
    assert_eq!(min.deadlock, Some(true), "{min:?}");
    assert!(min.deadlock_ports.as_ref().unwrap().len() >= 5, "a cycle round the ring: {min:?}");
    assert_eq!(min.ib.as_ref().unwrap().overruns, 0);
    let updn = go("ib-ring", Options { routing: RoutingKind::UpDown, ..o });
    assert_eq!(updn.deadlock, Some(false), "{updn:?}");
    assert_eq!(updn.duration_us, 2000.0, "ran to the end");
    // Every flow still moves at the end: its rate in the measured interval.
    assert!(updn.flows.iter().all(|&g| g > 1.0), "{:?}", updn.flows);
    assert_eq!(updn.drops, 0);
}

#[test]
fn compare_runs_one_workload_on_four_fabrics() {
    let base = Options { fanin: 8, flow_bytes: 64 << 10, ..Options::default() };
    let rows = rdma_fabric::compare::compare("incast", &base, &mut |_, _, _| {}).unwrap();
    let by = |c: &str| &rows.iter().find(|r| r.config == c).unwrap().report;
    assert_eq!(rows.len(), 4);
    assert_eq!(by("ib").drops, 0);
    assert!(by("ib").ib.as_ref().unwrap().credit_stalls > 0);
    assert_eq!(by("roce-pfc").drops, 0);
    assert!(by("roce-pfc").pauses > 0);
    assert!(by("roce-lossy").drops > 0);
    // Lossless fabrics finish the incast far sooner than the lossy one (retransmit timeouts).
    let p99 = |c: &str| by(c).latency_us_p99.unwrap();
    assert!(p99("ib") * 3.0 < p99("roce-lossy"), "{} vs {}", p99("ib"), p99("roce-lossy"));
    let t = rdma_fabric::compare::table("incast", &rows, 40.0);
    assert_eq!(t.lines().count(), 7, "{t}");
}

#[test]
fn scenarios_run_on_a_fabric_rdma_sm_configured() {
    let sm = IbOptions { sm: true, ..IbOptions::default() };
    let r = go("incast", ib(Options { fanin: 8, flow_bytes: 64 << 10, cc: Cc::None, ib: sm, ..Options::default() }));
    assert_eq!((r.drops, r.flows_unfinished), (0, 0), "{r:?}");
    // The same incast with preset tables: the same outcome within a few percent.
    let preset = go("incast", ib(Options { fanin: 8, flow_bytes: 64 << 10, cc: Cc::None, ..Options::default() }));
    let (a, b) = (r.fct_us_p99.unwrap(), preset.fct_us_p99.unwrap());
    assert!((a - b).abs() / b < 0.05, "{a} vs {b}");
    let ls = Options {
        topology: rdma_fabric::scenarios::TopologyKind::LeafSpine { leaves: 2, spines: 2, hosts_per_leaf: 4 },
        flow_bytes: 32 << 10,
        ib: sm,
        ..Options::default()
    };
    let r = go("all-to-all", ib(ls));
    assert_eq!((r.drops, r.flows_unfinished), (0, 0));
    // The SM spread destinations over both spines.
    assert!(r.spine_data_packets.as_ref().unwrap().iter().all(|&p| p > 100), "{r:?}");
}

/// A directed-route SMP on its return trip with the largest hop pointer
/// the wire allows (64) reaches a switch: it is dropped, not an index out
/// of the 64-entry return path (it panicked before).
#[test]
fn a_returning_smp_with_hop_pointer_64_is_dropped_not_a_panic() {
    use rdma_wire::smp::{DirectedRoute, SmpRepr, PERMISSIVE_LID};
    let mut f = ib_incast(2, &IbConfig::new(2, 32));
    let host = f.topo.host_nodes[f.topo.senders[0]];
    let mut dr = DirectedRoute::outbound(&[1; 63]).unwrap();
    dr.returning = true;
    dr.hop_ptr = 64;
    let smp = SmpRepr::request(0x81, 7, 0x0011, 0, Some(dr));
    f.send_smp(host, 0, &smp, PERMISSIVE_LID, PERMISSIVE_LID);
    f.run(Instant::ZERO + Duration::from_micros(50), false, &mut |_| {});
    assert!(f.sm_inbox.is_empty(), "nothing came back: {:?}", f.sm_inbox.len());
}
