//! Memory windows through the verbs API, between two soft devices over
//! real UDP sockets on loopback: type 1 windows bound with `bind`, type 2
//! windows bound by a BIND_MW work request and invalidated by the peer's
//! SEND with invalidate or by LOCAL_INV, and the errors misuse gets.

mod common;
use common::*;
use rdma_core_rs::*;

/// A connected pair of devices of one engine each: a device of several
/// refuses memory windows (see the last test).
fn one_engine_pair(qp_type: QpType) -> (Side, Side) {
    let config = DeviceConfig { progress: Progress::Thread, threads: 1, ..DeviceConfig::default() };
    pair_with(qp_type, config, ConnectOptions::default())
}

const WINDOW_RW: Access = Access(Access::REMOTE_READ.0 | Access::REMOTE_WRITE.0);

/// A region of `b`'s PD that windows may be bound to.
fn bindable(b: &Side) -> MemoryRegion {
    b.pd.reg_mr(8192, Access::ALL | Access::MW_BIND).unwrap()
}

#[test]
fn the_device_reports_memory_windows_with_the_verbs_values() {
    let (a, _b) = one_engine_pair(QpType::Rc);
    assert_eq!(a.ctx.device_cap_flags(), (1 << 17) | (1 << 24), "MEM_WINDOW | MEM_WINDOW_TYPE_2B, as rxe");
    assert_eq!(
        (device_cap::MEM_WINDOW, device_cap::MEM_WINDOW_TYPE_2A, device_cap::MEM_WINDOW_TYPE_2B),
        (1 << 17, 1 << 23, 1 << 24)
    );
    assert!(a.ctx.max_mw() > 0);
    assert_eq!((WcOpcode::BindMw as u32, WcOpcode::LocalInv as u32, WcStatus::MwBindErr as u32), (5, 6, 6));
    assert_eq!((Access::MW_BIND.0, Access::ZERO_BASED.0), (1 << 4, 1 << 5));
    assert_eq!((MwType::Type1 as u32, MwType::Type2 as u32), (1, 2));
    assert_eq!((inc_rkey(0x1234_56ff), inc_rkey(0x8000_0107)), (0x1234_5600, 0x8000_0108));
}

#[test]
fn a_type2_window_over_udp_until_the_peer_invalidates_it() {
    let (a, b) = one_engine_pair(QpType::Rc);
    let target = bindable(&b);
    target.write(0, &[0x5a; 8192]).unwrap();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let first = mw.rkey();
    assert!(mw.binding().is_none(), "allocated unbound");
    b.qp.post_send(&[mw.bind_wr(1, &target, target.addr() + 1024, 2048, WINDOW_RW)]).unwrap();
    let wc = b.wait_one();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::BindMw));
    let rkey = mw.current_rkey();
    assert_eq!(rkey, inc_rkey(first), "the key byte the bind asked for");
    assert_eq!(mw.binding().map(|w| (w.addr, w.len)), Some((target.addr() + 1024, 2048)));

    // The peer writes and reads through the window's rkey.
    let data = pattern(2048, 4);
    a.mr.write(0, &data).unwrap();
    let write =
        SendWr::new(2, SendOp::RdmaWrite { remote_addr: target.addr() + 1024, rkey }, vec![a.mr.sge(0, 2048).unwrap()]);
    let read = SendWr::new(
        3,
        SendOp::RdmaRead { remote_addr: target.addr() + 1024, rkey },
        vec![a.mr.sge(4096, 2048).unwrap()],
    );
    a.qp.post_send(&[write, read]).unwrap();
    for id in [2, 3] {
        let wc = a.wait_one();
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
    }
    let mut back = vec![0u8; 2048];
    target.read(1024, &mut back).unwrap();
    assert!(back == data, "written through the window");
    a.mr.read(4096, &mut back).unwrap();
    assert!(back == data, "read back through it");

    // A SEND with invalidate: the receive reports the key, the window goes.
    b.qp.post_recv(&[RecvWr { wr_id: 9, sg_list: vec![b.mr.sge(0, 64).unwrap()] }]).unwrap();
    let send = SendWr::new(4, SendOp::SendWithInv { invalidate_rkey: rkey }, vec![a.mr.sge(0, 16).unwrap()]);
    a.qp.post_send(&[send]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let rwc = b.wait_one();
    assert_eq!((rwc.wr_id, rwc.status, rwc.opcode), (9, WcStatus::Success, WcOpcode::Recv));
    assert_eq!((rwc.invalidated_rkey, rwc.wc_flags & wc_flags::WITH_INV), (Some(rkey), wc_flags::WITH_INV));
    assert!(mw.binding().is_none(), "invalidated");

    // Now its rkey reaches nothing, and the region can go.
    let again =
        SendWr::new(5, SendOp::RdmaWrite { remote_addr: target.addr() + 1024, rkey }, vec![a.mr.sge(0, 64).unwrap()]);
    a.qp.post_send(&[again]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::RemAccessErr);
    let mut all = vec![0u8; 8192];
    target.read(0, &mut all).unwrap();
    assert!(all[..1024].iter().chain(&all[3072..]).all(|&x| x == 0x5a), "nothing outside the window changed");
    assert!(all[1024..3072] == data[..], "and nothing after the invalidation");
    assert_eq!(target.windows_bound(), 0);
    target.dereg().map_err(|(_, e)| e).unwrap();
}

