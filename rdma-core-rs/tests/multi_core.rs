//! A device of several engines (`DeviceConfig::threads`,
//! docs/multi-core-device.md): its QPs spread over engines that each have
//! a socket on the device's port and a thread, while the application sees
//! one device: PDs and MRs good on every QP, CQs and channels shared by
//! all, completions in order per QP, a CQ overrun failing every QP on the
//! CQ whatever its engine.

mod common;

use common::*;
use rdma_core_rs::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const ENGINES: usize = 2;

fn engines_config() -> DeviceConfig {
    DeviceConfig { threads: ENGINES, ..DeviceConfig::default() }
}

/// The shared port's slot of a QPN: each engine has its own.
fn slot(qpn: u32) -> u32 {
    qpn >> 17
}

/// Waits until `n` completions came to `cq`.
fn take(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let start = Instant::now();
    while out.len() < n {
        assert!(start.elapsed() < Duration::from_secs(20), "{} of {n} completions", out.len());
        let want = n - out.len();
        cq.wait(&mut out, want, Some(Duration::from_millis(100))).unwrap();
    }
    out
}

/// Waits for `n` successful sends on `a`'s CQ and `n` successful receives
/// of `len` bytes on `b`'s; returns the receives.
fn delivered(a: &Side, b: &Side, n: usize, len: u32) -> Vec<WorkCompletion> {
    let sent = take(&a.cq, n);
    assert!(sent.iter().all(|wc| wc.status == WcStatus::Success), "{sent:?}");
    let got = take(&b.cq, n);
    assert!(got.iter().all(|wc| wc.status == WcStatus::Success && wc.byte_len == len), "{got:?}");
    got
}

#[test]
fn qps_spread_over_the_engines_and_every_byte_and_completion_arrives() {
    let (a_ip, b_ip) = addresses();
    let (a, _) = Side::new("engines-a", a_ip, QpType::Rc, engines_config(), None);
    let (b, _) = Side::new("engines-b", b_ip, QpType::Rc, engines_config(), None);
    let opts = ConnectOptions::default();
    let qps: Vec<_> = (0..4).map(|i| connected_qps(&a, &b, &opts, 100 * i)).collect();
    let slots: BTreeSet<u32> = qps.iter().map(|(qa, _)| slot(qa.qp_num())).collect();
    assert_eq!(slots.len(), ENGINES, "the QPs are on every engine: {slots:?}");
    let slots_b: BTreeSet<u32> = qps.iter().map(|(_, qb)| slot(qb.qp_num())).collect();
    assert_eq!(slots_b.len(), ENGINES, "the peer's too: {slots_b:?}");

    // 16 WRITEs of 4 KiB on each QP, every one signaled, each to a place
    // of its own; one MR, registered once, serves the QPs of both engines.
    const PER_QP: usize = 16;
    const LEN: usize = 4096;
    let data = pattern(qps.len() * PER_QP * LEN, 7);
    a.mr.write(0, &data).unwrap();
    for (q, (qa, _)) in qps.iter().enumerate() {
        let wrs: Vec<SendWr> = (0..PER_QP)
            .map(|i| {
                let off = (q * PER_QP + i) * LEN;
                write_wr((q * PER_QP + i) as u64, &a, off, LEN as u32, &b, off as u64)
            })
            .collect();
        qa.post_send(&wrs).unwrap();
    }
    let done = take(&a.cq, qps.len() * PER_QP);
    assert!(done.iter().all(|wc| wc.status == WcStatus::Success), "{done:?}");
    for (q, (qa, _)) in qps.iter().enumerate() {
        let ids: Vec<u64> = done.iter().filter(|wc| wc.qp_num == qa.qp_num()).map(|wc| wc.wr_id).collect();
        let want: Vec<u64> = (0..PER_QP).map(|i| (q * PER_QP + i) as u64).collect();
        assert_eq!(ids, want, "QP {q}'s completions in the order posted");
    }
    let mut got = vec![0u8; data.len()];
    b.mr.read(0, &mut got).unwrap();
    assert!(got == data, "every WRITE landed where it was aimed");

    // A SEND each way on every pair: receives on the QPs of both engines
    // of the peer complete on its one CQ.
    for (q, (qa, qb)) in qps.iter().enumerate() {
        let recv = RecvWr { wr_id: 1000 + q as u64, sg_list: vec![b.mr.sge(q * 64, 64).unwrap()] };
        qb.post_recv(&[recv]).unwrap();
        let send = SendWr::new(2000 + q as u64, SendOp::Send, vec![a.mr.sge(q * 64, 64).unwrap()]);
        qa.post_send(&[send]).unwrap();
    }
    let sends = take(&a.cq, qps.len());
    assert!(sends.iter().all(|wc| wc.status == WcStatus::Success && wc.wr_id >= 2000), "{sends:?}");
    let recvs = take(&b.cq, qps.len());
    for wc in &recvs {
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 64), "{wc:?}");
        let q = (wc.wr_id - 1000) as usize;
        assert_eq!(wc.qp_num, qps[q].1.qp_num(), "the receive completed for its QP");
    }
    let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
    assert_eq!(sa.retransmits, 0, "{sa:?}");
    assert_eq!(sb.drops.values().sum::<u64>(), 0, "{sb:?}");
    // The engines send runs of packets as GSO messages and take no GRO:
    // a merged datagram would go to the engine of its first packet.
    assert!(a.ctx.offloads().gso && !a.ctx.offloads().gro, "{:?}", a.ctx.offloads());
    let io = a.ctx.io_stats();
    assert!(io.gso_sends > 0 && b.ctx.io_stats().gro_receives == 0, "{io:?}");
}

