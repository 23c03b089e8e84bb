//! Memory windows (type 1 and type 2) between two endpoints on the
//! simulated link, and crafted requests from a hostile peer: binds and
//! local invalidates completing in order with the send queue, remote
//! access through a window's rkey (its range and rights only), SEND with
//! invalidate, and every refusal leaving memory and windows as they were.

mod common;

use common::hostile::*;
use common::*;
use core::net::IpAddr;
use core::time::Duration;
use rdma_transport::sim::{bring_up, connect, LinkConfig, PairConfig, Side, Sim};
use rdma_transport::*;
use rdma_wire::{BthRepr, NakCode, Opcode, Psn, RethRepr, Syndrome, TransportRepr};

const LIMIT: Duration = Duration::from_secs(10);
/// Where side B's bindable region is, and how long.
const VA: u64 = 0x10_0000;
const LEN: usize = 4096;
const BINDABLE: Access = Access(Access::ALL.0 | Access::MW_BIND.0);

fn pair() -> (Sim, Side, Side) {
    pair_on(LinkConfig::default(), 3)
}

fn pair_on(link: LinkConfig, seed: u64) -> (Sim, Side, Side) {
    let mut sim = Sim::new(seed, link);
    let (a, b) = connect(&mut sim, PairConfig::default());
    (sim, a, b)
}

/// A region of B's PD that windows may be bound to.
fn bindable(sim: &mut Sim, b: &Side) -> (RegionMemory, u32) {
    let mem = RegionMemory::zeroed(LEN);
    let (key, _) = sim.ep(b.ep).reg_mr(b.pd, VA, mem.clone(), BINDABLE);
    (mem, key)
}

fn post(sim: &mut Sim, s: &Side, wr_id: u64, op: SendOp, sg: Vec<Sge>) {
    sim.ep(s.ep).post_send(s.qpn, SendWr::new(wr_id, op, sg)).unwrap();
}

fn bind_op(mw_rkey: u32, mr: u32, addr: u64, length: u64, access: Access) -> SendOp {
    SendOp::BindMw { mw_rkey, rkey: mw_rkey.wrapping_add(1), mr_lkey: mr, addr, length, access }
}

/// Binds a new window of `mw_type` on B's QP; returns its handle and rkey.
fn bound_window(sim: &mut Sim, b: &Side, mw_type: MwType, mr: u32, addr: u64, len: u64, access: Access) -> (MwId, u32) {
    let (id, rkey) = sim.ep(b.ep).alloc_mw(b.pd, mw_type).unwrap();
    post(sim, b, 900, bind_op(rkey, mr, addr, len, access), vec![]);
    sim.run_idle(LIMIT);
    let wcs = sim.ep(b.ep).poll_cq(b.send_cq, usize::MAX);
    assert_eq!(statuses(&wcs), [(900, WcStatus::Success)]);
    assert_eq!((wcs[0].opcode, wcs[0].opcode as u32), (WcOpcode::BindMw, 5));
    let now = sim.ep(b.ep).mw(id).unwrap().rkey;
    assert_eq!(now, (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff), "the consumer's key byte");
    (id, now)
}

fn completions(sim: &mut Sim, s: &Side) -> Vec<WorkCompletion> {
    sim.ep(s.ep).poll_cq(s.send_cq, usize::MAX)
}

const WINDOW_RW: Access = Access(Access::REMOTE_READ.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0);

#[test]
fn a_type2_window_carries_writes_reads_and_atomics_until_a_send_with_invalidate() {
    let (mut sim, a, b) = pair();
    let (mem, mr) = bindable(&mut sim, &b);
    let (id, rkey) = bound_window(&mut sim, &b, MwType::Type2, mr, VA + 1024, 512, WINDOW_RW);
    assert!(is_window_key(rkey));
    assert_eq!(sim.ep(b.ep).windows_bound_to(mr), 1);

    let data = fill(&a, 0, 256, 7);
    post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: VA + 1024 + 100, rkey }, sge(&a, 0, 256));
    post(&mut sim, &a, 2, SendOp::RdmaRead { remote_addr: VA + 1024 + 100, rkey }, sge(&a, 4096, 256));
    post(&mut sim, &a, 3, SendOp::FetchAdd { remote_addr: VA + 1024, rkey, add: 5 }, sge(&a, 8192, 8));
    sim.run_idle(LIMIT);
    assert_eq!(
        statuses(&completions(&mut sim, &a)),
        [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(mem.to_vec()[1124..1380], data[..], "written through the window, at the region's bytes");
    assert_eq!(read(&a, 4096, 256), data, "read back through it");
    assert_eq!(u64::from_ne_bytes(mem.to_vec()[1024..1032].try_into().unwrap()), 5);

    // The peer invalidates the window as it sends: the receive says so.
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 50, sg_list: sge(&b, 0, 64) }).unwrap();
    post(&mut sim, &a, 4, SendOp::SendWithInv { invalidate_rkey: rkey }, sge(&a, 0, 16));
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(4, WcStatus::Success)]);
    let rwc = sim.ep(b.ep).poll_cq(b.recv_cq, usize::MAX);
    assert_eq!(statuses(&rwc), [(50, WcStatus::Success)]);
    assert_eq!((rwc[0].invalidated_rkey, rwc[0].wc_flags & wc_flags::WITH_INV), (Some(rkey), wc_flags::WITH_INV));
    assert_eq!(sim.ep(b.ep).mw(id).unwrap().binding, None, "invalidated");
    assert_eq!(sim.ep(b.ep).windows_bound_to(mr), 0);

    // Its rkey now reaches nothing: NAK remote access error, nothing written.
    let before = mem.to_vec();
    post(&mut sim, &a, 5, SendOp::RdmaWrite { remote_addr: VA + 1024, rkey }, sge(&a, 0, 64));
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(5, WcStatus::RemAccessErr)]);
    assert_eq!(mem.to_vec(), before);
    assert!(sim.ep(b.ep).stats().drops_for(Drop::RkeyViolation) >= 1);
}

