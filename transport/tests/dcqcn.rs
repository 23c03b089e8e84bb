//! DCQCN core against the oracles of shared/reference/congestion-control.md
//! (§2.1 paper RP, §2.2 HPCC/NVIDIA RP, §2.3 α, §1.6 CNP bytes, §1.2 NP).

use core::net::Ipv4Addr;
use core::time::Duration;

use proptest::prelude::*;
use rdma_transport::cc::*;
use rdma_transport::Instant;
use rdma_wire::*;

const G: u64 = 1_000_000_000;

fn us(x: u64) -> Instant {
    Instant::from_nanos(x * 1000)
}

fn close(got: f64, want: f64, tol: f64, what: &str) {
    assert!((got - want).abs() <= tol, "{what}: got {got}, want {want} ± {tol}");
}

/// Runs every timer up to `until`, returning (time, rate) after each.
fn run_timers(rp: &mut ReactionPoint, until: Instant) -> Vec<(Instant, u64)> {
    let mut out = Vec::new();
    while let Some(t) = rp.next_timer().filter(|&t| t <= until) {
        rp.on_timer(t);
        out.push((t, rp.rate()));
    }
    out
}

// §2.1: one CNP at 40 Gb/s, α = 1, timer-only increases every 55 µs.
#[test]
fn paper_rp_at_40g_follows_2_1_exactly() {
    let mut rp = ReactionPoint::new(DcqcnParams::paper(40 * G));
    rp.on_cnp(Instant::ZERO);
    assert_eq!((rp.rate(), rp.target_rate(), rp.alpha()), (20 * G, 40 * G, Alpha::ONE));
    assert_eq!((rp.rate_cuts(), rp.cnps_received()), (1, 1));
    let table = [
        30_000_000_000u64,
        35_000_000_000,
        37_500_000_000,
        38_750_000_000,
        39_375_000_000,
        39_687_500_000,
        39_843_750_000,
        39_921_875_000,
    ];
    for (k, want) in (1u64..).zip(table) {
        let t = rp.next_timer().expect("increase timer armed");
        assert_eq!(t, us(55 * k));
        rp.on_timer(t);
        assert_eq!(rp.rate(), want, "k = {k}");
        // Five fast-recovery steps, then AI absorbed by the cap on RT.
        assert_eq!(rp.target_rate(), 40 * G);
        assert_eq!(rp.stages(), (k as u32, 0));
    }
    // RC_k = 40 - 20·2^-k is exact in b/s up to k = 11.
    for k in 9u64..=11 {
        rp.on_timer(us(55 * k));
        assert_eq!(rp.rate(), 40 * G - ((20 * G) >> k), "k = {k}");
    }
    // It reaches line rate exactly, and then the timer stops.
    run_timers(&mut rp, us(55 * 100));
    assert_eq!(rp.rate(), 40 * G);
    assert_eq!(rp.next_timer(), None);
}

// §2.1 variant: RC = 20, RT = 40, α = 0.5 when the CNP arrives.
#[test]
fn paper_rp_variant_below_line_rate_follows_2_1() {
    let p = DcqcnParams::paper(40 * G);
    let mut rp = ReactionPoint::from_state(p, 20 * G, 40 * G, Alpha::from_ratio(1, 2));
    rp.on_cnp(Instant::ZERO);
    assert_eq!((rp.rate(), rp.target_rate()), (15 * G, 20 * G));
    assert_eq!(rp.alpha(), Alpha::from_ratio(257, 512), "0.50195312 = 257/512 exactly");
    let fr = [17_500_000_000u64, 18_750_000_000, 19_375_000_000, 19_687_500_000, 19_843_750_000];
    let ai =
        [(20_040_000_000u64, 19_941_875_000u64), (20_080_000_000, 20_010_937_500), (20_120_000_000, 20_065_468_750)];
    let steps = run_timers(&mut rp, us(55 * 8));
    let rates: Vec<u64> = steps.iter().map(|s| s.1).collect();
    assert_eq!(&rates[..5], &fr);
    assert_eq!(rates[5..], ai.map(|a| a.1));
    assert_eq!(rp.target_rate(), 20_120_000_000);
}

