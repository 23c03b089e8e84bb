//! Transmit arbitration between QPs (issue 32): a hostile or merely large
//! request on one QP must not hold up another QP of the same device.
//!
//! The device under test is side B of a `sim::connect` pair, driven by
//! hand as a NIC port would drive it: one packet is taken from
//! `poll_transmit` whenever the port is free, and the clock moves by that
//! packet's serialisation time at [`RATE_BPS`]. Crafted requests arrive
//! at scheduled times (from A's address, so they pass every check). The
//! bounds are in packets (what the scheduler decides) and in simulated
//! time at that rate. (`Sim::step` would not show it: it moves everything
//! an endpoint has to send onto a first-in first-out link at once, so a
//! packet queued later waits for all of it whatever the engine's order.)
//! The live version over UDP, with the 0.2 s goal of the issue, is
//! `another_qp_is_acked_while_one_replays_a_16_mib_read` in
//! `tests/hostile_peer.rs`.

mod common;

use common::hostile::*;
use core::time::Duration;
use rdma_transport::endpoint::TX_BURST;
use rdma_transport::rng::Rng;
use rdma_transport::sim::{bring_up, connect, LinkConfig, PairConfig, Side, Sim};
use rdma_transport::*;
use rdma_wire::{BthRepr, Opcode, Psn, RethRepr, TransportRepr};

/// The READ one QP replays: 16 MiB, 4,096 packets at a 4 KiB MTU (the
/// issue's measurement).
const READ_LEN: u32 = 16 << 20;
const MTU: u32 = 4096;
const READ_PACKETS: usize = (READ_LEN / MTU) as usize;
/// The modelled port: 25 Gb/s.
const RATE_BPS: u64 = 25_000_000_000;
/// The QPN at A that the other QPs of B are connected to: `PEER + i`.
const PEER: u32 = 0x5000;
/// Where B's IPv4 + UDP headers end and its BTH begins.
const BTH: usize = 28;

/// A request arriving at B.
#[derive(Debug, Clone, Copy)]
enum Arrival {
    /// A duplicate of the executed READ on the replaying QP, asking again
    /// from its `k`-th packet on (the rest of the READ).
    DupRead { k: u32 },
    /// A fresh READ of `len` bytes at `offset` on other QP `qp`.
    Read { qp: usize, offset: u64, len: u32 },
    /// A one-packet WRITE on other QP `qp`, asking for an ACK.
    Write { qp: usize },
}

/// One packet B sent: when it finished leaving, to which QP at A, its
/// opcode and PSN.
#[derive(Debug, Clone, Copy)]
struct Sent {
    done: Instant,
    dest_qp: u32,
    opcode: Opcode,
    psn: u32,
}

/// A WRITE that arrived, and the packets B sent before its ACK.
#[derive(Debug, Clone, Copy)]
struct Waited {
    qp: usize,
    /// Packets B sent between the arrival and the ACK.
    packets: usize,
    time: Duration,
}

struct Rig {
    sim: Sim,
    b: Side,
    /// The QPN at A that the replaying QP's answers go to.
    bulk_peer: u32,
    /// B's QPNs of the other QPs, their next expected PSN.
    others: Vec<(u32, u32)>,
    now: Instant,
    buf: Vec<u8>,
    sent: Vec<Sent>,
}

impl Rig {
    /// Device B with the replaying QP and `others` more RC QPs, all at a
    /// 4 KiB MTU, with payloads by reference (the bytes are not copied:
    /// the scheduler's decisions are what is tested). The replaying QP
    /// has executed a 16 MiB READ and sent its answer once.
    fn new(others: usize, agenda_threshold: usize) -> Rig {
        let cfg = PairConfig { mtu: Mtu::Mtu4096, mem_len: READ_LEN as usize, ..PairConfig::default() };
        let mut sim = Sim::new(32, LinkConfig::default());
        let (a, b) = connect(&mut sim, cfg);
        assert!(!(PEER..PEER + others as u32).contains(&a.qpn));
        let ep = sim.ep(b.ep);
        ep.set_payload_by_reference(true);
        ep.set_agenda_threshold(agenda_threshold);
        let mut qps = Vec::new();
        for i in 0..others {
            let init = QpInitAttr { recv_cq: b.recv_cq, cap: cfg.cap, ..QpInitAttr::new(QpType::Rc, b.pd, b.send_cq) };
            let qpn = ep.create_qp(init).expect("a QP");
            bring_up(ep, qpn, A.into(), PEER + i as u32, EPSN, 0x20, &cfg);
            qps.push((qpn, EPSN));
        }
        let mut rig = Rig {
            sim,
            b,
            bulk_peer: a.qpn,
            others: qps,
            now: Instant::ZERO,
            buf: vec![0; MAX_PACKET],
            sent: Vec::new(),
        };
        rig.arrive(Arrival::DupRead { k: 0 }); // the READ itself, in sequence
        while rig.pull().is_some() {}
        assert_eq!(rig.sent.len(), READ_PACKETS, "the READ is answered once");
        rig.sent.clear();
        rig
    }

