//! On-demand paging through the verbs API, between two soft devices over
//! real UDP sockets on loopback (docs/odp.md): pages unmapped under live
//! on-demand registrations get the IBTA errors and the process lives;
//! implicit ODP; `advise_mr`; the ODP capabilities.

mod common;
use common::*;
use rdma_core_rs::*;

const OLD: u8 = 0x3c;

/// One test at a time maps and unmaps pages (a hole of one test must not
/// become another's mapping).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// `n` pages of the test's own, filled with [`OLD`], touched only through
/// raw pointers.
struct Pages {
    _serial: std::sync::MutexGuard<'static, ()>,
    addr: usize,
    n: usize,
    gone: Vec<usize>,
}

impl Pages {
    fn new(n: usize) -> Pages {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n * page(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the fresh mapping.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), OLD, n * page()) };
        Pages { _serial: serial, addr: p as usize, n, gone: vec![] }
    }
    fn at(&self, i: usize) -> usize {
        self.addr + i * page()
    }
    fn ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }
    /// Page `i` stops being accessible: a `PROT_NONE` mapping in its place,
    /// which faults as an unmapped page does. A hole left by `munmap` was
    /// free for the next `mmap` of any thread (an io_uring ring, a stack),
    /// which made the page readable again: a READ into it "succeeded" once
    /// under `SOFTROCE_IO_DRIVER=io-uring`.
    fn unmap(&mut self, i: usize) {
        // SAFETY: page `i` of our mapping, replaced in place (MAP_FIXED);
        // nothing of ours points into it.
        let p = unsafe {
            libc::mmap(
                self.at(i) as *mut libc::c_void,
                page(),
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert_eq!(p as usize, self.at(i));
        self.gone.push(i);
    }
    /// A copy of mapped page `i`, read once the engine is done with it.
    fn bytes(&self, i: usize) -> Vec<u8> {
        assert!(!self.gone.contains(&i));
        let mut v = vec![0u8; page()];
        for (k, b) in v.iter_mut().enumerate() {
            // SAFETY: a mapped byte of ours; volatile, as the engine's thread wrote it.
            *b = unsafe { std::ptr::read_volatile((self.at(i) + k) as *const u8) };
        }
        v
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: our own pages (the gone ones reserved PROT_NONE).
        unsafe { libc::munmap(self.ptr().cast(), self.n * page()) };
    }
}

/// The errno an `Error::Io` carries (what the C ABI returns).
fn errno<T>(r: &Result<T>) -> Option<i32> {
    match r {
        Err(Error::Io(io)) => io.raw_os_error(),
        _ => None,
    }
}

/// A remote operation at an address through an rkey.
type MakeOp = fn(u64, u32) -> SendOp;

fn wr(id: u64, op: SendOp, sg: Vec<Sge>) -> SendWr {
    SendWr::new(id, op, sg)
}

fn status(s: &Side, w: SendWr) -> WcStatus {
    s.qp.post_send(&[w]).unwrap();
    s.wait_one().status
}

#[test]
fn the_device_reports_explicit_and_implicit_odp_for_rc_uc_and_ud() {
    let (a, _b) = pair(QpType::Rc);
    let caps = a.ctx.odp_caps();
    // verbs.h: IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT; SEND..SRQ_RECV
    // are bits 0..5, FLUSH and ATOMIC_WRITE 6 and 7 (newer rdma-core).
    assert_eq!(caps.general_caps, 0b11);
    assert_eq!(caps.rc_odp_caps, 0xff);
    assert_eq!((caps.uc_odp_caps, caps.ud_odp_caps, caps.xrc_odp_caps), (0b10_0111, 0b10_0011, 0b11_1101));
    assert_eq!(Access::ON_DEMAND.0, 1 << 6, "IBV_ACCESS_ON_DEMAND");
    assert_eq!(
        (AdviseMr::Prefetch as u32, AdviseMr::PrefetchWrite as u32, AdviseMr::PrefetchNoFault as u32),
        (0, 1, 2)
    );
}

/// Two pages registered on demand on B, the second unmapped while
/// registered: WRITE, READ and atomics into it fail with a remote access
/// error (each on a fresh pair: the error moves both QPs to ERR), the
/// first page works before and keeps its bytes, and the process lives.
#[test]
fn remote_accesses_to_a_page_unmapped_under_a_live_registration_are_remote_access_errors() {
    let mut pages = Pages::new(2);
    let ops: [(&str, MakeOp, u32); 4] = [
        ("WRITE", |a, k| SendOp::RdmaWrite { remote_addr: a, rkey: k }, 2000),
        ("READ", |a, k| SendOp::RdmaRead { remote_addr: a, rkey: k }, 2000),
        ("fetch and add", |a, k| SendOp::FetchAdd { remote_addr: a, rkey: k, add: 1 }, 8),
        ("compare and swap", |a, k| SendOp::CompareSwap { remote_addr: a, rkey: k, compare: 0, swap: 1 }, 8),
    ];
    let mut unmapped = false;
    for (name, op, len) in ops {
        let (a, b) = pair(QpType::Rc);
        // SAFETY: the pages are touched only through raw pointers.
        let mr = unsafe { b.pd.reg_mr_on_demand(pages.ptr(), 2 * page(), pages.addr as u64, Access::ALL) }.unwrap();
        assert!(mr.is_on_demand() && mr.access().contains(Access::ON_DEMAND));
        if !unmapped {
            // Page 0 works while page 1 is still there, then page 1 goes.
            a.mr.write(0, &[7; 100]).unwrap();
            let w = wr(
                1,
                SendOp::RdmaWrite { remote_addr: pages.at(1) as u64, rkey: mr.rkey() },
                vec![a.mr.sge(0, 100).unwrap()],
            );
            assert_eq!(status(&a, w), WcStatus::Success);
            assert_eq!(pages.bytes(1)[..100], [7; 100]);
            pages.unmap(1);
            unmapped = true;
        }
        let ok = wr(2, op(pages.at(0) as u64 + 64, mr.rkey()), vec![a.mr.sge(4096, len).unwrap()]);
        assert_eq!(status(&a, ok), WcStatus::Success, "{name} into the mapped page");
        let bad = wr(3, op(pages.at(1) as u64 + 64, mr.rkey()), vec![a.mr.sge(8192, len).unwrap()]);
        assert_eq!(status(&a, bad), WcStatus::RemAccessErr, "{name} into the unmapped page");
        assert_eq!(a.qp.query().unwrap().0, QpState::Err, "{name}");
        let mut word = [0u8; 8];
        assert!(errno(&mr.read(page() + 64, &mut word)) == Some(libc::EFAULT), "{name}: local read");
        if name != "READ" {
            assert_eq!(b.ctx.stats().drops.get(&DropReason::PageFault), Some(&1), "{name}");
        }
    }
    // What landed on page 0: the WRITE's zeros, then the atomics on them.
    let p0 = pages.bytes(0);
    assert_eq!((p0[..64].to_vec(), p0[2064..].to_vec()), (vec![OLD; 64], vec![OLD; page() - 2064]));
}

/// A SEND whose gather list is in a page unmapped under A's on-demand
/// region completes with a local protection error; one from the mapped
/// page, long enough to go by reference on this driver, arrives.
#[test]
fn a_send_from_an_unmapped_page_is_a_local_protection_error() {
    // The devices first: what they map (io_uring's rings, one page
    // each) must not land in the hole the test makes.
    let (a, b) = pair(QpType::Rc);
    let mut pages = Pages::new(2);
    pages.unmap(1);
    // SAFETY: as above.
    let mr = unsafe { a.pd.reg_mr_on_demand(pages.ptr(), 2 * page(), pages.addr as u64, Access::ALL) }.unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(0, 4096).unwrap()] }]).unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 2, sg_list: vec![b.mr.sge(4096, 4096).unwrap()] }]).unwrap();
    let good = wr(1, SendOp::Send, vec![Sge { addr: pages.at(0) as u64, length: 3000, lkey: mr.lkey() }]);
    assert_eq!(status(&a, good), WcStatus::Success);
    let got = b.wait_one();
    assert_eq!((got.wr_id, got.status, got.byte_len), (1, WcStatus::Success, 3000));
    let mut back = vec![0u8; 3000];
    b.mr.read(0, &mut back).unwrap();
    assert_eq!(back, vec![OLD; 3000]);
    let bad = wr(2, SendOp::Send, vec![Sge { addr: pages.at(1) as u64 + 8, length: 3000, lkey: mr.lkey() }]);
    assert_eq!(status(&a, bad), WcStatus::LocProtErr);
    assert_eq!(pages.bytes(0), vec![OLD; page()]);
}