// §2.2: HPCC `run.py dcqcn` settings at 100 Gb/s, one CNP at t = 0.
#[test]
fn hpcc_rp_at_100g_follows_2_2() {
    let mut rp = ReactionPoint::new(DcqcnParams::hpcc(100 * G));
    rp.on_cnp(Instant::ZERO);
    assert_eq!(rp.rate(), 100 * G, "the cut waits for the decrease check");
    assert_eq!(rp.next_timer(), Some(us(4)));
    rp.on_timer(us(4));
    close(rp.alpha().to_f64(), 0.98446631, 1e-8, "α after 4 decays");
    close(rp.rate() as f64 / 1e9, 50.776684, 1e-6, "first cut");
    assert_eq!(rp.target_rate(), 100 * G, "T-stage 0: no clamp");
    assert_eq!(rp.rate_cuts(), 1);
    let table = [(304, 75.388342), (604, 87.694171), (904, 93.847086), (1204, 96.923543), (1504, 98.461771)];
    let steps = run_timers(&mut rp, us(2404));
    for ((t, r), (want_t, want_r)) in steps.iter().zip(table) {
        assert_eq!(*t, us(want_t));
        close(*r as f64 / 1e9, want_r, 1e-6, "increase");
    }
    assert_eq!(steps.len(), 8);
    close(steps[7].1 as f64 / 1e9, 99.807721, 1e-6, "t = 2404 µs");
    // rate_k = 100 - 49.223316·2^-k.
    for (k, (_, r)) in (1..).zip(&steps) {
        close(*r as f64 / 1e9, 100.0 - 49.223316 / f64::powi(2.0, k), 2e-6, "closed form");
    }
    assert_eq!(rp.target_rate(), 100 * G);
}

// §2.2: with a CNP every µs the rate halves every 4 µs and reaches the
// 0.1 Gb/s floor after about 10 cuts, about 40 µs.
#[test]
fn hpcc_rp_under_continuous_cnps_reaches_the_floor_in_about_40us() {
    let p = DcqcnParams::hpcc(100 * G);
    let mut rp = ReactionPoint::new(p);
    let mut floor_at = None;
    for t in 0..=60 {
        rp.on_cnp(us(t));
        if rp.rate() == p.min_rate_bps && floor_at.is_none() {
            floor_at = Some((t, rp.rate_cuts()));
        }
        assert!(rp.alpha().to_f64() > 0.98, "α stays near 1");
    }
    let (t, cuts) = floor_at.expect("reaches the floor");
    assert!((40..=44).contains(&t) && (10..=11).contains(&cuts), "floor at {t} µs after {cuts} cuts");
    assert_eq!(rp.cnps_received(), 61);
    assert_eq!(rp.rate_cuts(), 15, "one cut per 4 µs period, not per CNP");
}

// §1.4 with the firmware defaults: α = 1023/1024, G = 1019/1024.
#[test]
fn nvidia_rp_first_cut_uses_firmware_alpha() {
    let mut rp = ReactionPoint::new(DcqcnParams::nvidia(100 * G));
    rp.on_cnp(us(10));
    rp.on_timer(us(14));
    let alpha = 1023.0 / 1024.0 * (1019.0f64 / 1024.0).powi(4);
    close(rp.alpha().to_f64(), alpha, 1e-8, "α");
    close(rp.rate() as f64, 100e9 * (1.0 - alpha / 2.0), 1000.0, "rate");
    // F = 1: one FR step, then AI with 5 Mb/s (capped), then HAI.
    assert_eq!(rp.next_timer(), Some(us(314)));
}

