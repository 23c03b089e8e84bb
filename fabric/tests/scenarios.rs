//! The oracles of issue 19 that this slice can check.

use core::time::Duration;
use rdma_fabric::scenarios::{run, Cc, Options, Preset};
use rdma_fabric::switch::Red;
use rdma_transport::sim::Rng;

fn go(name: &str, o: Options) -> rdma_fabric::report::Report {
    run(name, &o, &mut |_, _| {}).expect("a valid scenario")
}

#[test]
fn rp_trajectory_paper_40g_halves_the_gap_every_timer_period() {
    // §2.1: 20, 30, 35, 37.5, 38.75 ... Gb/s, one step per 55 µs.
    let r = go(
        "rp-trajectory",
        Options { preset: Preset::Paper, duration: Some(Duration::from_micros(300)), ..Options::default() },
    );
    let t = r.trajectory.expect("a trajectory");
    let got: Vec<(f64, f64)> = t.iter().map(|p| (p.t_us, p.rate_gbps)).collect();
    let want = [(0.0, 20.0), (55.0, 30.0), (110.0, 35.0), (165.0, 37.5), (220.0, 38.75), (275.0, 39.375)];
    assert_eq!(got, want);
}

#[test]
fn red_marking_curve_within_binomial_interval() {
    // A high-Pmax curve so each probability is measurable in 20 000 draws.
    let red = Red { kmin_bytes: 10_000, kmax_bytes: 110_000, pmax: 0.5 };
    let mut rng = Rng::new(7);
    let n = 20_000u32;
    for (q, p) in [(5_000u64, 0.0), (35_000, 0.125), (60_000, 0.25), (110_000, 0.5), (120_000, 1.0)] {
        assert_eq!(red.probability(q), p);
        let k = (0..n).filter(|_| red.should_mark(q, &mut rng)).count() as f64;
        let sd = (f64::from(n) * p * (1.0 - p)).sqrt();
        assert!((k - f64::from(n) * p).abs() <= 4.0 * sd + 0.5, "q={q}: {k} marks of {n}, p={p}");
    }
}

#[test]
fn two_flows_share_the_bottleneck() {
    // Paper preset, 40G, 30 ms simulated, measured over the second half.
    let r = go("dcqcn-fairness", Options { flows: 2, duration: Some(Duration::from_millis(30)), ..Options::default() });
    assert_eq!(r.drops, 0);
    assert!(r.cnps > 0 && r.ecn_marks > 0);
    assert!(r.throughput_fraction.unwrap() >= 0.9, "{r:?}");
    // Measured 0.987 for seed 1; the 0.99 needs a longer run (see docs).
    assert!(r.jain.unwrap() >= 0.95, "{r:?}");
    // The queue stays under Kmax and mostly above Kmin once DCQCN holds the rate.
    assert!(r.queue_below_kmax_fraction.unwrap() >= 0.99, "{r:?}");
    assert!(r.queue_p99_bytes.unwrap() <= Red::PAPER.kmax_bytes, "{r:?}");
    assert!(r.queue_in_band_fraction.unwrap() >= 0.5, "{r:?}");
}

/// Issue 19's convergence oracle: 2, 4 and 8 long flows through one 40G
/// bottleneck share it with Jain's index >= 0.99 over the measured half of
/// a 100 ms run, keep it >= 95 % busy without a drop, and hold the queue
/// under Kmax. (Single 100 µs windows are shorter than DCQCN's rate
/// oscillation; their minimum is reported, not judged: ~0.95.) The median
/// queue sits near the fluid model's fixed point q* (the reference's §2.5
/// table for these parameters: 20.2, 41.8 and 93.8 KB), within 40 %:
/// measured 12.8, 40.6 and 91.9 KB for seed 1.
#[test]
fn two_four_and_eight_flows_converge_to_a_fair_share() {
    let mut last_q = 0;
    for (flows, q_star) in [(2, 20_200.0), (4, 41_800.0), (8, 93_800.0)] {
        let r =
            go("dcqcn-fairness", Options { flows, duration: Some(Duration::from_millis(100)), ..Options::default() });
        assert_eq!(r.drops, 0, "{flows} flows: {r:?}");
        assert!(r.jain.unwrap() >= 0.99, "{flows} flows: Jain {:?}, {:?}", r.jain, r.flows);
        assert!(r.throughput_fraction.unwrap() >= 0.95, "{flows} flows: {r:?}");
        assert!(r.queue_p99_bytes.unwrap() <= Red::PAPER.kmax_bytes, "{flows} flows: {r:?}");
        let q = r.queue_p50_bytes.unwrap();
        assert!((q as f64 / q_star - 1.0).abs() <= 0.4, "{flows} flows: median queue {q} B, fluid model {q_star} B");
        assert!(q > last_q, "the queue grows with the number of flows");
        last_q = q;
    }
}

