//! Memory regions of the caller's memory through the Rust API, over UDP on
//! loopback: a region addressed at an iova other than its pointer
//! (`ProtectionDomain::reg_mr_raw_at`), and `MemoryRegion::rereg_raw`
//! changing the access, the translation and the PD with the keys kept,
//! each checked by a peer's WRITE.

mod common;
use common::*;
use rdma_core_rs::*;

/// WRITEs `data` from `a`'s region to `(rkey, addr)` on `b`; the completion status.
fn write_to(a: &Side, rkey: u32, addr: u64, data: &[u8]) -> WcStatus {
    a.mr.write(0, data).unwrap();
    let wr =
        SendWr::new(7, SendOp::RdmaWrite { remote_addr: addr, rkey }, vec![a.mr.sge(0, data.len() as u32).unwrap()]);
    a.qp.post_send(&[wr]).unwrap();
    a.wait_one().status
}

#[test]
fn an_iova_region_is_addressed_by_its_iova_and_rereg_keeps_its_keys() {
    let (a, b) = pair(QpType::Rc);
    let mut buf = vec![0u8; 4096].into_boxed_slice();
    let mut buf2 = vec![0u8; 1024].into_boxed_slice();
    let iova = 0x7000_0000_0000u64;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // SAFETY: the boxes outlive the region (dropped at the end of the test,
    // after it), and are read below only once the WRITEs completed.
    let mut mr = unsafe { b.pd.reg_mr_raw_at(buf.as_mut_ptr(), buf.len(), iova, rw) }.unwrap();
    assert_eq!(mr.addr(), iova);
    assert_eq!(write_to(&a, mr.rkey(), iova + 100, b"at the iova"), WcStatus::Success);
    assert_eq!(&buf[100..111], b"at the iova");

    // Access: no remote write. Same keys; a WRITE is a remote access error.
    let (lkey, rkey) = (mr.lkey(), mr.rkey());
    // SAFETY: no new translation.
    unsafe { mr.rereg_raw(None, None, Some(Access::LOCAL_WRITE)) }.unwrap();
    assert_eq!((mr.lkey(), mr.rkey(), mr.access()), (lkey, rkey, Access::LOCAL_WRITE));
    assert_eq!(write_to(&a, rkey, iova, b"refused"), WcStatus::RemAccessErr);
    assert_eq!(&buf[..7], &[0; 7], "the refused WRITE changed nothing");

    // A fresh pair (the first is in error now): a new translation, addressed
    // at its pointer, with remote write again.
    drop(mr);
    let (a, b) = pair(QpType::Rc);
    // SAFETY: as above.
    let mut mr = unsafe { b.pd.reg_mr_raw_at(buf.as_mut_ptr(), buf.len(), iova, rw) }.unwrap();
    let p2 = buf2.as_mut_ptr();
    // SAFETY: buf2 outlives the region.
    unsafe { mr.rereg_raw(None, Some((p2, buf2.len(), p2 as u64)), Some(rw)) }.unwrap();
    assert_eq!((mr.addr(), mr.len()), (p2 as u64, 1024));
    assert_eq!(write_to(&a, mr.rkey(), p2 as u64 + 8, b"translated"), WcStatus::Success);
    assert_eq!(&buf2[8..18], b"translated");
    // Refusals change nothing: a null pointer, an overflowing iova, a PD of
    // another device.
    let before = (mr.addr(), mr.len(), mr.access());
    // SAFETY: refused before any use.
    assert!(unsafe { mr.rereg_raw(None, Some((std::ptr::null_mut(), 8, 0)), None) }.is_err());
    assert!(unsafe { mr.rereg_raw(None, Some((p2, 16, u64::MAX - 4)), None) }.is_err());
    assert!(unsafe { mr.rereg_raw(Some(&a.pd), None, None) }.is_err());
    assert_eq!((mr.addr(), mr.len(), mr.access()), before);
    // Another PD of the device: b's QP can no longer reach it.
    let pd2 = b.ctx.alloc_pd().unwrap();
    // SAFETY: no new translation.
    unsafe { mr.rereg_raw(Some(&pd2), None, None) }.unwrap();
    assert_eq!(write_to(&a, mr.rkey(), p2 as u64, b"other pd"), WcStatus::RemAccessErr);
    assert_eq!(&buf2[..8], &[0; 8]);
    drop(mr);
    drop((buf, buf2));
}