#[test]
fn access_outside_the_window_or_beyond_its_rights_is_a_remote_access_error_touching_nothing() {
    type Case = (&'static str, fn(u32) -> SendOp);
    let cases: [Case; 4] = [
        ("WRITE past the window's end", |k| SendOp::RdmaWrite { remote_addr: VA + 1024 + 500, rkey: k }),
        ("WRITE before its start", |k| SendOp::RdmaWrite { remote_addr: VA + 1000, rkey: k }),
        ("READ of a write-only window", |k| SendOp::RdmaRead { remote_addr: VA + 1024, rkey: k }),
        ("atomic on a write-only window", |k| SendOp::FetchAdd { remote_addr: VA + 1024, rkey: k, add: 1 }),
    ];
    for (name, op) in cases {
        let (mut sim, a, b) = pair();
        let (mem, mr) = bindable(&mut sim, &b);
        mem.write(0, &[0x5a; LEN]);
        let (_, rkey) = bound_window(&mut sim, &b, MwType::Type2, mr, VA + 1024, 512, Access::REMOTE_WRITE);
        let sg = if name.starts_with("atomic") { sge(&a, 0, 8) } else { sge(&a, 0, 64) };
        post(&mut sim, &a, 1, op(rkey), sg);
        sim.run_idle(LIMIT);
        assert_eq!(statuses(&completions(&mut sim, &a)), [(1, WcStatus::RemAccessErr)], "{name}");
        assert_eq!(mem.to_vec(), vec![0x5a; LEN], "{name}: nothing written");
        assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err, "{name}: the responder's QP too");
    }
}

#[test]
fn local_invalidate_waits_for_earlier_requests_and_completes_in_order() {
    let (mut sim, a, b) = pair();
    let (mem, mr) = bindable(&mut sim, &b);
    let (id, rkey) = bound_window(&mut sim, &b, MwType::Type2, mr, VA, LEN as u64, WINDOW_RW);
    // B's own WRITE to A is outstanding when the LOCAL_INV is posted.
    let data = fill(&b, 0, 3000, 3);
    post(&mut sim, &b, 1, SendOp::RdmaWrite { remote_addr: a.va, rkey: a.rkey }, sge(&b, 0, 3000));
    post(&mut sim, &b, 2, SendOp::LocalInv { invalidate_rkey: rkey }, vec![]);
    // Until the WRITE's ACK is back, the window stays bound; the moment
    // it completes, the LOCAL_INV runs.
    let mut seen_bound_while_writing = false;
    sim.run_until(LIMIT, |sim| {
        let write_done = sim.ep(b.ep).mw(id).unwrap().binding.is_none();
        if !write_done && sim.ep(b.ep).qp_psns(b.qpn).unwrap().0 != 0x20 {
            seen_bound_while_writing = true;
        }
        write_done
    });
    assert!(seen_bound_while_writing, "the WRITE went out and the window was still bound");
    sim.run_idle(LIMIT);
    let wcs = completions(&mut sim, &b);
    assert_eq!(statuses(&wcs), [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!((wcs[1].opcode, wcs[1].opcode as u32), (WcOpcode::LocalInv, 6));
    assert_eq!(read(&a, 0, 3000), data);
    assert_eq!(sim.ep(b.ep).mw(id).unwrap().binding, None);
    post(&mut sim, &a, 3, SendOp::RdmaRead { remote_addr: VA, rkey }, sge(&a, 0, 8));
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(3, WcStatus::RemAccessErr)]);
    assert_eq!(mem.to_vec(), vec![0; LEN]);
}

