//! The client side: it drives the RDMA traffic and measures.

pub use super::oob::OOB_TIMEOUT;
use super::oob::{peer_text, Hello, Msg, Oob, SideInfo};
use super::perftest::{self, BwReport, Link};
use super::report::{Counters, ProgressLine, Report};
use super::side::{self, note, remote_addr, Side};
use super::{AtomicType, Config, PerfError, TestKind};
use hdrhistogram::Histogram;
use rdma_core_rs::*;
use std::result::Result;
use std::time::{Duration, Instant};

fn expect_info(m: Msg) -> Result<SideInfo, PerfError> {
    match m {
        Msg::Info(i) => Ok(i),
        other => Err(unexpected(other)),
    }
}

/// A message that is not the one expected (or the peer's error), as an
/// error that prints safely.
fn unexpected(m: Msg) -> PerfError {
    match m {
        Msg::Error(e) => PerfError::Peer(peer_text(&e)),
        other => PerfError::Peer(format!("unexpected message {}", peer_text(&format!("{other:?}")))),
    }
}

/// The next message; one that does not parse is answered with an `Error`.
fn recv_checked(oob: &mut dyn Oob, timeout: Duration) -> Result<Msg, PerfError> {
    oob.recv(timeout).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            let _ = oob.send(&Msg::Error(e.to_string()));
        }
        PerfError::Oob(e)
    })
}

pub fn run(cfg: &Config, oob: &mut dyn Oob) -> Result<Report, PerfError> {
    let device = cfg.device();
    let side = Side::open(cfg.bind, cfg, device, side::layout(cfg))?;
    oob.send(&Msg::Hello(Hello {
        test: cfg.test.name().into(),
        size: cfg.size,
        iters: cfg.iters,
        duration_ms: cfg.duration.map(|d| d.as_millis() as u64),
        qps: cfg.qps,
        mtu: cfg.mtu.bytes(),
        tx_depth: cfg.tx_depth,
        atomic: cfg.atomic.name().into(),
        verify: cfg.verify,
    }))?;
    let peer = expect_info(recv_checked(oob, OOB_TIMEOUT)?)?;
    // The server's lists and targets are checked before they size anything.
    if let Err(e) = peer.check(cfg.qps, cfg.mem_budget) {
        let _ = oob.send(&Msg::Error(e.to_string()));
        return Err(e);
    }
    oob.send(&Msg::Info(side.info()?))?;
    side.connect(&peer, cfg)?;
    match recv_checked(oob, OOB_TIMEOUT)? {
        Msg::Ready => {}
        other => return Err(unexpected(other)),
    }
    let outcome = traffic(cfg, &side, &peer, false);
    let run = match outcome {
        Ok(r) => r,
        Err(e) => {
            let _ = oob.send(&Msg::Error(format!("the client failed: {e}")));
            return Err(e);
        }
    };
    oob.send(&Msg::Done { iters: run.iters.clone() })?;
    let wait = OOB_TIMEOUT + cfg.duration.unwrap_or_default();
    let (server_ok, server_detail, server_retransmits) = match recv_checked(oob, wait)? {
        Msg::Result { verified, detail, retransmits } => (verified, detail.map(|d| peer_text(&d)), retransmits),
        other => return Err(unexpected(other)),
    };
    let total: u64 = run.iters.iter().sum();
    let mut report = Report::new(cfg, "client", total, run.elapsed, run.rtt.as_ref());
    report.counters = Counters::of(&side.ctx);
    report.retransmits = report.counters.retransmits.saturating_add(server_retransmits);
    if cfg.verify {
        let detail = run.verify_error.or(server_detail);
        report.verified = Some(detail.is_none() && server_ok != Some(false));
        report.verify_detail = detail;
    }
    Ok(report)
}

/// Runs the test's traffic against `peer` (`foreign`: a perftest peer,
/// whose memory starts with data of its own).
fn traffic(cfg: &Config, side: &Side, peer: &SideInfo, foreign: bool) -> Result<Run, PerfError> {
    if cfg.test.is_latency() {
        latency(cfg, side, peer, foreign)
    } else {
        bandwidth(cfg, side, peer, foreign)
    }
}