/// A channel armed on a CQ shared by the engines raises its event for a
/// completion of a QP on another engine than the first.
#[test]
fn an_armed_cq_gets_its_event_from_any_engine() {
    let (a_ip, b_ip) = addresses();
    let (a, _) = Side::new("events-a", a_ip, QpType::Rc, engines_config(), None);
    let (b, _) = Side::new("events-b", b_ip, QpType::Rc, engines_config(), None);
    let channel = a.ctx.create_comp_channel().unwrap();
    let cq = a.ctx.create_cq(64, Some(&channel)).unwrap();
    let opts = ConnectOptions::default();
    // QPs on the armed CQ until one is on another engine than the first's.
    let first = slot(a.qp.qp_num());
    let mut other = None;
    let mut kept = Vec::new();
    for i in 0..8 {
        let qa = a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
        let qb = b.pd.create_qp(&QpInitAttr::new(QpType::Rc, &b.cq)).unwrap();
        connect_pair((&a, &qa), (&b, &qb), &opts, i * 10);
        if slot(qa.qp_num()) != first {
            other = Some((qa, qb));
            break;
        }
        kept.push((qa, qb));
    }
    let (qa, _qb) = other.expect("a QP on another engine");
    cq.req_notify(false).unwrap();
    qa.post_send(&[write_wr(77, &a, 0, 256, &b, 0)]).unwrap();
    assert_eq!(channel.get_cq_event(WAIT).unwrap(), Some(cq.id()), "the event");
    let done = take(&cq, 1);
    assert_eq!((done[0].wr_id, done[0].status), (77, WcStatus::Success));
}

