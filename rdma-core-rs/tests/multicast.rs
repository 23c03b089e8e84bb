//! UD multicast over real UDP sockets (IP multicast on loopback): one send
//! reaches several QPs on two devices, a detached QP and a QP with another
//! Q_Key get nothing, and the misuse the kernel refuses is refused here.
//! Addresses 127.0.21.11-19, groups 239.21.0.11-17.

mod common;

use common::{pattern, WAIT};
use rdma_core_rs::*;
use std::net::IpAddr;
use std::time::Duration;

const QKEY: u32 = 0x0123_4567;

/// One UD QP with a CQ and a buffer of its own, at RTS with `qkey`.
struct Member {
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn member(ctx: &Context, pd: &ProtectionDomain, qkey: u32) -> Member {
    let cq = ctx.create_cq(64, None).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq)).unwrap();
    let mr = pd.reg_mr(8192, Access::ALL).unwrap();
    let opts = ConnectOptions { qkey, ..ConnectOptions::default() };
    let me = PeerInfo { qpn: qp.qp_num(), psn: 0, gid: ctx.query_gid(0).unwrap() };
    qp.connect(0, &me, &opts).unwrap();
    Member { cq, qp, mr }
}

impl Member {
    fn post_recv(&self, wr_id: u64) {
        self.qp.post_recv(&[RecvWr { wr_id, sg_list: vec![self.mr.sge(0, 4096).unwrap()] }]).unwrap();
    }

    fn wait(&self) -> WorkCompletion {
        let mut out = Vec::new();
        assert_eq!(self.cq.wait(&mut out, 1, WAIT).unwrap(), 1, "QP {:#x}: nothing arrived", self.qp.qp_num());
        out[0]
    }

    fn nothing(&self) -> bool {
        self.cq.poll(&mut Vec::new(), 4).unwrap() == 0
    }
}

fn device(name: &str, addr: &str) -> (Context, ProtectionDomain) {
    let cfg = DeviceConfig { progress: Progress::Thread, ..DeviceConfig::default() };
    let ctx = Device::with_config(name, addr.parse().unwrap(), cfg).unwrap().open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    (ctx, pd)
}

fn group(last: u8) -> Gid {
    Gid::from_ip(IpAddr::from([239, 21, 0, last]))
}

/// Sends `data` from `m` to the group's QPN 0xFFFFFF with `qkey`.
fn send(pd: &ProtectionDomain, m: &Member, g: Gid, qkey: u32, data: &[u8]) {
    m.mr.write(4096, data).unwrap();
    let ah = pd.create_ah(&AhAttr::new(g)).unwrap();
    let mut wr = SendWr::new(7, SendOp::Send, vec![m.mr.sge(4096, data.len() as u32).unwrap()]);
    wr.ud = Some(ah.ud_dest(MULTICAST_QPN, qkey));
    m.qp.post_send(&[wr]).unwrap();
    assert_eq!(m.wait().status, WcStatus::Success);
}

#[test]
fn one_send_reaches_every_attached_qp_on_two_devices_until_detached() {
    // Addresses of their own per driver: a device's port is free again
    // only once its last handle (its progress thread's too) is gone.
    for (driver, n) in [(IoDriver::Sockets, 11u8), (IoDriver::IoUring, 17)] {
        let addr = |k: u8| format!("127.0.21.{}", n + k);
        let cfg = DeviceConfig { progress: Progress::Thread, io_driver: driver, ..DeviceConfig::default() };
        let open = |name: &str, addr: &str| {
            let ctx = Device::with_config(name, addr.parse().unwrap(), cfg.clone()).unwrap().open().unwrap();
            let pd = ctx.alloc_pd().unwrap();
            (ctx, pd)
        };
        let (a, a_pd) = open("mc-a", &addr(0));
        let (b, b_pd) = open("mc-b", &addr(1));
        let (c, c_pd) = open("mc-c", &addr(2));
        let g = group(n);
        let sender = member(&a, &a_pd, QKEY);
        let members = [member(&b, &b_pd, QKEY), member(&b, &b_pd, QKEY), member(&c, &c_pd, QKEY)];
        let wrong_qkey = member(&c, &c_pd, 0x7777);
        let stranger = member(&c, &c_pd, QKEY);
        for m in members.iter().chain([&wrong_qkey]) {
            m.qp.attach_mcast(g, 0).unwrap();
            assert_eq!(m.qp.mcast_groups(), [(g, 0)]);
        }
        for (i, m) in members.iter().chain([&wrong_qkey, &stranger]).enumerate() {
            m.post_recv(i as u64);
            m.post_recv(10 + i as u64);
        }
        let data = pattern(700, 3);
        send(&a_pd, &sender, g, QKEY, &data);
        for m in &members {
            let wc = m.wait();
            assert_eq!((wc.status, wc.byte_len, wc.src_qp), (WcStatus::Success, 740, sender.qp.qp_num()), "{driver:?}");
            let got = m.mr.to_vec();
            assert_eq!(&got[40..740], &data[..]);
            assert_eq!(&got[32..40], &[127, 0, 21, n, 239, 21, 0, n], "GRH area: from the sender, to the group");
        }
        assert!(wrong_qkey.nothing() && stranger.nothing(), "{driver:?}: only members with the Q_Key receive");
        assert_eq!(c.stats().drops_for(DropReason::QkeyMismatch), 1);

        // Detached, a QP gets nothing; its device still receives for the other.
        members[0].qp.detach_mcast(g, 0).unwrap();
        assert!(matches!(members[0].qp.detach_mcast(g, 0), Err(Error::Mcast(McastError::NotAttached { .. }))));
        send(&a_pd, &sender, g, QKEY, &pattern(64, 4));
        assert_eq!(members[1].wait().byte_len, 104);
        assert_eq!(members[2].wait().byte_len, 104);
        assert!(members[0].nothing(), "{driver:?}: detached");
    }
}