// §1.4 phases once the target is below line rate: a CNP after a timer
// increase clamps the target (T-stage ≠ 0); then FR while stage < F, AI at
// stage == F, and a constant R_HAI after it.
#[test]
fn nvidia_rp_phases_after_a_clamped_cut() {
    let p = DcqcnParams::hpcc(100 * G);
    let mut rp = ReactionPoint::new(p);
    rp.on_cnp(Instant::ZERO);
    run_timers(&mut rp, us(304));
    let before = rp.rate();
    rp.on_cnp(us(310));
    assert_eq!(rp.next_timer(), Some(us(312)), "the next check on the 4 µs grid");
    rp.on_timer(us(312));
    let t1 = rp.target_rate();
    assert_eq!(t1, before, "clamped: a timer increase happened since the last cut");
    assert!(rp.rate() < before);
    let steps = run_timers(&mut rp, us(1512));
    assert_eq!(steps.iter().map(|s| s.0).collect::<Vec<_>>(), [612, 912, 1212, 1512].map(us));
    rp = ReactionPoint::new(p);
    rp.on_cnp(Instant::ZERO);
    run_timers(&mut rp, us(304));
    rp.on_cnp(us(310));
    let mut targets = Vec::new();
    while let Some(t) = rp.next_timer().filter(|&t| t <= us(1512)) {
        rp.on_timer(t);
        targets.push(rp.target_rate() - t1);
    }
    assert_eq!(targets, [0, 0, p.ai_rate_bps, p.ai_rate_bps + p.hai_rate_bps, p.ai_rate_bps + 2 * p.hai_rate_bps]);
}

// §1.3: AI when exactly one stage passed F, hyper increase by i·R_HAI when both did.
#[test]
fn paper_rp_byte_counter_and_hyper_increase() {
    let p = DcqcnParams::paper(40 * G);
    // α = 0 makes the cut a no-op, so RT = RC = 20 Gb/s and every step shows in RT.
    let mut rp = ReactionPoint::from_state(p, 20 * G, 20 * G, Alpha::ZERO);
    rp.on_cnp(Instant::ZERO);
    assert_eq!((rp.rate(), rp.target_rate()), (20 * G, 20 * G));
    rp.on_bytes_sent(6 * p.byte_counter + 123, us(1));
    assert_eq!(rp.stages(), (0, 6));
    assert_eq!(rp.target_rate(), 20 * G + p.ai_rate_bps, "BC-stage 6 > F: one AI step");
    let mut targets = Vec::new();
    for k in 1..=8 {
        rp.on_timer(us(55 * k));
        targets.push(rp.target_rate() - 20 * G);
    }
    let (ai, hai) = (p.ai_rate_bps, p.hai_rate_bps);
    // T-stage 1..5 with BC-stage 6: exactly one stage past F, so AI; then
    // both past F with min(stages) = 6: hyper increase with i = 1.
    assert_eq!(targets, [2 * ai, 3 * ai, 4 * ai, 5 * ai, 6 * ai, 6 * ai + hai, 6 * ai + 2 * hai, 6 * ai + 3 * hai]);
    // Bytes below B do not step; the remainder carries over. The next B
    // makes min(stages) = 7: i = 2.
    let (r, t) = (rp.rate(), rp.target_rate());
    rp.on_bytes_sent(p.byte_counter - 124, us(441));
    assert_eq!((rp.rate(), rp.target_rate()), (r, t));
    rp.on_bytes_sent(1, us(442));
    assert_eq!(rp.stages(), (8, 7));
    assert_eq!(rp.target_rate(), t + 2 * hai);
}

