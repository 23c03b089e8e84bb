//! FLUSH and ATOMIC WRITE (IBTA 1.5 annex A19) between two endpoints on
//! the simulated link, and crafted ones from a hostile peer: the bytes in
//! memory, the answers on the wire (an RDMA READ RESPONSE ONLY without
//! payload, or the NAK rxe answers), the completions and the counters.

mod common;

use common::hostile::*;
use common::*;
use core::time::Duration;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Side, Sim, Verdict};
use rdma_transport::wr::flush;
use rdma_transport::*;
use rdma_wire::{BthRepr, FethRepr, NakCode, Opcode, Psn, RethRepr, RoceV2Packet, Syndrome, TransportRepr};
use std::cell::RefCell;
use std::rc::Rc;

const LIMIT: Duration = Duration::from_secs(10);
/// What the QPs allow in these tests: everything, FLUSH included.
const QP_ACCESS: Access = Access(Access::ALL.0 | Access::FLUSH_GLOBAL.0 | Access::FLUSH_PERSISTENT.0);

fn pair_with(cfg: PairConfig) -> (Sim, Side, Side) {
    let mut sim = Sim::new(3, LinkConfig::default());
    let (a, b) = connect(&mut sim, cfg);
    set_qp_access(&mut sim, &b, QP_ACCESS);
    (sim, a, b)
}

fn pair() -> (Sim, Side, Side) {
    pair_with(PairConfig::default())
}

fn set_qp_access(sim: &mut Sim, s: &Side, access: Access) {
    let attr = QpAttr { qp_access_flags: Some(access), ..QpAttr::default() };
    sim.ep(s.ep).modify_qp(s.qpn, &attr).unwrap();
}

/// A region of `len` zeroed bytes at `va` on side `s`, in its PD.
fn region(sim: &mut Sim, s: &Side, va: u64, len: usize, access: Access) -> (RegionMemory, u32) {
    let mem = RegionMemory::zeroed(len);
    let (_, rkey) = sim.ep(s.ep).reg_mr(s.pd, va, mem.clone(), access);
    (mem, rkey)
}

fn post(sim: &mut Sim, s: &Side, wr_id: u64, op: SendOp) {
    sim.ep(s.ep).post_send(s.qpn, SendWr::new(wr_id, op, vec![])).unwrap();
}

fn completions(sim: &mut Sim, s: &Side) -> Vec<WorkCompletion> {
    sim.ep(s.ep).poll_cq(s.send_cq, usize::MAX)
}

/// (opcode, payload length, syndrome) of each packet side B sent.
type Sent = Rc<RefCell<Vec<(Opcode, usize, Option<Syndrome>)>>>;

/// Records what side B sends.
fn record_b(sim: &mut Sim) -> Sent {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let log = seen.clone();
    sim.set_filter(move |src, p| {
        if src == 1 {
            let t = RoceV2Packet::new_checked(p).unwrap();
            let t = t.transport();
            log.borrow_mut().push((t.bth().opcode(), t.payload().len(), t.aeth().map(|a| a.syndrome())));
        }
        Verdict::Deliver
    });
    seen
}

const VALUE: [u8; 8] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];

#[test]
fn atomic_write_stores_its_8_bytes_verbatim_and_is_answered_by_an_empty_read_response() {
    let (mut sim, a, b) = pair();
    b.mem.write(56, &[0xee; 24]);
    let seen = record_b(&mut sim);
    post(&mut sim, &a, 1, SendOp::AtomicWrite { remote_addr: b.va + 64, rkey: b.rkey, value: VALUE });
    sim.run_idle(LIMIT);
    assert_eq!(read(&b, 64, 8), VALUE, "the payload bytes, in memory order");
    assert_eq!((read(&b, 56, 8), read(&b, 72, 8)), (vec![0xee; 8], vec![0xee; 8]), "neighbours untouched");
    let wcs = completions(&mut sim, &a);
    assert_eq!(statuses(&wcs), [(1, WcStatus::Success)]);
    assert_eq!((wcs[0].opcode, wcs[0].opcode as u32, wcs[0].byte_len), (WcOpcode::AtomicWrite, 9, 8));
    assert_eq!(*seen.borrow(), [(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0, Some(Syndrome::ACK_UNLIMITED))]);
}