/// A CQ of depth 4 shared by QPs of two engines, overrun by 8 WRITEs: the
/// application gets one CQ error event, every QP on the CQ goes to ERR
/// with its fatal event (the QP of the engine that did not overflow it
/// too), and the four completions held are there.
#[test]
fn a_cq_overrun_fails_the_qps_of_every_engine_on_it() {
    let (a_ip, b_ip) = addresses();
    let (a, _) = Side::new("overrun-a", a_ip, QpType::Rc, engines_config(), None);
    let (b, _) = Side::new("overrun-b", b_ip, QpType::Rc, engines_config(), None);
    let small = a.ctx.create_cq(4, None).unwrap();
    let opts = ConnectOptions::default();
    let mut pairs = Vec::new();
    for i in 0..2u32 {
        let qa = a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &small)).unwrap();
        let qb = b.pd.create_qp(&QpInitAttr::new(QpType::Rc, &b.cq)).unwrap();
        connect_pair((&a, &qa), (&b, &qb), &opts, i * 10);
        pairs.push((qa, qb));
    }
    assert_ne!(slot(pairs[0].0.qp_num()), slot(pairs[1].0.qp_num()), "one QP on each engine");
    // The first QP fills the CQ and overruns it; the second's WRITEs come after.
    let wrs: Vec<SendWr> = (0..6).map(|i| write_wr(i, &a, 0, 64, &b, 0)).collect();
    pairs[0].0.post_send(&wrs).unwrap();
    let start = Instant::now();
    while a.ctx.stats().cq_overruns < 2 {
        assert!(start.elapsed() < Duration::from_secs(10), "no overrun: {:?}", a.ctx.stats());
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut events = Vec::new();
    let start = Instant::now();
    while events.len() < 3 && start.elapsed() < Duration::from_secs(10) {
        if let Some(ev) = a.ctx.get_async_event(Some(Duration::from_millis(50))).unwrap() {
            events.push(ev);
        }
    }
    let errors = events.iter().filter(|e| matches!(e, AsyncEvent::CqError(c) if c.0 == small.id())).count();
    assert_eq!(errors, 1, "one CQ error event: {events:?}");
    for (qa, _) in &pairs {
        assert!(events.contains(&AsyncEvent::QpFatal(qa.qp_num())), "QP {:#x} failed: {events:?}", qa.qp_num());
        assert_eq!(qa.query().unwrap().0, QpState::Err);
    }
    // A 7th event would be a second CQ error: none comes.
    assert_eq!(a.ctx.get_async_event(Some(Duration::from_millis(100))).unwrap(), None);
    let held = take(&small, 4);
    let ids: Vec<u64> = held.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, [0, 1, 2, 3], "the four the CQ held, in order");
    assert!(held.iter().all(|wc| wc.status == WcStatus::Success));
}

/// `threads` out of range, or several engines on a backend that cannot
/// share its port among them, is refused at the device, saying why.
#[test]
fn several_engines_need_the_udp_backend() {
    let addr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 79, 1));
    let too_many = DeviceConfig { threads: MAX_THREADS + 1, ..DeviceConfig::default() };
    let e = Device::with_config("engines-many", addr, too_many).unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
    let as_link = DeviceConfig { threads: 2, udp_as_link: true, ..DeviceConfig::default() };
    let e = Device::with_config("engines-link", addr, as_link).unwrap_err().to_string();
    assert!(e.contains("several engines"), "{e}");
}

