//! Bodies of the transport's fuzz targets (see `docs/fuzzing.md`). Each
//! takes arbitrary bytes and panics only when an oracle is violated:
//! `fuzz/fuzz_targets/<name>.rs` wraps it for libFuzzer, and
//! `tests/fuzz_corpus.rs` runs it over the seed corpus `fuzz/seeds/<name>/`.
//!
//! - [`responder`]: raw transport packets, re-framed with a good ICRC, into
//!   an endpoint with RC, UC and UD QPs.
//! - [`engine`]: a whole endpoint driven by a script of actions (crafted
//!   packets, replays, time, drains, receives, (de)registration, QP state
//!   changes, CQ polls), with oracles on memory, output volume and queues.
//! - [`cm_receive`]: the CM and its MAD layer under a hostile peer on QP1
//!   (`cm.rs`).

mod cm;
pub use cm::{cm_receive, cm_receive_report, CmReport};

use crate::endpoint::{Endpoint, MAX_PACKET};
use crate::framing::Framer;
use crate::memory::{Access, Pd, RegionMemory};
use crate::qp::{AddressVector, CqId, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpType, SrqId};
use crate::sim::{bring_up, PairConfig};
use crate::time::Instant;
use crate::wr::{RecvWr, SendOp, SendWr, Sge};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use rdma_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, FethRepr, HeaderSet, IpRepr, Ipv4Repr, Ipv6Repr,
    Opcode, OpcodeInfo, Operation, Psn, RethRepr, RoceV2Packet, RoceV2Repr, Syndrome, Transport, TransportPacket,
    TransportRepr, UdpRepr, ROCE_V2_PORT,
};
use std::collections::VecDeque;

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

    let framer = Framer::roce_v2(peer);
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

// ---------------------------------------------------------------------------
// The engine target.

/// Path MTU of every connected QP (small, so that multi-packet messages
/// and long READ responses are cheap to reach).
const MTU: Mtu = Mtu::Mtu256;
/// The PSN each responder expects after bring-up, and the first PSN each
/// requester sends.
const RQ_PSN: u32 = 0x20_0000;
const SQ_PSN: u32 = 0x10_0000;
const PEER_QPN: u32 = 0x99;
/// The Q_Key [`bring_up`] gives UD QPs.
const QKEY: u32 = 0x1111_1111;
/// The `max_dest_rd_atomic` [`bring_up`] sets: how many READs a responder
/// may remember for replay.
const MAX_DEST_RD_ATOMIC: usize = 16;
/// Bytes one answer to one delivered packet may take: an ACK, NAK or
/// atomic ACK, IPv6-framed (68 or 76 bytes), rounded up.
const REPLY_BYTES: u64 = 96;
/// Fixed slack in both byte budgets.
const SLACK: u64 = 4096;
/// Responses one QP may hold queued beyond one per answerable packet
/// delivered since the last drain (see `QpModel::answerable`): each
/// remembered READ or atomic, an ACK between each two, and a few NAKs.
const QUEUE_PER_QP: usize = 2 * MAX_DEST_RD_ATOMIC + 8;
/// Delivered packets remembered for replay, and the most copies per replay.
const HISTORY: usize = 32;
const MAX_COPIES: usize = 64;
/// Packets one input may deliver in all (keeps a run short).
const MAX_DELIVERED: u64 = 20_000;

/// What one run of [`engine_report`] did: for the corpus test, which checks
/// that the seeds reach the responder rather than bounce off the framing.
#[derive(Debug, Clone, Default)]
pub struct EngineReport {
    /// Packets handed to the endpoint, and those of them that were responses.
    pub delivered: u64,
    pub delivered_responses: u64,
    /// Bytes (IP header through ICRC) the endpoint sent as responder (ACKs,
    /// NAKs, READ responses, atomic ACKs) and as requester.
    pub response_bytes: u64,
    pub request_bytes: u64,
    /// READ bytes a correct responder may send (see [`engine`]).
    pub read_credit: u64,
    /// READ requests the responder executed in sequence.
    pub reads_executed: u64,
    pub stats: crate::Stats,
    /// Per region (writable, read-only, no remote access, receive buffers,
    /// other PD): whether any byte changed.
    pub regions_changed: Vec<bool>,
    /// Per region: whether it is still served as zeros at the end (only
    /// the writable one can be, under byte 0's bit 2).
    pub zeros_served: Vec<bool>,
    pub completions: u64,
}

