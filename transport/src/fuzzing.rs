//! Bodies of the transport's fuzz targets (see `docs/fuzzing.md`). Each
//! takes arbitrary bytes and panics only when an oracle is violated:
//! `fuzz/fuzz_targets/<name>.rs` wraps it for libFuzzer, and
//! `tests/fuzz_corpus.rs` runs it over the seed corpus `fuzz/corpus/<name>/`.
//!
//! - [`responder`]: raw transport packets, re-framed with a good ICRC, into
//!   an endpoint with RC, UC and UD QPs.

use crate::endpoint::{Endpoint, MAX_PACKET};
use crate::framing::Framer;
use crate::memory::{Access, RegionMemory};
use crate::qp::{AddressVector, QpCap, QpInitAttr, QpType};
use crate::sim::{bring_up, PairConfig};
use crate::time::Instant;
use crate::wr::{RecvWr, SendOp, SendWr, Sge};
use core::net::IpAddr;
use core::time::Duration;
use rdma_wire::{RoceV2Packet, TransportPacket, TransportRepr};

/// Arbitrary packets into an endpoint whose RC, UC and UD QPs hold
/// registered memory. The input is a run of transport packets (BTH
/// onward), each behind two length bytes, sent to one of the QPs from the
/// right peer address with a correct ICRC, so they pass the framing checks
/// and reach the responder and completer. The endpoint must never panic,
/// must never write a region that does not allow remote writes, and must
/// keep every packet it sends parseable with a correct ICRC.
pub fn responder(data: &[u8]) {
    let me: IpAddr = [127, 0, 0, 1].into();
    let peer: IpAddr = [127, 0, 0, 2].into();
    let mut ep = Endpoint::new(me);
    let pd = ep.alloc_pd();
    let cq = ep.create_cq(1 << 16);
    let writable = RegionMemory::zeroed(8192);
    let read_only = RegionMemory::from_vec(vec![0x5a; 4096]);
    let (lkey, _) = ep.reg_mr(pd, 0x1000, writable, Access::ALL);
    ep.reg_mr(pd, 0x10000, read_only.clone(), Access::REMOTE_READ);
    let mut qpns = Vec::new();
    for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let init =
            QpInitAttr { qp_type, pd, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap::default(), sq_sig_all: true };
        let qpn = ep.create_qp(init).expect("the CQ exists");
        let cfg = PairConfig { qp_type, ..PairConfig::default() };
        bring_up(&mut ep, qpn, peer, 0x99, 0, 0, &cfg);
        for i in 0..4 {
            let sg = vec![Sge { addr: 0x1000 + i * 2048, length: 2048, lkey }];
            ep.post_recv(qpn, RecvWr { wr_id: i, sg_list: sg }).expect("room for four receives");
        }
        qpns.push(qpn);
    }
    // Something outstanding on the RC QP, so that responses have a target.
    let sg = vec![Sge { addr: 0x1000, length: 64, lkey }];
    ep.post_send(qpns[0], SendWr::new(1, SendOp::RdmaRead { remote_addr: 0, rkey: 0 }, sg.clone()))
        .expect("a READ posts");
    ep.post_send(qpns[0], SendWr::new(2, SendOp::Send, sg)).expect("a SEND posts");

    let framer = Framer { local: peer, by_ref: false };
    let av = AddressVector::new(me);
    let mut out = vec![0u8; MAX_PACKET];
    let mut buf = vec![0u8; MAX_PACKET + 64];
    let mut rest = data;
    let mut now = Instant::ZERO;
    while rest.len() >= 3 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let (chunk, tail) = rest[2..].split_at(len);
        rest = tail;
        let mut pkt = chunk.to_vec();
        if pkt.len() >= 12 {
            // Aim at one of our QPs.
            let qpn = qpns[usize::from(pkt[5]) % qpns.len()];
            pkt[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        // Re-frame valid transport packets with a good ICRC; pass others raw.
        let parsed = TransportPacket::new_checked(&pkt[..])
            .ok()
            .and_then(|t| TransportRepr::parse(&t).ok().map(|r| (r, t.payload().to_vec())));
        let framed = match parsed {
            Some((repr, payload)) if payload.len() <= 4096 => {
                let n = framer.frame(&mut buf, &av, 0xc000, &repr, payload.len(), |d| {
                    d.copy_from_slice(&payload);
                    Ok::<(), ()>(())
                });
                match n {
                    Ok(n) => buf[..n].to_vec(),
                    Err(()) => continue,
                }
            }
            Some(_) => continue,
            None => pkt,
        };
        ep.handle_packet(now, &framed);
        now += Duration::from_micros(10);
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
        }
        while let Some(tx) = ep.poll_transmit(now, &mut out) {
            let p = RoceV2Packet::new_checked(&out[..tx.len]).expect("the engine sends well-formed packets");
            assert!(p.icrc_ok(), "the engine sends correct ICRCs");
        }
    }
    let _ = ep.poll_cq(cq, usize::MAX);
    assert!(
        read_only.to_vec().iter().all(|&b| b == 0x5a),
        "a region without remote write or atomic access was written"
    );
}
