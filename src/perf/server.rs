//! The server side: it answers the client (latency ping-pongs, receives
//! of send-bw) or stays passive while the engine serves WRITEs, READs and
//! atomics, and checks what arrived.

use super::client::OOB_TIMEOUT;
use super::oob::{Hello, Msg, Oob, SideInfo};
use super::report::{Counters, Report};
use super::side::{self, note, remote_addr, Side};
use super::{AtomicType, Config, PerfError, TestKind};
use rdma_core_rs::*;
use std::net::IpAddr;
use std::result::Result;
use std::time::{Duration, Instant};

/// The client's parameters, which the server adopts.
fn adopt(cfg: &Config, h: &Hello) -> Result<Config, PerfError> {
    let test = TestKind::from_name(&h.test).ok_or_else(|| PerfError::Peer(format!("unknown test {:?}", h.test)))?;
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
    Ok(c)
}

pub fn run(cfg: &Config, addr: IpAddr, oob: &mut dyn Oob) -> Result<Report, PerfError> {
    let hello = match oob.recv(OOB_TIMEOUT)? {
        Msg::Hello(h) => h,
        other => return Err(PerfError::Peer(format!("expected a Hello, got {other:?}"))),
    };
    let cfg = match adopt(cfg, &hello) {
        Ok(c) => c,
        Err(e) => {
            let _ = oob.send(&Msg::Error(e.to_string()));
            return Err(e);
        }
    };
    let device = DeviceConfig { faults: cfg.faults, ..DeviceConfig::default() };
    let side = match Side::open(addr, &cfg, device) {
        Ok(s) => s,
        Err(e) => {
            let _ = oob.send(&Msg::Error(format!("the server could not set up: {e}")));
            return Err(e);
        }
    };
    oob.send(&Msg::Info(side.info()?))?;
    let peer = match oob.recv(OOB_TIMEOUT)? {
        Msg::Info(i) => i,
        other => return Err(PerfError::Peer(format!("expected Info, got {other:?}"))),
    };
    side.connect(&peer, &cfg)?;
    prepare(&cfg, &side)?;
    oob.send(&Msg::Ready)?;
    let start = Instant::now();
    let result = serve(&cfg, &side, &peer, oob);
    let elapsed = start.elapsed();
    let (iters, mut verify_error) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = oob.send(&Msg::Error(format!("the server failed: {e}")));
            return Err(e);
        }
    };
    if cfg.verify && verify_error.is_none() {
        verify_error = final_check(&cfg, &side, &iters)?.err();
    }
    let counters = Counters::of(&side.ctx);
    let verified = cfg.verify.then_some(verify_error.is_none());
    oob.send(&Msg::Result { verified, detail: verify_error.clone(), retransmits: counters.retransmits })?;
    let mut report = Report::new(&cfg, "server", iters.iter().sum(), elapsed, None);
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
            side.mr.write(side.offset(0, 0), &buf)?;
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

fn peer_message(m: Option<Msg>) -> Result<Option<Vec<u64>>, PerfError> {
    match m {
        None => Ok(None),
        Some(Msg::Done { iters }) => Ok(Some(iters)),
        Some(Msg::Error(e)) => Err(PerfError::Peer(e)),
        Some(other) => Err(PerfError::Peer(format!("unexpected message {other:?}"))),
    }
}