    /// The QPN at A that B's packets of other QP `i` go to.
    fn peer(i: usize) -> u32 {
        PEER + i as u32
    }

    fn arrive(&mut self, what: Arrival) {
        let b = &self.b;
        let packet = match what {
            Arrival::DupRead { k } => {
                let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_READ_REQUEST, b.qpn, Psn::new(EPSN + k)));
                let skip = k * MTU;
                tr.reth = Some(RethRepr { va: b.va + u64::from(skip), rkey: b.rkey, dma_len: READ_LEN - skip });
                craft(&tr, &[])
            }
            Arrival::Read { qp, offset, len } => {
                let (qpn, psn) = self.others[qp];
                let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_READ_REQUEST, qpn, Psn::new(psn)));
                tr.reth = Some(RethRepr { va: b.va + offset, rkey: b.rkey, dma_len: len });
                self.others[qp].1 = psn + len.div_ceil(MTU).max(1);
                craft(&tr, &[])
            }
            Arrival::Write { qp } => {
                let (qpn, psn) = self.others[qp];
                let mut bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, qpn, Psn::new(psn));
                bth.ack_req = true;
                let mut tr = TransportRepr::new(bth);
                tr.reth = Some(RethRepr { va: b.va, rkey: b.rkey, dma_len: 8 });
                self.others[qp].1 = psn + 1;
                craft(&tr, b"urgent!!")
            }
        };
        self.sim.ep(self.b.ep).handle_packet(self.now, &packet);
    }

    /// Takes one packet from B and moves the clock past it.
    fn pull(&mut self) -> Option<Sent> {
        let t = self.sim.ep(self.b.ep).poll_transmit(self.now, &mut self.buf)?;
        let bits = t.wire_len() as u64 * 8;
        self.now += Duration::from_nanos((bits * 1_000_000_000).div_ceil(RATE_BPS));
        let h = &self.buf[BTH..BTH + 12];
        let s = Sent {
            done: self.now,
            opcode: Opcode(h[0]),
            dest_qp: u32::from_be_bytes([0, h[5], h[6], h[7]]),
            psn: u32::from_be_bytes([0, h[9], h[10], h[11]]),
        };
        self.sent.push(s);
        Some(s)
    }

    /// Runs a schedule of arrivals (times from now, in order), sending
    /// whenever there is something to send, until everything arrived
    /// and nothing is left (or `max_packets` went). Returns what each
    /// WRITE waited for its ACK.
    fn run(&mut self, schedule: &[(Duration, Arrival)], max_packets: usize) -> Vec<Waited> {
        let start = self.now;
        let mut next = 0;
        // (other QP, its PSN, arrival time, packets sent before it arrived)
        let mut writes = Vec::new();
        let mut waited = Vec::new();
        while self.sent.len() < max_packets {
            while let Some(&(_, what)) = schedule.get(next).filter(|(at, _)| start + *at <= self.now) {
                if let Arrival::Write { qp } = what {
                    writes.push((qp, self.others[qp].1, self.now, self.sent.len()));
                }
                self.arrive(what);
                next += 1;
            }
            match self.pull() {
                Some(s) if s.opcode == Opcode::RC_ACKNOWLEDGE => {
                    let acked = |&(qp, psn, ..): &(usize, u32, Instant, usize)| {
                        s.dest_qp == Rig::peer(qp) && Psn::new(s.psn).diff(Psn::new(psn)) >= 0
                    };
                    while let Some(i) = writes.iter().position(acked) {
                        let (qp, _, at, before) = writes.remove(i);
                        let packets = self.sent.len() - 1 - before;
                        waited.push(Waited { qp, packets, time: s.done - at });
                    }
                }
                Some(_) => {}
                None => match schedule.get(next) {
                    Some(&(at, _)) => self.now = self.now.max(start + at),
                    None => break,
                },
            }
        }
        assert!(writes.is_empty(), "WRITEs never ACKed within {max_packets} packets: {writes:?}");
        waited
    }

    /// Packets B sent to the replaying QP's peer (READ responses).
    fn replayed(&self) -> usize {
        self.sent.iter().filter(|s| s.dest_qp == self.bulk_peer).count()
    }
}

/// The most a QP that has one packet to send waits while QPs with bulk to
/// send take their turns: the turn of each of them (`busy` QPs), at most
/// [`TX_BURST`] packets each.
fn bound(busy: usize) -> usize {
    busy * TX_BURST as usize
}