#[test]
fn a_type1_window_bound_with_bind_holds_its_region_until_unbound() {
    let (a, b) = one_engine_pair(QpType::Rc);
    let target = bindable(&b);
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let info = MwBindInfo { mr: Some(&target), addr: target.addr(), length: 512, access: WINDOW_RW };
    let old = mw.rkey();
    let rkey = mw.bind(&b.qp, 1, true, &info).unwrap();
    assert_eq!((rkey, mw.rkey()), (inc_rkey(old), rkey), "ibv_bind_mw's new key, set at the post");
    let wc = b.wait_one();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::BindMw));

    a.mr.write(0, &[7; 512]).unwrap();
    let write = SendWr::new(2, SendOp::RdmaWrite { remote_addr: target.addr(), rkey }, vec![a.mr.sge(0, 512).unwrap()]);
    a.qp.post_send(&[write]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let mut back = [0u8; 512];
    target.read(0, &mut back).unwrap();
    assert_eq!(back, [7; 512]);

    // ibv_dereg_mr refuses while the window is bound (rxe: EINVAL).
    let (target, e) = target.dereg().unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!(target.windows_bound(), 1);

    // A SEND with invalidate cannot take a type 1 window away.
    b.qp.post_recv(&[RecvWr { wr_id: 9, sg_list: vec![b.mr.sge(0, 64).unwrap()] }]).unwrap();
    let send = SendWr::new(3, SendOp::SendWithInv { invalidate_rkey: rkey }, vec![a.mr.sge(0, 8).unwrap()]);
    a.qp.post_send(&[send]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::RemInvReqErr);
    assert_eq!(b.wait_one().status, WcStatus::RemInvReqErr);
    assert!(mw.binding().is_some(), "still bound");
    assert_eq!(b.ctx.stats().drops.get(&DropReason::InvalidateRefused), Some(&1));
}

#[test]
fn a_zero_length_bind_unbinds_a_type1_window_and_lets_the_region_go() {
    let (_a, b) = one_engine_pair(QpType::Rc);
    let target = bindable(&b);
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let info = MwBindInfo { mr: Some(&target), addr: target.addr(), length: 64, access: Access::REMOTE_READ };
    mw.bind(&b.qp, 1, true, &info).unwrap();
    assert_eq!(b.wait_one().status, WcStatus::Success);
    let unbind = MwBindInfo { mr: None, addr: 0, length: 0, access: Access::NONE };
    mw.bind(&b.qp, 2, true, &unbind).unwrap();
    assert_eq!((b.wait_one().wr_id, mw.binding()), (2, None));
    assert_eq!(mw.current_rkey(), mw.rkey());
    target.dereg().map_err(|(_, e)| e).unwrap();
}

