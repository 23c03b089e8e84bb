//! Deterministic simulation over many seeds: random mixes of operations,
//! message sizes, MTUs and fault rates (up to 30% loss, plus duplication,
//! reordering and corruption) on a connected RC pair, in both directions.
//!
//! For every seed: every signaled work request completes exactly once and
//! in order per QP; every successful SEND, WRITE and READ moved its bytes
//! exactly; atomics were applied exactly once; and nothing panicked.
//!
//! The one error accepted is retry exhaustion (RETRY_EXC_ERR, then flushes)
//! on a link that loses or corrupts at least 5% of packets: eight failed
//! attempts in a row do happen there, and giving up is then what the IBTA
//! requires. It must stay rare: at most 1% of seeds.
//!
//! `PROPERTY_CASES=N` sets how many seeds (default 10,000);
//! `PROPERTY_SEED=S` replays one, and `PROPERTY_PCAP=FILE` records what it
//! sent (read it with `rdma-dump FILE`); `PROPERTY_LOG=1` prints the
//! engine's debug events. A failure prints its replay command.

use core::time::Duration;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Rng, Sim};
use rdma_transport::*;

const SLOT: u64 = 16 * 1024;
const OPS_MAX: u64 = 24;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd(u64),
    CompareSwap,
}

#[derive(Debug, Clone, Copy)]
struct Op {
    kind: Kind,
    from_a: bool,
    len: u32,
    slot: u64,
}

/// Everything a seed decides.
#[derive(Debug)]
struct Case {
    mtu: Mtu,
    link: LinkConfig,
    ops: Vec<Op>,
}

fn case(seed: u64) -> Case {
    let mut r = Rng::new(seed);
    let mtu = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096][r.below(5) as usize];
    let pct = |r: &mut Rng, max: u64| r.below(max + 1) as f64 / 100.0;
    let link = LinkConfig {
        latency: Duration::from_micros(1 + r.below(20)),
        bandwidth_bps: [0, 10_000_000_000, 100_000_000_000][r.below(3) as usize],
        loss: if r.chance(0.2) { 0.0 } else { pct(&mut r, 30) },
        duplicate: pct(&mut r, 10),
        reorder: pct(&mut r, 20),
        reorder_delay: Duration::from_micros(1 + r.below(50)),
        corrupt: pct(&mut r, 5),
    };
    let n = 1 + r.below(OPS_MAX);
    let ops = (0..n)
        .map(|i| {
            let kind = match r.below(7) {
                0 => Kind::Send,
                1 => Kind::SendImm,
                2 => Kind::Write,
                3 => Kind::WriteImm,
                4 => Kind::Read,
                5 => Kind::FetchAdd(r.next_u64() >> 40),
                _ => Kind::CompareSwap,
            };
            let len = match kind {
                Kind::FetchAdd(_) | Kind::CompareSwap => 8,
                _ if r.chance(0.1) => 0,
                _ => {
                    let max = if r.chance(0.3) { SLOT - 1 } else { 300 };
                    1 + r.below(max) as u32
                }
            };
            Op { kind, from_a: r.chance(0.5), len, slot: i }
        })
        .collect();
    Case { mtu, link, ops }
}

/// Offsets in each side's memory: slot i holds op i's local buffer at
/// `i * SLOT` and its remote target at `i * SLOT + SLOT / 2`... except that
/// SENDs land in the receiver's slot; both halves are SLOT/2 = 8 KiB apart.
fn local_off(op: &Op) -> u64 {
    op.slot * 2 * SLOT
}
fn remote_off(op: &Op) -> u64 {
    op.slot * 2 * SLOT + SLOT
}

fn pattern(seed: u64, op: &Op) -> Vec<u8> {
    let mut r = Rng::new(seed ^ (op.slot << 32) ^ 0x5eed);
    (0..op.len).map(|_| r.next_u64() as u8).collect()
}

const ATOMIC_INIT: u64 = 1_000_000;

/// How a seed ended, when it ended well.
#[derive(Debug, PartialEq)]
enum Outcome {
    Clean,
    RetryExhausted,
}