#[test]
fn refused_local_invalidates_fail_the_qp_with_local_qp_operation_error() {
    for what in ["twice", "a region's key", "a type 1 window"] {
        let (mut sim, _a, b) = pair();
        let (_, mr) = bindable(&mut sim, &b);
        let key = match what {
            "twice" => {
                let (_, k) = bound_window(&mut sim, &b, MwType::Type2, mr, VA, 64, WINDOW_RW);
                post(&mut sim, &b, 1, SendOp::LocalInv { invalidate_rkey: k }, vec![]);
                sim.run_idle(LIMIT);
                assert_eq!(statuses(&completions(&mut sim, &b)), [(1, WcStatus::Success)]);
                k
            }
            "a region's key" => mr,
            _ => bound_window(&mut sim, &b, MwType::Type1, mr, VA, 64, WINDOW_RW).1,
        };
        post(&mut sim, &b, 2, SendOp::LocalInv { invalidate_rkey: key }, vec![]);
        sim.run_idle(LIMIT);
        assert_eq!(statuses(&completions(&mut sim, &b)), [(2, WcStatus::LocQpOpErr)], "{what}");
        assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err, "{what}");
    }
}

#[test]
fn bind_misuse_completes_with_mw_bind_error_and_changes_nothing() {
    // (what, window PD is another, window type, length, region access)
    for what in ["window of another PD", "region without MW_BIND", "outside the region", "rebinding a bound type 2"] {
        let (mut sim, _a, b) = pair();
        let (_, mr) = bindable(&mut sim, &b);
        let ep = sim.ep(b.ep);
        let (plain, _) = ep.reg_mr(b.pd, 0x90_0000, RegionMemory::zeroed(64), Access::ALL);
        let other_pd = ep.alloc_pd();
        let (id, rkey, op) = match what {
            "window of another PD" => {
                let (id, k) = ep.alloc_mw(other_pd, MwType::Type2).unwrap();
                (id, k, bind_op(k, mr, VA, 64, WINDOW_RW))
            }
            "region without MW_BIND" => {
                let (id, k) = ep.alloc_mw(b.pd, MwType::Type2).unwrap();
                (id, k, bind_op(k, plain, 0x90_0000, 64, WINDOW_RW))
            }
            "outside the region" => {
                let (id, k) = ep.alloc_mw(b.pd, MwType::Type2).unwrap();
                (id, k, bind_op(k, mr, VA + LEN as u64 - 8, 16, WINDOW_RW))
            }
            _ => {
                let (id, k) = bound_window(&mut sim, &b, MwType::Type2, mr, VA, 64, WINDOW_RW);
                (id, k, bind_op(k, mr, VA + 64, 64, WINDOW_RW))
            }
        };
        let before = sim.ep(b.ep).mw(id).unwrap();
        post(&mut sim, &b, 7, op, vec![]);
        sim.run_idle(LIMIT);
        let wcs = completions(&mut sim, &b);
        assert_eq!(statuses(&wcs), [(7, WcStatus::MwBindErr)], "{what}");
        assert_eq!((wcs[0].opcode, WcStatus::MwBindErr as u32), (WcOpcode::BindMw, 6), "{what}");
        assert_eq!(sim.ep(b.ep).mw(id).unwrap(), before, "{what}: the window is as it was");
        assert_eq!(sim.ep(b.ep).mw(id).unwrap().rkey, rkey, "{what}");
        assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err, "{what}: the QP fails, as in rxe");
    }
}

/// A bind that fails behind a request still waiting for its ACK: that
/// request completes as it turns out (here: success), then the bind fails,
/// and nothing posted after it goes out.
#[test]
fn a_bind_failing_behind_an_outstanding_write_fails_after_it_and_stops_the_queue() {
    let (mut sim, a, b) = pair();
    let (_, mr) = bindable(&mut sim, &b);
    let other_pd = sim.ep(b.ep).alloc_pd();
    let (_, foreign) = sim.ep(b.ep).alloc_mw(other_pd, MwType::Type2).unwrap();
    let data = fill(&b, 0, 5000, 1);
    post(&mut sim, &b, 1, SendOp::RdmaWrite { remote_addr: a.va, rkey: a.rkey }, sge(&b, 0, 5000));
    post(&mut sim, &b, 2, bind_op(foreign, mr, VA, 64, WINDOW_RW), vec![]);
    post(&mut sim, &b, 3, SendOp::RdmaWrite { remote_addr: a.va + 8192, rkey: a.rkey }, sge(&b, 0, 64));
    sim.run_idle(LIMIT);
    let wcs = completions(&mut sim, &b);
    assert_eq!(statuses(&wcs), [(1, WcStatus::Success), (2, WcStatus::MwBindErr), (3, WcStatus::WrFlushErr)]);
    assert_eq!(read(&a, 0, 5000), data, "the WRITE before it landed");
    assert_eq!(read(&a, 8192, 64), vec![0; 64], "the WRITE after it never went out");
    assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err);

    // The request before it fails instead: it completes with its own
    // error (not a success it never had), and the bind is flushed.
    let (mut sim, a, b) = pair();
    let (_, mr) = bindable(&mut sim, &b);
    let other_pd = sim.ep(b.ep).alloc_pd();
    let (_, foreign) = sim.ep(b.ep).alloc_mw(other_pd, MwType::Type2).unwrap();
    post(&mut sim, &b, 1, SendOp::RdmaWrite { remote_addr: a.va, rkey: a.rkey ^ 0x100 }, sge(&b, 0, 5000));
    post(&mut sim, &b, 2, bind_op(foreign, mr, VA, 64, WINDOW_RW), vec![]);
    sim.run_idle(LIMIT);
    let wcs = completions(&mut sim, &b);
    assert_eq!(statuses(&wcs), [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]);
}