/// At 0.5 Gb/s the queue DCQCN holds (~200 KB) takes ms to drain: the QPs'
/// ACK timeout follows the link (`host::ack_timeout_for`), so four flows
/// share the link without a single retransmission. With 40G's 524 µs
/// timeout they timed out on queueing alone and three of them died.
#[test]
fn slow_links_time_out_only_on_loss() {
    assert_eq!(rdma_fabric::host::ack_timeout_for(40_000_000_000, 2_000_000), 7);
    assert_eq!(rdma_fabric::host::ack_timeout_for(500_000_000, 2_000_000), 14);
    let o = Options { flows: 4, line_rate_gbps: 0.5, duration: Some(Duration::from_millis(100)), ..Options::default() };
    let r = go("dcqcn-fairness", o);
    assert_eq!((r.retransmits, r.drops), (0, 0), "{r:?}");
    assert!(r.jain.unwrap() >= 0.99, "{:?}", r.flows);
}

#[test]
fn incast_drops_far_less_with_dcqcn() {
    let off = go("incast", Options { fanin: 8, cc: Cc::None, ..Options::default() });
    let on = go("incast", Options { fanin: 8, cc: Cc::Dcqcn, ..Options::default() });
    assert_eq!((off.flows_unfinished, on.flows_unfinished), (0, 0));
    assert!(off.drops > 500, "{off:?}");
    assert!(on.drops * 2 < off.drops, "on {} off {}", on.drops, off.drops);
    assert!(on.fct_us_p99.unwrap() < off.fct_us_p99.unwrap());
}

#[test]
fn same_seed_same_json() {
    let o = Options { fanin: 4, seed: 42, ..Options::default() };
    let a = serde_json::to_string(&go("incast", o)).unwrap();
    let b = serde_json::to_string(&go("incast", o)).unwrap();
    assert_eq!(a, b);
    let o = Options { flows: 2, seed: 9, duration: Some(Duration::from_millis(2)), ..Options::default() };
    assert_eq!(
        serde_json::to_string(&go("dcqcn-fairness", o)).unwrap(),
        serde_json::to_string(&go("dcqcn-fairness", o)).unwrap()
    );
}

fn incast_pfc(fanin: usize, flow_kb: u64, dcqcn: bool, headroom: Option<u64>) -> rdma_fabric::report::Report {
    let o = Options {
        fanin,
        flow_bytes: flow_kb * 1024,
        cc: Cc::from_dcqcn(dcqcn),
        pfc: true,
        headroom_bytes: headroom,
        ..Options::default()
    };
    go("incast", o)
}

#[test]
fn incast_with_pfc_and_formula_headroom_is_lossless() {
    // 8:1, DCQCN off: the same run drops 1849 packets without PFC (above).
    let r = incast_pfc(8, 256, false, None);
    assert_eq!(r.headroom_bytes, Some(21 * 1024), "§3.3 at 40G, 1 µs links");
    assert_eq!((r.drops, r.retransmits, r.flows_unfinished), (0, 0, 0), "{r:?}");
    assert!(r.pauses > 100 && r.resumes > 0, "{r:?}");
    // What the headroom had to absorb: ~rate × 2 × delay (10 KB) + one packet.
    let used = r.headroom_used_bytes.unwrap();
    assert!((10_000..=12_500).contains(&used), "{used}");
    assert!(r.throughput_fraction.unwrap() > 0.9, "{r:?}");
    // §2.7: in the long run each ingress is paused 1 - 1/N of the time; the
    // senders' NIC ports are the paused transmitters here.
    let fct = r.fct_us_p99.unwrap();
    let senders: Vec<_> = r.paused_ports.iter().filter(|p| p.node.starts_with("host")).collect();
    assert_eq!(senders.len(), 8);
    for p in senders {
        let f = p.paused_us / fct;
        assert!((0.6..=0.95).contains(&f), "{p:?}: paused {f} of the run, 1 - 1/8 = 0.875 expected");
    }
}