fn run(seed: u64) -> Result<Outcome, String> {
    let c = case(seed);
    let cfg = PairConfig {
        mtu: c.mtu,
        mem_len: (OPS_MAX * 2 * SLOT) as usize,
        a_psn: (Rng::new(seed).next_u64() & 0xff_ffff) as u32 | 0xff_ff00, // near the wrap
        b_psn: (seed as u32).wrapping_mul(2_654_435_761) & 0xff_ffff,
        timeout: 8,
        retry_cnt: 7,
        ..PairConfig::default()
    };
    let mut sim = Sim::new(seed, c.link);
    if let Ok(path) = std::env::var("PROPERTY_PCAP") {
        let f = std::fs::File::create(&path).map_err(|e| format!("{path}: {e}"))?;
        sim.capture(Box::new(std::io::BufWriter::new(f))).map_err(|e| e.to_string())?;
    }
    let (a, b) = connect(&mut sim, cfg);
    // Half the seeds hold lone ACKs (a verbs device's DeviceConfig::ack_delay).
    if seed % 2 == 1 {
        let delay = core::time::Duration::from_micros(20);
        sim.ep(a.ep).set_ack_delay(delay);
        sim.ep(b.ep).set_ack_delay(delay);
    }
    let side = |from_a: bool| if from_a { (a.clone(), b.clone()) } else { (b.clone(), a.clone()) };

    for op in &c.ops {
        let (me, peer) = side(op.from_a);
        let data = pattern(seed, op);
        me.mem.write(local_off(op) as usize, &data);
        peer.mem.write(remote_off(op) as usize, &data.iter().map(|x| !x).collect::<Vec<_>>());
        if let Kind::FetchAdd(_) | Kind::CompareSwap = op.kind {
            peer.mem.write(remote_off(op) as usize, &ATOMIC_INIT.to_ne_bytes());
        }
        let sg = vec![Sge { addr: me.va + local_off(op), length: op.len, lkey: me.lkey }];
        let remote_addr = peer.va + remote_off(op);
        let rkey = peer.rkey;
        let send_op = match op.kind {
            Kind::Send => SendOp::Send,
            Kind::SendImm => SendOp::SendWithImm { imm: op.slot as u32 },
            Kind::Write => SendOp::RdmaWrite { remote_addr, rkey },
            Kind::WriteImm => SendOp::RdmaWriteWithImm { remote_addr, rkey, imm: op.slot as u32 },
            Kind::Read => SendOp::RdmaRead { remote_addr, rkey },
            Kind::FetchAdd(add) => SendOp::FetchAdd { remote_addr, rkey, add },
            Kind::CompareSwap => SendOp::CompareSwap { remote_addr, rkey, compare: ATOMIC_INIT, swap: op.slot + 7 },
        };
        if matches!(op.kind, Kind::Send | Kind::SendImm | Kind::WriteImm) {
            let rsg = vec![Sge { addr: peer.va + remote_off(op), length: SLOT as u32, lkey: peer.lkey }];
            sim.ep(peer.ep).post_recv(peer.qpn, RecvWr { wr_id: op.slot, sg_list: rsg }).map_err(|e| e.to_string())?;
        }
        sim.ep(me.ep).post_send(me.qpn, SendWr::new(op.slot, send_op, sg)).map_err(|e| e.to_string())?;
    }
    let n_a = c.ops.iter().filter(|o| o.from_a).count();
    let n_b = c.ops.len() - n_a;
    let mut wcs: [Vec<WorkCompletion>; 2] = [Vec::new(), Vec::new()];
    let mut recvs: [Vec<WorkCompletion>; 2] = [Vec::new(), Vec::new()];
    let sides = [a.clone(), b.clone()];
    sim.run_until(Duration::from_secs(600), |sim| {
        for i in 0..2 {
            let s = &sides[i];
            wcs[i].extend(sim.ep(s.ep).poll_cq(s.send_cq, usize::MAX));
            recvs[i].extend(sim.ep(s.ep).poll_cq(s.recv_cq, usize::MAX));
        }
        wcs[0].len() >= n_a && wcs[1].len() >= n_b
    });
    // Let late duplicates and retransmissions drain, then look again.
    sim.run_idle(Duration::from_millis(50));
    for i in 0..2 {
        let s = &sides[i];
        wcs[i].extend(sim.ep(s.ep).poll_cq(s.send_cq, usize::MAX));
        recvs[i].extend(sim.ep(s.ep).poll_cq(s.recv_cq, usize::MAX));
    }

    let mut exhausted = false;
    for (i, from_a) in [(0, true), (1, false)] {
        let mine: Vec<&Op> = c.ops.iter().filter(|o| o.from_a == from_a).collect();
        let got: Vec<u64> = wcs[i].iter().map(|w| w.wr_id).collect();
        let want: Vec<u64> = mine.iter().map(|o| o.slot).collect();
        if got != want {
            return Err(format!("side {i}: completions {got:?}, posted {want:?}"));
        }
        let mut failed = false;
        exhausted |= wcs[i].iter().any(|w| w.status == WcStatus::RetryExcErr);
        for w in &wcs[i] {
            match (failed, w.status) {
                (false, WcStatus::Success) => {}
                (false, WcStatus::RetryExcErr) if c.link.loss + c.link.corrupt >= 0.05 => failed = true,
                (true, WcStatus::WrFlushErr) => {}
                (_, s) => return Err(format!("side {i}: wr {} completed with {s:?} (loss {})", w.wr_id, c.link.loss)),
            }
        }
    }

    // Data: only for requests that completed successfully on both ends.
    let ok = |op: &Op| {
        let i = if op.from_a { 0 } else { 1 };
        wcs[i].iter().any(|w| w.wr_id == op.slot && w.status == WcStatus::Success)
    };
    for op in c.ops.iter().filter(|o| ok(o)) {
        let (me, peer) = side(op.from_a);
        let data = pattern(seed, op);
        let mut buf = vec![0u8; op.len as usize];
        match op.kind {
            Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm => {
                peer.mem.read(remote_off(op) as usize, &mut buf);
                if buf != data {
                    return Err(format!(
                        "wr {} ({:?}, {} bytes): data at the target differs",
                        op.slot, op.kind, op.len
                    ));
                }
                if !matches!(op.kind, Kind::Write) {
                    let r = if op.from_a { &recvs[1] } else { &recvs[0] };
                    let n = r.iter().filter(|w| w.wr_id == op.slot).count();
                    let w = r.iter().find(|w| w.wr_id == op.slot);
                    if n != 1 || w.is_some_and(|w| w.byte_len != op.len || w.status != WcStatus::Success) {
                        return Err(format!("wr {}: {n} receive completions: {w:?}", op.slot));
                    }
                }
            }
            Kind::Read => {
                me.mem.read(local_off(op) as usize, &mut buf);
                let inverted: Vec<u8> = data.iter().map(|x| !x).collect();
                if buf != inverted {
                    return Err(format!("wr {} (READ, {} bytes): data read differs", op.slot, op.len));
                }
            }
            Kind::FetchAdd(add) => {
                me.mem.read(local_off(op) as usize, &mut buf);
                let mut v = [0u8; 8];
                peer.mem.read(remote_off(op) as usize, &mut v);
                if buf != ATOMIC_INIT.to_ne_bytes() || u64::from_ne_bytes(v) != ATOMIC_INIT + add {
                    return Err(format!(
                        "wr {}: fetch-add not applied exactly once ({:?})",
                        op.slot,
                        u64::from_ne_bytes(v)
                    ));
                }
            }
            Kind::CompareSwap => {
                me.mem.read(local_off(op) as usize, &mut buf);
                let mut v = [0u8; 8];
                peer.mem.read(remote_off(op) as usize, &mut v);
                if buf != ATOMIC_INIT.to_ne_bytes() || u64::from_ne_bytes(v) != op.slot + 7 {
                    return Err(format!("wr {}: compare-swap not applied exactly once", op.slot));
                }
            }
        }
    }
    Ok(if exhausted { Outcome::RetryExhausted } else { Outcome::Clean })
}

