//! The server side: it answers the client (latency ping-pongs, receives
//! of send-bw) or stays passive while the engine serves WRITEs, READs and
//! atomics, and checks what arrived.

use super::config;
use super::oob::OOB_TIMEOUT;
use super::oob::{check_done, peer_text, Hello, Msg, Oob, SideInfo};
use super::perftest::{self, BwReport, Link};
use super::report::{Counters, Report};
use super::side::{self, note, remote_addr, Side};
use super::{AtomicType, Config, PerfError, TestKind};
use rdma_core_rs::*;
use std::net::IpAddr;
use std::result::Result;
use std::time::{Duration, Instant};

/// The client's parameters, which the server adopts: checked as the
/// command line's are, and against this side's memory budget, before
/// anything is allocated.
pub fn adopt(cfg: &Config, h: &Hello) -> Result<Config, PerfError> {
    let test = TestKind::from_name(&h.test)
        .ok_or_else(|| PerfError::Peer(format!("unknown test \"{}\"", peer_text(&h.test))))?;
    let mtu = Mtu::from_bytes(h.mtu).ok_or_else(|| PerfError::Peer(format!("bad MTU {}", h.mtu)))?;
    let atomic = match h.atomic.as_str() {
        "CMP_AND_SWAP" => AtomicType::CmpAndSwap,
        _ => AtomicType::FetchAndAdd,
    };
    let c = Config {
        test,
        size: h.size,
        iters: h.iters,
        duration: h.duration_ms.map(Duration::from_millis),
        qps: h.qps,
        mtu,
        tx_depth: h.tx_depth,
        atomic,
        verify: h.verify,
        ..cfg.clone()
    };
    c.validate().map_err(|e| PerfError::Peer(format!("the client asked for something invalid: {e}")))?;
    super::budget::check_side(&c, &side::layout(&c)).map_err(|mut e| {
        e.what = format!("the client's Hello: {}", e.what);
        e
    })?;
    Ok(c)
}

/// The next message; one that does not parse (or a line over the limit)
/// is answered with an `Error` before this side gives up.
fn recv_checked(oob: &mut dyn Oob, timeout: Duration) -> Result<Msg, PerfError> {
    oob.recv(timeout).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            let _ = oob.send(&Msg::Error(e.to_string()));
        }
        PerfError::Oob(e)
    })
}

/// Gives up on the client: tells it why, then returns the error.
fn refuse<T>(oob: &mut dyn Oob, e: PerfError) -> Result<T, PerfError> {
    tracing::warn!(error = %e, "refusing the client");
    let _ = oob.send(&Msg::Error(e.to_string()));
    Err(e)
}

pub fn run(cfg: &Config, addr: IpAddr, oob: &mut dyn Oob) -> Result<Report, PerfError> {
    let hello = match recv_checked(oob, OOB_TIMEOUT)? {
        Msg::Hello(h) => h,
        other => return refuse(oob, unexpected("a Hello", &other)),
    };
    let cfg = match adopt(cfg, &hello) {
        Ok(c) => c,
        Err(e) => return refuse(oob, e),
    };
    let device = cfg.device();
    let side = match Side::open(addr, &cfg, device, side::layout(&cfg)) {
        Ok(s) => s,
        Err(e) => {
            let _ = oob.send(&Msg::Error(format!("the server could not set up: {e}")));
            return Err(e);
        }
    };
    oob.send(&Msg::Info(side.info()?))?;
    let peer = match recv_checked(oob, OOB_TIMEOUT)? {
        Msg::Info(i) => i,
        other => return refuse(oob, unexpected("Info", &other)),
    };
    if let Err(e) = peer.check(cfg.qps, cfg.mem_budget).and_then(|()| side.connect(&peer, &cfg)) {
        return refuse(oob, e);
    }
    prepare(&cfg, &side)?;
    oob.send(&Msg::Ready)?;
    let start = Instant::now();
    let result = serve(&cfg, &side, &peer, &mut until_done(oob, config::server_is_passive(cfg.test), cfg.qps));
    let elapsed = start.elapsed();
    let (iters, mut verify_error) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = oob.send(&Msg::Error(format!("the server failed: {e}")));
            super::report::note_progress_gaps(&side.ctx);
            return Err(e);
        }
    };
    if cfg.verify && verify_error.is_none() {
        verify_error = final_check(&cfg, &side, &iters, side.slots)?.err();
    }
    let counters = Counters::of(&side.ctx);
    let verified = cfg.verify.then_some(verify_error.is_none());
    oob.send(&Msg::Result { verified, detail: verify_error.clone(), retransmits: counters.retransmits })?;
    let mut report = Report::new(&cfg, "server", total(&iters), elapsed, None);
    report.retransmits = counters.retransmits;
    report.counters = counters;
    report.verified = verified;
    report.verify_detail = verify_error;
    Ok(report)
}

