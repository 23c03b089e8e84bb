//! On-demand paging (docs/odp.md) on the simulated link: regions over the
//! test's own mmap'd pages, registered on demand, a page unmapped (or made
//! read-only) under the live registration; every remote access to it
//! (WRITE, READ, atomics, ATOMIC WRITE, FLUSH, a SEND into a receive
//! buffer) and every local one (a SEND's or a READ's SGE) gets the IBTA
//! error, the process lives, and the other page keeps its bytes. Implicit
//! ODP (the whole address space) reaches any mapped address and fails
//! cleanly on an unmapped one. The runs are seeded, some on a lossy link.

mod common;

use common::*;
use core::time::Duration;
use rdma_transport::sim::{connect, LinkConfig, PairConfig, Side, Sim};
use rdma_transport::wr::flush;
use rdma_transport::*;

const LIMIT: Duration = Duration::from_secs(10);
const QP_ACCESS: Access = Access(Access::ALL.0 | Access::FLUSH_GLOBAL.0 | Access::FLUSH_PERSISTENT.0);
const ODP_ACCESS: Access = Access(QP_ACCESS.0 | Access::ON_DEMAND.0);
const OLD: u8 = 0xab;

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// `n` fresh pages of the test's own, mapped read-write and filled with
/// [`OLD`]; unmapped when dropped (what is left of them).
struct Pages {
    _serial: std::sync::MutexGuard<'static, ()>,
    addr: usize,
    n: usize,
    gone: Vec<usize>,
}

/// The tests of this file map and unmap pages: one test's hole must not
/// become another's fresh mapping while it is being tested, so they run
/// one at a time (each holds this while its pages live).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Pages {
    fn new(n: usize) -> Pages {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                n * page(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping just made, which nothing else uses yet.
        unsafe { core::ptr::write_bytes(p.cast::<u8>(), OLD, n * page()) };
        Pages { _serial: serial, addr: p as usize, n, gone: vec![] }
    }
    fn at(&self, i: usize) -> usize {
        self.addr + i * page()
    }
    fn unmap(&mut self, i: usize) {
        // SAFETY: page `i` of our mapping; nothing of ours points into it.
        assert_eq!(unsafe { libc::munmap(self.at(i) as *mut libc::c_void, page()) }, 0);
        self.gone.push(i);
    }
    fn read_only(&self, i: usize) {
        // SAFETY: page `i` of our mapping.
        assert_eq!(unsafe { libc::mprotect(self.at(i) as *mut libc::c_void, page(), libc::PROT_READ) }, 0);
    }
    /// A copy of mapped page `i` (the engine is idle: the sim is single-threaded).
    fn bytes(&self, i: usize) -> Vec<u8> {
        assert!(!self.gone.contains(&i));
        // SAFETY: a mapped, readable page of ours, not written meanwhile.
        unsafe { core::slice::from_raw_parts(self.at(i) as *const u8, page()).to_vec() }
    }
}

impl core::ops::Drop for Pages {
    fn drop(&mut self) {
        for i in (0..self.n).filter(|i| !self.gone.contains(i)) {
            // SAFETY: our own page, still mapped.
            unsafe { libc::munmap(self.at(i) as *mut libc::c_void, page()) };
        }
    }
}

fn pair(seed: u64, link: LinkConfig) -> (Sim, Side, Side) {
    let mut sim = Sim::new(seed, link);
    let (a, b) = connect(&mut sim, PairConfig::default());
    for s in [&a, &b] {
        let attr = QpAttr { qp_access_flags: Some(QP_ACCESS), ..QpAttr::default() };
        sim.ep(s.ep).modify_qp(s.qpn, &attr).unwrap();
    }
    (sim, a, b)
}

/// Registers `pages` on side `s`, on demand, at their own addresses.
fn register(sim: &mut Sim, s: &Side, pages: &Pages) -> u32 {
    // SAFETY: the pages are the test's, touched only through raw pointers.
    let mem = unsafe { RegionMemory::on_demand(pages.addr, pages.n * page()) };
    sim.ep(s.ep).reg_mr(s.pd, pages.addr as u64, mem, ODP_ACCESS).0
}