/// What the traffic loop measured.
struct Run {
    iters: Vec<u64>,
    elapsed: Duration,
    rtt: Option<Histogram<u64>>,
    verify_error: Option<String>,
}

fn wr_id(q: usize, i: u64) -> u64 {
    (q as u64) << 48 | i
}

fn split_wr_id(id: u64) -> (usize, u64) {
    ((id >> 48) as usize, id & ((1 << 48) - 1))
}

fn bad_status(wc: &WorkCompletion) -> PerfError {
    let (q, i) = split_wr_id(wc.wr_id);
    PerfError::Failed(format!("QP {q} work request {i} completed with status {:?} ({})", wc.status, wc.status.as_str()))
}

/// The 8-byte value an atomic of round `r` should find (and leave).
fn atomic_op(atomic: AtomicType, remote_addr: u64, rkey: u32, round: u64) -> SendOp {
    match atomic {
        AtomicType::FetchAndAdd => SendOp::FetchAdd { remote_addr, rkey, add: 1 },
        AtomicType::CmpAndSwap => SendOp::CompareSwap { remote_addr, rkey, compare: round, swap: round + 1 },
    }
}

/// What atomics returned, per remote target: each returns the value the
/// one before it left. Our own server starts every target at 0; a foreign
/// peer's memory starts at whatever it holds, learned from the first return.
struct AtomicTrack {
    base: Vec<Option<u64>>,
    targets: usize,
}

impl AtomicTrack {
    fn new(qps: usize, targets: usize, known_zero: bool) -> AtomicTrack {
        AtomicTrack { base: vec![known_zero.then_some(0); qps * targets.max(1)], targets: targets.max(1) }
    }

    /// Checks what op `j` of QP `q` returned into local slot `s`.
    fn check(&mut self, side: &Side, q: usize, s: usize, j: u64) -> Result<(), String> {
        let got = side.mr.read_u64(side.offset(q, s)).map_err(|e| e.to_string())?;
        let (t, round) = ((j % self.targets as u64) as usize, j / self.targets as u64);
        let base = *self.base[q * self.targets + t].get_or_insert(got.wrapping_sub(round));
        let want = base.wrapping_add(round);
        if got == want {
            Ok(())
        } else {
            Err(format!("atomic: QP {q} target {t} round {round}: returned {got}, expected {want}"))
        }
    }
}