/// Fills what the client reads and posts the first receives.
fn prepare(cfg: &Config, side: &Side) -> Result<(), PerfError> {
    let mut buf = vec![0u8; cfg.size];
    match cfg.test {
        TestKind::ReadBw => {
            for q in 0..side.qps.len() {
                for s in 0..side.slots {
                    side::pattern(&mut buf, q, s as u64);
                    side.mr.write(side.offset(q, s), &buf)?;
                }
            }
        }
        TestKind::ReadLat => {
            side::pattern(&mut buf, 0, 0);
            side.mr.write(side.target(0, 0), &buf)?;
        }
        TestKind::SendBw => {
            for (q, qp) in side.qps.iter().enumerate() {
                let wrs: Vec<RecvWr> = (0..side.slots)
                    .map(|s| RecvWr { wr_id: (q * side.slots + s) as u64, sg_list: vec![side.sge(q, s, cfg.size)] })
                    .collect();
                qp.post_recv(&wrs)?;
            }
        }
        TestKind::SendLat => {
            side.qps[0].post_recv(&[RecvWr { wr_id: 0, sg_list: vec![side.sge(0, 1, cfg.size)] }])?;
        }
        _ => {}
    }
    Ok(())
}

/// The iterations of every QP, saturating (the counts are the client's).
fn total(iters: &[u64]) -> u64 {
    iters.iter().fold(0u64, |t, &n| t.saturating_add(n))
}

/// A message that is not the one expected, as an error naming it briefly.
fn unexpected(wanted: &str, got: &Msg) -> PerfError {
    match got {
        Msg::Error(e) => PerfError::Peer(peer_text(e)),
        other => PerfError::Peer(format!("expected {wanted}, got {}", peer_text(&format!("{other:?}")))),
    }
}

/// When the server's part ends: asked with what it served per QP so far
/// (receives of send-bw, round trips of the ping-pongs), it answers with
/// the client's per-QP iteration counts once the client is done.
type Until<'a> = dyn FnMut(&[u64]) -> Result<Option<Vec<u64>>, PerfError> + 'a;

/// The end condition of rdma-perf's own exchange: the client's Done.
fn until_done<'a>(
    oob: &'a mut dyn Oob,
    passive: bool,
    qps: usize,
) -> impl FnMut(&[u64]) -> Result<Option<Vec<u64>>, PerfError> + 'a {
    let mut done: Option<Vec<u64>> = None;
    move |served: &[u64]| {
        if done.is_none() {
            let m = oob.try_recv().inspect_err(|e| {
                if e.kind() == std::io::ErrorKind::InvalidData {
                    let _ = oob.send(&Msg::Error(e.to_string()));
                }
            })?;
            done = match peer_message(m).and_then(|d| d.map(|i| check_done(&i, qps).map(|()| i)).transpose()) {
                Ok(d) => d,
                Err(e) => return refuse(oob, e),
            };
        }
        Ok(match &done {
            Some(iters) if passive || served.iter().zip(iters).all(|(s, i)| s >= i) => Some(iters.clone()),
            _ => None,
        })
    }
}

fn peer_message(m: Option<Msg>) -> Result<Option<Vec<u64>>, PerfError> {
    match m {
        None => Ok(None),
        Some(Msg::Done { iters }) => Ok(Some(iters)),
        Some(other) => Err(unexpected("Done", &other)),
    }
}