/// Drives a whole [`Endpoint`] from a script of actions and checks, as it
/// goes, what a hostile peer must never achieve.
///
/// Setup: one PD with four regions — writable (all access, 8 KiB),
/// read-only (remote read, 64 KiB), no remote access (local write, 4 KiB),
/// receive buffers (local write, 32 KiB) — and a region of every access in
/// a second PD that no QP uses; QPs RC, UC, UD and RC-on-an-SRQ brought up
/// with [`bring_up`] as the simulator does; receives posted on each; on the
/// first RC QP READs, a SEND, a WRITE and a FETCH_ADD outstanding, so that
/// responses have a target.
///
/// Input: byte 0 picks by-reference payloads (bit 0), IPv6 (bit 1) and
/// a writable region that starts served as zeros (bit 2,
/// [`RegionMemory::zeroed`]: zeros written keep it so, anything else ends
/// it);
/// then actions, each an action byte (modulo 8) and its operands, missing
/// bytes read as zero:
/// 0. deliver a crafted packet (12 operand bytes, see `Harness::craft`):
///    QP, opcode (any request or response opcode, rarely another
///    transport's), PSN relative to the expected one (in sequence, recent
///    duplicate, ahead, far behind, far ahead), rkey (a live key, a stale
///    one, garbage), va/length (inside, straddling the end, before, overflowing,
///    the whole region, DMA length >= 2^31), payload length, AckReq, bad
///    P_Key / Q_Key / source address / QPN;
/// 1. replay one of the last 32 delivered packets 1 to 64 times;
/// 2. advance the clock by 2^k us and fire due timers;
/// 3. drain `poll_transmit`;
/// 4. post a receive (any QP or the SRQ, into any region);
/// 5. deregister a region, or register it again (new key);
/// 6. move a QP to ERR, to RESET, or to RESET and back up (re-posting);
/// 7. poll the CQ and the async events.
///
/// The input ends with a drain. Oracles (a panic says which):
/// - nothing panics, and every packet sent parses as RoCE v2 from our
///   address with a correct ICRC;
/// - a region still served as zeros holds only zeros (else its reads
///   would answer zeros for bytes that are not);
/// - no byte of any region changes unless an operation the region's
///   access and PD allow may have written it: a posted receive or a local
///   READ/atomic target (local write), a WRITE's RETH range (remote write),
///   an atomic's 8 bytes (remote atomic);
/// - responder bytes sent <= READ credit + 96 x packets delivered + 4096,
///   where the READ credit is, for each READ the responder executed in
///   sequence (its expected PSN moved past it), its length plus 96 bytes a
///   packet, and for a duplicate READ whose PSN falls in one of the last
///   `max_dest_rd_atomic` executed READs of its QP, that READ's credit
///   again, at most once per READ between two drains (a repeated duplicate
///   restarts a replay not yet sent, as in rxe, rather than queueing
///   another). So a correct responder may answer every packet and replay
///   remembered READs, but not answer a READ it never executed, nor send a
///   READ's data over and over for one delivery of duplicates;
/// - requester bytes sent <= (sum over posted sends of length + 96 bytes a
///   packet) x (1 + responses delivered + timer firings) + 4096: each
///   retransmission needs a NAK, an RNR NAK or a timeout;
/// - each QP holds at most 2 x max_dest_rd_atomic + 8 queued responses,
///   plus one per packet delivered to it since the last drain other than a
///   READ request it executed or took as a duplicate: an ACK, NAK or
///   atomic replay may answer each packet, but READ responses must stay
///   within the remembered resources.
pub fn engine(data: &[u8]) {
    engine_report(data);
}