fn bandwidth(cfg: &Config, side: &Side, peer: &SideInfo, foreign: bool) -> Result<Run, PerfError> {
    let nq = side.qps.len();
    let slots = side.slots as u64;
    let peer_slots = peer.slots.max(1) as u64;
    // Only the atomic tests track their targets (peer.slots is the peer's
    // number, checked against the budget when it arrived).
    let tracked = if cfg.test.is_atomic() { peer.slots } else { 1 };
    let mut atomics = AtomicTrack::new(nq, tracked, !foreign);
    let depth = (cfg.tx_depth as u64).min(slots);
    let target = if cfg.duration.is_some() { None } else { Some(cfg.iters) };
    // Unsignaled runs of requests, one completion each; every request is
    // signaled in duration mode so the count at the end is exact.
    let sig_every = if target.is_some() { (depth / 4).clamp(1, 16) } else { 1 };
    let size = cfg.size;
    let mut posted = vec![0u64; nq];
    let mut completed = vec![0u64; nq];
    let mut scratch = vec![0u8; side.slot_len];
    let mut wcs = Vec::with_capacity(1024);
    let mut batch = vec![SendWr::new(0, SendOp::Send, vec![side.sge(0, 0, size)]); 32];
    let mut verify_error = None;
    let mut progress = ProgressLine::new(cfg.progress, cfg.test.name(), size);
    let start = Instant::now();
    let deadline = cfg.duration.map(|d| start + d);
    let mut stop = false;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stop = true;
        }
        let mut posted_any = false;
        for q in 0..nq {
            let mut n = 0;
            while !stop && posted[q] - completed[q] < depth && target.is_none_or(|t| posted[q] < t) && n < batch.len() {
                let i = posted[q];
                let s = (i % slots) as usize;
                let off = side.offset(q, s);
                let last = target.is_some_and(|t| i + 1 == t);
                let op = match cfg.test {
                    TestKind::WriteBw => {
                        if cfg.verify {
                            side::pattern(&mut scratch[..size], q, i);
                            side.mr.write(off, &scratch[..size])?;
                        }
                        SendOp::RdmaWrite { remote_addr: remote_addr(peer, q, i), rkey: peer.rkeys[q] }
                    }
                    TestKind::SendBw => {
                        if cfg.verify {
                            side::pattern(&mut scratch[..size], q, i);
                            side.mr.write(off, &scratch[..size])?;
                            SendOp::SendWithImm { imm: i as u32 }
                        } else {
                            SendOp::Send
                        }
                    }
                    TestKind::ReadBw => {
                        if cfg.verify {
                            if i >= slots {
                                // what the read of message i - slots brought
                                let target = (i - slots) % peer_slots;
                                side.mr.read(off, &mut scratch[..size])?;
                                note(&mut verify_error, side::check(&scratch[..size], q, target, "read-bw"));
                            }
                            scratch[..size].fill(0);
                            side.mr.write(off, &scratch[..size])?;
                        }
                        SendOp::RdmaRead { remote_addr: remote_addr(peer, q, i), rkey: peer.rkeys[q] }
                    }
                    TestKind::AtomicBw => {
                        if cfg.verify && i >= slots {
                            note(&mut verify_error, atomics.check(side, q, s, i - slots));
                        }
                        atomic_op(cfg.atomic, remote_addr(peer, q, i), peer.rkeys[q], i / peer_slots)
                    }
                    _ => unreachable!("bandwidth tests only"),
                };
                // The requests are built once and rewritten, as perftest's
                // are: posting copies them, so nothing is allocated per message.
                let wr = &mut batch[n];
                (wr.wr_id, wr.op, wr.sg_list[0]) = (wr_id(q, i), op, side.sge(q, s, size));
                wr.signaled = (i + 1) % sig_every == 0 || last;
                n += 1;
                posted[q] += 1;
            }
            if n > 0 {
                side.qps[q].post_send(&batch[..n])?;
                posted_any = true;
            }
        }
        wcs.clear();
        if posted_any {
            side.cq.poll(&mut wcs, 1024)?;
        } else {
            // Nothing to post until something completes: sleep on the socket.
            side.cq.wait(&mut wcs, 1024, Some(Duration::from_millis(5)))?;
        }
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return Err(bad_status(wc));
            }
            let (q, i) = split_wr_id(wc.wr_id);
            completed[q] = completed[q].max(i + 1);
        }
        let done: u64 = completed.iter().sum();
        progress.tick(done, target.map(|t| t * nq as u64));
        if (0..nq).all(|q| completed[q] == posted[q] && (stop || target.is_some_and(|t| posted[q] >= t))) {
            break;
        }
    }
    let elapsed = start.elapsed();
    if cfg.verify {
        // The last message of every slot.
        for (q, &n) in posted.iter().enumerate() {
            for i in n.saturating_sub(slots)..n {
                let s = (i % slots) as usize;
                match cfg.test {
                    TestKind::ReadBw => {
                        side.mr.read(side.offset(q, s), &mut scratch[..size])?;
                        note(&mut verify_error, side::check(&scratch[..size], q, i % peer_slots, "read-bw"));
                    }
                    TestKind::AtomicBw => note(&mut verify_error, atomics.check(side, q, s, i)),
                    _ => {}
                }
            }
        }
    }
    Ok(Run { iters: completed, elapsed, rtt: None, verify_error })
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// Polls until a completion of `want` arrives; returns it. Other
/// completions (unsignaled-run sends) are checked and dropped.
fn poll_for(
    side: &Side,
    wcs: &mut Vec<WorkCompletion>,
    want: WcOpcode,
    events: bool,
) -> Result<WorkCompletion, PerfError> {
    let start = Instant::now();
    loop {
        wcs.clear();
        if events {
            side.cq.wait(wcs, 16, Some(Duration::from_millis(100)))?;
        } else {
            side.cq.poll(wcs, 16)?;
        }
        let mut found = None;
        for wc in wcs.iter() {
            if wc.status != WcStatus::Success {
                return Err(bad_status(wc));
            }
            if wc.opcode == want {
                found = Some(*wc);
            }
        }
        if let Some(wc) = found {
            return Ok(wc);
        }
        if start.elapsed() > OOB_TIMEOUT {
            return Err(PerfError::Failed(format!("no {want:?} completion in {OOB_TIMEOUT:?}")));
        }
    }
}