#[test]
fn incast_with_undersized_headroom_drops() {
    // 8 KB < the ~11.3 KB in flight after XOFF.
    let r = incast_pfc(8, 256, false, Some(8_000));
    assert!(r.drops > 100 && r.retransmits > 0, "{r:?}");
    assert_eq!(r.flows_unfinished, 0);
}

#[test]
fn dcqcn_makes_pfc_pause_far_less() {
    // 1 MiB per sender so DCQCN has time to act: seed 1 measured 5130
    // pauses with PFC alone and 718 with DCQCN too.
    let alone = incast_pfc(8, 1024, false, None);
    let both = incast_pfc(8, 1024, true, None);
    assert_eq!((alone.drops, both.drops), (0, 0));
    assert!(both.pauses * 4 < alone.pauses, "with DCQCN {} alone {}", both.pauses, alone.pauses);
    assert!(both.paused_us_total * 4.0 < alone.paused_us_total);
}

#[test]
fn pfc_runs_replay_exactly() {
    let o = Options { fanin: 4, seed: 5, pfc: true, headroom_bytes: Some(9_000), ..Options::default() };
    let a = serde_json::to_string(&go("incast", o)).unwrap();
    assert_eq!(a, serde_json::to_string(&go("incast", o)).unwrap());
    assert!(a.contains("\"pauses\":") && a.contains("\"paused_ports\":[{"), "{a}");
}

#[test]
fn victim_is_slowed_by_pfc_and_relieved_by_dcqcn() {
    // §3.4 2 with a 4:1 incast into R2; the victim's own path is idle, so
    // its fair rate is the uplink minus H2's share: 40 - 40/4 = 30 Gb/s.
    // Seed 1, 10 ms, second half: 8.95 Gb/s under PFC alone (about C/4, as
    // the reference predicts), 25.1 Gb/s with DCQCN too, 34.6 with neither
    // (at the cost of 9145 drops).
    let v = |pfc, dcqcn| go("victim", Options { fanin: 4, pfc, cc: Cc::from_dcqcn(dcqcn), ..Options::default() });
    let alone = v(true, false);
    let both = v(true, true);
    let neither = v(false, false);
    let gbps = |r: &rdma_fabric::report::Report| r.victim_gbps.unwrap();
    assert_eq!((alone.drops, both.drops), (0, 0));
    assert!(gbps(&alone) < 12.0, "{alone:?}");
    assert!(gbps(&both) > 0.75 * 30.0 && gbps(&both) > 2.0 * gbps(&alone), "{both:?}");
    assert!(both.pauses * 4 < alone.pauses, "{} vs {}", both.pauses, alone.pauses);
    assert!(neither.drops > 0 && neither.pauses == 0 && gbps(&neither) > 25.0, "{neither:?}");
    // The bottleneck stays busy in every case.
    for r in [&alone, &both, &neither] {
        assert!(r.throughput_fraction.unwrap() > 0.95, "{r:?}");
    }
}

/// Polylines of `svg` with more than `min` points: the data lines, not
/// the ticks or legend swatches (two points each).
fn long_polylines(svg: &str, min: usize) -> Vec<&str> {
    svg.split("<polyline")
        .skip(1)
        .filter(|p| {
            p.split("points=\"").nth(1).map_or(0, |x| x.split('"').next().unwrap_or("").split_whitespace().count())
                > min
        })
        .collect()
}

#[test]
fn plot_writes_one_line_per_flow_and_the_queue() {
    let dir = std::env::temp_dir();
    let o = Options { flows: 3, duration: Some(Duration::from_millis(2)), ..Options::default() };
    let r = go("dcqcn-fairness", o);
    assert_eq!(r.series.flow_rates.len(), 3);
    assert!(r.series.queue.len() <= rdma_fabric::report::MAX_SERIES_POINTS);
    let path = dir.join(format!("rdma-fabric-plot-{}.svg", std::process::id()));
    rdma_fabric::plot::write(&r, &path).expect("an SVG");
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "well-formed ends");
    assert_eq!(svg.matches("<polyline").count(), svg.matches("points=").count());
    // Three flows and the queue.
    assert_eq!(long_polylines(&svg, 5).len(), 4, "{svg}");
    assert!(svg.contains("flow 2") && svg.contains("bottleneck data queue"));
    // rp-trajectory: one line, no queue panel.
    let rp = go("rp-trajectory", Options::default());
    let path = dir.join(format!("rdma-fabric-rp-{}.svg", std::process::id()));
    rdma_fabric::plot::write(&rp, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(long_polylines(&svg, 5).len(), 1);
    assert!(!svg.contains("bottleneck data queue"));
    // PNG is refused with a typed error, before anything is written.
    let png = dir.join("never-written.png");
    assert!(matches!(rdma_fabric::plot::write(&rp, &png), Err(rdma_fabric::plot::PlotError::Format(_))));
    assert!(!png.exists());
}