/// Implicit ODP: one rkey for the whole address space. WRITE and READ
/// at any mapped address work; an unmapped one is a remote access error.
#[test]
fn implicit_odp_reaches_mapped_addresses_and_fails_cleanly_on_unmapped_ones() {
    // The devices first: what they map (io_uring's rings, one page
    // each) must not land in the hole the test makes.
    let (a, b) = pair(QpType::Rc);
    let mut pages = Pages::new(4);
    pages.unmap(1);
    // SAFETY: as above; the peer is this test.
    let all = unsafe { b.pd.reg_mr_implicit(Access::ALL) }.unwrap();
    assert_eq!((all.addr(), all.len()), (0, usize::MAX));
    let data = pattern(5000, 4);
    a.mr.write(0, &data).unwrap();
    let w = wr(
        1,
        SendOp::RdmaWrite { remote_addr: pages.at(3) as u64 - 3000, rkey: all.rkey() },
        vec![a.mr.sge(0, 5000).unwrap()],
    );
    assert!(status(&a, w) == WcStatus::Success);
    let mut both = pages.bytes(2);
    both.extend(pages.bytes(3));
    assert!(both[page() - 3000..page()] == data[..3000] && both[page()..page() + 2000] == data[3000..]);
    let r = wr(
        2,
        SendOp::RdmaRead { remote_addr: pages.at(3) as u64, rkey: all.rkey() },
        vec![a.mr.sge(8192, 2000).unwrap()],
    );
    assert_eq!(status(&a, r), WcStatus::Success);
    let mut back = vec![0u8; 2000];
    a.mr.read(8192, &mut back).unwrap();
    assert!(back == data[3000..]);
    let hole =
        wr(3, SendOp::RdmaWrite { remote_addr: pages.at(1) as u64, rkey: all.rkey() }, vec![a.mr.sge(0, 64).unwrap()]);
    assert_eq!(status(&a, hole), WcStatus::RemAccessErr);
    assert_eq!(b.ctx.stats().drops.get(&DropReason::PageFault), Some(&1));
}