/// Polls memory until the last byte of slot 1 shows `marker`.
fn poll_marker(side: &Side, wcs: &mut Vec<WorkCompletion>, size: usize, marker: u8) -> Result<(), PerfError> {
    let at = side.offset(0, 1) + size - 1;
    let start = Instant::now();
    let mut b = [0u8];
    loop {
        wcs.clear();
        side.cq.poll(wcs, 16)?; // progress, and the WRITE completions
        if let Some(wc) = wcs.iter().find(|w| w.status != WcStatus::Success) {
            return Err(bad_status(wc));
        }
        side.mr.read(at, &mut b)?;
        if b[0] == marker {
            return Ok(());
        }
        if start.elapsed() > OOB_TIMEOUT {
            return Err(PerfError::Failed(format!("the peer's WRITE did not arrive in {OOB_TIMEOUT:?}")));
        }
    }
}

fn latency(cfg: &Config, side: &Side, peer: &SideInfo, foreign: bool) -> Result<Run, PerfError> {
    let size = cfg.size;
    let qp = &side.qps[0];
    let mut hist = new_histogram();
    let mut atomics = AtomicTrack::new(1, 1, !foreign);
    let mut wcs = Vec::with_capacity(16);
    let mut buf = vec![0u8; size];
    let mut verify_error = None;
    let mut progress = ProgressLine::new(cfg.progress, cfg.test.name(), size);
    let start = Instant::now();
    let deadline = cfg.duration.map(|d| start + d);
    // The requests, built once (posting copies them): what each test sends
    // from (SEND and WRITE: slot 0) or into (READ and atomics: slot 1).
    let mut recv = RecvWr { wr_id: 0, sg_list: vec![side.sge(0, 1, size)] };
    let sge = match cfg.test {
        TestKind::SendLat | TestKind::WriteLat => side.sge(0, 0, size),
        TestKind::AtomicLat => side.sge(0, 1, 8),
        _ => side.sge(0, 1, size),
    };
    let mut wr = SendWr::new(0, SendOp::Send, vec![sge]);
    let mut i = 0u64;
    while deadline.map_or(i < cfg.iters, |d| Instant::now() < d) {
        let t0;
        match cfg.test {
            TestKind::SendLat => {
                recv.wr_id = wr_id(0, i);
                qp.post_recv(std::slice::from_ref(&recv))?;
                if cfg.verify {
                    side::pattern(&mut buf, 0, i);
                    side.mr.write(side.offset(0, 0), &buf)?;
                }
                (wr.wr_id, wr.op) = (wr_id(0, i), SendOp::Send);
                t0 = Instant::now();
                qp.post_send(std::slice::from_ref(&wr))?;
                let wc = poll_for(side, &mut wcs, WcOpcode::Recv, cfg.events)?;
                hist.record(t0.elapsed().as_nanos() as u64).ok();
                if cfg.verify {
                    if wc.byte_len as usize != size {
                        note(
                            &mut verify_error,
                            Err(format!("send-lat: message {i}: {} bytes, expected {size}", wc.byte_len)),
                        );
                    }
                    side.mr.read(side.offset(0, 1), &mut buf)?;
                    note(&mut verify_error, side::check(&buf, 1, i, "send-lat"));
                }
            }
            TestKind::WriteLat => {
                // As perftest: the server writes first, then each side
                // answers the other's WRITE with its own; a round trip is
                // from this side's WRITE i to the server's WRITE i + 1.
                if i == 0 {
                    poll_marker(side, &mut wcs, size, side::marker(0))?;
                    if cfg.verify {
                        side.mr.read(side.offset(0, 1), &mut buf)?;
                        note(&mut verify_error, side::check_lat(&buf, 0, "the server"));
                    }
                }
                side::lat_message(&mut buf, i);
                side.mr.write(side.offset(0, 0), &buf)?;
                let op = SendOp::RdmaWrite { remote_addr: remote_addr(peer, 0, 0), rkey: peer.rkeys[0] };
                (wr.wr_id, wr.op) = (wr_id(0, i), op);
                t0 = Instant::now();
                qp.post_send(std::slice::from_ref(&wr))?;
                let more = deadline.map_or(i + 1 < cfg.iters, |d| Instant::now() < d);
                if more {
                    poll_marker(side, &mut wcs, size, side::marker(i + 1))?;
                    hist.record(t0.elapsed().as_nanos() as u64).ok();
                    if cfg.verify {
                        side.mr.read(side.offset(0, 1), &mut buf)?;
                        note(&mut verify_error, side::check_lat(&buf, i + 1, "the server"));
                    }
                }
            }
            TestKind::ReadLat => {
                if cfg.verify {
                    buf.fill(0);
                    side.mr.write(side.offset(0, 1), &buf)?;
                }
                let op = SendOp::RdmaRead { remote_addr: remote_addr(peer, 0, 0), rkey: peer.rkeys[0] };
                (wr.wr_id, wr.op) = (wr_id(0, i), op);
                t0 = Instant::now();
                qp.post_send(std::slice::from_ref(&wr))?;
                poll_for(side, &mut wcs, WcOpcode::RdmaRead, cfg.events)?;
                hist.record(t0.elapsed().as_nanos() as u64).ok();
                if cfg.verify {
                    side.mr.read(side.offset(0, 1), &mut buf)?;
                    note(&mut verify_error, side::check(&buf, 0, 0, "read-lat"));
                }
            }
            TestKind::AtomicLat => {
                let op = atomic_op(cfg.atomic, remote_addr(peer, 0, 0), peer.rkeys[0], i);
                (wr.wr_id, wr.op) = (wr_id(0, i), op);
                t0 = Instant::now();
                qp.post_send(std::slice::from_ref(&wr))?;
                let want = if cfg.atomic == AtomicType::FetchAndAdd { WcOpcode::FetchAdd } else { WcOpcode::CompSwap };
                poll_for(side, &mut wcs, want, cfg.events)?;
                hist.record(t0.elapsed().as_nanos() as u64).ok();
                if cfg.verify {
                    note(&mut verify_error, atomics.check(side, 0, 1, i));
                }
            }
            _ => unreachable!("latency tests only"),
        }
        i += 1;
        progress.tick(i, deadline.is_none().then_some(cfg.iters));
    }
    let elapsed = start.elapsed();
    // Collect the completions of the last sends so the QP ends quiet.
    let _ = side.cq.wait(&mut wcs, 16, Some(Duration::from_millis(1)));
    Ok(Run { iters: vec![i], elapsed, rtt: Some(hist), verify_error })
}