#[test]
fn misuse_is_refused_at_the_call_or_with_a_bind_error() {
    let (_a, b) = one_engine_pair(QpType::Rc);
    let target = bindable(&b);
    let other_pd = b.ctx.alloc_pd().unwrap();
    // Refused by the call, as libibverbs' ibv_bind_mw and rxe's provider do.
    let t2 = b.pd.alloc_mw(MwType::Type2).unwrap();
    let info = MwBindInfo { mr: Some(&target), addr: target.addr(), length: 64, access: WINDOW_RW };
    assert!(t2.bind(&b.qp, 1, true, &info).is_err(), "ibv_bind_mw is for type 1");
    let foreign = other_pd.alloc_mw(MwType::Type1).unwrap();
    assert!(foreign.bind(&b.qp, 1, true, &info).is_err(), "a region of another PD");
    let t1 = b.pd.alloc_mw(MwType::Type1).unwrap();
    let no_mr = MwBindInfo { mr: None, addr: 8, length: 8, access: WINDOW_RW };
    assert!(t1.bind(&b.qp, 1, true, &no_mr).is_err(), "an address without a region");
    let zb = MwBindInfo { access: Access::ZERO_BASED, ..info };
    assert!(t1.bind(&b.qp, 1, true, &zb).is_err(), "zero-based");
    assert_eq!(t1.rkey(), t1.current_rkey(), "nothing was posted");

    // A type 2 window of another PD, bound on this QP: IBV_WC_MW_BIND_ERR.
    let t2_foreign = other_pd.alloc_mw(MwType::Type2).unwrap();
    let before = t2_foreign.current_rkey();
    b.qp.post_send(&[t2_foreign.bind_wr(7, &target, target.addr(), 64, WINDOW_RW)]).unwrap();
    let wc = b.wait_one();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (7, WcStatus::MwBindErr, WcOpcode::BindMw));
    assert_eq!((t2_foreign.current_rkey(), t2_foreign.binding()), (before, None));
    assert_eq!(b.qp.query().unwrap().0, QpState::Err, "the QP fails, as in rxe");
}

#[test]
fn local_invalidate_takes_a_type2_window_back() {
    let (a, b) = one_engine_pair(QpType::Rc);
    let target = bindable(&b);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = inc_rkey(mw.rkey());
    let bind = mw.bind_wr(1, &target, target.addr(), 4096, WINDOW_RW);
    let inv = SendWr::new(2, SendOp::LocalInv { invalidate_rkey: rkey }, vec![]);
    b.qp.post_send(&[bind, inv]).unwrap();
    for (id, op) in [(1, WcOpcode::BindMw), (2, WcOpcode::LocalInv)] {
        let wc = b.wait_one();
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (id, WcStatus::Success, op));
    }
    assert!(mw.binding().is_none());
    let read = SendWr::new(3, SendOp::RdmaRead { remote_addr: target.addr(), rkey }, vec![a.mr.sge(0, 8).unwrap()]);
    a.qp.post_send(&[read]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::RemAccessErr);
}

/// A device of several engines has memory windows too (one window table
/// that its engines share: docs/multi-core-device.md), and a region
/// registered after a window was made has the same keys in every engine:
/// it can be bound and read back, and deregistering it is refused while
/// the window is bound, on every engine alike.
#[test]
fn a_device_of_several_engines_has_memory_windows() {
    let addr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 78, 1));
    let config = DeviceConfig { threads: 2, ..DeviceConfig::default() };
    let ctx = Device::with_config("mw-engines", addr, config).unwrap().open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let mw = pd.alloc_mw(MwType::Type1).unwrap();
    // Made after the window: its keys must still agree across the engines.
    let mr = pd.reg_mr(4096, Access::ALL | Access::MW_BIND).unwrap();
    let qps: Vec<QueuePair> = (0..2).map(|_| pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap()).collect();
    assert_ne!(qps[0].qp_num() >> 17, qps[1].qp_num() >> 17, "the QPs are on both engines");
    let peer = PeerInfo { qpn: 0x99, psn: 1, gid: Gid::from_ip(addr) };
    for qp in &qps {
        qp.connect(1, &peer, &ConnectOptions::default()).unwrap();
    }
    // Bound through the second QP (the second engine), seen by the first.
    let info = MwBindInfo { mr: Some(&mr), addr: mr.addr() + 64, length: 128, access: Access::REMOTE_READ };
    let rkey = mw.bind(&qps[1], 7, true, &info).unwrap();
    let mut wc = Vec::new();
    let start = std::time::Instant::now();
    while wc.is_empty() {
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "no bind completion");
        cq.wait(&mut wc, 1, Some(std::time::Duration::from_millis(100))).unwrap();
    }
    assert_eq!((wc[0].status, wc[0].opcode), (WcStatus::Success, WcOpcode::BindMw), "{wc:?}");
    assert_eq!(mw.current_rkey(), rkey);
    let b = mw.binding().expect("bound, as the first engine sees it");
    assert_eq!((b.mr_key, b.addr, b.len), (mr.lkey(), mr.addr() + 64, 128));
    assert_eq!(mr.windows_bound(), 1);
    let mr = match mr.dereg() {
        Err((mr, _)) => mr,
        Ok(()) => panic!("a region with a window bound was deregistered"),
    };
    drop(mw);
    assert_eq!(mr.windows_bound(), 0);
    assert!(mr.dereg().is_ok());
}