fn post(sim: &mut Sim, s: &Side, wr_id: u64, op: SendOp, sg: Vec<Sge>) {
    sim.ep(s.ep).post_send(s.qpn, SendWr::new(wr_id, op, sg)).unwrap();
}

fn done(sim: &mut Sim, s: &Side) -> Vec<(u64, WcStatus)> {
    statuses(&sim.ep(s.ep).poll_cq(s.send_cq, usize::MAX))
}

/// The remote operations of the test, each at `addr` through `rkey`, and
/// the bytes a WRITE or READ moves from/to side A's region.
fn remote_ops(addr: u64, rkey: u32) -> Vec<(&'static str, SendOp, u32)> {
    vec![
        ("WRITE", SendOp::RdmaWrite { remote_addr: addr, rkey }, 100),
        ("WRITE of 3 packets", SendOp::RdmaWrite { remote_addr: addr, rkey }, 3000),
        ("READ", SendOp::RdmaRead { remote_addr: addr, rkey }, 100),
        ("compare and swap", SendOp::CompareSwap { remote_addr: addr, rkey, compare: 0, swap: 7 }, 8),
        ("fetch and add", SendOp::FetchAdd { remote_addr: addr, rkey, add: 1 }, 8),
        ("ATOMIC WRITE", SendOp::AtomicWrite { remote_addr: addr, rkey, value: [9; 8] }, 0),
        (
            "FLUSH of a range",
            SendOp::Flush {
                remote_addr: addr,
                rkey,
                len: 64,
                placement: flush::GLOBAL,
                selectivity: flush::SELECTIVITY_RANGE,
            },
            0,
        ),
    ]
}

/// Runs `op` from A against B on a fresh pair (seeded, `link`), and
/// returns A's completion status and B's page-fault drops.
fn run_remote(
    seed: u64,
    link: LinkConfig,
    pages: &Pages,
    target: impl Fn(u32) -> (SendOp, u32),
) -> (WcStatus, u64, QpState) {
    let (mut sim, a, b) = pair(seed, link);
    let rkey = register(&mut sim, &b, pages);
    let (op, len) = target(rkey);
    let sg = if len > 0 { sge(&a, 0, len) } else { vec![] };
    post(&mut sim, &a, 1, op, sg);
    sim.run_idle(LIMIT);
    let wcs = done(&mut sim, &a);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    let faults = sim.ep(b.ep).stats().drops_for(Drop::PageFault);
    (wcs[0].1, faults, sim.ep(b.ep).query_qp(b.qpn).unwrap().0)
}

#[test]
fn every_remote_access_to_an_unmapped_page_is_a_remote_access_error_and_the_other_page_is_intact() {
    let mut pages = Pages::new(2);
    pages.unmap(1);
    for seed in [1, 2, 3] {
        for (name, op, len) in remote_ops(pages.at(1) as u64 + 64, 0) {
            let (status, faults, state) = run_remote(seed, LinkConfig::default(), &pages, |rkey| {
                let mut op = op;
                set_rkey(&mut op, rkey);
                (op, len)
            });
            assert_eq!(status, WcStatus::RemAccessErr, "{name}");
            assert_eq!(state, QpState::Err, "{name}: the responder's QP goes to ERR, as for any remote access error");
            // A READ's bytes are copied when its response is built, where no
            // drop is counted; every other fault is counted where it struck.
            assert_eq!(faults, u64::from(name != "READ"), "{name}");
            assert_eq!(pages.bytes(0), vec![OLD; page()], "{name}: the mapped page is untouched");
        }
    }
}

fn set_rkey(op: &mut SendOp, to: u32) {
    match op {
        SendOp::RdmaWrite { rkey, .. }
        | SendOp::RdmaRead { rkey, .. }
        | SendOp::CompareSwap { rkey, .. }
        | SendOp::FetchAdd { rkey, .. }
        | SendOp::AtomicWrite { rkey, .. }
        | SendOp::Flush { rkey, .. } => *rkey = to,
        _ => unreachable!(),
    }
}

