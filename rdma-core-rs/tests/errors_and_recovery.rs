//! Error completions, flushes, RNR, loss recovery, bad input and the
//! memory guards, through the verbs API over UDP loopback.

mod common;
use common::*;
use rdma_core_rs::*;
use std::time::Duration;

#[test]
fn bad_lkey_bad_rkey_and_a_too_small_receive_complete_with_their_status() {
    let (a, b) = pair(QpType::Rc);
    let bad_l = SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
        vec![Sge { addr: a.mr.addr(), length: 8, lkey: a.mr.lkey() ^ 0x100 }],
    );
    a.qp.post_send(&[bad_l]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::LocProtErr);
    assert_eq!(a.qp.query().unwrap().0, QpState::Err);

    let (a, b) = pair(QpType::Rc);
    let bad_r = SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() ^ 0x100 },
        vec![a.mr.sge(0, 8).unwrap()],
    );
    a.qp.post_send(&[bad_r]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::RemAccessErr);

    let (a, b) = pair(QpType::Rc);
    b.qp.post_recv(&[RecvWr { wr_id: 5, sg_list: vec![b.mr.sge(0, 16).unwrap()] }]).unwrap();
    a.qp.post_send(&[SendWr::new(1, SendOp::Send, vec![a.mr.sge(0, 100).unwrap()])]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::RemInvReqErr);
    let r = b.wait_one();
    assert_eq!((r.wr_id, r.status), (5, WcStatus::LocLenErr));
}

#[test]
fn moving_to_err_flushes_posted_receives_and_later_posts() {
    let (a, _b) = pair(QpType::Rc);
    let wrs: Vec<RecvWr> = (0..3).map(|i| RecvWr { wr_id: i, sg_list: vec![a.mr.sge(0, 64).unwrap()] }).collect();
    a.qp.post_recv(&wrs).unwrap();
    a.qp.modify(&QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() }).unwrap();
    let mut out = Vec::new();
    while out.len() < 3 {
        assert!(a.cq.wait(&mut out, 8, WAIT).unwrap() > 0);
    }
    assert!(out.iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1, 2]);
    a.qp.post_send(&[SendWr::new(9, SendOp::Send, vec![a.mr.sge(0, 8).unwrap()])]).unwrap();
    let wc = a.wait_one();
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushErr));
}

#[test]
fn a_send_before_its_receive_is_posted_waits_through_rnr_naks() {
    let opts = ConnectOptions { min_rnr_timer: 1, ..ConnectOptions::default() }; // 0.01 ms
    let cfg = DeviceConfig { progress: Progress::Thread, ..DeviceConfig::default() };
    let (a, b) = pair_with(QpType::Rc, cfg, opts);
    a.mr.write(0, b"late").unwrap();
    a.qp.post_send(&[SendWr::new(1, SendOp::Send, vec![a.mr.sge(0, 4).unwrap()])]).unwrap();
    let start = std::time::Instant::now();
    while b.ctx.stats().rnr_naks_sent == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no RNR NAK");
        std::thread::sleep(Duration::from_millis(1));
    }
    b.qp.post_recv(&[RecvWr { wr_id: 2, sg_list: vec![b.mr.sge(0, 4).unwrap()] }]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    assert_eq!(b.wait_one().byte_len, 4);
    assert_eq!(&b.mr.to_vec()[..4], b"late");
    assert!(a.ctx.stats().rnr_naks_received > 0);
}

#[test]
fn loss_duplication_reordering_and_corruption_still_deliver_every_byte() {
    let faults = FaultConfig { loss: 0.05, duplicate: 0.03, reorder: 0.03, corrupt: 0.02, seed: 7 };
    let cfg = DeviceConfig { progress: Progress::Thread, faults, ..DeviceConfig::default() };
    // ~17 ms timer: short enough for a quick test (a lost tail waits one),
    // long enough that eight tries (~134 ms) survive a loaded machine
    // starving the progress thread (4 ms, 33 ms in all, did not always).
    let opts = ConnectOptions { timeout: 12, mtu: Mtu::Mtu1024, ..ConnectOptions::default() };
    let (a, b) = pair_with(QpType::Rc, cfg, opts);
    let n = 64;
    let len = 4000;
    let mut wrs = Vec::new();
    for i in 0..n {
        a.mr.write(i * len, &pattern(len, i as u8)).unwrap();
        wrs.push(write_wr(i as u64, &a, i * len, len as u32, &b, (i * len) as u64));
    }
    a.qp.post_send(&wrs).unwrap();
    let mut out = Vec::new();
    while out.len() < n {
        assert!(a.cq.wait(&mut out, 64, WAIT).unwrap() > 0, "stuck: {:?}", a.ctx.stats());
    }
    assert!(out.iter().all(|w| w.status == WcStatus::Success), "{out:?}");
    for i in 0..n {
        let mut got = vec![0u8; len];
        b.mr.read(i * len, &mut got).unwrap();
        assert_eq!(got, pattern(len, i as u8), "message {i}");
    }
    let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
    let io = a.ctx.io_stats();
    assert!(io.injected_losses > 0 && io.injected_corruptions > 0 && io.injected_duplicates > 0);
    assert!(sa.retransmits > 0, "{sa:?}");
    assert!(sb.drops_for(DropReason::IcrcMismatch) > 0, "corrupted packets are caught by the ICRC: {sb:?}");
}