/// Runs the server's part until the client says it is done; returns the
/// client's per-QP iteration counts and the first verification failure.
fn serve(
    cfg: &Config,
    side: &Side,
    peer: &SideInfo,
    oob: &mut dyn Oob,
) -> Result<(Vec<u64>, Option<String>), PerfError> {
    let mut verify_error = None;
    let mut wcs = Vec::with_capacity(1024);
    let size = cfg.size;
    match cfg.test {
        t if side::server_is_passive(t) => loop {
            if let Some(iters) = peer_message(oob.try_recv()?)? {
                return Ok((iters, None));
            }
            side.ctx.progress_for(Duration::from_millis(2))?;
        },
        TestKind::SendBw => {
            let nq = side.qps.len();
            let mut seen: Vec<Vec<bool>> = vec![Vec::new(); nq];
            let mut received = vec![0u64; nq];
            let mut buf = vec![0u8; size];
            let mut done: Option<Vec<u64>> = None;
            loop {
                wcs.clear();
                side.cq.wait(&mut wcs, 1024, Some(Duration::from_millis(2)))?;
                for wc in &wcs {
                    if wc.status != WcStatus::Success {
                        return Err(PerfError::Failed(format!("receive completed with {:?}", wc.status)));
                    }
                    let (q, s) = ((wc.wr_id as usize) / side.slots, (wc.wr_id as usize) % side.slots);
                    received[q] += 1;
                    if cfg.verify {
                        let i = u64::from(wc.imm_data.unwrap_or(u32::MAX));
                        let idx = i as usize;
                        if seen[q].len() <= idx {
                            seen[q].resize(idx + 1, false);
                        }
                        if seen[q][idx] {
                            note(&mut verify_error, Err(format!("send-bw: QP {q} message {i} arrived twice")));
                        }
                        seen[q][idx] = true;
                        if wc.byte_len as usize != size {
                            note(
                                &mut verify_error,
                                Err(format!("send-bw: message {i}: {} bytes, expected {size}", wc.byte_len)),
                            );
                        }
                        side.mr.read(side.offset(q, s), &mut buf)?;
                        note(&mut verify_error, side::check(&buf, q, i, "send-bw"));
                    }
                    side.qps[q].post_recv(&[RecvWr { wr_id: wc.wr_id, sg_list: vec![side.sge(q, s, size)] }])?;
                }
                if done.is_none() {
                    done = peer_message(oob.try_recv()?)?;
                }
                if let Some(iters) = &done {
                    if (0..nq).all(|q| received[q] >= iters[q]) {
                        if cfg.verify {
                            for q in 0..nq {
                                if let Some(i) =
                                    (0..iters[q] as usize).find(|&i| !seen[q].get(i).copied().unwrap_or(false))
                                {
                                    note(&mut verify_error, Err(format!("send-bw: QP {q} message {i} never arrived")));
                                }
                            }
                        }
                        return Ok((iters.clone(), verify_error));
                    }
                }
            }
        }
        TestKind::SendLat | TestKind::WriteLat => {
            let qp = &side.qps[0];
            let mut buf = vec![0u8; size];
            let mut i = 0u64;
            let mut last_heard = Instant::now();
            loop {
                // The client says when it is done (it counts, in -D runs too).
                if let Some(iters) = peer_message(oob.try_recv()?)? {
                    if iters[0] <= i {
                        return Ok((iters, verify_error));
                    }
                }
                let arrived = if cfg.test == TestKind::SendLat {
                    wcs.clear();
                    side.cq.poll(&mut wcs, 16)?;
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
                        qp.post_recv(&[RecvWr { wr_id: i + 1, sg_list: vec![side.sge(0, 1, size)] }])?;
                        if cfg.verify {
                            side::pattern(&mut buf, 1, i);
                            side.mr.write(side.offset(0, 0), &buf)?;
                        }
                        qp.post_send(&[SendWr::new(i, SendOp::Send, vec![side.sge(0, 0, size)])])?;
                    }
                    got
                } else {
                    let at = side.offset(0, 1) + size - 1;
                    let mut b = [0u8];
                    side.ctx.progress()?;
                    side.mr.read(at, &mut b)?;
                    if b[0] == side::marker(i) {
                        if cfg.verify {
                            side.mr.read(side.offset(0, 1), &mut buf)?;
                            note(&mut verify_error, side::check_lat(&buf, i, "the client"));
                        }
                        side::lat_message(&mut buf, i);
                        side.mr.write(side.offset(0, 0), &buf)?;
                        let op = SendOp::RdmaWrite { remote_addr: remote_addr(peer, 0, 1), rkey: peer.rkey };
                        qp.post_send(&[SendWr::new(i, op, vec![side.sge(0, 0, size)])])?;
                        wcs.clear();
                        side.cq.poll(&mut wcs, 16)?;
                        if let Some(wc) = wcs.iter().find(|w| w.status != WcStatus::Success) {
                            return Err(PerfError::Failed(format!("WRITE completed with {:?}", wc.status)));
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
fn final_check(cfg: &Config, side: &Side, iters: &[u64]) -> Result<Result<(), String>, PerfError> {
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
                let targets = if cfg.test == TestKind::AtomicLat { 1 } else { slots };
                for s in 0..targets {
                    let want = n / targets + u64::from(s < n % targets);
                    let got = side.mr.read_u64(side.offset(q, s as usize))?;
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