#[test]
fn the_same_accesses_to_the_mapped_page_succeed_on_a_lossy_link() {
    let mut pages = Pages::new(2);
    pages.unmap(1);
    let lossy = LinkConfig { loss: 0.1, duplicate: 0.05, reorder: 0.05, ..LinkConfig::default() };
    for seed in 10..16 {
        for (name, op, len) in remote_ops(pages.at(0) as u64 + 256, 0) {
            let (status, faults, _) = run_remote(seed, lossy, &pages, |rkey| {
                let mut op = op;
                set_rkey(&mut op, rkey);
                (op, len)
            });
            assert_eq!((status, faults), (WcStatus::Success, 0), "seed {seed}: {name}");
        }
    }
    // Something landed: the last fetch-and-add / CAS / ATOMIC WRITE / WRITEs.
    assert_ne!(pages.bytes(0)[256..256 + 8], [OLD; 8]);
}

#[test]
fn a_write_lands_in_on_demand_memory_and_a_read_and_atomics_see_it() {
    let pages = Pages::new(2);
    let (mut sim, a, b) = pair(7, LinkConfig::default());
    let rkey = register(&mut sim, &b, &pages);
    let data = fill(&a, 0, 3000, 3);
    let at = pages.at(0) as u64 + 1000;
    post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: at, rkey }, sge(&a, 0, 3000));
    post(&mut sim, &a, 2, SendOp::RdmaRead { remote_addr: at, rkey }, sge(&a, 8192, 3000));
    post(&mut sim, &a, 3, SendOp::FetchAdd { remote_addr: at, rkey, add: 5 }, sge(&a, 16384, 8));
    post(&mut sim, &a, 4, SendOp::CompareSwap { remote_addr: at, rkey, compare: 0, swap: 1 }, sge(&a, 16392, 8));
    sim.run_idle(LIMIT);
    let ok = |i| (i, WcStatus::Success);
    assert_eq!(done(&mut sim, &a), [ok(1), ok(2), ok(3), ok(4)]);
    let mut want = pages.bytes(1);
    want.fill(OLD);
    let mut both = pages.bytes(0);
    both.extend(pages.bytes(1));
    let before = u64::from_ne_bytes(data[..8].try_into().unwrap());
    assert_eq!(read(&a, 8192, 3000), data, "READ gives back what WRITE put");
    assert_eq!(read(&a, 16384, 8), before.to_ne_bytes(), "fetch-and-add's original value");
    assert_eq!(u64::from_ne_bytes(both[1000..1008].try_into().unwrap()), before + 5);
    assert_eq!(both[1008..4000], data[8..], "the WRITE crossed the page boundary");
    assert_eq!((both[..1000].to_vec(), both[4000..].to_vec()), (vec![OLD; 1000], vec![OLD; 2 * page() - 4000]));
}

#[test]
fn a_read_running_into_an_unmapped_page_sends_what_it_has_then_a_nak() {
    let mut pages = Pages::new(2);
    pages.unmap(1);
    let (mut sim, a, b) = pair(4, LinkConfig::default());
    let rkey = register(&mut sim, &b, &pages);
    // 4 packets of 1024 bytes from the last 2048 bytes of page 0: the third
    // response packet's bytes are in the hole.
    let from = pages.at(1) as u64 - 2048;
    post(&mut sim, &a, 1, SendOp::RdmaRead { remote_addr: from, rkey }, sge(&a, 0, 4096));
    sim.run_idle(LIMIT);
    assert_eq!(done(&mut sim, &a), [(1, WcStatus::RemAccessErr)]);
    assert_eq!(read(&a, 0, 2048), vec![OLD; 2048], "the responses before the fault were placed");
    assert_eq!(sim.ep(b.ep).query_qp(b.qpn).unwrap().0, QpState::Err);
}

#[test]
fn a_write_to_a_read_only_page_is_refused_and_changes_nothing() {
    let pages = Pages::new(2);
    pages.read_only(1);
    let (mut sim, a, b) = pair(5, LinkConfig::default());
    let rkey = register(&mut sim, &b, &pages);
    post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: pages.at(1) as u64, rkey }, sge(&a, 0, 512));
    sim.run_idle(LIMIT);
    assert_eq!(done(&mut sim, &a), [(1, WcStatus::RemAccessErr)]);
    assert_eq!((pages.bytes(0), pages.bytes(1)), (vec![OLD; page()], vec![OLD; page()]));
    assert_eq!(sim.ep(b.ep).stats().drops_for(Drop::PageFault), 1);
}