/// UD ping-pong between two devices of several engines: every datagram
/// arrives (loopback loses none), so a lost one is the device's.
#[test]
fn ud_ping_pong_loses_nothing() {
    let (a_ip, b_ip) = addresses();
    // Devices opened and closed on a's address first (as a client that
    // retries its connection does): their engines join the port and leave.
    for _ in 0..3 {
        drop(Device::with_config("ud-a-before", a_ip, engines_config()).unwrap().open().unwrap());
    }
    let (a, _) = Side::new("ud-a", a_ip, QpType::Ud, engines_config(), None);
    let (b, _) = Side::new("ud-b", b_ip, QpType::Ud, engines_config(), None);
    let opts = ConnectOptions::default();
    a.qp.connect(1, &b.info(0), &opts).unwrap();
    b.qp.connect(2, &a.info(0), &opts).unwrap();
    let to_b = a.pd.create_ah(&AhAttr::new(b.ctx.query_gid(0).unwrap())).unwrap();
    let to_a = b.pd.create_ah(&AhAttr::new(a.ctx.query_gid(0).unwrap())).unwrap();
    let recv = |s: &Side, id: u64| {
        s.qp.post_recv(&[RecvWr { wr_id: id, sg_list: vec![s.mr.sge(8192, 40 + 4096).unwrap()] }]).unwrap();
    };
    let send = |from: &Side, ah: &AddressHandle, qpn: u32, wr_id: u64| {
        let mut wr = SendWr::new(wr_id, SendOp::Send, vec![from.mr.sge(0, 4096).unwrap()]);
        wr.ud = Some(ah.ud_dest(qpn, opts.qkey));
        from.qp.post_send(&[wr]).unwrap();
    };
    let mut out = Vec::new();
    let mut wait = |s: &Side, what: &str, i: u64| {
        let start = Instant::now();
        loop {
            out.clear();
            if s.cq.wait(&mut out, 1, Some(Duration::from_millis(100))).unwrap() == 1 {
                assert_eq!(out[0].status, WcStatus::Success, "{what} {i}");
                return out[0];
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{what} {i} never completed: a {:?} {:?} / b {:?} {:?}",
                a.ctx.stats(),
                a.ctx.io_stats(),
                b.ctx.stats(),
                b.ctx.io_stats()
            );
        }
    };
    for i in 0..1000u64 {
        recv(&b, i);
        recv(&a, i);
        send(&a, &to_b, b.qp.qp_num(), i);
        wait(&a, "a's send", i);
        wait(&b, "b's receive", i);
        send(&b, &to_a, a.qp.qp_num(), i);
        wait(&b, "b's send", i);
        wait(&a, "a's receive", i);
    }
}

/// A poll that finds its CQ empty makes a round of progress on the
/// engines with QPs on that CQ, as a poll of a device of one engine does
/// (a busy poller then takes a packet without waiting for an engine's
/// thread to wake), and on no other: a CQ without QPs costs no system call.
#[test]
fn an_empty_poll_makes_progress_on_the_engines_of_its_cq() {
    let (a_ip, _) = addresses();
    let (a, _) = Side::new("empty-poll-a", a_ip, QpType::Rc, engines_config(), None);
    let lonely = a.ctx.create_cq(16, None).unwrap();
    let receives = || a.ctx.io_stats().recv_syscalls;
    // The engines' threads take what their join sent (the shared port's
    // probes), then sleep: nothing is in flight.
    let start = Instant::now();
    let mut last = receives();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = receives();
        if now == last || start.elapsed() > Duration::from_secs(2) {
            break;
        }
        last = now;
    }
    const POLLS: u64 = 200;
    let mut out = Vec::new();
    // The engines' threads still wake every 100 ms and make a receive call
    // of their own: a test thread held up that long counts theirs too. So
    // the best of three tries counts (each try takes well under 100 ms).
    let mut tries = Vec::new();
    for _ in 0..3 {
        let before = receives();
        for _ in 0..POLLS {
            assert_eq!(lonely.poll(&mut out, 1).unwrap(), 0);
        }
        let between = receives();
        for _ in 0..POLLS {
            assert_eq!(a.cq.poll(&mut out, 1).unwrap(), 0);
        }
        let after = receives();
        // A round whose lock an engine's thread held is skipped: a few. The
        // CQ's QP is on the first engine: the other makes none.
        let (lonely_calls, calls) = (between - before, after - between);
        if lonely_calls < 5 && (POLLS - 5..=POLLS + 5).contains(&calls) {
            return;
        }
        tries.push((lonely_calls, calls));
    }
    panic!("{POLLS} empty polls of a CQ without QPs, then of a CQ with one, made (receive calls) {tries:?}");
}