#[test]
fn a_type1_window_serves_any_qp_of_its_pd_and_refuses_send_with_invalidate() {
    let (mut sim, a, b) = pair();
    let (mem, mr) = bindable(&mut sim, &b);
    let (id, rkey) = bound_window(&mut sim, &b, MwType::Type1, mr, VA, 128, WINDOW_RW);
    post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: VA, rkey }, sge(&a, 0, 128));
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(1, WcStatus::Success)]);
    let before = mem.to_vec();
    // A SEND with invalidate naming it: NAK invalid request, nothing placed,
    // the window still bound.
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 50, sg_list: sge(&b, 0, 64) }).unwrap();
    b.mem.write(0, &[0xcc; 64]);
    fill(&a, 0, 16, 9);
    post(&mut sim, &a, 2, SendOp::SendWithInv { invalidate_rkey: rkey }, sge(&a, 0, 16));
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(2, WcStatus::RemInvReqErr)]);
    let rwc = sim.ep(b.ep).poll_cq(b.recv_cq, usize::MAX);
    assert_eq!(statuses(&rwc), [(50, WcStatus::RemInvReqErr)]);
    assert_eq!(read(&b, 0, 64), vec![0xcc; 64], "the SEND's bytes were not placed");
    assert!(sim.ep(b.ep).mw(id).unwrap().binding.is_some(), "a type 1 window stays bound");
    assert_eq!(mem.to_vec(), before);
    assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::InvalidateRefused), 1);
}

#[test]
fn a_type1_window_is_unbound_by_a_zero_length_bind() {
    let (mut sim, a, b) = pair();
    let (_, mr) = bindable(&mut sim, &b);
    let (id, rkey) = bound_window(&mut sim, &b, MwType::Type1, mr, VA, 128, WINDOW_RW);
    post(&mut sim, &b, 2, bind_op(rkey, 0, 0, 0, Access::NONE), vec![]);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &b)), [(2, WcStatus::Success)]);
    let w = sim.ep(b.ep).mw(id).unwrap();
    assert_eq!(w.binding, None);
    post(&mut sim, &a, 3, SendOp::RdmaRead { remote_addr: VA, rkey: w.rkey }, sge(&a, 0, 8));
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(3, WcStatus::RemAccessErr)]);
}

#[test]
fn a_type2_window_is_reached_only_through_the_qp_it_is_bound_to() {
    let (mut sim, a, b) = pair();
    let (mem, mr) = bindable(&mut sim, &b);
    // A second QP of B's PD, connected to nothing that answers, binds it.
    let ep = sim.ep(b.ep);
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd: b.pd,
        send_cq: b.send_cq,
        recv_cq: b.recv_cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let qp2 = ep.create_qp(init).unwrap();
    bring_up(ep, qp2, IpAddr::from([127, 0, 0, 9]), 77, 0, 0, &PairConfig::default());
    let (_, rkey) = ep.alloc_mw(b.pd, MwType::Type2).unwrap();
    ep.post_send(qp2, SendWr::new(1, bind_op(rkey, mr, VA, 64, WINDOW_RW), vec![])).unwrap();
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &b)), [(1, WcStatus::Success)]);
    let rkey = (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff);
    post(&mut sim, &a, 2, SendOp::RdmaWrite { remote_addr: VA, rkey }, sge(&a, 0, 8));
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &a)), [(2, WcStatus::RemAccessErr)]);
    assert_eq!(mem.to_vec(), vec![0; LEN]);
    // Destroying the QP it is bound to unbinds it.
    assert_eq!(sim.ep(b.ep).windows_bound_to(mr), 1);
    sim.ep(b.ep).destroy_qp(qp2).unwrap();
    assert_eq!(sim.ep(b.ep).windows_bound_to(mr), 0);
}