/// Runs the server's part until the client says it is done; returns the
/// client's per-QP iteration counts and the first verification failure.
fn serve(
    cfg: &Config,
    side: &Side,
    peer: &SideInfo,
    until: &mut Until,
) -> Result<(Vec<u64>, Option<String>), PerfError> {
    let mut verify_error = None;
    let mut wcs = Vec::with_capacity(1024);
    let size = cfg.size;
    match cfg.test {
        t if config::server_is_passive(t) => loop {
            if let Some(iters) = until(&[])? {
                return Ok((iters, None));
            }
            side.ctx.progress_for(Duration::from_millis(2))?;
        },
        TestKind::SendBw => {
            let nq = side.qps.len();
            let mut received = vec![0u64; nq];
            let mut buf = vec![0u8; size];
            let mut recv = RecvWr { wr_id: 0, sg_list: vec![side.sge(0, 0, size)] }; // rewritten per receive
            loop {
                wcs.clear();
                side.cq.wait(&mut wcs, 1024, Some(Duration::from_millis(2)))?;
                for wc in &wcs {
                    if wc.status != WcStatus::Success {
                        return Err(PerfError::Failed(format!("receive completed with {:?}", wc.status)));
                    }
                    let (q, s) = ((wc.wr_id as usize) / side.slots, (wc.wr_id as usize) % side.slots);
                    received[q] += 1;
                    // An RC QP delivers in order: the nth receive completion
                    // of a QP carries the client's message n - 1 (its
                    // immediate, which wraps at 2^32). Anything else is a
                    // message lost, repeated or overtaken. Checked against a
                    // count, not a record of every message, so that a run of
                    // any length verifies in constant memory.
                    let expected = received[q] - 1;
                    let i = wc.imm_data.unwrap_or(!(expected as u32));
                    if cfg.verify && i != expected as u32 {
                        note(
                            &mut verify_error,
                            Err(format!(
                                "send-bw: QP {q} receive {expected} brought message {i}, not {}",
                                expected as u32
                            )),
                        );
                    } else if cfg.verify {
                        if wc.byte_len as usize != size {
                            note(
                                &mut verify_error,
                                Err(format!("send-bw: message {expected}: {} bytes, expected {size}", wc.byte_len)),
                            );
                        }
                        side.mr.read(side.offset(q, s), &mut buf)?;
                        note(&mut verify_error, side::check(&buf, q, expected, "send-bw"));
                    }
                    (recv.wr_id, recv.sg_list[0]) = (wc.wr_id, side.sge(q, s, size));
                    side.qps[q].post_recv(std::slice::from_ref(&recv))?;
                }
                if let Some(iters) = until(&received)? {
                    if cfg.verify {
                        for q in 0..nq {
                            if received[q] < iters[q] {
                                note(
                                    &mut verify_error,
                                    Err(format!("send-bw: QP {q} message {} never arrived", received[q])),
                                );
                            }
                        }
                    }
                    return Ok((iters, verify_error));
                }
            }
        }
        TestKind::SendLat | TestKind::WriteLat => {
            let qp = &side.qps[0];
            let mut buf = vec![0u8; size];
            let mut i = 0u64;
            // write-lat: WRITEs this side made
            let mut sent = 0u64;
            // The requests, built once and rewritten (posting copies them).
            let mut recv = RecvWr { wr_id: 0, sg_list: vec![side.sge(0, 1, size)] };
            let mut wr = SendWr::new(0, SendOp::Send, vec![side.sge(0, 0, size)]);
            let mut last_heard = Instant::now();
            loop {
                // The client says when it is done (it counts, in -D runs too).
                if let Some(iters) = until(&[i])? {
                    return Ok((iters, verify_error));
                }
                let arrived = if cfg.test == TestKind::SendLat {
                    wcs.clear();
                    if cfg.events {
                        side.cq.wait(&mut wcs, 16, Some(Duration::from_millis(2)))?;
                    } else {
                        side.cq.poll(&mut wcs, 16)?;
                    }
                    let mut got = false;
                    for wc in &wcs {
                        if wc.status != WcStatus::Success {
                            return Err(PerfError::Failed(format!("completion with {:?}", wc.status)));
                        }
                        if wc.opcode == WcOpcode::Recv {
                            got = true;
                            if cfg.verify {
                                side.mr.read(side.offset(0, 1), &mut buf)?;
                                note(&mut verify_error, side::check(&buf, 0, i, "send-lat"));
                            }
                        }
                    }
                    if got {
                        recv.wr_id = i + 1;
                        qp.post_recv(std::slice::from_ref(&recv))?;
                        if cfg.verify {
                            side::pattern(&mut buf, 1, i);
                            side.mr.write(side.offset(0, 0), &buf)?;
                        }
                        wr.wr_id = i;
                        qp.post_send(std::slice::from_ref(&wr))?;
                    }
                    got
                } else {
                    // The server writes first (as perftest's does), then
                    // answers each of the client's WRITEs with the next.
                    let mut write = |n: u64, buf: &mut Vec<u8>| -> Result<(), PerfError> {
                        side::lat_message(buf, n);
                        side.mr.write(side.offset(0, 0), buf)?;
                        let op = SendOp::RdmaWrite { remote_addr: remote_addr(peer, 0, 0), rkey: peer.rkeys[0] };
                        (wr.wr_id, wr.op) = (n, op);
                        qp.post_send(std::slice::from_ref(&wr))?;
                        Ok(())
                    };
                    if sent == 0 {
                        write(0, &mut buf)?;
                        sent = 1;
                    }
                    let at = side.offset(0, 1) + size - 1;
                    let mut b = [0u8];
                    wcs.clear();
                    side.cq.poll(&mut wcs, 16)?; // progress, and the WRITE completions
                    if let Some(wc) = wcs.iter().find(|w| w.status != WcStatus::Success) {
                        return Err(PerfError::Failed(format!("WRITE completed with {:?}", wc.status)));
                    }
                    side.mr.read(at, &mut b)?;
                    if b[0] == side::marker(i) {
                        if cfg.verify {
                            side.mr.read(side.offset(0, 1), &mut buf)?;
                            note(&mut verify_error, side::check_lat(&buf, i, "the client"));
                        }
                        if cfg.duration.is_some() || sent < cfg.iters {
                            write(sent, &mut buf)?;
                            sent += 1;
                        }
                        true
                    } else {
                        false
                    }
                };
                if arrived {
                    i += 1;
                    last_heard = Instant::now();
                } else if last_heard.elapsed() > Duration::from_millis(1) {
                    // The client is quiet (or done): sleep on the socket a little.
                    side.ctx.progress_for(Duration::from_micros(500))?;
                }
            }
        }
        _ => unreachable!("every test is covered"),
    }
}

