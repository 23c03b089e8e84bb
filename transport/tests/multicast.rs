//! UD multicast in the engine: attach/detach rules, one send reaching a
//! copy to every attached QP of every device (and no other QP), the Q_Key
//! check per member, and the same over RoCE v1 and native IB framing.

mod common;

use common::*;
use core::net::IpAddr;
use core::time::Duration;
use rdma_transport::sim::{bring_up, LinkConfig, PairConfig, Side, Sim};
use rdma_transport::*;

const LIMIT: Duration = Duration::from_secs(5);
const QKEY: u32 = 0x0123_4567;

fn group() -> IpAddr {
    "239.21.0.1".parse().unwrap()
}

/// A device at `addr` on `link` (with `lid` for native IB).
fn device(sim: &mut Sim, addr: &str, link: LinkKind, lid: u16, seed: u64) -> usize {
    let mut ep = Endpoint::with_seed(addr.parse().unwrap(), seed);
    ep.set_link(link, lid);
    sim.add_endpoint(ep)
}

/// A QP of `qp_type` on device `ep` with a buffer and CQs of its own,
/// brought up to RTS with Q_Key `qkey` (UD).
fn qp(sim: &mut Sim, ep: usize, qp_type: QpType, qkey: u32) -> Side {
    let e = sim.ep(ep);
    let pd = e.alloc_pd();
    let (send_cq, recv_cq) = (e.create_cq(64), e.create_cq(64));
    let mem = RegionMemory::zeroed(1 << 16);
    let va = 0x7f00_0000_0000;
    let (lkey, rkey) = e.reg_mr(pd, va, mem.clone(), Access::ALL);
    let cap = QpCap { max_send_wr: 64, max_recv_wr: 64, ..QpCap::default() };
    let init = QpInitAttr { qp_type, pd, send_cq, recv_cq, srq: None, cap, sq_sig_all: false };
    let qpn = e.create_qp(init).unwrap();
    let cfg = PairConfig { qp_type, ..PairConfig::default() };
    bring_up(e, qpn, "127.0.21.250".parse().unwrap(), 0x11, 0, 0, &cfg);
    if qp_type == QpType::Ud {
        e.modify_qp(qpn, &QpAttr { qkey: Some(qkey), ..QpAttr::default() }).unwrap();
    }
    Side { ep, qpn, pd, send_cq, recv_cq, mem, va, lkey, rkey }
}

fn post_recv(sim: &mut Sim, s: &Side, wr_id: u64) {
    sim.ep(s.ep).post_recv(s.qpn, RecvWr { wr_id, sg_list: sge(s, 0, 4096) }).unwrap();
}

/// Sends `len` bytes from `s` to the group (QPN 0xFFFFFF) with `qkey`.
fn send_to_group(sim: &mut Sim, s: &Side, dest: UdDest, len: usize, seed: u8) -> Vec<u8> {
    let data = fill(s, 8192, len, seed);
    let mut wr = SendWr::new(1, SendOp::Send, sge(s, 8192, len as u32));
    wr.signaled = true;
    wr.ud = Some(dest);
    sim.ep(s.ep).post_send(s.qpn, wr).unwrap();
    data
}

fn received(sim: &mut Sim, s: &Side) -> Vec<WorkCompletion> {
    sim.ep(s.ep).poll_cq(s.recv_cq, 16)
}

#[test]
fn one_send_reaches_every_attached_qp_of_every_device_and_no_other() {
    let mut sim = Sim::new(21, LinkConfig::default());
    let (a, b, c) = (
        device(&mut sim, "127.0.21.1", LinkKind::RoceV2, 0, 1),
        device(&mut sim, "127.0.21.2", LinkKind::RoceV2, 0, 2),
        device(&mut sim, "127.0.21.3", LinkKind::RoceV2, 0, 3),
    );
    let sender = qp(&mut sim, a, QpType::Ud, QKEY);
    let members =
        [qp(&mut sim, b, QpType::Ud, QKEY), qp(&mut sim, b, QpType::Ud, QKEY), qp(&mut sim, c, QpType::Ud, QKEY)];
    let stranger = qp(&mut sim, c, QpType::Ud, QKEY);
    let wrong_qkey = qp(&mut sim, c, QpType::Ud, 0x7777);
    for s in members.iter().chain([&stranger, &wrong_qkey]) {
        post_recv(&mut sim, s, 100 + u64::from(s.qpn & 0xff));
    }
    for s in members.iter().chain([&wrong_qkey]) {
        sim.ep(s.ep).attach_mcast(s.qpn, group(), 0).unwrap();
    }
    let data = send_to_group(&mut sim, &sender, UdDest::new(group(), MULTICAST_QPN, QKEY), 300, 7);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&sim.ep(a).poll_cq(sender.send_cq, 4)), [(1, WcStatus::Success)]);
    for m in &members {
        let wcs = received(&mut sim, m);
        assert_eq!(wcs.len(), 1, "member {:#x} gets one copy", m.qpn);
        assert_eq!((wcs[0].status, wcs[0].byte_len, wcs[0].src_qp), (WcStatus::Success, 340, sender.qpn));
        assert_eq!(read(m, 40, 300), data);
        // The GRH area holds the IPv4 header: to the group, from the sender.
        assert_eq!(read(m, 20 + 12, 8), [127, 0, 21, 1, 239, 21, 0, 1]);
    }
    assert!(received(&mut sim, &stranger).is_empty(), "a QP not attached gets nothing");
    assert!(received(&mut sim, &wrong_qkey).is_empty(), "a member with another Q_Key gets nothing");
    assert_eq!(sim.ep(c).stats().drops_for(Drop::QkeyMismatch), 1);
    assert_eq!(sim.ep(a).stats().drops_for(Drop::NoMulticastGroup), 0, "the sender's own device floods nothing back");
}