#[test]
fn pfc_deadlock_is_detected_and_breaking_the_cycle_avoids_it() {
    // Seed 1, 40G, DCQCN off: every ring ingress passes XOFF within ~100 µs
    // with transit data for the next, paused, hop; 200 µs later nothing has
    // been delivered and the three clockwise ring ports are paused with data.
    let o = Options { pfc: true, cc: Cc::None, duration: Some(Duration::from_millis(2)), ..Options::default() };
    let r = go("pfc-deadlock", o);
    assert_eq!(r.deadlock, Some(true), "{r:?}");
    let at = r.deadlock_us.unwrap();
    assert!((200.0..=1000.0).contains(&at), "{at}");
    let mut ports: Vec<(String, usize)> =
        r.deadlock_ports.clone().unwrap().into_iter().map(|p| (p.node, p.port)).collect();
    ports.sort();
    let want = [("switch0", 0), ("switch1", 1), ("switch2", 1)].map(|(n, p)| (n.to_string(), p));
    assert_eq!(ports, want, "the clockwise port of each switch");
    assert_eq!(r.drops, 0);
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"deadlock\":true") && json.contains("\"deadlock_ports\":[{\"node\":\"switch"), "{json}");
    // DCQCN does not save it: the cycle closes before any rate cut lands.
    assert_eq!(go("pfc-deadlock", Options { cc: Cc::Dcqcn, ..o }).deadlock, Some(true));

    // One flow sent the other way round, or PFC off: no deadlock, all flows move.
    for (what, o) in [("rerouted", Options { reroute: true, ..o }), ("PFC off", Options { pfc: false, ..o })] {
        let r = go("pfc-deadlock", o);
        assert_eq!((r.deadlock, r.deadlock_us), (Some(false), None), "{what}: {r:?}");
        assert_eq!(r.deadlock_ports, Some(vec![]));
        assert!(r.flows.iter().all(|&g| g > 10.0), "{what}: {:?}", r.flows);
    }
    // --reroute means nothing elsewhere.
    let bad = Options { reroute: true, ..Options::default() };
    assert!(run("incast", &bad, &mut |_, _| {}).is_err());
}

#[test]
fn leaf_spine_spreads_flows_over_spines_and_replays() {
    use rdma_fabric::scenarios::TopologyKind;
    let topology = TopologyKind::LeafSpine { leaves: 2, spines: 4, hosts_per_leaf: 8 };
    let o = Options { flows: 8, topology, duration: Some(Duration::from_millis(1)), ..Options::default() };
    let r = go("dcqcn-fairness", o);
    // Eight flows from leaf 1 to host 0 on leaf 0, each QP's own UDP source
    // port hashed: seed 1 puts them on three of the four spines.
    let spines = r.spine_data_packets.clone().expect("leaf-spine counts");
    assert_eq!(spines.len(), 4);
    assert!(spines.iter().filter(|&&n| n > 0).count() >= 3, "{spines:?}");
    assert!(r.flows.iter().all(|&g| g > 0.0), "{:?}", r.flows);
    let a = serde_json::to_string(&r).unwrap();
    assert_eq!(a, serde_json::to_string(&go("dcqcn-fairness", o)).unwrap());
    // incast on leaf-spine finishes every flow; the single-switch JSON has no spine key.
    let i = go("incast", Options { fanin: 4, topology, ..Options::default() });
    assert_eq!(i.flows_unfinished, 0, "{i:?}");
    let single = serde_json::to_string(&go("incast", Options { fanin: 2, ..Options::default() })).unwrap();
    assert!(!single.contains("spine_data_packets"));
    // Bad shapes are errors, not panics.
    for t in [
        TopologyKind::LeafSpine { leaves: 0, spines: 2, hosts_per_leaf: 8 },
        TopologyKind::LeafSpine { leaves: 2, spines: 2, hosts_per_leaf: 2 },
        TopologyKind::LeafSpine { leaves: 128, spines: 2, hosts_per_leaf: 64 },
        TopologyKind::LeafSpine { leaves: 129, spines: 2, hosts_per_leaf: 8 },
    ] {
        assert!(run("incast", &Options { topology: t, ..Options::default() }, &mut |_, _| {}).is_err());
    }
    assert!(run("victim", &Options { topology, ..Options::default() }, &mut |_, _| {}).is_err());
}