/// Time of `packets` full-sized packets at [`RATE_BPS`] (headers included).
fn wire_time(packets: usize) -> Duration {
    let bits = packets as u64 * (u64::from(MTU) + 64) * 8;
    Duration::from_nanos((bits * 1_000_000_000).div_ceil(RATE_BPS))
}

/// The measurement, on the engine: while one QP replays an
/// executed 16 MiB READ (4,096 packets) on request of 250 duplicate READs,
/// another QP's WRITE is ACKed after at most one turn of the replaying QP
/// (16 packets, 21 us at 25 Gb/s), whether the duplicates come all at once,
/// every 50 us (each restarting the replay), or each once the replay before
/// it has ended (whole replays back to back, 5.4 ms each: 24 of them here,
/// to keep the test short). With the walk and with the agenda.
#[test]
fn another_qp_is_acked_within_one_turn_while_one_replays_a_16_mib_read() {
    let replay_time = wire_time(READ_PACKETS);
    for (name, gap, dups) in [
        ("all at once", Duration::ZERO, 250),
        ("every 50 us", Duration::from_micros(50), 250),
        ("each after the replay before it", replay_time, 24),
    ] {
        for threshold in [usize::MAX, 0] {
            let mut rig = Rig::new(1, threshold);
            let mut rng = Rng::new(dups as u64 + gap.as_nanos() as u64);
            let mut schedule: Vec<(Duration, Arrival)> =
                (0..dups).map(|i| (gap * i, Arrival::DupRead { k: 0 })).collect();
            // Nine WRITEs at seeded times over the attack (the first with the first duplicate).
            let span = (gap * dups).max(replay_time);
            for i in 0..9u64 {
                let at = if i == 0 { Duration::ZERO } else { Duration::from_nanos(rng.below(span.as_nanos() as u64)) };
                schedule.push((at, Arrival::Write { qp: 0 }));
            }
            schedule.sort_by_key(|&(at, _)| at);
            let waited = rig.run(&schedule, 2_000_000);
            assert_eq!(waited.len(), 9);
            let worst = waited.iter().max_by_key(|w| w.packets).expect("nine");
            assert!(
                worst.packets <= bound(1) && worst.time <= wire_time(bound(1) + 1),
                "{name}, agenda threshold {threshold}: a WRITE waited {} packets ({:?}) for its ACK \
                 behind the replay: {waited:?}",
                worst.packets,
                worst.time,
            );
            // The replaying QP was not starved either: the last duplicate's
            // replay went out whole.
            assert!(rig.replayed() >= READ_PACKETS, "{name}: replayed {} packets", rig.replayed());
            let last = rig.sent.iter().rev().find(|s| s.dest_qp == rig.bulk_peer).expect("a replay");
            assert_eq!(last.opcode, Opcode::RC_RDMA_READ_RESPONSE_LAST, "{name}");
        }
    }
}

/// Neither bulk QP starves the other: while the replay of the 16 MiB READ
/// and a fresh 4 MiB READ on another QP both have packets, they alternate
/// in turns of [`TX_BURST`] packets, each gets half the wire, and both
/// answers end whole. With the walk and with the agenda.
#[test]
fn two_bulk_qps_share_the_wire_turn_by_turn() {
    for threshold in [usize::MAX, 0] {
        let mut rig = Rig::new(1, threshold);
        let fresh = 4u32 << 20;
        let schedule = [
            (Duration::ZERO, Arrival::DupRead { k: 0 }),
            (Duration::ZERO, Arrival::Read { qp: 0, offset: 0, len: fresh }),
            // Duplicates asking for the rest keep coming meanwhile.
            (Duration::from_micros(200), Arrival::DupRead { k: 100 }),
            (Duration::from_micros(400), Arrival::DupRead { k: 300 }),
        ];
        rig.run(&schedule, 2_000_000);
        let fresh_packets = (fresh / MTU) as usize;
        let other = |s: &Sent| s.dest_qp == Rig::peer(0);
        let last_other = rig.sent.iter().rposition(other).expect("the fresh READ was answered");
        assert_eq!(rig.sent.iter().filter(|s| other(s)).count(), fresh_packets);
        assert_eq!(rig.sent[last_other].opcode, Opcode::RC_RDMA_READ_RESPONSE_LAST);
        // While both had packets, runs are one turn long and alternate.
        let both = &rig.sent[..=last_other];
        let mut run = (other(&both[0]), 0);
        for s in both {
            run = if other(s) == run.0 { (run.0, run.1 + 1) } else { (other(s), 1) };
            assert!(run.1 <= TX_BURST as usize, "threshold {threshold}: a run longer than a turn");
        }
        let replayed = both.len() - fresh_packets;
        assert!(replayed.abs_diff(fresh_packets) <= TX_BURST as usize, "{replayed} against {fresh_packets}");
        // And the replay, alone after that, ends whole.
        let end = rig.sent.last().map(|s| (s.dest_qp == rig.bulk_peer, s.opcode));
        assert_eq!(end, Some((true, Opcode::RC_RDMA_READ_RESPONSE_LAST)));
    }
}