// §2.3: α decay (255/256)^n and rise 1 - (255/256)^n.
#[test]
fn alpha_dynamics_follow_2_3() {
    let g = Gain::new(1, 256);
    let table = [
        (1, 0.996094),
        (4, 0.984466),
        (10, 0.961617),
        (18, 0.931974),
        (100, 0.676116),
        (256, 0.367160),
        (1000, 0.019963),
    ];
    let mut a = Alpha::ONE;
    let mut n = 0;
    for (at, want) in table {
        while n < at {
            a = a.decay(g);
            n += 1;
        }
        close(a.to_f64(), want, 1e-6, "decay");
    }
    // Half-lives: 177.1 updates at g = 1/256, 141.6 at G = 1019/1024.
    for (g, half) in [(g, 177), (Gain::new(5, 1024), 141)] {
        let mut a = Alpha::ONE;
        for _ in 0..half {
            a = a.decay(g);
        }
        assert!(a.to_f64() > 0.5 && a.decay(g).to_f64() < 0.5, "half-life of {g:?}");
    }
    // Rise from 0 through the paper RP, one CNP per step.
    let mut rp = ReactionPoint::from_state(DcqcnParams::paper(40 * G), 40 * G, 40 * G, Alpha::ZERO);
    let rise = [(1, 0.0039), (10, 0.0384), (100, 0.3239), (256, 0.6328)];
    let mut n = 0;
    for (at, want) in rise {
        while n < at {
            rp.on_cnp(us(n));
            n += 1;
        }
        close(rp.alpha().to_f64(), want, 1e-4, "rise");
    }
}

// §2.3 through the state machines: the paper's K = 55 µs timer and HPCC's
// 1 µs timer, evaluated lazily in one call or tick by tick.
#[test]
fn alpha_decays_on_its_timer_lazily_and_eagerly_alike() {
    let mut rp = ReactionPoint::new(DcqcnParams::paper(40 * G));
    rp.on_cnp(Instant::ZERO);
    rp.on_timer(us(550));
    close(rp.alpha().to_f64(), 0.961617, 1e-6, "10 × K");

    let mut lazy = ReactionPoint::new(DcqcnParams::hpcc(100 * G));
    lazy.on_cnp(Instant::ZERO);
    let mut eager = lazy.clone();
    lazy.on_timer(us(1000));
    for t in 1..=1000 {
        eager.on_timer(us(t));
    }
    close(lazy.alpha().to_f64(), 0.019963, 1e-6, "1000 × 1 µs");
    assert_eq!(lazy, eager);
}

// §1.6: the NVIDIA CNP example, byte for byte, ICRC included.
#[test]
fn cnp_matches_the_reference_test_vector() {
    const VECTOR: &str = "4589003C98C640002011692716161608\
                          16161607DBAE12B7002800008100FFFF\
                          400000D2000000000000000000000000\
                          0000000000000000DAFC1BEF";
    let want: Vec<u8> =
        (0..VECTOR.len()).step_by(2).map(|i| u8::from_str_radix(&VECTOR[i..i + 2], 16).unwrap()).collect();
    assert_eq!(want.len(), 60);

    let transport = cnp_transport_bytes(0xD2, 0xFFFF).unwrap();
    assert_eq!(&transport[..], &want[28..56], "BTH + 16 reserved bytes");

    let repr = RoceV2Repr {
        ip: IpRepr::V4(Ipv4Repr {
            dscp: 0x89 >> 2,
            ecn: 0x89 & 3,
            ident: 0x98C6,
            dont_frag: true,
            ttl: 0x20,
            protocol: 17,
            src: Ipv4Addr::new(22, 22, 22, 8),
            dst: Ipv4Addr::new(22, 22, 22, 7),
        }),
        udp: UdpRepr { src_port: 0xDBAE, dst_port: ROCE_V2_PORT, checksum: 0 },
        transport: cnp_repr(0xD2, 0xFFFF).to_transport(),
    };
    let mut buf = [0u8; 64];
    let n = repr.emit(&mut buf, &[]).unwrap();
    assert_eq!(&buf[..n], &want[..]);

    let p = RoceV2Packet::new_checked(&want[..]).unwrap();
    assert!(p.icrc_ok());
    let t = TransportRepr::parse(&p.transport()).unwrap();
    assert_eq!(CnpRepr::from_transport(&t), Some(cnp_repr(0xD2, 0xFFFF)));
}

#[test]
fn cnp_for_a_qpn_wider_than_24_bits_is_an_error() {
    assert!(cnp_transport_bytes(1 << 24, 0xFFFF).is_err());
    assert!(cnp_transport_bytes(u32::MAX, 0).is_err());
    assert_eq!(cnp_transport_bytes(0xFF_FFFF, 0x8001).unwrap()[5..8], [0xFF; 3]);
}