#[test]
fn flush_after_writes_completes_with_the_written_bytes_in_place() {
    let (mut sim, a, b) = pair();
    let (mem, rkey) = region(&mut sim, &b, 0x10_0000, 4096, Access::ALL | Access::FLUSH_GLOBAL);
    let data = fill(&a, 0, 1000, 5);
    let sg = sge(&a, 0, 1000);
    sim.ep(a.ep).post_send(a.qpn, SendWr::new(1, SendOp::RdmaWrite { remote_addr: 0x10_0100, rkey }, sg)).unwrap();
    let seen = record_b(&mut sim);
    let op = SendOp::Flush {
        remote_addr: 0x10_0100,
        rkey,
        len: 1000,
        placement: flush::GLOBAL,
        selectivity: flush::SELECTIVITY_RANGE,
    };
    let mut wr = SendWr::new(2, op, vec![]);
    wr.signaled = true;
    sim.ep(a.ep).post_send(a.qpn, wr).unwrap();
    sim.run_idle(LIMIT);
    let wcs = completions(&mut sim, &a);
    assert_eq!(statuses(&wcs), [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!((wcs[1].opcode, wcs[1].opcode as u32, wcs[1].byte_len), (WcOpcode::Flush, 8, 1000));
    assert_eq!(mem.to_vec()[0x100..0x100 + 1000], data[..]);
    let seen = seen.borrow();
    assert_eq!(seen.last(), Some(&(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0, Some(Syndrome::ACK_UNLIMITED))));
}

#[test]
fn flush_of_the_whole_region_ignores_the_range_and_persistent_needs_its_own_right() {
    let (mut sim, a, b) = pair();
    let (_, rkey) = region(&mut sim, &b, 0x10_0000, 4096, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL);
    // Selectivity "memory region": the RETH's range is not looked at (rxe).
    let whole =
        SendOp::Flush { remote_addr: 0, rkey, len: 0, placement: flush::GLOBAL, selectivity: flush::SELECTIVITY_MR };
    post(&mut sim, &a, 1, whole);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(1, WcStatus::Success)]);
    // The region allows global placement only: a persistent FLUSH is refused.
    let persistent = SendOp::Flush {
        remote_addr: 0x10_0000,
        rkey,
        len: 8,
        placement: flush::GLOBAL | flush::PERSISTENT,
        selectivity: flush::SELECTIVITY_RANGE,
    };
    post(&mut sim, &a, 2, persistent);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(2, WcStatus::RemAccessErr)]);
    assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::RkeyViolation), 1);
    assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err, "as rxe: the responder QP goes to ERR");
}