/// Every shipped scenario file runs (shortened), and a flag on the command
/// line overrides the file's value.
#[test]
fn scenario_files_run_and_flags_override_them() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-fabric"))
            .args(["run", "--file", f.to_str().unwrap(), "--duration", "300us", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}: {}", f.display(), String::from_utf8_lossy(&out.stderr));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(r["scenario"].is_string(), "{}", f.display());
        if f.ends_with("fairness-8.toml") {
            assert_eq!(r["flows"].as_array().unwrap().len(), 8, "the file's flows = 8");
            assert_eq!(r["duration_us"].as_f64(), Some(300.0), "--duration overrides the file's 100ms");
        }
    }
    let bad = std::env::temp_dir().join(format!("bad-scenario-{}.toml", std::process::id()));
    std::fs::write(&bad, "scenario = \"incast\"\nfanout = 3\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-fabric"))
        .args(["run", "--file", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fanout"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(&bad).unwrap();
}

/// The parking lot: a long flow across three bottleneck links, each shared
/// with a one-hop cross flow. Every link stays busy without a drop, and
/// DCQCN is not max-min fair across several bottlenecks: the long flow,
/// marked at every hop, gets less than each cross flow (measured 13.6
/// against 24-26 Gb/s for seed 1; the max-min share is 20), yet keeps a
/// real share.
#[test]
fn parking_lot_penalises_the_long_flow_but_keeps_every_link_busy() {
    let r = go("parking-lot", Options { flows: 3, ..Options::default() });
    assert_eq!(r.flows.len(), 4, "{r:?}");
    assert_eq!((r.drops, r.retransmits), (0, 0), "{r:?}");
    assert!(r.throughput_fraction.unwrap() >= 0.85, "the least busy link: {r:?}");
    let (long, cross) = (r.flows[0], &r.flows[1..]);
    assert!(cross.iter().all(|&c| long < c), "long {long} vs cross {cross:?}");
    assert!(long >= 0.25 * 40.0, "long {long}");
}

/// `--shared-buffer-kb`: the incast's switch pools its buffer; a pool
/// smaller than the congested port's own limit drops more (the flag reaches
/// every switch).
#[test]
fn a_shared_buffer_smaller_than_the_port_limit_drops_more() {
    let base = Options { fanin: 8, cc: Cc::None, ..Options::default() };
    let own = go("incast", base);
    let pooled = go("incast", Options { shared_buffer_bytes: Some(150_000), ..base });
    assert!(pooled.drops > own.drops, "pooled {} vs own {}", pooled.drops, own.drops);
}

/// The tool's start again with huge pages for its heap
/// (`rdma_fabric::huge_pages`) changes where memory comes from, not what
/// a run computes: the same JSON with it and with the opt-out
/// (`RDMA_FABRIC_HUGE_PAGES=0`), and nothing on stderr either way. (Where
/// the kernel's THP mode is not `madvise`, neither run restarts and this
/// shows only that both run.)
#[test]
fn huge_pages_or_not_a_run_gives_the_same_json() {
    let run = |huge: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-fabric"))
            .args(["run", "all-to-all", "--topology", "leaf-spine", "--leaves", "2", "--spines", "2"])
            .args(["--hosts-per-leaf", "8", "--flow-kb", "16", "--json"])
            .env(rdma_fabric::huge_pages::OPT_OUT_ENV, huge)
            .env_remove("GLIBC_TUNABLES")
            .env_remove("RDMA_FABRIC_HUGE_PAGES_RESTARTED")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stderr.is_empty(), "nothing said on stderr: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let (with, without) = (run("1"), run("0"));
    let r: serde_json::Value = serde_json::from_slice(&with).unwrap();
    assert_eq!(r["flows"].as_array().map(Vec::len), Some(16 * 15), "an all-to-all of 16 hosts ran");
    assert_eq!(String::from_utf8_lossy(&with), String::from_utf8_lossy(&without));
}