/// The engines of a device share one table of memory windows: a type 1
/// window bound through a QP of one engine is reached by the peer through
/// a QP of the other, and unbound through that other, it reaches nothing
/// through the first. (Each engine had its own table: the WRITE failed.)
#[test]
fn a_window_bound_through_one_engine_is_reached_through_the_other() {
    let (a_ip, b_ip) = addresses();
    let (a, _) = Side::new("mw-engines-a", a_ip, QpType::Rc, engines_config(), None);
    let (b, _) = Side::new("mw-engines-b", b_ip, QpType::Rc, engines_config(), None);
    let opts = ConnectOptions::default();
    let (qa0, qb0) = connected_qps(&a, &b, &opts, 100);
    let (qa1, qb1) = connected_qps(&a, &b, &opts, 200);
    assert_ne!(slot(qb0.qp_num()), slot(qb1.qp_num()), "the peer's QPs are on both engines");
    let target = b.pd.reg_mr(8192, Access::ALL | Access::MW_BIND).unwrap();
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let window =
        MwBindInfo { mr: Some(&target), addr: target.addr() + 4096, length: 4096, access: Access::REMOTE_WRITE };
    let rkey = mw.bind(&qb0, 1, true, &window).unwrap();
    let bound = take(&b.cq, 1);
    assert_eq!((bound[0].status, bound[0].opcode), (WcStatus::Success, WcOpcode::BindMw), "{bound:?}");

    a.mr.write(0, b"through the window").unwrap();
    let write = |qp: &QueuePair, id, rkey| {
        let op = SendOp::RdmaWrite { remote_addr: target.addr() + 4096 + 64, rkey };
        qp.post_send(&[SendWr::new(id, op, vec![a.mr.sge(0, 18).unwrap()])]).unwrap();
        take(&a.cq, 1)[0].status
    };
    assert_eq!(write(&qa1, 2, rkey), WcStatus::Success, "bound through engine {}", slot(qb0.qp_num()));
    let mut got = [0u8; 18];
    target.read(4096 + 64, &mut got).unwrap();
    assert_eq!(&got, b"through the window");

    // Unbound (a zero-length bind) through the other engine's QP: neither
    // its new key nor the one it was bound under reaches anything.
    let none = MwBindInfo { mr: None, addr: 0, length: 0, access: Access::NONE };
    let unbound = mw.bind(&qb1, 3, true, &none).unwrap();
    assert_eq!(take(&b.cq, 1)[0].status, WcStatus::Success);
    assert_eq!(write(&qa0, 4, unbound), WcStatus::RemAccessErr, "an unbound window reaches nothing");
    assert_eq!(write(&qa1, 5, rkey), WcStatus::RemAccessErr, "the key it was bound under is gone");
}