#[test]
fn after_detach_nothing_arrives_and_the_packet_is_counted() {
    let mut sim = Sim::new(22, LinkConfig::default());
    let (a, b) = (
        device(&mut sim, "127.0.21.1", LinkKind::RoceV2, 0, 1),
        device(&mut sim, "127.0.21.2", LinkKind::RoceV2, 0, 2),
    );
    let sender = qp(&mut sim, a, QpType::Ud, QKEY);
    let (m1, m2) = (qp(&mut sim, b, QpType::Ud, QKEY), qp(&mut sim, b, QpType::Ud, QKEY));
    for m in [&m1, &m2] {
        post_recv(&mut sim, m, 1);
        post_recv(&mut sim, m, 2);
        sim.ep(b).attach_mcast(m.qpn, group(), 0).unwrap();
    }
    sim.ep(b).detach_mcast(m1.qpn, group(), 0).unwrap();
    send_to_group(&mut sim, &sender, UdDest::new(group(), MULTICAST_QPN, QKEY), 64, 1);
    sim.run_idle(LIMIT);
    assert!(received(&mut sim, &m1).is_empty(), "detached");
    assert_eq!(statuses(&received(&mut sim, &m2)), [(1, WcStatus::Success)]);
    sim.ep(b).detach_mcast(m2.qpn, group(), 0).unwrap();
    assert!(sim.ep(b).mcast_groups_of(m2.qpn).is_empty());
    send_to_group(&mut sim, &sender, UdDest::new(group(), MULTICAST_QPN, QKEY), 64, 2);
    sim.run_idle(LIMIT);
    assert!(received(&mut sim, &m1).is_empty() && received(&mut sim, &m2).is_empty());
    assert_eq!(sim.ep(b).stats().drops_for(Drop::NoMulticastGroup), 1, "the group is gone: dropped, counted");
}

#[test]
fn a_multicast_qpn_to_a_unicast_address_reaches_nobody() {
    let mut sim = Sim::new(23, LinkConfig::default());
    let (a, b) = (
        device(&mut sim, "127.0.21.1", LinkKind::RoceV2, 0, 1),
        device(&mut sim, "127.0.21.2", LinkKind::RoceV2, 0, 2),
    );
    let sender = qp(&mut sim, a, QpType::Ud, QKEY);
    let m = qp(&mut sim, b, QpType::Ud, QKEY);
    post_recv(&mut sim, &m, 1);
    sim.ep(b).attach_mcast(m.qpn, group(), 0).unwrap();
    send_to_group(&mut sim, &sender, UdDest::new("127.0.21.2".parse().unwrap(), MULTICAST_QPN, QKEY), 64, 1);
    sim.run_idle(LIMIT);
    assert!(received(&mut sim, &m).is_empty());
    assert_eq!(sim.ep(b).stats().drops_for(Drop::NoMulticastGroup), 1);
}

#[test]
fn attach_and_detach_refuse_what_the_kernel_refuses() {
    let mut sim = Sim::new(24, LinkConfig::default());
    let b = device(&mut sim, "127.0.21.2", LinkKind::RoceV2, 0, 2);
    let rc = qp(&mut sim, b, QpType::Rc, 0);
    let ud = qp(&mut sim, b, QpType::Ud, QKEY);
    let ep = sim.ep(b);
    assert_eq!(ep.attach_mcast(rc.qpn, group(), 0), Err(McastError::NotUd { qpn: rc.qpn }));
    let unicast: IpAddr = "127.0.21.9".parse().unwrap();
    assert_eq!(ep.attach_mcast(ud.qpn, unicast, 0), Err(McastError::NotMulticast { gid: unicast }));
    assert_eq!(ep.attach_mcast(0x42, group(), 0), Err(McastError::NoSuchQp(0x42)));
    assert_eq!(ep.detach_mcast(ud.qpn, group(), 0), Err(McastError::NotAttached { qpn: ud.qpn, gid: group(), lid: 0 }));
    ep.attach_mcast(ud.qpn, group(), 0).unwrap();
    ep.attach_mcast(ud.qpn, group(), 0).unwrap(); // twice: a no-op, as rxe
    let v6: IpAddr = "ff0e::21:1".parse().unwrap();
    ep.attach_mcast(ud.qpn, v6, 0).unwrap();
    assert_eq!(ep.mcast_groups_of(ud.qpn).len(), 2);
    ep.detach_mcast(ud.qpn, group(), 0).unwrap();
    assert!(ep.detach_mcast(ud.qpn, group(), 0).is_err(), "one detach per attach");
    ep.destroy_qp(ud.qpn).unwrap();
    assert!(ep.mcast_groups_of(ud.qpn).is_empty(), "a destroyed QP leaves its groups");
}