/// One misuse per case: the requester's completion, the NAK B sent and
/// what B counted; B's memory is unchanged in every case.
#[test]
fn misuse_is_naked_as_rxe_naks_it_and_touches_nothing() {
    type Case = (&'static str, fn(&Side, u32, u32) -> SendOp, WcStatus, NakCode, Drop);
    let cases: [Case; 8] = [
        (
            "FLUSH past the end of the region",
            |_, flushable, _| SendOp::Flush {
                remote_addr: 0x10_0000 + 4000,
                rkey: flushable,
                len: 97,
                placement: flush::GLOBAL,
                selectivity: flush::SELECTIVITY_RANGE,
            },
            WcStatus::RemAccessErr,
            NakCode::RemoteAccessError,
            Drop::RkeyViolation,
        ),
        (
            "FLUSH of a region without the FLUSH right",
            |b, _, _| SendOp::Flush {
                remote_addr: b.va,
                rkey: b.rkey,
                len: 64,
                placement: flush::GLOBAL,
                selectivity: flush::SELECTIVITY_RANGE,
            },
            WcStatus::RemAccessErr,
            NakCode::RemoteAccessError,
            Drop::RkeyViolation,
        ),
        (
            "FLUSH with a bad rkey",
            |_, flushable, _| SendOp::Flush {
                remote_addr: 0x10_0000,
                rkey: flushable ^ 0x300,
                len: 8,
                placement: flush::GLOBAL,
                selectivity: flush::SELECTIVITY_MR,
            },
            WcStatus::RemAccessErr,
            NakCode::RemoteAccessError,
            Drop::RkeyViolation,
        ),
        (
            "ATOMIC WRITE to a misaligned address",
            |b, _, _| SendOp::AtomicWrite { remote_addr: b.va + 4, rkey: b.rkey, value: VALUE },
            WcStatus::RemInvReqErr,
            NakCode::InvalidRequest,
            Drop::MisalignedAtomic,
        ),
        (
            "ATOMIC WRITE past the end of the region",
            |b, _, _| SendOp::AtomicWrite { remote_addr: b.va + (1 << 20), rkey: b.rkey, value: VALUE },
            WcStatus::RemAccessErr,
            NakCode::RemoteAccessError,
            Drop::RkeyViolation,
        ),
        (
            "ATOMIC WRITE straddling the end of the region",
            |b, _, _| SendOp::AtomicWrite { remote_addr: b.va + (1 << 20) - 4, rkey: b.rkey, value: VALUE },
            WcStatus::RemAccessErr,
            NakCode::RemoteAccessError,
            Drop::RkeyViolation,
        ),
        (
            "ATOMIC WRITE to a read-only region",
            |_, _, read_only| SendOp::AtomicWrite { remote_addr: 0x20_0000, rkey: read_only, value: VALUE },
            WcStatus::RemAccessErr,
            NakCode::RemoteAccessError,
            Drop::RkeyViolation,
        ),
        (
            "ATOMIC WRITE with a bad rkey",
            |b, _, _| SendOp::AtomicWrite { remote_addr: b.va, rkey: b.rkey ^ 0x300, value: VALUE },
            WcStatus::RemAccessErr,
            NakCode::RemoteAccessError,
            Drop::RkeyViolation,
        ),
    ];
    for (name, op, status, nak, why) in cases {
        let (mut sim, a, b) = pair();
        let (flushable, fkey) = region(&mut sim, &b, 0x10_0000, 4096, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL);
        let (read_only, rkey) = region(&mut sim, &b, 0x20_0000, 4096, Access::REMOTE_READ);
        read_only.write(0, &[0xaa; 64]);
        b.mem.write(0, &[0x5a; 64]);
        b.mem.write((1 << 20) - 64, &[0x5a; 64]);
        let before = (b.mem.to_vec(), flushable.to_vec(), read_only.to_vec());
        let seen = record_b(&mut sim);
        post(&mut sim, &a, 1, op(&b, fkey, rkey));
        post(&mut sim, &a, 2, SendOp::AtomicWrite { remote_addr: b.va + 8, rkey: b.rkey, value: VALUE });
        sim.run_idle(LIMIT);
        let wcs = completions(&mut sim, &a);
        assert_eq!(statuses(&wcs), [(1, status), (2, WcStatus::WrFlushErr)], "{name}");
        assert_eq!(*seen.borrow(), [(Opcode::RC_ACKNOWLEDGE, 0, Some(Syndrome::Nak(nak)))], "{name}");
        assert_eq!(sim.ep(b.ep).stats().drops_for(why), 1, "{name}");
        assert!(before == (b.mem.to_vec(), flushable.to_vec(), read_only.to_vec()), "{name}: nothing written");
        assert_eq!(sim.ep(a.ep).query_qp(a.qpn).unwrap().0, QpState::Err, "{name}");
        assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err, "{name}");
    }
}

#[test]
fn a_qp_without_the_right_refuses_the_operation_as_an_invalid_request() {
    for case in ["FLUSH without IBV_ACCESS_FLUSH_GLOBAL on the QP", "ATOMIC WRITE without REMOTE_WRITE on the QP"] {
        let (mut sim, a, b) = pair();
        let (_, fkey) = region(&mut sim, &b, 0x10_0000, 4096, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL);
        set_qp_access(&mut sim, &b, Access::REMOTE_READ | Access::REMOTE_ATOMIC | Access::LOCAL_WRITE);
        let op = if case.starts_with("FLUSH") {
            SendOp::Flush { remote_addr: 0x10_0000, rkey: fkey, len: 8, placement: flush::GLOBAL, selectivity: 0 }
        } else {
            SendOp::AtomicWrite { remote_addr: b.va, rkey: b.rkey, value: VALUE }
        };
        post(&mut sim, &a, 1, op);
        sim.run_idle(LIMIT);
        assert_eq!(statuses(&completions(&mut sim, &a)), [(1, WcStatus::RemInvReqErr)], "{case}");
        assert_eq!(read(&b, 0, 8), [0; 8], "{case}");
        assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::UnsupportedOpcode), 1, "{case}");
    }
}