/// The engines share the device's SRQs: QPs on one SRQ spread over the
/// engines, and every receive posted to it is taken exactly once, by
/// whichever engine's QP a message came to; the limit event is raised
/// once. (Before, QPs on an SRQ all stayed on the first engine.)
#[test]
fn qps_on_one_srq_spread_over_the_engines_and_share_its_receives() {
    let (a_ip, b_ip) = addresses();
    let (a, _) = Side::new("srq-engines-a", a_ip, QpType::Rc, engines_config(), None);
    let (b, srq) = Side::new("srq-engines-b", b_ip, QpType::Rc, engines_config(), Some(256));
    let srq = srq.expect("an SRQ");
    let opts = ConnectOptions::default();
    // Four QPs of b on the SRQ (the side's own and three more), in turn on the engines.
    let mut pairs = vec![(a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &a.cq)).unwrap(), None)];
    for _ in 0..3 {
        let mut attr = QpInitAttr::new(QpType::Rc, &b.cq);
        attr.srq = Some(&srq);
        let qb = b.pd.create_qp(&attr).unwrap();
        pairs.push((a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &a.cq)).unwrap(), Some(qb)));
    }
    let mut slots = BTreeSet::new();
    for (i, (qa, qb)) in pairs.iter().enumerate() {
        let qb = qb.as_ref().unwrap_or(&b.qp);
        slots.insert(slot(qb.qp_num()));
        connect_pair((&a, qa), (&b, qb), &opts, 100 * i as u32);
    }
    assert_eq!(slots.len(), ENGINES, "the QPs on the SRQ are on every engine: {slots:?}");

    const RECVS: u64 = 64;
    let wrs: Vec<RecvWr> =
        (0..RECVS).map(|i| RecvWr { wr_id: i, sg_list: vec![b.mr.sge(i as usize * 64, 64).unwrap()] }).collect();
    srq.post_recv(&wrs).unwrap();
    srq.arm_limit(8).unwrap();
    // 60 SENDs, 15 on each QP: the SRQ falls below its limit of 8 once.
    a.mr.write(0, &pattern(64, 9)).unwrap();
    for (i, (qa, _)) in pairs.iter().enumerate() {
        let sends: Vec<SendWr> = (0..15)
            .map(|k| SendWr::new(1000 + 15 * i as u64 + k, SendOp::Send, vec![a.mr.sge(0, 64).unwrap()]))
            .collect();
        qa.post_send(&sends).unwrap();
    }
    let got = delivered(&a, &b, 60, 64);
    // Taken in the order posted, whatever the engine: the first 60, each
    // once, and on each QP in rising order.
    let ids: BTreeSet<u64> = got.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, (0..60).collect(), "each of the first 60 receives taken once");
    for qpn in got.iter().map(|wc| wc.qp_num).collect::<BTreeSet<_>>() {
        let on: Vec<u64> = got.iter().filter(|wc| wc.qp_num == qpn).map(|wc| wc.wr_id).collect();
        assert!(on.windows(2).all(|w| w[0] < w[1]), "QP {qpn:#x} took its receives out of order: {on:?}");
    }
    let by_engine: BTreeSet<u32> = got.iter().map(|wc| slot(wc.qp_num)).collect();
    assert_eq!(by_engine.len(), ENGINES, "receives completed on QPs of every engine");
    for wc in &got {
        let mut bytes = [0u8; 64];
        b.mr.read(wc.wr_id as usize * 64, &mut bytes).unwrap();
        assert_eq!(bytes.to_vec(), pattern(64, 9), "receive {} holds its message", wc.wr_id);
    }
    assert_eq!(
        b.ctx.get_async_event(Some(Duration::from_secs(2))).unwrap(),
        Some(AsyncEvent::SrqLimitReached(SrqId(srq.id())))
    );
    assert_eq!(b.ctx.get_async_event(Some(Duration::from_millis(200))).unwrap(), None, "the limit event once");
}

