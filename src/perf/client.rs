//! The client side: it drives the RDMA traffic and measures.

use super::oob::{Hello, Msg, Oob, SideInfo};
use super::report::{Counters, ProgressLine, Report};
use super::side::{self, note, remote_addr, Side};
use super::{AtomicType, Config, PerfError, TestKind};
use hdrhistogram::Histogram;
use rdma_core_rs::*;
use std::result::Result;
use std::time::{Duration, Instant};

/// How long to wait for the peer between phases.
pub const OOB_TIMEOUT: Duration = Duration::from_secs(30);

fn expect_info(m: Msg) -> Result<SideInfo, PerfError> {
    match m {
        Msg::Info(i) => Ok(i),
        Msg::Error(e) => Err(PerfError::Peer(e)),
        other => Err(PerfError::Peer(format!("unexpected message {other:?}"))),
    }
}

pub fn run(cfg: &Config, oob: &mut dyn Oob) -> Result<Report, PerfError> {
    let device = DeviceConfig { faults: cfg.faults, ..DeviceConfig::default() };
    let side = Side::open(cfg.bind, cfg, device)?;
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
    let peer = expect_info(oob.recv(OOB_TIMEOUT)?)?;
    oob.send(&Msg::Info(side.info()?))?;
    side.connect(&peer, cfg)?;
    match oob.recv(OOB_TIMEOUT)? {
        Msg::Ready => {}
        Msg::Error(e) => return Err(PerfError::Peer(e)),
        other => return Err(PerfError::Peer(format!("unexpected message {other:?}"))),
    }
    let outcome = if cfg.test.is_latency() { latency(cfg, &side, &peer) } else { bandwidth(cfg, &side, &peer) };
    let run = match outcome {
        Ok(r) => r,
        Err(e) => {
            let _ = oob.send(&Msg::Error(format!("the client failed: {e}")));
            return Err(e);
        }
    };
    oob.send(&Msg::Done { iters: run.iters.clone() })?;
    let wait = OOB_TIMEOUT + cfg.duration.unwrap_or_default();
    let (server_ok, server_detail, server_retransmits) = match oob.recv(wait)? {
        Msg::Result { verified, detail, retransmits } => (verified, detail, retransmits),
        Msg::Error(e) => return Err(PerfError::Peer(e)),
        other => return Err(PerfError::Peer(format!("unexpected message {other:?}"))),
    };
    let total: u64 = run.iters.iter().sum();
    let mut report = Report::new(cfg, "client", total, run.elapsed, run.rtt.as_ref());
    report.counters = Counters::of(&side.ctx);
    report.retransmits = report.counters.retransmits + server_retransmits;
    if cfg.verify {
        let detail = run.verify_error.or(server_detail);
        report.verified = Some(detail.is_none() && server_ok != Some(false));
        report.verify_detail = detail;
    }
    Ok(report)
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

/// Checks the original value an atomic of round `round` returned.
fn check_atomic(side: &Side, q: usize, s: usize, round: u64) -> Result<(), String> {
    let got = side.mr.read_u64(side.offset(q, s)).map_err(|e| e.to_string())?;
    if got == round {
        Ok(())
    } else {
        Err(format!("atomic: QP {q} slot {s} round {round}: returned {got}, expected {round}"))
    }
}

fn bandwidth(cfg: &Config, side: &Side, peer: &SideInfo) -> Result<Run, PerfError> {
    let nq = side.qps.len();
    let slots = side.slots as u64;
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
    let mut batch = Vec::with_capacity(32);
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
            batch.clear();
            while !stop && posted[q] - completed[q] < depth && target.is_none_or(|t| posted[q] < t) && batch.len() < 32
            {
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
                        SendOp::RdmaWrite { remote_addr: remote_addr(peer, q, s), rkey: peer.rkey }
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
                                side.mr.read(off, &mut scratch[..size])?;
                                note(&mut verify_error, side::check(&scratch[..size], q, s as u64, "read-bw"));
                            }
                            scratch[..size].fill(0);
                            side.mr.write(off, &scratch[..size])?;
                        }
                        SendOp::RdmaRead { remote_addr: remote_addr(peer, q, s), rkey: peer.rkey }
                    }
                    TestKind::AtomicBw => {
                        let round = i / slots;
                        if cfg.verify && i >= slots {
                            note(&mut verify_error, check_atomic(side, q, s, round - 1));
                        }
                        atomic_op(cfg.atomic, remote_addr(peer, q, s), peer.rkey, round)
                    }
                    _ => unreachable!("bandwidth tests only"),
                };
                let mut wr = SendWr::new(wr_id(q, i), op, vec![side.sge(q, s, size)]);
                wr.signaled = (i + 1) % sig_every == 0 || last;
                batch.push(wr);
                posted[q] += 1;
            }
            if !batch.is_empty() {
                side.qps[q].post_send(&batch)?;
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
                        note(&mut verify_error, side::check(&scratch[..size], q, s as u64, "read-bw"));
                    }
                    TestKind::AtomicBw => note(&mut verify_error, check_atomic(side, q, s, i / slots)),
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
fn poll_for(side: &Side, wcs: &mut Vec<WorkCompletion>, want: WcOpcode) -> Result<WorkCompletion, PerfError> {
    let start = Instant::now();
    loop {
        wcs.clear();
        side.cq.poll(wcs, 16)?;
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

fn latency(cfg: &Config, side: &Side, peer: &SideInfo) -> Result<Run, PerfError> {
    let size = cfg.size;
    let qp = &side.qps[0];
    let mut hist = new_histogram();
    let mut wcs = Vec::with_capacity(16);
    let mut buf = vec![0u8; size];
    let mut verify_error = None;
    let mut progress = ProgressLine::new(cfg.progress, cfg.test.name(), size);
    let start = Instant::now();
    let deadline = cfg.duration.map(|d| start + d);
    let mut i = 0u64;
    while deadline.map_or(i < cfg.iters, |d| Instant::now() < d) {
        let t0;
        match cfg.test {
            TestKind::SendLat => {
                qp.post_recv(&[RecvWr { wr_id: wr_id(0, i), sg_list: vec![side.sge(0, 1, size)] }])?;
                if cfg.verify {
                    side::pattern(&mut buf, 0, i);
                    side.mr.write(side.offset(0, 0), &buf)?;
                }
                t0 = Instant::now();
                qp.post_send(&[SendWr::new(wr_id(0, i), SendOp::Send, vec![side.sge(0, 0, size)])])?;
                let wc = poll_for(side, &mut wcs, WcOpcode::Recv)?;
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
                side::lat_message(&mut buf, i);
                side.mr.write(side.offset(0, 0), &buf)?;
                t0 = Instant::now();
                let op = SendOp::RdmaWrite { remote_addr: remote_addr(peer, 0, 1), rkey: peer.rkey };
                qp.post_send(&[SendWr::new(wr_id(0, i), op, vec![side.sge(0, 0, size)])])?;
                poll_marker(side, &mut wcs, size, side::marker(i))?;
                hist.record(t0.elapsed().as_nanos() as u64).ok();
                if cfg.verify {
                    side.mr.read(side.offset(0, 1), &mut buf)?;
                    note(&mut verify_error, side::check_lat(&buf, i, "the server"));
                }
            }
            TestKind::ReadLat => {
                if cfg.verify {
                    buf.fill(0);
                    side.mr.write(side.offset(0, 1), &buf)?;
                }
                t0 = Instant::now();
                let op = SendOp::RdmaRead { remote_addr: remote_addr(peer, 0, 0), rkey: peer.rkey };
                qp.post_send(&[SendWr::new(wr_id(0, i), op, vec![side.sge(0, 1, size)])])?;
                poll_for(side, &mut wcs, WcOpcode::RdmaRead)?;
                hist.record(t0.elapsed().as_nanos() as u64).ok();
                if cfg.verify {
                    side.mr.read(side.offset(0, 1), &mut buf)?;
                    note(&mut verify_error, side::check(&buf, 0, 0, "read-lat"));
                }
            }
            TestKind::AtomicLat => {
                t0 = Instant::now();
                let op = atomic_op(cfg.atomic, remote_addr(peer, 0, 0), peer.rkey, i);
                qp.post_send(&[SendWr::new(wr_id(0, i), op, vec![side.sge(0, 1, 8)])])?;
                let want = if cfg.atomic == AtomicType::FetchAndAdd { WcOpcode::FetchAdd } else { WcOpcode::CompSwap };
                poll_for(side, &mut wcs, want)?;
                hist.record(t0.elapsed().as_nanos() as u64).ok();
                if cfg.verify {
                    note(&mut verify_error, check_atomic(side, 0, 1, i));
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