#[test]
fn a_region_with_bound_windows_is_not_deregistered() {
    let (mut sim, _a, b) = pair();
    let (_, mr) = bindable(&mut sim, &b);
    let (id, rkey) = bound_window(&mut sim, &b, MwType::Type2, mr, VA, 64, WINDOW_RW);
    assert_eq!(sim.ep(b.ep).try_dereg_mr(mr), Err(DeregError::WindowsBound { key: mr, bound: 1 }));
    assert!(sim.ep(b.ep).mr(mr).is_some(), "still registered");
    post(&mut sim, &b, 1, SendOp::LocalInv { invalidate_rkey: rkey }, vec![]);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&completions(&mut sim, &b)), [(1, WcStatus::Success)]);
    assert_eq!(sim.ep(b.ep).try_dereg_mr(mr), Ok(()));
    assert_eq!(sim.ep(b.ep).try_dereg_mr(mr), Err(DeregError::NoSuchRegion(mr)));
    assert!(sim.ep(b.ep).dealloc_mw(id));
    assert!(sim.ep(b.ep).mw(id).is_none());
}

#[test]
fn local_operations_are_refused_on_ud_and_with_buffers() {
    let (mut sim, _a, b) = pair();
    let ep = sim.ep(b.ep);
    let (_, rkey) = ep.alloc_mw(b.pd, MwType::Type2).unwrap();
    let mut wr = SendWr::new(1, SendOp::LocalInv { invalidate_rkey: rkey }, sge(&b, 0, 8));
    assert!(matches!(ep.post_send(b.qpn, wr.clone()), Err(VerbsError::InvalidAttribute { .. })));
    wr.sg_list.clear();
    assert!(ep.post_send(b.qpn, wr).is_ok());
}

/// Over a lossy, reordering, duplicating link, binds and local invalidates
/// complete in order with the requests around them, a SEND with invalidate
/// invalidates once (its duplicates are only re-ACKed), and a WRITE
/// through a window after its invalidation never lands.
#[test]
fn seeded_lossy_links_keep_local_operations_in_order_and_invalidate_once() {
    for seed in 1..=24u64 {
        let link = LinkConfig {
            loss: 0.05,
            duplicate: 0.05,
            reorder: 0.05,
            reorder_delay: Duration::from_micros(20),
            ..LinkConfig::default()
        };
        let (mut sim, a, b) = pair_on(link, seed);
        let (mem, mr) = bindable(&mut sim, &b);
        let (id, rkey) = sim.ep(b.ep).alloc_mw(b.pd, MwType::Type2).unwrap();
        let new_key = (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff);
        // B: WRITE, BIND, WRITE, all signaled: completions in posting order.
        post(&mut sim, &b, 1, SendOp::RdmaWrite { remote_addr: a.va, rkey: a.rkey }, sge(&b, 0, 5000));
        post(&mut sim, &b, 2, bind_op(rkey, mr, VA, 2048, WINDOW_RW), vec![]);
        post(&mut sim, &b, 3, SendOp::RdmaWrite { remote_addr: a.va + 8192, rkey: a.rkey }, sge(&b, 0, 100));
        sim.run_idle(LIMIT);
        let wcs = completions(&mut sim, &b);
        assert_eq!(
            statuses(&wcs),
            [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)],
            "seed {seed}"
        );
        assert_eq!(wcs.iter().map(|w| w.opcode).collect::<Vec<_>>()[1], WcOpcode::BindMw);
        // A writes through the window, then invalidates it with a SEND.
        let data = fill(&a, 0, 2048, seed as u8);
        post(&mut sim, &a, 10, SendOp::RdmaWrite { remote_addr: VA, rkey: new_key }, sge(&a, 0, 2048));
        sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 60, sg_list: sge(&b, 0, 64) }).unwrap();
        post(&mut sim, &a, 11, SendOp::SendWithInv { invalidate_rkey: new_key }, sge(&a, 0, 32));
        sim.run_idle(LIMIT);
        assert_eq!(
            statuses(&completions(&mut sim, &a)),
            [(10, WcStatus::Success), (11, WcStatus::Success)],
            "seed {seed}"
        );
        assert_eq!(mem.to_vec()[..2048], data[..], "seed {seed}");
        let rwc = sim.ep(b.ep).poll_cq(b.recv_cq, usize::MAX);
        assert_eq!(statuses(&rwc), [(60, WcStatus::Success)], "seed {seed}");
        assert_eq!(rwc[0].invalidated_rkey, Some(new_key), "seed {seed}");
        assert_eq!(sim.ep(b.ep).mw(id).unwrap().binding, None, "seed {seed}");
        assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Rts, "seed {seed}: duplicates were harmless");
        // After it, the window's key reaches nothing.
        let snapshot = mem.to_vec();
        fill(&a, 0, 64, 0xee);
        post(&mut sim, &a, 12, SendOp::RdmaWrite { remote_addr: VA, rkey: new_key }, sge(&a, 0, 64));
        sim.run_idle(LIMIT);
        // The NAK, or (when the link lost it) retries into a responder
        // that the NAK moved to the error state.
        let status = statuses(&completions(&mut sim, &a));
        assert!(
            status == [(12, WcStatus::RemAccessErr)] || status == [(12, WcStatus::RetryExcErr)],
            "seed {seed}: {status:?}"
        );
        assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err, "seed {seed}");
        assert_eq!(mem.to_vec(), snapshot, "seed {seed}");
    }
}