#[test]
fn datagrams_that_are_not_roce_or_are_for_unknown_qps_are_counted_and_dropped() {
    let (a, b) = pair(QpType::Rc);
    let sock = std::net::UdpSocket::bind((a.ctx.device().addr(), 0)).unwrap();
    let dest = (b.ctx.device().addr(), 4791);
    sock.send_to(b"hello, not RoCE", dest).unwrap();
    sock.send_to(&[0u8; 3], dest).unwrap();
    // A well-formed SEND ONLY with a right ICRC (over the headers the kernel
    // writes for this socket), for a QP that does not exist.
    let (std::net::IpAddr::V4(src), std::net::IpAddr::V4(dst)) = (a.ctx.device().addr(), b.ctx.device().addr()) else {
        unreachable!("IPv4 test addresses")
    };
    let repr = rdma_wire::RoceV2Repr {
        ip: rdma_wire::IpRepr::V4(rdma_wire::Ipv4Repr {
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            src,
            dst,
        }),
        udp: rdma_wire::UdpRepr { src_port: sock.local_addr().unwrap().port(), dst_port: 4791, checksum: 0 },
        transport: rdma_wire::TransportRepr::new(rdma_wire::BthRepr::new(
            rdma_wire::Opcode::RC_SEND_ONLY,
            0xfff,
            rdma_wire::Psn::new(0),
        )),
    };
    let mut pkt = [0u8; 128];
    let len = repr.emit(&mut pkt, b"payload!").unwrap();
    sock.send_to(&pkt[28..len], dest).unwrap();
    // And the same packet with one payload bit flipped.
    pkt[len - 6] ^= 1;
    sock.send_to(&pkt[28..len], dest).unwrap();
    let start = std::time::Instant::now();
    loop {
        let s = b.ctx.stats();
        let (malformed, unknown, icrc) = (
            s.drops_for(DropReason::Malformed),
            s.drops_for(DropReason::UnknownQp),
            s.drops_for(DropReason::IcrcMismatch),
        );
        if (malformed, unknown, icrc) == (2, 1, 1) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{s:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    // The device still works.
    b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(0, 8).unwrap()] }]).unwrap();
    a.qp.post_send(&[SendWr::new(1, SendOp::Send, vec![a.mr.sge(0, 8).unwrap()])]).unwrap();
    assert_eq!(b.wait_one().status, WcStatus::Success);
}

#[test]
fn a_locked_region_holds_off_the_engine_until_the_guard_drops() {
    let (a, b) = pair(QpType::Rc);
    a.mr.write(0, &[0xab; 64]).unwrap();
    let guard = b.mr.lock();
    a.qp.post_send(&[write_wr(1, &a, 0, 64, &b, 0)]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // The WRITE has arrived but cannot land while the guard is held.
    assert!(guard[..64].iter().all(|&x| x == 0));
    let mut out = Vec::new();
    assert_eq!(a.cq.wait(&mut out, 1, Some(Duration::from_millis(20))).unwrap(), 0, "completed under the guard");
    drop(guard);
    assert_eq!(a.wait_one().status, WcStatus::Success);
    assert_eq!(&b.mr.to_vec()[..64], &[0xab; 64]);
}

#[test]
fn raw_registration_uses_the_callers_memory_in_place() {
    let (a, b) = pair(QpType::Rc);
    let mut buf = vec![0u8; 4096].into_boxed_slice();
    // SAFETY: `buf` outlives `raw` (dropped at the end of the test, after
    // `raw`), and is only touched through `raw` in between.
    let raw = unsafe { b.pd.reg_mr_raw(buf.as_mut_ptr(), buf.len(), Access::ALL).unwrap() };
    assert_eq!(raw.addr(), buf.as_ptr() as u64);
    a.mr.write(0, b"zero copy").unwrap();
    let wr = SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: raw.addr() + 100, rkey: raw.rkey() },
        vec![a.mr.sge(0, 9).unwrap()],
    );
    a.qp.post_send(&[wr]).unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    assert_eq!(&raw.lock()[100..109], b"zero copy");
    drop(raw);
    assert_eq!(&buf[100..109], b"zero copy");
}

#[test]
fn local_accessors_and_objects_of_other_devices_are_refused_with_typed_errors() {
    let (a, b) = pair(QpType::Rc);
    assert!(matches!(a.mr.read(a.mr.len() - 4, &mut [0u8; 8]), Err(Error::OutOfBounds { .. })));
    assert!(matches!(a.mr.sge(usize::MAX, 8), Err(Error::OutOfBounds { .. })));
    let attr = QpInitAttr::new(QpType::Rc, &b.cq);
    assert!(matches!(a.pd.create_qp(&attr), Err(Error::WrongDevice(_))));
    assert!(matches!(a.pd.reg_mr(16, Access::REMOTE_WRITE), Err(Error::InvalidArgument(_))));
    let wr = RecvWr { wr_id: 0, sg_list: vec![a.mr.sge(0, 8).unwrap(); 100] };
    let e = a.qp.post_recv(&[wr]).unwrap_err();
    assert!(e.to_string().contains("scatter/gather"), "{e}");
}