/// With a dozen QPs (past the walk's threshold: the agenda chooses), one
/// replaying the 16 MiB READ and one serving a fresh 4 MiB READ, a WRITE
/// on each of the ten others at the same moment is ACKed after at most one
/// turn of each bulk QP and the ACKs of the others: no QP waits for another
/// one's bulk. The walk gives the same turns.
#[test]
fn many_qps_each_get_their_turn() {
    for threshold in [usize::MAX, 0] {
        let mut rig = Rig::new(11, threshold);
        let mut schedule = vec![
            (Duration::ZERO, Arrival::DupRead { k: 0 }),
            (Duration::ZERO, Arrival::Read { qp: 0, offset: 0, len: 4 << 20 }),
        ];
        for round in 0..5u32 {
            let at = Duration::from_micros(100 + 700 * u64::from(round));
            schedule.extend((1..11).map(|qp| (at, Arrival::Write { qp })));
        }
        let waited = rig.run(&schedule, 2_000_000);
        assert_eq!(waited.len(), 50);
        for w in &waited {
            assert!(w.packets <= bound(2) + 10, "threshold {threshold}: QP {} waited {w:?}", w.qp);
        }
    }
}

/// A seeded property over random loads: up to a dozen QPs, duplicates of
/// the 16 MiB READ asking for random rests of it at random times, fresh
/// READs of up to 2 MiB on up to three other QPs, WRITEs on the rest.
/// Every WRITE is ACKed after at most a turn of each QP with bulk to send
/// and the answers of the others; every READ, fresh or replayed, is
/// answered whole (no QP starves another, either way). With the walk and
/// with the agenda.
#[test]
fn no_qp_waits_for_another_ones_bulk_property() {
    for seed in 1..=40u64 {
        let mut rng = Rng::new(seed);
        let others = 1 + rng.below(11) as usize;
        let bulk = (rng.below(4) as usize).min(others - 1);
        let threshold = if seed % 2 == 0 { usize::MAX } else { 0 };
        let mut rig = Rig::new(others, threshold);
        let span = 2_000 + rng.below(8_000); // microseconds of arrivals
        let mut schedule = Vec::new();
        for i in 0..1 + rng.below(40) {
            // The first asks for the whole READ, the others for a random rest of it.
            let k = if i == 0 { 0 } else { rng.below(READ_PACKETS as u64) as u32 };
            schedule.push((Duration::from_micros(rng.below(span)), Arrival::DupRead { k }));
        }
        // READ response packets each bulk QP owes.
        let mut want = vec![0usize; bulk];
        for (qp, owed) in want.iter_mut().enumerate() {
            for _ in 0..1 + rng.below(4) {
                let len = (16 + rng.below(496) as u32) * MTU; // 64 KiB to 2 MiB
                schedule.push((Duration::from_micros(rng.below(span)), Arrival::Read { qp, offset: 0, len }));
                *owed += (len / MTU) as usize;
            }
        }
        let writes = 5 + rng.below(20);
        for _ in 0..writes {
            let qp = bulk + rng.below((others - bulk) as u64) as usize;
            schedule.push((Duration::from_micros(rng.below(span)), Arrival::Write { qp }));
        }
        schedule.sort_by_key(|&(at, _)| at);
        let waited = rig.run(&schedule, 4_000_000);
        assert_eq!(waited.len() as u64, writes, "seed {seed}");
        // The replaying QP and each bulk QP have a turn each; every other
        // QP a packet (its ACK) ahead of this one at most.
        let limit = bound(1 + bulk) + others;
        for w in &waited {
            assert!(w.packets <= limit, "seed {seed} ({others} QPs, {bulk} bulk): {w:?} over {limit} packets");
        }
        for (qp, &n) in want.iter().enumerate() {
            let got: Vec<&Sent> = rig.sent.iter().filter(|s| s.dest_qp == Rig::peer(qp)).collect();
            assert_eq!(got.len(), n, "seed {seed}: QP {qp}'s READs");
            assert_eq!(got.last().map(|s| s.opcode), Some(Opcode::RC_RDMA_READ_RESPONSE_LAST), "seed {seed}");
        }
        let last = rig.sent.iter().rev().find(|s| s.dest_qp == rig.bulk_peer).map(|s| s.opcode);
        assert_eq!(last, Some(Opcode::RC_RDMA_READ_RESPONSE_LAST), "seed {seed}: the replay did not end");
    }
}