fn np(mode: NpMode, interval: Duration) -> NotificationPoint {
    let mut p = DcqcnParams::paper(40 * G);
    p.np_mode = mode;
    p.cnp_interval = interval;
    NotificationPoint::new(&p)
}

// §1.2: a burst inside the interval gives one CNP; after it, another.
#[test]
fn np_answers_a_burst_once_per_interval() {
    for mode in [NpMode::Suppress, NpMode::Deferred] {
        let mut n = np(mode, Duration::from_micros(4));
        let sent = (0..40).filter(|i| n.on_ce_marked(Instant::from_nanos(i * 100))).count();
        assert_eq!(sent, 1, "{mode:?}: one CNP for the burst");
        assert_eq!((n.ecn_ce_received(), n.cnps_sent()), (40, 1));
        match mode {
            NpMode::Suppress => assert_eq!(n.next_timer(), None),
            NpMode::Deferred => {
                assert_eq!(n.next_timer(), Some(us(4)));
                assert!(!n.on_timer(Instant::from_nanos(3999)));
                assert!(n.on_timer(us(4)), "the marks inside the interval are answered at its end");
                assert_eq!(n.next_timer(), None);
            }
        }
        let before = n.cnps_sent();
        assert!(n.on_ce_marked(us(9)), "{mode:?}: a mark after the interval gets a CNP at once");
        assert_eq!(n.cnps_sent(), before + 1);
    }
}

// §1.2 / issue 19 oracle: continuous marking gives the first CNP at once,
// then one per interval.
#[test]
fn np_under_continuous_marking_sends_one_cnp_per_interval() {
    let mut n = np(NpMode::Suppress, Duration::from_micros(4));
    let at: Vec<u64> = (0..1000).filter(|&t| n.on_ce_marked(us(t))).collect();
    assert_eq!(at, (0..1000).step_by(4).collect::<Vec<_>>());

    let mut n = np(NpMode::Deferred, Duration::from_micros(50));
    let mut at = Vec::new();
    for t in 0..1000 {
        if n.next_timer().is_some_and(|d| d <= us(t)) && n.on_timer(us(t)) {
            at.push(t);
        }
        if n.on_ce_marked(us(t)) {
            at.push(t);
        }
    }
    assert_eq!(at, (0..1000).step_by(50).collect::<Vec<_>>());

    let mut n = np(NpMode::Suppress, Duration::ZERO);
    assert!((0..10).all(|_| n.on_ce_marked(us(1))), "interval 0 answers every mark");
}

#[test]
fn np_at_the_end_of_time_does_not_panic_or_loop() {
    let mut n = np(NpMode::Deferred, Duration::from_micros(50));
    let end = Instant::from_nanos(u64::MAX);
    assert!(n.on_ce_marked(end));
    assert!(!n.on_ce_marked(end));
    assert_eq!(n.next_timer(), None);
    assert!(!n.on_timer(end));
}

#[test]
fn pacer_has_no_drift_over_a_long_run() {
    // 1500 B at 7 Gb/s is 1714.28… ns: rounding each gap would drift 0.7 ns a packet.
    let rate = 7 * G;
    let mut p = Pacer::new(rate);
    let mut t = Instant::ZERO;
    for n in 0..200_000u128 {
        let want = (n * 12_000 * 1_000_000_000).div_ceil(u128::from(rate)) as u64;
        t = p.next_send_at(t);
        assert_eq!(t.as_nanos(), want, "packet {n}");
        p.on_sent(t, 1500);
    }
}