/// Checks the server's memory at the end: the last WRITE of every slot, or
/// the final value of every atomic target.
/// `targets`: how many targets per QP the client's atomics cycle through.
fn final_check(cfg: &Config, side: &Side, iters: &[u64], targets: usize) -> Result<Result<(), String>, PerfError> {
    let slots = side.slots as u64;
    let mut buf = vec![0u8; cfg.size];
    for (q, &n) in iters.iter().enumerate() {
        match cfg.test {
            TestKind::WriteBw => {
                for i in n.saturating_sub(slots)..n {
                    let s = (i % slots) as usize;
                    side.mr.read(side.offset(q, s), &mut buf)?;
                    if let Err(e) = side::check(&buf, q, i, "write-bw") {
                        return Ok(Err(e));
                    }
                }
            }
            TestKind::AtomicBw | TestKind::AtomicLat => {
                let targets = if cfg.test == TestKind::AtomicLat { 1 } else { targets as u64 };
                for s in 0..targets {
                    let want = n / targets + u64::from(s < n % targets);
                    let got = side.mr.read_u64(side.target(q, s as usize))?;
                    if got != want {
                        return Ok(Err(format!(
                            "{}: QP {q} target {s} holds {got} after {n} operations, expected exactly {want}",
                            cfg.test
                        )));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(Ok(()))
}

/// The server against a perftest client (`rdma-perf write-bw` here,
/// `ib_write_bw SERVER` there).
pub fn run_perftest(cfg: &Config, link: &mut Link) -> Result<Report, PerfError> {
    let s = perftest::session::Session::connect(cfg, link)?;
    let (cfg, side, peer, script, mine) = (&s.cfg, &s.side, &s.peer, &s.script, &s.mine);
    // what the client reads carries this side's pattern; receives go up
    // before the last hand shake, as perftest's do
    prepare(&Config { verify: false, ..cfg.clone() }, side)?;
    s.shake(link, &script.after)?;
    let n = cfg.qps;
    let iters = cfg.iters;
    let start = Instant::now();
    let (served, _) = {
        let mut until = |counts: &[u64]| -> Result<Option<Vec<u64>>, PerfError> {
            if config::server_is_passive(cfg.test) {
                // the client's hand shake after its traffic (or its closing one)
                return Ok(link.poll_hand_shake(&mine[0])?.then(|| vec![iters; n]));
            }
            Ok((counts.len() == n && counts.iter().all(|&c| c >= iters)).then(|| counts.to_vec()))
        };
        serve(&Config { verify: false, ..cfg.clone() }, side, peer, &mut until)?
    };
    let elapsed = start.elapsed();
    if script.reports {
        // the client's figures; perftest's server prints them, so do we
        let theirs = link.reports(&BwReport::default())?;
        tracing::info!(size = theirs.size, iters = theirs.iters, mb_s = theirs.bw_avg, "the client's report");
    }
    if script.close {
        if !script.server_closes_first {
            s.shake(link, &[0])?;
        }
        link.done()?;
    }
    let mut report = Report::new(cfg, "server", served.iter().sum(), elapsed, None);
    let counters = Counters::of(&side.ctx);
    report.retransmits = counters.retransmits;
    report.counters = counters;
    if cfg.verify {
        let targets = perftest::cycle_slots(cfg.size, s.cycle, s.cache);
        let verdict = final_check(cfg, side, &served, targets)?;
        report.verified = Some(verdict.is_ok());
        report.verify_detail = verdict.err();
    }
    s.hang_up(link);
    Ok(report)
}