// A hostile peer: crafted requests straight into B.

fn hostile_write(b: &Side, rkey: u32, va: u64, payload: &[u8]) -> Vec<u8> {
    let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, b.qpn, Psn::new(EPSN)));
    tr.bth.ack_req = true;
    tr.reth = Some(RethRepr { va, rkey, dma_len: payload.len() as u32 });
    craft(&tr, payload)
}

fn hostile_send_with_inv(b: &Side, rkey: u32, payload: &[u8]) -> Vec<u8> {
    let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY_WITH_INVALIDATE, b.qpn, Psn::new(EPSN)));
    tr.ieth = Some(rkey);
    craft(&tr, payload)
}

const NAK_ACCESS: (Opcode, Option<Syndrome>) =
    (Opcode::RC_ACKNOWLEDGE, Some(Syndrome::Nak(NakCode::RemoteAccessError)));
const NAK_INVALID: (Opcode, Option<Syndrome>) = (Opcode::RC_ACKNOWLEDGE, Some(Syndrome::Nak(NakCode::InvalidRequest)));

#[test]
fn hostile_writes_through_unbound_guessed_or_invalidated_window_keys_are_naked() {
    for what in ["unbound", "guessed key byte", "invalidated", "deallocated", "another PD's"] {
        let (mut sim, _a, b) = pair();
        let (mem, mr) = bindable(&mut sim, &b);
        let rkey = match what {
            "unbound" => sim.ep(b.ep).alloc_mw(b.pd, MwType::Type2).unwrap().1,
            "guessed key byte" => bound_window(&mut sim, &b, MwType::Type2, mr, VA, 64, WINDOW_RW).1 ^ 0x5a,
            "invalidated" => {
                let (_, k) = bound_window(&mut sim, &b, MwType::Type2, mr, VA, 64, WINDOW_RW);
                post(&mut sim, &b, 1, SendOp::LocalInv { invalidate_rkey: k }, vec![]);
                sim.run_idle(LIMIT);
                k
            }
            "deallocated" => {
                let (id, k) = bound_window(&mut sim, &b, MwType::Type1, mr, VA, 64, WINDOW_RW);
                assert!(sim.ep(b.ep).dealloc_mw(id));
                k
            }
            _ => {
                let ep = sim.ep(b.ep);
                let pd2 = ep.alloc_pd();
                let (mr2, _) = ep.reg_mr(pd2, 0x50_0000, RegionMemory::zeroed(64), BINDABLE);
                let (_, k) = ep.alloc_mw(pd2, MwType::Type1).unwrap();
                // A type 1 window of PD 2 bound on B's QP (of PD 1): allowed
                // (rxe checks no QP PD for type 1), but B's QP cannot use it.
                ep.post_send(b.qpn, SendWr::new(3, bind_op(k, mr2, 0x50_0000, 64, WINDOW_RW), vec![])).unwrap();
                sim.run_idle(LIMIT);
                assert_eq!(statuses(&completions(&mut sim, &b)), [(3, WcStatus::Success)]);
                (k & !0xff) | (k.wrapping_add(1) & 0xff)
            }
        };
        let _ = completions(&mut sim, &b);
        let va = if what == "another PD's" { 0x50_0000 } else { VA };
        assert_eq!(answers(&mut sim, &b, &hostile_write(&b, rkey, va, &[0xff; 32])), [NAK_ACCESS], "{what}");
        assert_eq!(mem.to_vec(), vec![0; LEN], "{what}: nothing written");
        assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err, "{what}");
    }
}