#[test]
fn post_send_refuses_what_cannot_be_sent() {
    let (mut sim, a, b) = pair();
    let ep = sim.ep(a.ep);
    let flush =
        |placement, selectivity| SendOp::Flush { remote_addr: b.va, rkey: b.rkey, len: 8, placement, selectivity };
    for (op, sg) in [
        (flush(0, 0), vec![]),
        (flush(4, 0), vec![]),
        (flush(flush::GLOBAL, 2), vec![]),
        (SendOp::Flush { remote_addr: 0, rkey: 0, len: (1 << 31) + 1, placement: 1, selectivity: 0 }, vec![]),
        (flush(flush::GLOBAL, 0), sge(&a, 0, 8)),
        (SendOp::AtomicWrite { remote_addr: b.va, rkey: b.rkey, value: VALUE }, sge(&a, 0, 8)),
    ] {
        assert!(ep.post_send(a.qpn, SendWr::new(1, op, sg)).is_err(), "{op:?}");
    }
    // Nothing was queued: the QP is still fine.
    post(&mut sim, &a, 2, flush(flush::GLOBAL, 0));
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(2, WcStatus::RemAccessErr)], "b's region has no FLUSH right");
}

#[test]
fn uc_has_neither_operation() {
    let cfg = PairConfig { qp_type: QpType::Uc, ..PairConfig::default() };
    let mut sim = Sim::new(3, LinkConfig::default());
    let (a, b) = connect(&mut sim, cfg);
    let ep = sim.ep(a.ep);
    let e = ep.post_send(
        a.qpn,
        SendWr::new(1, SendOp::AtomicWrite { remote_addr: b.va, rkey: b.rkey, value: VALUE }, vec![]),
    );
    assert!(matches!(e, Err(VerbsError::UnsupportedOp { op: "ATOMIC_WRITE", .. })), "{e:?}");
    let op = SendOp::Flush { remote_addr: b.va, rkey: b.rkey, len: 8, placement: 1, selectivity: 0 };
    let e = ep.post_send(a.qpn, SendWr::new(1, op, vec![]));
    assert!(matches!(e, Err(VerbsError::UnsupportedOp { op: "FLUSH", .. })), "{e:?}");
}

/// The first answer to an ATOMIC WRITE is lost; B's memory changes before
/// the retry arrives. The retry is answered from the responder resource
/// and not written again (IBTA oA19-28 semantics: one write per request).
#[test]
fn a_retried_atomic_write_is_answered_again_but_written_once() {
    let cfg = PairConfig { timeout: 8, ..PairConfig::default() };
    let (mut sim, a, b) = pair_with(cfg);
    let mem = b.mem.clone();
    let dropped = Rc::new(RefCell::new(0));
    let count = dropped.clone();
    sim.set_filter(move |src, p| {
        if src == 1 && opcode_of(p) == Opcode::RC_RDMA_READ_RESPONSE_ONLY && *count.borrow() == 0 {
            *count.borrow_mut() += 1;
            mem.write(64, &[0xcc; 8]); // after the write, before the retry
            return Verdict::Drop;
        }
        Verdict::Deliver
    });
    post(&mut sim, &a, 1, SendOp::AtomicWrite { remote_addr: b.va + 64, rkey: b.rkey, value: VALUE });
    sim.run_idle(LIMIT);
    assert_eq!(*dropped.borrow(), 1);
    let wcs = completions(&mut sim, &a);
    assert_eq!(statuses(&wcs), [(1, WcStatus::Success)]);
    assert_eq!(read(&b, 64, 8), [0xcc; 8], "the retry did not write again");
    assert!(sim.ep(b.ep).stats().duplicates >= 1);
    assert_eq!(sim.ep(a.ep).stats().retransmits, 1);
}