/// [`engine`], returning what the run did.
pub fn engine_report(data: &[u8]) -> EngineReport {
    let mut input = Input { data, pos: 0 };
    let flags = input.byte();
    let mut h = Harness::new(flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
    while !input.done() && h.delivered < MAX_DELIVERED {
        match input.byte() % 8 {
            0 => {
                let b: [u8; 12] = core::array::from_fn(|_| input.byte());
                if let Some(pkt) = h.craft(b) {
                    h.deliver(&pkt);
                }
                h.check_memory();
            }
            1 => {
                let (which, copies) = (input.byte(), input.byte());
                if !h.history.is_empty() {
                    let pkt = h.history[h.history.len() - 1 - usize::from(which) % h.history.len()].clone();
                    for _ in 0..=usize::from(copies) % MAX_COPIES {
                        h.deliver(&pkt);
                    }
                }
                h.check_memory();
            }
            2 => h.advance(input.byte()),
            3 => h.drain(),
            4 => {
                let b: [u8; 6] = core::array::from_fn(|_| input.byte());
                h.post_recv(b);
            }
            5 => h.toggle_region(input.byte()),
            6 => {
                let (qp, what) = (input.byte(), input.byte());
                h.modify(qp, what);
            }
            _ => h.poll(input.byte()),
        }
    }
    h.drain();
    h.poll(255);
    h.check_memory();
    h.report()
}

/// The fuzz input, read a byte at a time; zeros past its end.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// A registered region and what the model allows to change in it.
struct Region {
    pd: Pd,
    va: u64,
    access: Access,
    memory: RegionMemory,
    initial: Vec<u8>,
    /// The current key, or the last one while deregistered.
    key: u32,
    registered: bool,
    /// Bytes an allowed operation may have written.
    may_change: Vec<bool>,
}

impl Region {
    fn len(&self) -> u64 {
        self.initial.len() as u64
    }

    /// Allows `[va, va + len)` to change, if `needed` is allowed through
    /// `key` from a QP of `pd`.
    fn allow(&mut self, key: u32, pd: Pd, va: u64, len: u64, needed: Access) {
        if !self.registered || key != self.key || pd != self.pd || !self.access.contains(needed) {
            return;
        }
        let start = va.max(self.va);
        let end = va.saturating_add(len).min(self.va + self.len());
        if start < end {
            self.may_change[(start - self.va) as usize..(end - self.va) as usize].fill(true);
        }
    }
}

/// A READ the responder executed in sequence, as the model remembers it.
struct ReadResource {
    psn: Psn,
    npkts: u32,
    credit: u64,
    /// Replayed (given credit) since the last drain.
    replayed: bool,
}

struct QpModel {
    qpn: u32,
    qp_type: QpType,
    on_srq: bool,
    reads: VecDeque<ReadResource>,
    /// Packets delivered since the last drain that may each be answered by
    /// an ACK, NAK or atomic replay: any but READ requests, and the
    /// in-sequence READ requests the responder refused.
    answerable: usize,
}

struct Harness {
    ep: Endpoint,
    by_ref: bool,
    me: IpAddr,
    peer: IpAddr,
    stranger: IpAddr,
    pd: Pd,
    cq: CqId,
    srq: SrqId,
    regions: Vec<Region>,
    qps: Vec<QpModel>,
    keys_seen: Vec<u32>,
    /// Opcodes by transport (RC, UC, UD), then every opcode.
    opcodes: [Vec<(Opcode, &'static OpcodeInfo)>; 4],
    history: VecDeque<Vec<u8>>,
    now: Instant,
    delivered: u64,
    delivered_responses: u64,
    timer_fires: u64,
    response_bytes: u64,
    request_bytes: u64,
    read_credit: u64,
    reads_executed: u64,
    /// Sum over posted sends of their length plus [`REPLY_BYTES`] a packet.
    send_bytes: u64,
    completions: u64,
    wr_id: u64,
    out: Vec<u8>,
    wire: Vec<u8>,
}

/// Indices of the regions the setup names (1 is read-only, 2 has no
/// remote access, 4 is in another PD).
const WRITABLE: usize = 0;
const RECV_BUF: usize = 3;

fn is_response(op: Operation) -> bool {
    matches!(op, Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::RdmaReadResponse)
}

fn packets_for(len: u64) -> u32 {
    crate::requester::packets_for(len, MTU.bytes())
}

impl Harness {
    /// `zeroed`: the writable region starts as [`RegionMemory::zeroed`].
    fn new(by_ref: bool, ipv6: bool, zeroed: bool) -> Harness {
        let (me, peer, stranger): (IpAddr, IpAddr, IpAddr) = if ipv6 {
            let a = |n| IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n));
            (a(1), a(2), a(3))
        } else {
            let a = |n| IpAddr::V4(Ipv4Addr::new(10, 0, 0, n));
            (a(1), a(2), a(3))
        };
        let mut ep = Endpoint::new(me);
        ep.set_payload_by_reference(by_ref);
        let pd = ep.alloc_pd();
        let other_pd = ep.alloc_pd();
        let cq = ep.create_cq(64);
        let srq = ep.create_srq(pd, 64, 0);
        let specs = [
            (pd, 0x1_0000, 8 << 10, Access::ALL),
            (pd, 0x10_0000, 64 << 10, Access::REMOTE_READ),
            (pd, 0x20_0000, 4 << 10, Access::LOCAL_WRITE),
            (pd, 0x30_0000, 32 << 10, Access::LOCAL_WRITE),
            (other_pd, 0x40_0000, 4 << 10, Access::ALL),
        ];
        let mut regions = Vec::new();
        let mut keys_seen = Vec::new();
        for (i, (pd, va, len, access)) in specs.into_iter().enumerate() {
            let (initial, memory) = if zeroed && i == 0 {
                (vec![0; len], RegionMemory::zeroed(len))
            } else {
                let initial: Vec<u8> =
                    (0..len).map(|j: usize| (j as u8).wrapping_mul(7) ^ (0x10 * i as u8 + 1)).collect();
                (initial.clone(), RegionMemory::from_vec(initial))
            };
            let (key, _) = ep.reg_mr(pd, va, memory.clone(), access);
            keys_seen.push(key);
            regions.push(Region {
                pd,
                va,
                access,
                memory,
                initial,
                key,
                registered: true,
                may_change: vec![false; len],
            });
        }
        let mut qps = Vec::new();
        for (qp_type, on_srq) in [(QpType::Rc, false), (QpType::Uc, false), (QpType::Ud, false), (QpType::Rc, true)] {
            let init = QpInitAttr {
                qp_type,
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: on_srq.then_some(srq),
                cap: QpCap::default(),
                sq_sig_all: true,
            };
            let qpn = ep.create_qp(init).expect("the CQ and SRQ exist");
            qps.push(QpModel { qpn, qp_type, on_srq, reads: VecDeque::new(), answerable: 0 });
        }
        let by_transport = |t: Transport| Opcode::all().filter(|(_, i)| i.transport == t).collect::<Vec<_>>();
        let opcodes = [
            by_transport(Transport::Rc),
            by_transport(Transport::Uc),
            by_transport(Transport::Ud),
            Opcode::all().collect(),
        ];
        let mut h = Harness {
            ep,
            by_ref,
            me,
            peer,
            stranger,
            pd,
            cq,
            srq,
            regions,
            qps,
            keys_seen,
            opcodes,
            history: VecDeque::new(),
            now: Instant::ZERO,
            delivered: 0,
            delivered_responses: 0,
            timer_fires: 0,
            response_bytes: 0,
            request_bytes: 0,
            read_credit: 0,
            reads_executed: 0,
            send_bytes: 0,
            completions: 0,
            wr_id: 0,
            out: vec![0u8; MAX_PACKET],
            wire: vec![0u8; MAX_PACKET + 64],
        };
        for i in 0..h.qps.len() {
            h.bring_up(i);
        }
        h
    }

    /// Takes QP `i` to RTS as the simulator does, posts its receives and,
    /// on the first RC QP, the outstanding requests.
    fn bring_up(&mut self, i: usize) {
        let q = &self.qps[i];
        let cfg = PairConfig { qp_type: q.qp_type, mtu: MTU, ..PairConfig::default() };
        bring_up(&mut self.ep, q.qpn, self.peer, PEER_QPN, RQ_PSN, SQ_PSN, &cfg);
        for k in 0..4u64 {
            let addr = self.regions[RECV_BUF].va + i as u64 * 4096 + k * 1024;
            self.post_recv_at(i, RECV_BUF, addr, 1024);
        }
        if i != 0 {
            return;
        }
        let (w, rb) = (&self.regions[WRITABLE], &self.regions[RECV_BUF]);
        let (wk, wva, rbk, rbva) = (w.key, w.va, rb.key, rb.va);
        let sends = [
            (SendOp::RdmaRead { remote_addr: 0x5000, rkey: 0x77 }, Sge { addr: rbva + 0x5000, length: 64, lkey: rbk }),
            (SendOp::Send, Sge { addr: wva, length: 32, lkey: wk }),
            (
                SendOp::FetchAdd { remote_addr: 0x5008, rkey: 0x77, add: 1 },
                Sge { addr: rbva + 0x5100, length: 8, lkey: rbk },
            ),
            (SendOp::RdmaWrite { remote_addr: 0x6000, rkey: 0x77 }, Sge { addr: wva + 0x100, length: 300, lkey: wk }),
            (SendOp::RdmaRead { remote_addr: 0x7000, rkey: 0x77 }, Sge { addr: rbva + 0x5200, length: 600, lkey: rbk }),
        ];
        let (qpn, pd) = (self.qps[0].qpn, self.pd);
        for (op, sge) in sends {
            self.wr_id += 1;
            if self.ep.post_send(qpn, SendWr::new(self.wr_id, op, vec![sge])).is_ok() {
                let len = u64::from(sge.length);
                self.send_bytes += len + REPLY_BYTES * u64::from(packets_for(len));
                if op.writes_local() {
                    let r = &mut self.regions[RECV_BUF];
                    r.allow(sge.lkey, pd, sge.addr, len, Access::LOCAL_WRITE);
                }
            }
        }
    }

    /// Posts one receive of `len` bytes at `addr` in region `r` on QP `i`
    /// (or its SRQ), and lets those bytes change.
    fn post_recv_at(&mut self, i: usize, r: usize, addr: u64, len: u32) {
        self.wr_id += 1;
        let lkey = self.regions[r].key;
        let wr = RecvWr { wr_id: self.wr_id, sg_list: vec![Sge { addr, length: len, lkey }] };
        let q = &self.qps[i];
        let posted = if q.on_srq { self.ep.post_srq_recv(self.srq, wr) } else { self.ep.post_recv(q.qpn, wr) };
        if posted.is_ok() {
            let pd = self.pd;
            self.regions[r].allow(lkey, pd, addr, u64::from(len), Access::LOCAL_WRITE);
        }
    }

    /// Builds the packet that 12 operand bytes describe (see [`engine`]):
    /// `None` if its headers do not fit its opcode.
    fn craft(&mut self, b: [u8; 12]) -> Option<Vec<u8>> {
        let q = &self.qps[usize::from(b[0] & 3)];
        let table = if b[1] >= 0xf8 {
            &self.opcodes[3]
        } else {
            &self.opcodes[match q.qp_type {
                QpType::Rc | QpType::XrcSend | QpType::XrcRecv => 0,
                QpType::Uc => 1,
                QpType::Ud => 2,
            }]
        };
        let (opcode, info) = table[usize::from(b[1]) % table.len()];
        let dest_qp = if b[0] & 4 != 0 { 0x7f_0000 | u32::from(b[11]) } else { q.qpn };
        let pkey = if b[0] & 8 != 0 { 0x1234 } else { 0xffff };
        let qkey = if b[0] & 16 != 0 { 0xdead_beef } else { QKEY };
        let src = if b[0] & 32 != 0 { self.stranger } else { self.peer };

        // PSN: responses are judged against what the requester sent,
        // requests against what the responder expects.
        let base = if is_response(info.operation) { SQ_PSN } else { self.ep.expected_psn(q.qpn).unwrap_or(0) };
        let d = i32::from(b[2] as i8) as u32;
        let psn = Psn::new(match b[3] % 4 {
            0 | 1 => base.wrapping_add(d),
            2 => base.wrapping_sub(0x40_0000 + (u32::from(b[3] >> 2) << 12)).wrapping_add(d),
            _ => base.wrapping_add(0x40_0000).wrapping_add(d),
        });

        // The rkey, and the region va and length are taken relative to.
        let ri = usize::from(b[4]) % self.regions.len();
        let r = &self.regions[ri];
        let rkey = match b[4] {
            0..=0xef => r.key,
            0xf0..=0xf7 => self.keys_seen[usize::from(b[4]) % self.keys_seen.len()],
            _ => 0xdead_0000 | u32::from(b[4]),
        };
        let off = u64::from(u16::from_be_bytes([b[6], b[7]]));
        let mut len = u64::from(u16::from_be_bytes([b[8], b[9]]));
        let rlen = r.len();
        let va = match b[5] % 8 {
            0 | 1 => {
                // Inside, and fitting.
                let o = off % rlen;
                len %= rlen - o + 1;
                r.va + o
            }
            2 => r.va + off % rlen,
            3 => {
                // Straddling the end.
                let o = rlen - 1 - off % rlen.min(64);
                len = rlen - o + 1 + len % 64;
                r.va + o
            }
            4 => {
                len = rlen;
                r.va
            }
            5 => r.va.wrapping_sub(1 + off),
            6 => u64::MAX - off,
            _ => {
                len |= 0x8000_0000;
                r.va + off % rlen
            }
        };
        let atomic_va = if b[5] & 0x80 != 0 { va } else { va & !7 };
        // An ATOMIC WRITE mostly as a requester sends it: 8 bytes, aligned.
        let aw = info.operation == Operation::AtomicWrite && b[9] & 3 != 0;
        let (va, dma_len) = if aw { (atomic_va, 8) } else { (va, len as u32) };

        let mtu = MTU.bytes() as usize;
        let plen = if !info.has_payload {
            0
        } else if aw {
            8
        } else {
            match b[10] {
                0..=0xdf => usize::from(b[10]) * 2,
                0xe0..=0xef => mtu,
                0xf0..=0xf7 => (len as usize).min(mtu),
                0xf8 => mtu - 1,
                0xf9 => mtu + 1,
                0xfa => 2 * mtu,
                0xfb => 1,
                0xfc => 3,
                0xfd => 4096,
                0xfe => 4095,
                _ => 0,
            }
        };
        // Operand 0: zeros (what a zeroed region keeps serving as zeros).
        let payload: Vec<u8> =
            if b[11] == 0 { vec![0; plen] } else { (0..plen).map(|i| (i as u8).wrapping_mul(31) ^ b[11]).collect() };

        let bth =
            BthRepr { solicited: b[0] & 64 != 0, ack_req: b[0] & 128 != 0, pkey, ..BthRepr::new(opcode, dest_qp, psn) };
        let mut t = TransportRepr::new(bth);
        let hs = info.headers;
        let v = u64::from(b[11]);
        if hs.contains(HeaderSet::DETH) {
            t.deth = Some(DethRepr { qkey, src_qp: PEER_QPN });
        }
        if hs.contains(HeaderSet::XRCETH) {
            t.xrc_srq = Some(u32::from(b[11]));
        }
        if hs.contains(HeaderSet::FETH) {
            t.feth = Some(FethRepr { placement: b[11] & 0xf, selectivity: (b[11] >> 4) & 3 });
        }
        if hs.contains(HeaderSet::RETH) {
            t.reth = Some(RethRepr { va, rkey, dma_len });
        }
        if hs.contains(HeaderSet::ATOMIC_ETH) {
            t.atomic_eth =
                Some(AtomicEthRepr { va: atomic_va, rkey, swap_add: v * 0x0101_0101_0101_0101, compare: off });
        }
        if hs.contains(HeaderSet::AETH) {
            t.aeth = Some(AethRepr { syndrome: Syndrome::from_byte(b[11]), msn: u32::from(b[8]) });
        }
        if hs.contains(HeaderSet::ATOMIC_ACK_ETH) {
            t.atomic_ack_eth = Some(AtomicAckEthRepr { orig: v << 8 | u64::from(b[6]) });
        }
        if hs.contains(HeaderSet::IMM_DT) {
            t.imm_dt = Some(u32::from_be_bytes([b[11]; 4]));
        }
        if hs.contains(HeaderSet::IETH) {
            t.ieth = Some(rkey);
        }
        let ip = match (src, self.me) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                IpRepr::V4(Ipv4Repr { dscp: 0, ecn: 0, ident: 0, dont_frag: true, ttl: 64, protocol: 17, src, dst })
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                IpRepr::V6(Ipv6Repr { traffic_class: 0, flow_label: 0, next_header: 17, hop_limit: 64, src, dst })
            }
            _ => unreachable!("one family"),
        };
        let udp = UdpRepr { src_port: 0xc000 | u16::from(b[11]), dst_port: ROCE_V2_PORT, checksum: 0 };
        let n = RoceV2Repr { ip, udp, transport: t }.emit(&mut self.wire, &payload).ok()?;

        // What the packet may legitimately write, if it is executed.
        let pd = self.pd;
        match info.operation {
            Operation::RdmaWrite if info.position.starts() => {
                for r in &mut self.regions {
                    r.allow(rkey, pd, va, u64::from(dma_len), Access::REMOTE_WRITE);
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                for r in &mut self.regions {
                    r.allow(rkey, pd, atomic_va, 8, Access::REMOTE_ATOMIC);
                }
            }
            // An ATOMIC WRITE writes its 8 bytes at the RETH's address.
            Operation::AtomicWrite => {
                for r in &mut self.regions {
                    r.allow(rkey, pd, va, 8, Access::REMOTE_WRITE);
                }
            }
            _ => {}
        }
        Some(self.wire[..n].to_vec())
    }

    /// Hands one packet to the endpoint and updates the READ credit.
    fn deliver(&mut self, pkt: &[u8]) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(pkt.to_vec());
        let p = RoceV2Packet::new_checked(pkt).expect("crafted packets parse");
        let t = p.transport();
        let (op, qpn, psn) = (t.info().operation, t.bth().dest_qp(), t.bth().psn());
        let before = self.ep.expected_psn(qpn);
        self.ep.handle_packet(self.now, pkt);
        self.now += Duration::from_micros(1);
        self.delivered += 1;
        if is_response(op) {
            self.delivered_responses += 1;
        }
        if op != Operation::RdmaReadRequest {
            if let Some(q) = self.qps.iter_mut().find(|q| q.qpn == qpn) {
                q.answerable += 1;
            }
        }
        let model = self.qps.iter_mut().find(|q| q.qpn == qpn && q.qp_type == QpType::Rc);
        if let (Operation::RdmaReadRequest, Some(q), Some(before), Some(reth)) = (op, model, before, t.reth()) {
            let before = Psn::new(before);
            let len = u64::from(RethRepr::parse(&reth).dma_len);
            let executed = psn == before && self.ep.expected_psn(qpn) != Some(before.value());
            if psn == before && !executed {
                q.answerable += 1; // refused with a NAK
            }
            if executed {
                let npkts = packets_for(len);
                let credit = len + REPLY_BYTES * u64::from(npkts);
                self.read_credit += credit;
                self.reads_executed += 1;
                if q.reads.len() == MAX_DEST_RD_ATOMIC {
                    q.reads.pop_front();
                }
                q.reads.push_back(ReadResource { psn, npkts, credit, replayed: false });
            } else if psn.diff(before) < 0 {
                let hit = q.reads.iter_mut().find(|r| !r.replayed && psn.in_window(r.psn, r.npkts));
                if let Some(r) = hit {
                    r.replayed = true;
                    self.read_credit += r.credit;
                }
            }
        }
        for q in &self.qps {
            let n = self.ep.queued_responses(q.qpn);
            let bound = QUEUE_PER_QP + q.answerable;
            assert!(
                n <= bound,
                "QP {:#x} holds {n} queued responses (bound {bound}) after {} packets delivered",
                q.qpn,
                self.delivered
            );
        }
    }

    /// Sends everything the endpoint has to send, checking each packet and
    /// the byte budgets.
    fn drain(&mut self) {
        while let Some(tx) = self.ep.poll_transmit(self.now, &mut self.out) {
            let packet = match &tx.payload {
                None => self.out[..tx.len].to_vec(),
                Some(p) => {
                    assert!(self.by_ref, "a payload by reference, which the driver did not allow");
                    let mut payload = vec![0u8; p.len];
                    p.memory.read(p.offset, &mut payload);
                    p.seal(&mut self.out[..tx.len], &payload);
                    [&self.out[..p.at], &payload[..], &self.out[p.at..tx.len]].concat()
                }
            };
            assert_eq!(packet.len(), tx.wire_len());
            let p = RoceV2Packet::new_checked(&packet[..]).expect("the engine sends well-formed RoCE v2 packets");
            assert!(p.icrc_ok(), "the engine sends correct ICRCs");
            let (src, dst) = match (p.ipv4(), p.ipv6()) {
                (Some(h), _) => (IpAddr::V4(h.src()), IpAddr::V4(h.dst())),
                (_, Some(h)) => (IpAddr::V6(h.src()), IpAddr::V6(h.dst())),
                _ => unreachable!("a checked packet is IPv4 or IPv6"),
            };
            assert_eq!(src, self.me, "the engine sends from its own address");
            assert_eq!(dst, tx.dest, "the packet goes where the Transmit says");
            let n = packet.len() as u64;
            if is_response(p.transport().info().operation) {
                self.response_bytes += n;
                let budget = self.read_credit + REPLY_BYTES * self.delivered + SLACK;
                assert!(
                    self.response_bytes <= budget,
                    "amplification: the responder sent {} bytes for {} packets delivered, {} READs executed \
                     ({} bytes of READ credit): budget {budget}",
                    self.response_bytes,
                    self.delivered,
                    self.reads_executed,
                    self.read_credit
                );
            } else {
                self.request_bytes += n;
                let budget = self.send_bytes * (1 + self.delivered_responses + self.timer_fires) + SLACK;
                assert!(
                    self.request_bytes <= budget,
                    "the requester sent {} bytes for {} bytes of posted sends, {} responses delivered and {} \
                     timer firings: budget {budget}",
                    self.request_bytes,
                    self.send_bytes,
                    self.delivered_responses,
                    self.timer_fires
                );
            }
        }
        for q in &mut self.qps {
            q.answerable = 0;
            for r in &mut q.reads {
                r.replayed = false;
            }
        }
    }

    fn advance(&mut self, k: u8) {
        self.now += Duration::from_micros(1 << (k % 24));
        if self.ep.poll_timeout().is_some_and(|t| t <= self.now) {
            self.ep.handle_timeout(self.now);
            self.timer_fires += 1;
        }
    }

    /// A receive of any length into any region, on any QP or the SRQ.
    fn post_recv(&mut self, b: [u8; 6]) {
        let i = usize::from(b[0]) % self.qps.len();
        let r = usize::from(b[1]) % self.regions.len();
        let reg = &self.regions[r];
        let addr = reg.va + u64::from(u16::from_be_bytes([b[2], b[3]])) % (reg.len() + 64);
        let len = u32::from(u16::from_be_bytes([b[4], b[5]]));
        self.post_recv_at(i, r, addr, len);
    }

    fn toggle_region(&mut self, b: u8) {
        let n = self.regions.len();
        let r = &mut self.regions[usize::from(b) % n];
        if r.registered {
            assert!(self.ep.dereg_mr(r.key), "a registered region deregisters");
            r.registered = false;
        } else {
            let (key, _) = self.ep.reg_mr(r.pd, r.va, r.memory.clone(), r.access);
            r.key = key;
            r.registered = true;
            self.keys_seen.push(key);
        }
    }

    fn modify(&mut self, qp: u8, what: u8) {
        let i = usize::from(qp) % self.qps.len();
        let qpn = self.qps[i].qpn;
        self.qps[i].reads.clear();
        let to = |s| QpAttr { qp_state: Some(s), ..QpAttr::default() };
        match what % 3 {
            0 => self.ep.modify_qp(qpn, &to(QpState::Err)).expect("any state goes to ERR"),
            1 => self.ep.modify_qp(qpn, &to(QpState::Reset)).expect("any state goes to RESET"),
            _ => {
                self.ep.modify_qp(qpn, &to(QpState::Reset)).expect("any state goes to RESET");
                self.bring_up(i);
            }
        }
    }

    fn poll(&mut self, n: u8) {
        for wc in self.ep.poll_cq(self.cq, usize::from(n)) {
            assert!(self.qps.iter().any(|q| q.qpn == wc.qp_num), "a completion for QP {:#x}, not ours", wc.qp_num);
            self.completions += 1;
        }
        while self.ep.poll_event().is_some() {}
    }

    /// Every region's bytes differ from the initial ones only where
    /// allowed, and one served as zeros holds zeros. The stored bytes are
    /// read without [`RegionMemory::lock`], which would end the zeros.
    fn check_memory(&self) {
        for (i, r) in self.regions.iter().enumerate() {
            r.memory.with_stored(|now, zeros| {
                if let Some(at) = now.iter().position(|&b| b != 0).filter(|_| zeros) {
                    panic!("region {i} is served as zeros but holds {:#04x} at va {:#x}", now[at], r.va + at as u64);
                }
                if now[..] == r.initial[..] {
                    return;
                }
                if let Some(at) = (0..now.len()).find(|&j| now[j] != r.initial[j] && !r.may_change[j]) {
                    panic!(
                        "region {i} (access {:?}) changed at va {:#x}, which no allowed operation could write",
                        r.access,
                        r.va + at as u64
                    );
                }
            });
        }
    }

    fn report(&self) -> EngineReport {
        EngineReport {
            delivered: self.delivered,
            delivered_responses: self.delivered_responses,
            response_bytes: self.response_bytes,
            request_bytes: self.request_bytes,
            read_credit: self.read_credit,
            reads_executed: self.reads_executed,
            stats: self.ep.stats(),
            regions_changed: self.regions.iter().map(|r| r.memory.with_stored(|b, _| *b != r.initial[..])).collect(),
            zeros_served: self.regions.iter().map(|r| r.memory.with_stored(|_, z| z)).collect(),
            completions: self.completions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memory oracle sees a byte that no allowed operation wrote.
    #[test]
    #[should_panic(expected = "region 1")]
    fn memory_oracle_catches_a_write_to_the_read_only_region() {
        let h = Harness::new(false, false, false);
        h.check_memory();
        h.regions[1].memory.write(100, &[0xff ^ h.regions[1].initial[100]]);
        h.check_memory();
    }

    /// The oracle sees a region served as zeros that holds something else
    /// (reads would answer zeros for it).
    #[test]
    #[should_panic(expected = "region 0 is served as zeros but holds 0x5a")]
    fn memory_oracle_catches_zeros_served_over_other_bytes() {
        let h = Harness::new(false, false, true);
        h.check_memory();
        h.regions[0].memory.write_behind_zeros(300, &[0x5a]);
        h.check_memory();
    }

    /// A WRITE of zeros into the zeroed region leaves it served as zeros,
    /// a WRITE of anything else ends that and lands; the checks that run
    /// after each leave the zeros alone (they do not lock the region).
    #[test]
    fn zeros_written_keep_a_zeroed_region_and_other_bytes_end_it() {
        let mut h = Harness::new(false, false, true);
        // RC WRITE_ONLY with AckReq to the writable region, va +0x40, 64 bytes.
        let write = |v: u8| [0x80, 10, 0, 0, 0, 0, 0, 0x40, 0, 64, 32, v];
        let zeros = h.craft(write(0)).expect("a WRITE");
        h.deliver(&zeros);
        h.check_memory();
        let stored = |h: &Harness| h.regions[0].memory.with_stored(|b, z| (b.to_vec(), z));
        assert_eq!(stored(&h), (vec![0; 8 << 10], true), "zeros written: still served as zeros");
        let other = h.craft(write(0x1f)).expect("a WRITE");
        h.deliver(&other);
        h.check_memory();
        let (bytes, zeros) = stored(&h);
        assert!(!zeros, "a byte other than zero ends the zeros");
        assert_eq!(bytes[0x40], 0x1f, "and lands");
        assert!(bytes[..0x40].iter().chain(&bytes[0x80..]).all(|&b| b == 0), "only the WRITE's range changed");
    }

    /// An in-sequence READ earns its length (plus headers) of credit once;
    /// duplicates of it earn it once more until the next drain, and a READ
    /// far behind the expected PSN earns nothing.
    #[test]
    fn read_credit_counts_executions_and_one_replay_per_drain() {
        let mut h = Harness::new(false, false, false);
        // QP 0, RDMA READ of the whole read-only region, in sequence.
        let read = |psn_mode: u8| [0, 12, 0, psn_mode, 1, 4, 0, 0, 0, 0, 0, 0];
        let pkt = h.craft(read(0)).expect("a READ request");
        let one = 65536 + REPLY_BYTES * 256;
        h.deliver(&pkt);
        assert_eq!((h.reads_executed, h.read_credit), (1, one));
        h.deliver(&pkt);
        assert_eq!(h.read_credit, 2 * one, "a duplicate earns a replay");
        h.drain();
        for _ in 0..3 {
            h.deliver(&pkt);
        }
        assert_eq!(h.read_credit, 3 * one, "after a drain, duplicates earn one replay again, once");
        let far = h.craft(read(2)).expect("a READ request");
        h.deliver(&far);
        assert_eq!((h.reads_executed, h.read_credit), (1, 3 * one), "a READ never executed earns nothing");
    }
}