/// XRC spreads too: XRC_RECV QPs of one domain on both engines land their
/// messages in one XRC SRQ (the engines share SRQs and domains), whose CQ
/// a poll drives on every engine; the domain does not close while a QP of
/// another engine than the first is in it.
#[test]
fn xrc_recv_qps_on_both_engines_share_a_domain_and_its_srq() {
    let (a_ip, b_ip) = addresses();
    let (a, _) = Side::new("xrc-engines-a", a_ip, QpType::Rc, engines_config(), None);
    let (b, _) = Side::new("xrc-engines-b", b_ip, QpType::Rc, engines_config(), None);
    let xrcd = b.ctx.open_xrcd().unwrap();
    let srq = b.pd.create_xrc_srq(&xrcd, &b.cq, 64, 0).unwrap();
    let recv_qps: Vec<QueuePair> = (0..2).map(|_| xrcd.create_recv_qp().unwrap()).collect();
    let slots: BTreeSet<u32> = recv_qps.iter().map(|q| slot(q.qp_num())).collect();
    assert_eq!(slots.len(), ENGINES, "the XRC_RECV QPs are on every engine: {slots:?}");
    let opts = ConnectOptions::default();
    let send_qps: Vec<QueuePair> = recv_qps
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let s = a.pd.create_qp(&QpInitAttr::new(QpType::XrcSend, &a.cq)).unwrap();
            connect_pair((&a, &s), (&b, r), &opts, 0x10 + 0x100 * i as u32);
            s
        })
        .collect();
    let send_slots: BTreeSet<u32> = send_qps.iter().map(|q| slot(q.qp_num())).collect();
    assert_eq!(send_slots.len(), ENGINES, "the XRC_SEND QPs are on every engine: {send_slots:?}");
    let wrs: Vec<RecvWr> =
        (0..8).map(|i| RecvWr { wr_id: i, sg_list: vec![b.mr.sge(i as usize * 256, 256).unwrap()] }).collect();
    srq.srq().post_recv(&wrs).unwrap();
    a.mr.write(0, &pattern(256, 3)).unwrap();
    for (i, s) in send_qps.iter().enumerate() {
        let sends: Vec<SendWr> = (0..4)
            .map(|k| SendWr {
                xrc_srqn: srq.srq_num(),
                ..SendWr::new(10 * i as u64 + k, SendOp::Send, vec![a.mr.sge(0, 256).unwrap()])
            })
            .collect();
        s.post_send(&sends).unwrap();
    }
    let got = delivered(&a, &b, 8, 256);
    let ids: BTreeSet<u64> = got.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, (0..8).collect(), "each receive of the SRQ taken once");
    let by: BTreeSet<u32> = got.iter().map(|wc| wc.qp_num).collect();
    assert_eq!(by, recv_qps.iter().map(QueuePair::qp_num).collect(), "both XRC_RECV QPs took messages");

    // In use while a QP of the second engine is in it.
    let busy = |x: &Xrcd| matches!(x.close(), Err(Error::Verbs(VerbsError::XrcdInUse(_))));
    drop(srq);
    // Side::new made b's own QP first, on the first engine.
    let (first, second): (Vec<QueuePair>, Vec<QueuePair>) =
        recv_qps.into_iter().partition(|q| slot(q.qp_num()) == slot(b.qp.qp_num()));
    assert_eq!((first.len(), second.len()), (1, 1));
    drop(first);
    assert!(busy(&xrcd), "a QP on the other engine is still in the domain");
    drop(second);
    xrcd.close().unwrap();
}