/// The client against a perftest server (`ib_write_bw SERVER` style).
pub fn run_perftest(cfg: &Config, link: &mut Link) -> Result<Report, PerfError> {
    let s = perftest::session::Session::connect(cfg, link)?;
    s.shake(link, &s.script.after)?;
    let (cfg, side, peer, script) = (&s.cfg, &s.side, &s.peer, &s.script);
    let run = traffic(cfg, side, peer, true)?;
    if script.reports {
        s.shake(link, &[0])?;
        let total: u64 = run.iters.iter().sum();
        let secs = run.elapsed.as_secs_f64().max(1e-9);
        let mbs = total as f64 * cfg.size as f64 / secs / f64::from(1 << 20);
        let mine_report = BwReport {
            size: cfg.size as u64,
            iters: total,
            bw_peak: mbs,
            bw_avg: mbs,
            msg_rate: total as f64 / secs / 1e6,
        };
        link.reports(&mine_report)?;
    }
    if script.close {
        s.shake(link, &[0])?;
        link.done()?;
    }
    let total: u64 = run.iters.iter().sum();
    let mut report = Report::new(cfg, "client", total, run.elapsed, run.rtt.as_ref());
    report.counters = Counters::of(&side.ctx);
    report.retransmits = report.counters.retransmits;
    if cfg.verify {
        report.verified = Some(run.verify_error.is_none());
        report.verify_detail = run.verify_error;
    }
    s.hang_up(link);
    Ok(report)
}