#[test]
fn completion_channel_reports_an_armed_cq() {
    let (a_ip, b_ip) = addresses();
    let cfg = DeviceConfig::default(); // manual progress: the channel wait drives it
    let dev_a = Device::with_config("chan-a", a_ip, cfg.clone()).unwrap();
    let (b, _) = Side::new("chan-b", b_ip, QpType::Rc, DeviceConfig { progress: Progress::Thread, ..cfg }, None);
    let ctx = dev_a.open().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(16, Some(&ch)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let mr = pd.reg_mr(64, Access::ALL).unwrap();
    let opts = ConnectOptions::default();
    qp.connect(5, &b.info(6), &opts).unwrap();
    b.qp.connect(6, &PeerInfo { qpn: qp.qp_num(), psn: 5, gid: ctx.query_gid(0).unwrap() }, &opts).unwrap();
    cq.req_notify(false).unwrap();
    qp.post_send(&[SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
        vec![mr.sge(0, 8).unwrap()],
    )])
    .unwrap();
    assert_eq!(ch.get_cq_event(WAIT).unwrap(), Some(cq.id()));
    ch.ack_cq_events(&cq, 1);
    let mut out = Vec::new();
    assert_eq!(cq.poll(&mut out, 4).unwrap(), 1);
    assert_eq!(ch.get_cq_event(Some(Duration::from_millis(20))).unwrap(), None, "one event per arming");
}

#[test]
fn tokio_tasks_wait_for_completions_without_blocking_the_runtime() {
    let (a, b) = pair(QpType::Rc);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(0, 8).unwrap()] }]).unwrap();
        a.qp.post_send(&[SendWr::new(1, SendOp::Send, vec![a.mr.sge(0, 8).unwrap()])]).unwrap();
        let mut out = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(10), b.cq.wait_async(&mut out, 4)).await.unwrap().unwrap();
        assert_eq!((n, out[0].status), (1, WcStatus::Success));
    });
    let mut out = Vec::new();
    assert!(matches!(futures_lite_block(b.cq.wait_async(&mut out, 1)), Err(Error::InvalidArgument(_))));
}

/// Polls a future once outside any runtime.
fn futures_lite_block<F: std::future::Future>(f: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("expected an immediate answer"),
    }
}

/// A CQ that overflows is in error from then on (IBTA 11.4.2.1): the
/// completion that found it full is lost and counted, the device raises
/// the CQ's error event, and the QP completing into it goes to ERR with
/// a fatal event; what the CQ held before stays, in order. Through the
/// verbs API over UDP, the device's progress driven by the waits: what a
/// CQ kept at device level by a multi-core device must still do
/// (docs/multi-core-device.md).
#[test]
fn a_cq_overrun_puts_the_cq_and_its_qp_in_error_and_keeps_what_it_held() {
    let (ctx, b) = manual_against_threaded("ovr");
    let pd = ctx.alloc_pd().unwrap();
    let (scq, rcq) = (ctx.create_cq(4, None).unwrap(), ctx.create_cq(16, None).unwrap());
    assert_eq!(scq.depth(), 4);
    let qp = pd.create_qp(&QpInitAttr { recv_cq: &rcq, ..QpInitAttr::new(QpType::Rc, &scq) }).unwrap();
    let mr = pd.reg_mr(64, Access::ALL).unwrap();
    connect_to_side(&qp, &ctx, &b);
    let before = ctx.stats().cq_overruns;

    // Eight signaled WRITEs, none polled: the fifth completion finds the
    // CQ full; the rest, completed or flushed, go to a CQ in error.
    let write = |id| {
        SendWr::new(id, SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() }, vec![mr.sge(0, 8).unwrap()])
    };
    qp.post_send(&(1..=8).map(write).collect::<Vec<_>>()).unwrap();
    assert_eq!(ctx.get_async_event(WAIT).unwrap(), Some(AsyncEvent::CqError(CqId(scq.id()))));
    assert_eq!(ctx.get_async_event(WAIT).unwrap(), Some(AsyncEvent::QpFatal(qp.qp_num())));
    assert_eq!(qp.query().unwrap().0, QpState::Err);
    assert_eq!(ctx.stats().cq_overruns - before, 4, "completions 5 to 8 lost, each counted");

    let mut out = Vec::new();
    ctx.progress_for(Duration::from_millis(20)).unwrap();
    assert_eq!(scq.poll(&mut out, 16).unwrap(), 4);
    let got: Vec<_> = out.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    assert_eq!(got, (1..=4).map(|id| (id, WcStatus::Success)).collect::<Vec<_>>());
    // A post to the QP in ERR is flushed, into a CQ in error: lost too.
    qp.post_send(&[write(9)]).unwrap();
    ctx.progress_for(Duration::from_millis(20)).unwrap();
    assert_eq!(scq.poll(&mut out, 16).unwrap(), 0);
    assert_eq!(ctx.stats().cq_overruns - before, 5);
}