#[test]
fn a_flush_of_the_whole_on_demand_region_names_no_page_and_succeeds() {
    let mut pages = Pages::new(2);
    pages.unmap(1);
    let (mut sim, a, b) = pair(6, LinkConfig::default());
    let rkey = register(&mut sim, &b, &pages);
    let whole =
        SendOp::Flush { remote_addr: 0, rkey, len: 0, placement: flush::GLOBAL, selectivity: flush::SELECTIVITY_MR };
    post(&mut sim, &a, 1, whole, vec![]);
    let range = SendOp::Flush {
        remote_addr: pages.at(0) as u64,
        rkey,
        len: page() as u64,
        placement: flush::GLOBAL,
        selectivity: flush::SELECTIVITY_RANGE,
    };
    post(&mut sim, &a, 2, range, vec![]);
    sim.run_idle(LIMIT);
    assert_eq!(done(&mut sim, &a), [(1, WcStatus::Success), (2, WcStatus::Success)]);
}

/// Local SGEs in an on-demand region of A's: a SEND from an unmapped page
/// and a READ into one are local protection errors; a long SEND from the
/// mapped page goes, copied even where packets may carry payload by
/// reference.
#[test]
fn local_sges_in_an_unmapped_page_are_local_protection_errors() {
    let mut pages = Pages::new(2);
    pages.unmap(1);
    for (name, remote) in [("SEND", false), ("READ into", true)] {
        let (mut sim, a, b) = pair(8, LinkConfig::default());
        let lkey = register(&mut sim, &a, &pages);
        sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 9, sg_list: sge(&b, 0, 4096) }).unwrap();
        let sg = vec![Sge { addr: pages.at(1) as u64, length: 600, lkey }];
        let op = if remote { SendOp::RdmaRead { remote_addr: b.va, rkey: b.rkey } } else { SendOp::Send };
        post(&mut sim, &a, 1, op, sg);
        sim.run_idle(LIMIT);
        assert_eq!(done(&mut sim, &a), [(1, WcStatus::LocProtErr)], "{name}");
        assert_eq!(pages.bytes(0), vec![OLD; page()], "{name}");
    }
    let (mut sim, a, b) = pair(9, LinkConfig::default());
    sim.ep(a.ep).set_payload_by_reference(true);
    let lkey = register(&mut sim, &a, &pages);
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 9, sg_list: sge(&b, 0, 4096) }).unwrap();
    post(&mut sim, &a, 1, SendOp::Send, vec![Sge { addr: pages.at(0) as u64, length: 3000, lkey }]);
    sim.run_idle(LIMIT);
    assert_eq!(done(&mut sim, &a), [(1, WcStatus::Success)]);
    assert_eq!(read(&b, 0, 3000), vec![OLD; 3000]);
    assert_eq!(sim.stats.by_reference, 0, "on-demand bytes are never sent by reference");
}

/// A SEND whose receive buffer is an unmapped on-demand page: the receive
/// completes with a local protection error and the sender gets remote
/// operational error, as rxe answers a receive buffer it cannot write.
#[test]
fn a_send_into_an_unmapped_receive_buffer_fails_on_both_sides() {
    let mut pages = Pages::new(2);
    pages.unmap(1);
    let (mut sim, a, b) = pair(11, LinkConfig::default());
    let lkey = register(&mut sim, &b, &pages);
    let sg = vec![Sge { addr: pages.at(1) as u64, length: 256, lkey }];
    sim.ep(b.ep).post_recv(b.qpn, RecvWr { wr_id: 5, sg_list: sg }).unwrap();
    post(&mut sim, &a, 1, SendOp::Send, sge(&a, 0, 100));
    sim.run_idle(LIMIT);
    assert_eq!(done(&mut sim, &a), [(1, WcStatus::RemOpErr)]);
    let recv = statuses(&sim.ep(b.ep).poll_cq(b.recv_cq, usize::MAX));
    assert_eq!(recv, [(5, WcStatus::LocProtErr)]);
    assert_eq!(pages.bytes(0), vec![OLD; page()]);
}