/// ATOMIC WRITE takes one of `max_rd_atomic`'s slots, FLUSH does not (as
/// rxe's requester counts them); either way every request completes and
/// the responder never sees more than it advertised.
#[test]
fn many_in_a_row_with_one_rd_atomic_slot() {
    let cfg = PairConfig { max_rd_atomic: 1, ..PairConfig::default() };
    let (mut sim, a, b) = pair_with(cfg);
    let (_, fkey) = region(&mut sim, &b, 0x10_0000, 4096, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL);
    for i in 0..40u64 {
        let op = if i % 2 == 0 {
            SendOp::AtomicWrite { remote_addr: b.va + 8 * i, rkey: b.rkey, value: (i + 1).to_ne_bytes() }
        } else {
            SendOp::Flush { remote_addr: 0x10_0000, rkey: fkey, len: 4096, placement: 1, selectivity: 0 }
        };
        post(&mut sim, &a, i, op);
    }
    sim.run_idle(LIMIT);
    let wcs = completions(&mut sim, &a);
    assert_eq!(wcs.len(), 40);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    for i in (0..40u64).step_by(2) {
        assert_eq!(read(&b, 8 * i as usize, 8), (i + 1).to_ne_bytes());
    }
    assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::TooManyReads), 0);
}

// A hostile peer: crafted requests straight into B.

fn atomic_write_request(b: &Side, va: u64, dma_len: u32, payload: &[u8]) -> Vec<u8> {
    let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_ATOMIC_WRITE, b.qpn, Psn::new(EPSN)));
    tr.reth = Some(RethRepr { va, rkey: b.rkey, dma_len });
    craft(&tr, payload)
}

#[test]
fn hostile_atomic_writes_of_the_wrong_size_are_invalid_requests() {
    for (name, dma_len, payload) in
        [("RETH length 16", 16, &VALUE[..]), ("payload of 4", 8, &VALUE[..4]), ("payload of 12", 8, &[7u8; 12][..])]
    {
        let mut sim = Sim::new(3, LinkConfig::default());
        let (_a, b) = connect(&mut sim, PairConfig::default());
        let nak = answers(&mut sim, &b, &atomic_write_request(&b, b.va, dma_len, payload));
        assert_eq!(nak, [(Opcode::RC_ACKNOWLEDGE, Some(Syndrome::Nak(NakCode::InvalidRequest)))], "{name}");
        assert_eq!(read(&b, 0, 16), [0; 16], "{name}: nothing written");
        assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::BadLength), 1, "{name}");
    }
}

#[test]
fn hostile_flushes_with_reserved_fields_or_huge_lengths_are_invalid_requests() {
    for (name, feth, dma_len) in [
        ("selectivity 3", FethRepr { placement: 1, selectivity: 3 }, 8),
        ("length past 2^31", FethRepr { placement: 1, selectivity: 0 }, u32::MAX),
    ] {
        let (mut sim, _a, b) = pair();
        let (_, rkey) = region(&mut sim, &b, 0x10_0000, 4096, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL);
        let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_FLUSH, b.qpn, Psn::new(EPSN)));
        tr.feth = Some(feth);
        tr.reth = Some(RethRepr { va: 0x10_0000, rkey, dma_len });
        let nak = answers(&mut sim, &b, &craft(&tr, &[]));
        assert_eq!(nak, [(Opcode::RC_ACKNOWLEDGE, Some(Syndrome::Nak(NakCode::InvalidRequest)))], "{name}");
        assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err, "{name}");
    }
}