#[test]
fn a_qp_dropped_while_attached_leaves_the_ip_group() {
    let (a, a_pd) = device("mc-drop-a", "127.0.21.14");
    let (b, b_pd) = device("mc-drop-b", "127.0.21.15");
    let g = group(14);
    let sender = member(&a, &a_pd, QKEY);
    let gone = member(&b, &b_pd, QKEY);
    gone.qp.attach_mcast(g, 0).unwrap();
    drop(gone);
    // The device left the IP group: the next send does not even reach it
    // (had it stayed, the engine would drop the packet: no member).
    let before = b.stats().packets_received;
    send(&a_pd, &sender, g, QKEY, &pattern(32, 1));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(b.stats().packets_received, before, "no datagram for a group the device left");
    assert_eq!(b.stats().drops_for(DropReason::NoMulticastGroup), 0);
    // Joined again by a new member, it receives.
    let m = member(&b, &b_pd, QKEY);
    m.qp.attach_mcast(g, 0).unwrap();
    m.post_recv(1);
    send(&a_pd, &sender, g, QKEY, &pattern(32, 2));
    assert_eq!(m.wait().byte_len, 72);
}

#[test]
fn misuse_is_refused_with_what_was_wrong() {
    let (ctx, pd) = device("mc-misuse", "127.0.21.16");
    let cq = ctx.create_cq(16, None).unwrap();
    let rc = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let e = rc.attach_mcast(group(16), 0).unwrap_err();
    assert!(matches!(e, Error::Mcast(McastError::NotUd { .. })), "{e}");
    let ud = member(&ctx, &pd, QKEY);
    let unicast = Gid::from_ip("127.0.21.99".parse().unwrap());
    let e = ud.qp.attach_mcast(unicast, 0).unwrap_err();
    assert!(matches!(e, Error::Mcast(McastError::NotMulticast { .. })), "{e}");
    let e = ud.qp.detach_mcast(group(16), 0).unwrap_err();
    assert!(e.to_string().contains("is not attached to multicast group 239.21.0.16"), "{e}");
    // An IPv4 device cannot join an IPv6 group: refused, and not half attached.
    let v6 = Gid::from_ip("ff0e::21:16".parse().unwrap());
    let e = ud.qp.attach_mcast(v6, 0).unwrap_err();
    assert!(matches!(&e, Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidInput), "{e}");
    assert!(ud.qp.mcast_groups().is_empty());
    ud.qp.attach_mcast(group(16), 0).unwrap();
    ud.qp.attach_mcast(group(16), 0).unwrap();
    ud.qp.detach_mcast(group(16), 0).unwrap();
    assert!(ud.qp.mcast_groups().is_empty(), "a second attach was a no-op: one detach undoes it");
}

/// RoCE v1 and native IB frames over an in-process link: the frame driver
/// broadcasts multicast frames and each device keeps those of its groups
/// (docs/multicast.md). The IB group is named by its multicast LID.
#[test]
fn frame_links_carry_multicast_to_members_only() {
    for (link, tag) in [(LinkKind::RoceV1, 1u8), (LinkKind::Ib, 2)] {
        let fab = format!("mcast-test-{}-{tag}", std::process::id());
        let open = |n: u8| {
            let cfg = DeviceConfig { link, lid: u16::from(n), progress: Progress::Thread, ..DeviceConfig::default() };
            let ctx =
                Device::in_process(&format!("{fab}-{n}"), &fab, [2, 0x21, tag, 0, 0, n], cfg).unwrap().open().unwrap();
            let pd = ctx.alloc_pd().unwrap();
            (ctx, pd)
        };
        let ((a, a_pd), (b, b_pd), (c, c_pd)) = (open(1), open(2), open(3));
        let sender = member(&a, &a_pd, QKEY);
        let m = member(&b, &b_pd, QKEY);
        let outsider = member(&c, &c_pd, QKEY);
        let g = Gid::from_ip("ff0e::21:5".parse().unwrap());
        let mlid = if link == LinkKind::Ib { 0xc021 } else { 0 };
        m.qp.attach_mcast(g, mlid).unwrap();
        m.post_recv(1);
        outsider.post_recv(1);
        let mut av = AddressVector::new(g.to_ip());
        av.dlid = mlid;
        let ah = a_pd.create_ah_av(av).unwrap();
        sender.mr.write(4096, &pattern(300, 9)).unwrap();
        let mut wr = SendWr::new(7, SendOp::Send, vec![sender.mr.sge(4096, 300).unwrap()]);
        wr.ud = Some(ah.ud_dest(MULTICAST_QPN, QKEY));
        sender.qp.post_send(&[wr]).unwrap();
        assert_eq!(sender.wait().status, WcStatus::Success, "{link:?}");
        let wc = m.wait();
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 340), "{link:?}");
        assert_eq!(&m.mr.to_vec()[40..340], &pattern(300, 9)[..], "{link:?}");
        assert!(outsider.nothing(), "{link:?}: a device without members keeps nothing");
        assert_eq!(c.stats().drops_for(DropReason::NoMulticastGroup), 1, "{link:?}: it got the frame and dropped it");
        drop(b);
    }
}