#[test]
fn advise_mr_prefetches_and_answers_with_the_man_pages_errors() {
    // The devices first: what they map (io_uring's rings, one page
    // each) must not land in the hole the test makes.
    let (a, _b) = pair(QpType::Rc);
    let mut pages = Pages::new(2);
    pages.unmap(1);
    // SAFETY: as above.
    let mr = unsafe { a.pd.reg_mr_on_demand(pages.ptr(), 2 * page(), pages.addr as u64, Access::ALL) }.unwrap();
    // SAFETY: as above.
    let ro = unsafe { a.pd.reg_mr_on_demand(pages.ptr(), page(), 0x1000_0000, Access::REMOTE_READ) }.unwrap();
    let sge = |m: &MemoryRegion, off: u64, len: u32| Sge { addr: m.addr() + off, length: len, lkey: m.lkey() };
    let flush = AdviseMr::FLAG_FLUSH;
    a.pd.advise_mr(AdviseMr::Prefetch, flush, &[sge(&mr, 0, 4096)]).unwrap();
    a.pd.advise_mr(AdviseMr::PrefetchWrite, 0, &[sge(&mr, 100, 200)]).unwrap();
    a.pd.advise_mr(AdviseMr::PrefetchNoFault, 0, &[sge(&mr, page() as u64, 8)]).unwrap();
    let e = a.pd.advise_mr(AdviseMr::Prefetch, 0, &[sge(&mr, 0, 8), sge(&mr, page() as u64, 8)]);
    assert!(errno(&e) == Some(libc::EFAULT), "the unmapped page: EFAULT, {e:?}");
    let e = a.pd.advise_mr(AdviseMr::Prefetch, 0, &[sge(&mr, 0, 2 * page() as u32 + 1)]);
    assert!(errno(&e) == Some(libc::EFAULT), "past the region: EFAULT, {e:?}");
    let e = a.pd.advise_mr(AdviseMr::Prefetch, 0, &[Sge { addr: 0, length: 8, lkey: 0x00de_ad00 }]);
    assert!(errno(&e) == Some(libc::EFAULT), "no such key: EFAULT, {e:?}");
    let e = a.pd.advise_mr(AdviseMr::PrefetchWrite, 0, &[sge(&ro, 0, 8)]);
    assert!(errno(&e) == Some(libc::EPERM), "write advice, read-only region: EPERM, {e:?}");
    let e = a.pd.advise_mr(AdviseMr::Prefetch, 0, &[a.mr.sge(0, 8).unwrap()]);
    assert!(matches!(e, Err(Error::InvalidArgument(_))), "not on demand: EINVAL, {e:?}");
    let e = a.pd.advise_mr(AdviseMr::Prefetch, 2, &[sge(&mr, 0, 8)]);
    assert!(matches!(e, Err(Error::InvalidArgument(_))), "unknown flag: EINVAL, {e:?}");
    assert_eq!(pages.bytes(0), vec![OLD; page()], "prefetching changes no byte");
}