#[test]
fn pacer_banks_no_credit_and_repaces_on_a_rate_change() {
    let mut p = Pacer::new(12 * G);
    p.on_sent(Instant::ZERO, 1500); // 12 000 bits: 1 µs at 12 Gb/s
    assert_eq!(p.next_send_at(Instant::ZERO), us(1));
    p.set_rate(Instant::from_nanos(500), 6 * G); // half drained; the rest at half speed
    assert_eq!(p.next_send_at(Instant::from_nanos(500)), Instant::from_nanos(1500));
    // Idle for a long time: the next packet goes at once, the one after a gap later.
    assert_eq!(p.next_send_at(us(100)), us(100));
    p.on_sent(us(100), 1500);
    p.on_sent(us(100), 1500);
    assert_eq!(p.next_send_at(us(100)), us(104));
    // A zero rate is read as 1 b/s rather than dividing by zero.
    let mut z = Pacer::new(0);
    z.on_sent(Instant::ZERO, 1);
    assert_eq!(z.next_send_at(Instant::ZERO), Instant::from_nanos(8_000_000_000));
}

/// Packets a sender gets out in `span` when it only wakes every `tick`
/// and then sends everything the pacer allows (1000-byte packets).
fn sent_with_coarse_wakeups(mut p: Pacer, tick: Duration, span: Duration) -> u64 {
    let (mut t, mut sent) = (Instant::ZERO, 0);
    while t.as_nanos() < span.as_nanos() as u64 {
        while p.next_send_at(t) <= t {
            p.on_sent(t, 1000);
            sent += 1;
        }
        t = Instant::from_nanos(t.as_nanos() + tick.as_nanos() as u64);
    }
    sent
}

#[test]
fn a_burst_allowance_lets_a_late_sender_keep_its_rate() {
    // 1 Gb/s: a 1000-byte packet every 8 µs, 1250 in 10 ms. A sender that
    // wakes every 50 µs gets one packet per wake-up without an allowance...
    let span = Duration::from_millis(10);
    let tick = Duration::from_micros(50);
    assert_eq!(sent_with_coarse_wakeups(Pacer::new(G), tick, span), 200);
    // ... and its full rate with 100 µs of credit: every packet due by the
    // last wake-up (9950 µs; one at 0, then one per 8 µs) has left.
    let n = sent_with_coarse_wakeups(Pacer::with_burst(G, Duration::from_micros(100)), tick, span);
    assert_eq!(n, 9_950 / 8 + 1);
    // The credit is bounded: after a long idle, one burst of 100 µs (12.5
    // packets' worth), then the rate again.
    let mut p = Pacer::with_burst(G, Duration::from_micros(100));
    let t = us(10_000);
    let mut burst = 0;
    while p.next_send_at(t) <= t {
        p.on_sent(t, 1000);
        burst += 1;
    }
    assert_eq!(burst, 13);
    assert_eq!(p.next_send_at(t), t + Duration::from_nanos(4_000));
}

/// One input to a reaction point.
#[derive(Debug, Clone, Copy)]
enum Ev {
    Cnp,
    Bytes(u64),
    Timer,
}

fn ev() -> impl Strategy<Value = (u64, Ev)> {
    let kind = prop_oneof![Just(Ev::Cnp), (0u64..40_000_000).prop_map(Ev::Bytes), Just(Ev::Timer)];
    (0u64..400_000, kind)
}

fn params() -> impl Strategy<Value = DcqcnParams> {
    (1u64..400, 0u64..1000, any::<bool>(), 0u32..8, 0u32..4).prop_map(|(gbps, min_mbps, nvidia, f, shift)| {
        let line = gbps * G;
        let mut p = if nvidia { DcqcnParams::nvidia(line) } else { DcqcnParams::paper(line) };
        p.min_rate_bps = min_mbps * 1_000_000;
        p.fast_recovery_steps = f;
        p.cut_shift = shift;
        p.byte_counter = if nvidia { 0 } else { 1_000_000 };
        p
    })
}