#[test]
fn hostile_sends_with_invalidate_of_keys_the_qp_may_not_invalidate_are_naked() {
    for what in ["a region's key", "a type 1 window", "an unbound window", "no window", "another QP's window"] {
        let (mut sim, _a, b) = pair();
        let (_, mr) = bindable(&mut sim, &b);
        let (key, id) = match what {
            "a region's key" => (mr, None),
            "a type 1 window" => {
                let (id, k) = bound_window(&mut sim, &b, MwType::Type1, mr, VA, 64, WINDOW_RW);
                (k, Some(id))
            }
            "an unbound window" => {
                let (id, k) = sim.ep(b.ep).alloc_mw(b.pd, MwType::Type2).unwrap();
                (k, Some(id))
            }
            "no window" => (0x8000_7700, None),
            _ => {
                let ep = sim.ep(b.ep);
                let init = QpInitAttr {
                    qp_type: QpType::Rc,
                    pd: b.pd,
                    send_cq: b.send_cq,
                    recv_cq: b.recv_cq,
                    srq: None,
                    cap: QpCap::default(),
                    sq_sig_all: false,
                };
                let qp2 = ep.create_qp(init).unwrap();
                bring_up(ep, qp2, IpAddr::from([127, 0, 0, 9]), 77, 0, 0, &PairConfig::default());
                let (id, k) = ep.alloc_mw(b.pd, MwType::Type2).unwrap();
                ep.post_send(qp2, SendWr::new(1, bind_op(k, mr, VA, 64, WINDOW_RW), vec![])).unwrap();
                sim.run_idle(LIMIT);
                (sim.ep(b.ep).mw(id).unwrap().rkey, Some(id))
            }
        };
        let _ = completions(&mut sim, &b);
        let before = id.map(|id| sim.ep(b.ep).mw(id).unwrap());
        sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 5, sg_list: sge(&b, 0, 64) }).unwrap();
        assert_eq!(answers(&mut sim, &b, &hostile_send_with_inv(&b, key, &[0xab; 16])), [NAK_INVALID], "{what}");
        assert_eq!(read(&b, 0, 16), vec![0; 16], "{what}: nothing placed");
        assert_eq!(id.map(|id| sim.ep(b.ep).mw(id).unwrap()), before, "{what}: window unchanged");
        let rwc = sim.ep(b.ep).poll_cq(b.recv_cq, usize::MAX);
        assert_eq!(statuses(&rwc)[0], (5, WcStatus::RemInvReqErr), "{what}");
        assert!(sim.ep(b.ep).mr(mr).is_some(), "{what}: the region is untouched");
    }
}

/// A zero-length WRITE checks no key (IBTA 9.4.4), window keys included;
/// a WRITE whose window is invalidated between its packets stops there.
#[test]
fn hostile_zero_length_and_split_writes_through_windows() {
    let (mut sim, _a, b) = pair();
    let (mem, mr) = bindable(&mut sim, &b);
    assert_eq!(
        answers(&mut sim, &b, &hostile_write(&b, 0x8000_1234, 0, &[])),
        [(Opcode::RC_ACKNOWLEDGE, Some(Syndrome::ACK_UNLIMITED))]
    );
    let (_, k) = bound_window(&mut sim, &b, MwType::Type2, mr, VA, 4096, WINDOW_RW);
    let _ = completions(&mut sim, &b);
    // WRITE FIRST of 2048 bytes at MTU 1024, then the window goes, then the rest.
    let mut first = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_WRITE_FIRST, b.qpn, Psn::new(EPSN + 1)));
    first.reth = Some(RethRepr { va: VA, rkey: k, dma_len: 2048 });
    sim.ep(b.ep).handle_packet(Instant::ZERO, &craft(&first, &[1; 1024]));
    post(&mut sim, &b, 1, SendOp::LocalInv { invalidate_rkey: k }, vec![]);
    let mut buf = vec![0u8; MAX_PACKET];
    while sim.ep(b.ep).poll_transmit(Instant::ZERO, &mut buf).is_some() {}
    assert_eq!(statuses(&completions(&mut sim, &b)), [(1, WcStatus::Success)]);
    let last = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_WRITE_LAST, b.qpn, Psn::new(EPSN + 2)));
    assert_eq!(answers(&mut sim, &b, &craft(&last, &[2; 1024])), [NAK_ACCESS]);
    assert_eq!(mem.to_vec()[..1024], [1; 1024], "the first packet landed while the window was bound");
    assert_eq!(mem.to_vec()[1024..2048], [0; 1024], "the last did not");
}