/// A duplicate FLUSH is answered again from its responder resource; one
/// for a PSN that never carried a FLUSH is dropped; a FLUSH's answer does
/// not count against `max_dest_rd_atomic`, so a READ right after it is served.
#[test]
fn hostile_duplicate_flushes_are_answered_only_for_flushes_that_ran() {
    let cfg = PairConfig { max_rd_atomic: 1, ..PairConfig::default() };
    let (mut sim, _a, b) = pair_with(cfg);
    let (_, rkey) = region(&mut sim, &b, 0x10_0000, 4096, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL);
    let flush_at = |psn: u32| {
        let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_FLUSH, b.qpn, Psn::new(psn)));
        tr.feth = Some(FethRepr { placement: 1, selectivity: 0 });
        tr.reth = Some(RethRepr { va: 0x10_0000, rkey, dma_len: 64 });
        craft(&tr, &[])
    };
    let ok = (Opcode::RC_RDMA_READ_RESPONSE_ONLY, Some(Syndrome::ACK_UNLIMITED));
    let ep = sim.ep(b.ep);
    ep.handle_packet(Instant::ZERO, &flush_at(EPSN));
    let mut read = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_READ_REQUEST, b.qpn, Psn::new(EPSN + 1)));
    read.reth = Some(RethRepr { va: b.va, rkey: b.rkey, dma_len: 8 });
    let answered = answers(&mut sim, &b, &craft(&read, &[]));
    assert_eq!(answered, [ok, ok], "the FLUSH's answer and the READ's, no NAK");
    assert_eq!(answers(&mut sim, &b, &flush_at(EPSN)), [], "its resource went to the READ (capacity 1)");
    // A FLUSH again at a PSN that was a READ: not replayed as anything.
    assert_eq!(answers(&mut sim, &b, &flush_at(EPSN + 1)), []);
    assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::DuplicateUnknown), 2);
    let (mut sim, _a, b) = pair();
    let (_, rkey) = region(&mut sim, &b, 0x10_0000, 4096, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL);
    let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_FLUSH, b.qpn, Psn::new(EPSN)));
    tr.feth = Some(FethRepr { placement: 1, selectivity: 0 });
    tr.reth = Some(RethRepr { va: 0x10_0000, rkey, dma_len: 64 });
    let p = craft(&tr, &[]);
    assert_eq!(answers(&mut sim, &b, &p), [ok]);
    assert_eq!(answers(&mut sim, &b, &p), [ok], "the duplicate is answered again");
}

/// A request the responder ends the connection for does not take the
/// answers of earlier requests with it: an ATOMIC_WRITE's response and a
/// READ's data queued before the NAK still go out first (a NIC answers in
/// PSN order), so those requests complete with success and only the bad
/// one fails.
#[test]
fn earlier_results_go_out_before_a_fatal_nak() {
    let (mut sim, a, b) = pair();
    // An infinitely fast link: the three requests arrive together and are
    // all handled before b sends anything, as a burst read from a socket.
    sim.set_config(LinkConfig { bandwidth_bps: 0, ..LinkConfig::default() });
    // No FLUSH on b's QP: the FLUSH is an invalid request.
    set_qp_access(&mut sim, &b, Access::ALL);
    let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    b.mem.write(4096, &data);
    let (local, lkey) = region(&mut sim, &a, 0x9000_0000, 4096, Access::LOCAL_WRITE);
    post(&mut sim, &a, 1, SendOp::AtomicWrite { remote_addr: b.va + 64, rkey: b.rkey, value: VALUE });
    sim.ep(a.ep)
        .post_send(
            a.qpn,
            SendWr::new(
                2,
                SendOp::RdmaRead { remote_addr: b.va + 4096, rkey: b.rkey },
                vec![Sge { addr: 0x9000_0000, length: 3000, lkey }],
            ),
        )
        .unwrap();
    let flush = SendOp::Flush {
        remote_addr: b.va,
        rkey: b.rkey,
        len: 64,
        placement: flush::GLOBAL,
        selectivity: flush::SELECTIVITY_RANGE,
    };
    post(&mut sim, &a, 3, flush);
    sim.run_idle(LIMIT);
    let got: Vec<(u64, WcStatus)> = completions(&mut sim, &a).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got[..3], [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::RemInvReqErr)]);
    let mut landed = [0u8; 8];
    b.mem.read(64, &mut landed);
    assert_eq!(landed, VALUE);
    let mut read = vec![0u8; 3000];
    local.read(0, &mut read);
    assert_eq!(read, data, "the READ's data arrived whole");
}