/// The RDMA CM drives the QPs of every engine: the QPs of its IDs spread
/// like any other, the CM takes each through RTR and RTS where it lives,
/// and a disconnect moves it to ERR there, its posted receive flushed to
/// the CQ. (Before, the CM's QPs all stayed on the first engine, where the
/// CM runs.)
#[test]
fn the_rdma_cm_connects_and_disconnects_qps_on_every_engine() {
    use rdma_core_rs::cm::{attach_context, ConnParam, EventChannel, EventType, PortSpace};
    use std::net::SocketAddr;
    // The next event but a time-wait's end, which an earlier connection's
    // disconnect brings a second later, in between on a slow machine.
    let expect = |ch: &EventChannel, e: EventType| loop {
        let ev = ch.get_cm_event(Some(Duration::from_secs(10))).expect("an event within 10 s");
        if ev.event != EventType::TimewaitExit {
            assert_eq!(ev.event, e, "{ev:?}");
            break ev;
        }
    };
    let (a_ip, b_ip) = addresses();
    let (a, _) = Side::new("cm-engines-a", a_ip, QpType::Rc, engines_config(), None);
    let (b, _) = Side::new("cm-engines-b", b_ip, QpType::Rc, engines_config(), None);
    attach_context(&a.ctx).unwrap();
    attach_context(&b.ctx).unwrap();
    let server = SocketAddr::new(b_ip, 7471);
    let sch = EventChannel::new();
    let listen = sch.create_id(PortSpace::Tcp);
    listen.bind_addr(server).unwrap();
    listen.listen(8).unwrap();
    let cch = EventChannel::new();
    // The server's QPs complete on a CQ with a completion channel.
    let bchan = b.ctx.create_comp_channel().unwrap();
    let bcq = b.ctx.create_cq(64, Some(&bchan)).unwrap();
    const N: usize = 4;
    let pairs: Vec<_> = (0..N)
        .map(|_| {
            let id = cch.create_id(PortSpace::Tcp);
            id.resolve_addr(Some(a_ip), server, Duration::from_secs(2)).unwrap();
            expect(&cch, EventType::AddrResolved);
            id.resolve_route(Duration::from_secs(2)).unwrap();
            expect(&cch, EventType::RouteResolved);
            let qa = id.create_qp(&a.pd, &QpInitAttr::new(QpType::Rc, &a.cq)).unwrap();
            id.connect(&ConnParam::default()).unwrap();
            let req = expect(&sch, EventType::ConnectRequest);
            let qb = req.id.create_qp(&b.pd, &QpInitAttr::new(QpType::Rc, &bcq)).unwrap();
            req.id.accept(&ConnParam::default()).unwrap();
            expect(&cch, EventType::Established);
            expect(&sch, EventType::Established);
            (id, req.id, qa, qb)
        })
        .collect();
    let slots: BTreeSet<u32> = pairs.iter().map(|p| slot(p.2.qp_num())).collect();
    assert_eq!(slots.len(), ENGINES, "the client's CM QPs are on every engine: {slots:?}");
    let slots_b: BTreeSet<u32> = pairs.iter().map(|p| slot(p.3.qp_num())).collect();
    assert_eq!(slots_b.len(), ENGINES, "the server's too: {slots_b:?}");

    // A SEND on every connection.
    for (q, (_, _, qa, qb)) in pairs.iter().enumerate() {
        qb.post_recv(&[RecvWr { wr_id: q as u64, sg_list: vec![b.mr.sge(q * 64, 64).unwrap()] }]).unwrap();
        qa.post_send(&[SendWr::new(q as u64, SendOp::Send, vec![a.mr.sge(q * 64, 64).unwrap()])]).unwrap();
    }
    let sent = take(&a.cq, N);
    assert!(sent.iter().all(|wc| wc.status == WcStatus::Success), "{sent:?}");
    let got = take(&bcq, N);
    assert!(got.iter().all(|wc| wc.status == WcStatus::Success && wc.byte_len == 64), "{got:?}");
    let by: BTreeSet<u32> = got.iter().map(|wc| wc.qp_num).collect();
    assert_eq!(by, pairs.iter().map(|p| p.3.qp_num()).collect(), "every connection carried its SEND");

    // Disconnected from the client; the server's answering disconnect
    // moves its QP to ERR on whichever engine holds it, and the receive
    // posted there is flushed to the CQ, its channel's event raised, before
    // the call returns (not in that engine's next round: the look at the
    // channel makes no progress).
    for (q, (id, sid, _, qb)) in pairs.iter().enumerate() {
        qb.post_recv(&[RecvWr { wr_id: 100 + q as u64, sg_list: vec![b.mr.sge(0, 64).unwrap()] }]).unwrap();
        id.disconnect().unwrap();
        expect(&cch, EventType::Disconnected);
        expect(&sch, EventType::Disconnected);
        bcq.req_notify(false).unwrap();
        sid.disconnect().unwrap();
        assert_eq!(qb.query().unwrap().0, QpState::Err, "server QP {q} in ERR");
        let event = bchan.get_cq_event(Some(Duration::ZERO)).unwrap();
        assert_eq!(event, Some(bcq.id()), "QP {q} (slot {}): the flush's event at once", slot(qb.qp_num()));
        let mut flushed = Vec::new();
        bcq.poll(&mut flushed, 4).unwrap();
        let want = (100 + q as u64, qb.qp_num(), WcStatus::WrFlushErr);
        assert!(
            flushed.iter().any(|wc| (wc.wr_id, wc.qp_num, wc.status) == want),
            "QP {q} (slot {}): its receive flushed at once: {flushed:?}",
            slot(qb.qp_num())
        );
    }
    for p in &pairs {
        assert_eq!(p.2.query().unwrap().0, QpState::Err, "the client's QPs in ERR");
    }
}