#[test]
fn ipv6_groups_over_roce_v2() {
    let mut sim = Sim::new(25, LinkConfig::default());
    let (a, b) = (
        device(&mut sim, "fd00::21:1", LinkKind::RoceV2, 0, 1),
        device(&mut sim, "fd00::21:2", LinkKind::RoceV2, 0, 2),
    );
    let sender = qp(&mut sim, a, QpType::Ud, QKEY);
    let m = qp(&mut sim, b, QpType::Ud, QKEY);
    post_recv(&mut sim, &m, 1);
    let g: IpAddr = "ff0e::21:1".parse().unwrap();
    sim.ep(b).attach_mcast(m.qpn, g, 0).unwrap();
    let data = send_to_group(&mut sim, &sender, UdDest::new(g, MULTICAST_QPN, QKEY), 100, 3);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&received(&mut sim, &m)), [(1, WcStatus::Success)]);
    assert_eq!(read(&m, 40, 100), data);
    assert_eq!(read(&m, 24, 16), "ff0e::21:1".parse::<core::net::Ipv6Addr>().unwrap().octets(), "the GRH's DGID");
}

#[test]
fn roce_v1_frames_carry_the_group_in_the_grh() {
    let mut sim = Sim::new(26, LinkConfig::default());
    let (a, b) = (
        device(&mut sim, "fe80::21:1", LinkKind::RoceV1, 0, 1),
        device(&mut sim, "fe80::21:2", LinkKind::RoceV1, 0, 2),
    );
    let sender = qp(&mut sim, a, QpType::Ud, QKEY);
    let m = qp(&mut sim, b, QpType::Ud, QKEY);
    post_recv(&mut sim, &m, 1);
    let g: IpAddr = "ff0e::21:2".parse().unwrap();
    sim.ep(b).attach_mcast(m.qpn, g, 0).unwrap();
    let data = send_to_group(&mut sim, &sender, UdDest::new(g, MULTICAST_QPN, QKEY), 100, 4);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&received(&mut sim, &m)), [(1, WcStatus::Success)]);
    assert_eq!(read(&m, 40, 100), data);
}

#[test]
fn native_ib_groups_are_named_by_a_multicast_lid() {
    let mut sim = Sim::new(27, LinkConfig::default());
    let (a, b) =
        (device(&mut sim, "fe80::21:1", LinkKind::Ib, 1, 1), device(&mut sim, "fe80::21:2", LinkKind::Ib, 2, 2));
    let sender = qp(&mut sim, a, QpType::Ud, QKEY);
    let (m, other) = (qp(&mut sim, b, QpType::Ud, QKEY), qp(&mut sim, b, QpType::Ud, QKEY));
    post_recv(&mut sim, &m, 1);
    post_recv(&mut sim, &other, 1);
    let g: IpAddr = "ff12:601b::21:3".parse().unwrap();
    assert_eq!(sim.ep(b).attach_mcast(m.qpn, g, 0x21), Err(McastError::NotMulticastLid { lid: 0x21 }));
    sim.ep(b).attach_mcast(m.qpn, g, 0xc021).unwrap();
    // A local route (no GRH): the LID alone names the group.
    let mut dest = UdDest::new(IpAddr::V6(core::net::Ipv6Addr::UNSPECIFIED), MULTICAST_QPN, QKEY);
    dest.dlid = 0xc021;
    let data = send_to_group(&mut sim, &sender, dest, 100, 5);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&received(&mut sim, &m)), [(1, WcStatus::Success)]);
    assert_eq!(read(&m, 40, 100), data);
    assert!(received(&mut sim, &other).is_empty());
    // With a GRH, the MGID names it.
    let mut dest = UdDest::new(g, MULTICAST_QPN, QKEY);
    dest.dlid = 0xc021;
    post_recv(&mut sim, &m, 2);
    send_to_group(&mut sim, &sender, dest, 50, 6);
    sim.run_idle(LIMIT);
    assert_eq!(statuses(&received(&mut sim, &m)), [(2, WcStatus::Success)]);
}