fn drive(p: DcqcnParams, evs: &[(u64, Ev)], poll_every: Option<u64>) -> (ReactionPoint, Vec<u64>) {
    let mut rp = ReactionPoint::new(p);
    let mut now = 0u64;
    let mut rates = Vec::new();
    for &(dt, e) in evs {
        if let Some(step) = poll_every {
            let mut t = now + step;
            while t < now + dt {
                rp.on_timer(Instant::from_nanos(t));
                t += step;
            }
        }
        now += dt;
        let t = Instant::from_nanos(now);
        match e {
            Ev::Cnp => rp.on_cnp(t),
            Ev::Bytes(n) => rp.on_bytes_sent(n, t),
            Ev::Timer => rp.on_timer(t),
        }
        rates.push(rp.rate());
    }
    (rp, rates)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn rp_rate_stays_in_bounds_and_timers_lie_ahead(p in params(), evs in prop::collection::vec(ev(), 1..200)) {
        let mut rp = ReactionPoint::new(p);
        let floor = p.min_rate_bps.clamp(1, p.line_rate_bps);
        let mut now = 0u64;
        for (dt, e) in evs {
            now += dt;
            let t = Instant::from_nanos(now);
            match e {
                Ev::Cnp => rp.on_cnp(t),
                Ev::Bytes(n) => rp.on_bytes_sent(n, t),
                Ev::Timer => rp.on_timer(t),
            }
            prop_assert!(rp.rate() >= floor && rp.rate() <= p.line_rate_bps, "rate {}", rp.rate());
            prop_assert!(rp.target_rate() >= floor && rp.target_rate() <= p.line_rate_bps);
            prop_assert!(rp.alpha() <= Alpha::ONE);
            prop_assert!(rp.next_timer().is_none_or(|n| n > t), "a due timer was left behind");
        }
    }

    #[test]
    fn rp_is_deterministic_and_independent_of_polling(p in params(), evs in prop::collection::vec(ev(), 1..60)) {
        let (a, ra) = drive(p, &evs, None);
        let (b, rb) = drive(p, &evs, None);
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(&ra, &rb);
        // Extra timer calls between events change nothing.
        let (c, rc) = drive(p, &evs, Some(7_919));
        prop_assert_eq!(&a, &c);
        prop_assert_eq!(ra, rc);
    }

    #[test]
    fn np_spacing_holds_for_any_marks(
        deferred in any::<bool>(),
        interval_ns in 0u64..100_000,
        gaps in prop::collection::vec(0u64..20_000, 1..300),
    ) {
        let mode = if deferred { NpMode::Deferred } else { NpMode::Suppress };
        let mut n = np(mode, Duration::from_nanos(interval_ns));
        let mut sent: Vec<u64> = Vec::new();
        let mut now = 0;
        for (i, gap) in gaps.iter().enumerate() {
            now += gap;
            while let Some(d) = n.next_timer().filter(|d| d.as_nanos() <= now) {
                prop_assert!(n.on_timer(d));
                sent.push(d.as_nanos());
            }
            if n.on_ce_marked(Instant::from_nanos(now)) {
                sent.push(now);
            }
            prop_assert!(sent.windows(2).all(|w| w[1] - w[0] >= interval_ns));
            // Suppress: every mark has a CNP within the interval before it.
            let last = *sent.last().unwrap();
            prop_assert!(now - last < interval_ns.max(1) || deferred);
            prop_assert_eq!(n.ecn_ce_received(), i as u64 + 1);
        }
        prop_assert_eq!(n.cnps_sent(), sent.len() as u64);
        prop_assert!(sent[0] == gaps[0], "the first mark is answered at once");
    }

    #[test]
    fn pacer_departures_are_exact_for_any_sizes(rate in 1u64..400_000_000_000, sizes in prop::collection::vec(1usize..9000, 1..200)) {
        let mut p = Pacer::new(rate);
        let mut t = Instant::from_nanos(1_000);
        let mut bits = 0u128;
        for s in sizes {
            let next = p.next_send_at(t);
            let want = 1_000 + (bits * 1_000_000_000).div_ceil(u128::from(rate));
            prop_assert_eq!(u128::from(next.as_nanos()), want);
            p.on_sent(next, s);
            t = next;
            bits += s as u128 * 8;
        }
    }
}