#[test]
fn random_operations_under_faults_complete_exactly_once_with_exact_data() {
    let seeds: Vec<u64> = match std::env::var("PROPERTY_SEED") {
        Ok(s) => vec![s.parse().expect("PROPERTY_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("PROPERTY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
            (0..n).collect()
        }
    };
    if std::env::var("PROPERTY_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .without_time()
            .with_test_writer()
            .try_init();
    }
    let mut failures = Vec::new();
    let mut exhausted = 0usize;
    for &seed in &seeds {
        let outcome = std::panic::catch_unwind(|| run(seed)).unwrap_or_else(|p| {
            Err(p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default())
        });
        if outcome == Ok(Outcome::RetryExhausted) {
            exhausted += 1;
            if std::env::var("PROPERTY_VERBOSE").is_ok() {
                let l = case(seed).link;
                eprintln!("seed {seed}: retry exhaustion at loss {} corrupt {}", l.loss, l.corrupt);
            }
        }
        if let Err(e) = outcome {
            eprintln!("seed {seed} failed: {e}\n  case: {:?}\n  replay: PROPERTY_SEED={seed} cargo test -p rdma-transport --test properties", case(seed));
            failures.push(seed);
            if failures.len() >= 5 {
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} seeds failed, first {:?}", failures.len(), seeds.len(), failures);
    eprintln!(
        "{} seeds: {} ran clean, {} ended in retry exhaustion under loss",
        seeds.len(),
        seeds.len() - exhausted,
        exhausted
    );
    assert!(
        exhausted * 100 <= seeds.len().max(100),
        "retry exhaustion in {exhausted} of {} seeds is too often",
        seeds.len()
    );
}