/// Seeded streams of crafted requests naming window keys (current, stale,
/// guessed), the region's key and random keys, at addresses around the
/// window, with SENDs with invalidate among them: nothing panics, no byte
/// outside the window ever changes, and the window only goes away by a
/// SEND with invalidate of its current key on its own QP.
#[test]
fn hostile_request_streams_around_a_window_touch_nothing_outside_it() {
    use rdma_transport::rng::Rng;
    const WIN: u64 = VA + 1024;
    const WIN_LEN: u64 = 512;
    let (mut landed, mut invalidated) = (0, 0);
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed);
        let (mut sim, _a, b) = pair();
        // The region itself grants peers nothing: only the window does.
        let mem = RegionMemory::zeroed(LEN);
        let (mr, _) = sim.ep(b.ep).reg_mr(b.pd, VA, mem.clone(), Access::LOCAL_WRITE | Access::MW_BIND);
        mem.write(0, &[0x5a; LEN]);
        let mw_type = if rng.chance(0.5) { MwType::Type1 } else { MwType::Type2 };
        let (id, key) = bound_window(&mut sim, &b, mw_type, mr, WIN, WIN_LEN, WINDOW_RW);
        sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 1, sg_list: sge(&b, 0, 4096) }).unwrap();
        let mut psn = EPSN;
        for _ in 0..8 {
            let rkey = match rng.below(7) {
                0..=2 => key,
                3 => key ^ (1 + rng.below(255) as u32),
                4 => mr,
                5 => rng.next_u64() as u32 | 0x8000_0000,
                _ => rng.next_u64() as u32,
            };
            let va = WIN - 64 + rng.below(WIN_LEN + 128);
            let len = rng.below(700) as u32;
            let op = rng.below(6);
            let mut tr = TransportRepr::new(BthRepr::new(
                [
                    Opcode::RC_RDMA_WRITE_ONLY,
                    Opcode::RC_RDMA_READ_REQUEST,
                    Opcode::RC_FETCH_ADD,
                    Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
                    Opcode::RC_RDMA_WRITE_FIRST,
                    Opcode::RC_COMPARE_SWAP,
                ][op as usize],
                b.qpn,
                Psn::new(psn),
            ));
            tr.bth.ack_req = true;
            let payload: Vec<u8> = match op {
                0 => vec![0xee; len as usize],
                3 => vec![0xdd; (len % 64) as usize],
                4 => vec![0xcc; 1024],
                _ => Vec::new(),
            };
            match op {
                0 | 1 => tr.reth = Some(RethRepr { va, rkey, dma_len: len }),
                4 => tr.reth = Some(RethRepr { va, rkey, dma_len: 2048 }),
                2 | 5 => {
                    tr.atomic_eth = Some(rdma_wire::AtomicEthRepr {
                        va: va & !7,
                        rkey,
                        swap_add: 0xfeed,
                        compare: 0x5a5a_5a5a_5a5a_5a5a,
                    })
                }
                _ => tr.ieth = Some(rkey),
            }
            let frame = craft(&tr, &payload);
            let valid_inv = op == 3 && rkey == key && mw_type == MwType::Type2;
            let was_bound = sim.ep(b.ep).mw(id).unwrap().binding.is_some();
            answers(&mut sim, &b, &frame);
            let now_bound = sim.ep(b.ep).mw(id).unwrap().binding.is_some();
            assert!(
                now_bound == was_bound || (valid_inv && was_bound && !now_bound),
                "seed {seed}: the window changed without a valid invalidation"
            );
            invalidated += usize::from(was_bound && !now_bound);
            psn = if op == 1 { psn + (len.div_ceil(1024)).max(1) } else { psn + 1 };
            if sim.ep(b.ep).query_qp(b.qpn).unwrap().0 == QpState::Err {
                break;
            }
        }
        let after = mem.to_vec();
        let (lo, hi) = ((WIN - VA) as usize, (WIN - VA + WIN_LEN) as usize);
        assert!(after[..lo].iter().chain(&after[hi..]).all(|&x| x == 0x5a), "seed {seed}: bytes outside the window");
        landed += usize::from(after[lo..hi].iter().any(|&x| x != 0x5a));
    }
    assert!(
        landed > 20 && invalidated >= 5,
        "the streams reached the window ({landed}) and invalidated it ({invalidated})"
    );
}

/// Two engines of one device (one seed) that share a window table: a
/// window made through one leaves both engines' region keys in step (the
/// window's key draws from the table's own generator), and both see one
/// window. Before, a window's key was drawn from the engine's region-key
/// generator, so the next region got other keys there.
#[test]
fn engines_sharing_a_window_table_keep_their_region_keys_in_step() {
    let ip = IpAddr::V4(core::net::Ipv4Addr::new(10, 0, 0, 9));
    let (mut first, mut other) = (Endpoint::with_seed(ip, 5), Endpoint::with_seed(ip, 5));
    other.share_windows(first.window_table());
    let (pd, pd2) = (first.alloc_pd(), other.alloc_pd());
    assert_eq!(pd, pd2);
    let keys = |ep: &mut Endpoint| ep.reg_mr(pd, 0x1000, RegionMemory::zeroed(4096), BINDABLE);
    assert_eq!(keys(&mut first), keys(&mut other));
    let (id, rkey) = first.alloc_mw(pd, MwType::Type1).unwrap();
    let (mr, _) = keys(&mut first);
    assert_eq!(keys(&mut other).0, mr, "a region made after the window has one key in both engines");
    assert_eq!(other.mw(id).map(|w| (w.rkey, w.binding)), Some((rkey, None)), "one window");
    assert!(other.dealloc_mw(id));
    assert!(first.mw(id).is_none(), "freed through the other engine");
}