/// Implicit ODP: one region of the whole address space (va 0, length
/// 2^64 - 1). WRITE and READ reach any mapped address; an unmapped one,
/// address 0 and the top of the address space fail cleanly.
#[test]
fn implicit_on_demand_reaches_any_mapped_address_and_fails_cleanly_elsewhere() {
    let mut pages = Pages::new(3);
    pages.unmap(1);
    let (mut sim, a, b) = pair(12, LinkConfig::default());
    // SAFETY: the test touches its pages only through raw pointers.
    let (_, rkey) = sim.ep(b.ep).reg_mr(b.pd, 0, unsafe { RegionMemory::implicit() }, ODP_ACCESS);
    assert_eq!(sim.ep(b.ep).mr(rkey).unwrap().len, u64::MAX);
    let data = fill(&a, 0, 2000, 1);
    post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: pages.at(2) as u64 + 8, rkey }, sge(&a, 0, 2000));
    post(&mut sim, &a, 2, SendOp::RdmaRead { remote_addr: pages.at(0) as u64, rkey }, sge(&a, 4096, 100));
    sim.run_idle(LIMIT);
    assert_eq!(done(&mut sim, &a), [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(pages.bytes(2)[8..2008], data[..]);
    assert_eq!(read(&a, 4096, 100), vec![OLD; 100]);
    for (addr, why) in [
        (pages.at(1) as u64, Drop::PageFault),
        (0, Drop::PageFault),
        (u64::MAX - 15, Drop::RkeyViolation), // wraps past 2^64: outside the region
    ] {
        let (mut sim, a, b) = pair(13, LinkConfig::default());
        // SAFETY: as above.
        let (_, rkey) = sim.ep(b.ep).reg_mr(b.pd, 0, unsafe { RegionMemory::implicit() }, ODP_ACCESS);
        post(&mut sim, &a, 1, SendOp::RdmaWrite { remote_addr: addr, rkey }, sge(&a, 0, 100));
        sim.run_idle(LIMIT);
        assert_eq!(done(&mut sim, &a), [(1, WcStatus::RemAccessErr)], "{addr:#x}");
        assert_eq!(sim.ep(b.ep).stats().drops_for(why), 1, "{addr:#x}");
    }
    assert_eq!((pages.bytes(0), pages.bytes(2)[..8].to_vec()), (vec![OLD; page()], vec![OLD; 8]));
}

#[test]
fn advise_mr_prefetches_mapped_ranges_and_refuses_the_others() {
    use rdma_transport::memory::AccessError;
    let mut pages = Pages::new(3);
    pages.unmap(1);
    pages.read_only(2);
    let (mut sim, a, _b) = pair(14, LinkConfig::default());
    let lkey = register(&mut sim, &a, &pages);
    let sg = |i: usize, len: u32| [Sge { addr: pages.at(i) as u64, length: len, lkey }];
    let ep = sim.ep(a.ep);
    assert_eq!(ep.advise_mr(a.pd, &sg(0, 4096), true, true), Ok(()));
    assert_eq!(ep.advise_mr(a.pd, &sg(2, 4096), false, true), Ok(()));
    assert!(matches!(ep.advise_mr(a.pd, &sg(2, 4096), true, true), Err(AccessError::Unmapped { .. })));
    assert!(matches!(ep.advise_mr(a.pd, &sg(0, 4097), false, true), Err(AccessError::Unmapped { .. })));
    assert_eq!(ep.advise_mr(a.pd, &sg(1, 8), false, false), Ok(()), "PREFETCH_NO_FAULT faults nothing in");
    assert!(matches!(
        ep.advise_mr(a.pd, &[Sge { addr: a.va, length: 8, lkey: a.lkey }], false, true),
        Err(AccessError::NotOnDemand { .. })
    ));
    assert!(matches!(ep.advise_mr(Pd(99), &sg(0, 8), false, true), Err(AccessError::PdMismatch { .. })));
    assert_eq!(pages.bytes(0), vec![OLD; page()], "a prefetch changes no byte");
}
