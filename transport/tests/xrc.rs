//! XRC (IBTA annex A14) between two endpoints on the simulated link: one
//! XRC_SEND QP reaching two XRC SRQs of one domain through one XRC_RECV
//! QP, RDMA WRITE and READ against the SRQ's PD, and hostile requests (an
//! SRQ of another domain, no SRQ at all) NAKed with Invalid Request while
//! touching nothing. ACKs and retries are RC's: a lossy link too.

mod common;

use common::*;
use core::net::IpAddr;
use core::time::Duration;
use rdma_transport::sim::{bring_up, connect, LinkConfig, PairConfig, Side, Sim};
use rdma_transport::*;

const LIMIT: Duration = Duration::from_secs(20);

struct Xrc {
    sim: Sim,
    a: Side,
    b: Side,
    send_qpn: u32,
    recv_qpn: u32,
    xrcd: XrcdId,
    srqs: [SrqId; 2],
}

fn setup(link: LinkConfig, seed: u64) -> Xrc {
    let mut sim = Sim::new(seed, link);
    let (a, b) = connect(&mut sim, PairConfig::default());
    let (ip_a, ip_b): (IpAddr, IpAddr) = ([127, 0, 0, 1].into(), [127, 0, 0, 2].into());
    let epb = sim.ep(b.ep);
    let xrcd = epb.open_xrcd();
    let srqs = [0, 1].map(|_| epb.create_xrc_srq(b.pd, xrcd, b.recv_cq, 64, 0).unwrap());
    let recv_qpn = epb.create_xrc_qp(QpInitAttr::new(QpType::XrcRecv, Pd(0), b.recv_cq), Some(xrcd)).unwrap();
    let send_qpn = sim.ep(a.ep).create_xrc_qp(QpInitAttr::new(QpType::XrcSend, a.pd, a.send_cq), None).unwrap();
    let cfg = PairConfig::default();
    bring_up(sim.ep(a.ep), send_qpn, ip_b, recv_qpn, 100, 200, &cfg);
    bring_up(sim.ep(b.ep), recv_qpn, ip_a, send_qpn, 200, 100, &cfg);
    Xrc { sim, a, b, send_qpn, recv_qpn, xrcd, srqs }
}

fn send(x: &mut Xrc, wr_id: u64, op: SendOp, sg: Vec<Sge>, srqn: u32) {
    let wr = SendWr { xrc_srqn: srqn, ..SendWr::new(wr_id, op, sg) };
    x.sim.ep(x.a.ep).post_send(x.send_qpn, wr).unwrap();
}

fn recv(x: &mut Xrc, srq: SrqId, wr_id: u64, offset: u64, len: u32) {
    x.sim.ep(x.b.ep).post_srq_recv(srq, RecvWr { wr_id, sg_list: sge(&x.b, offset, len) }).unwrap();
}

fn traffic(x: &mut Xrc) {
    let n0 = x.sim.ep(x.b.ep).srq_num(x.srqs[0]).unwrap();
    let n1 = x.sim.ep(x.b.ep).srq_num(x.srqs[1]).unwrap();
    assert_ne!(n0, n1);
    let srqs = x.srqs;
    recv(x, srqs[0], 10, 0, 4096);
    recv(x, srqs[1], 11, 8192, 4096);
    let d0 = fill(&x.a, 0, 3000, 1);
    let d1 = fill(&x.a, 4096, 100, 2);
    let d2 = fill(&x.a, 12288, 2000, 3);
    let sg = sge(&x.a, 4096, 100);
    send(x, 1, SendOp::Send, sg, n1);
    let sg = sge(&x.a, 0, 3000);
    send(x, 2, SendOp::Send, sg, n0);
    let (va, rkey) = (x.b.va, x.b.rkey);
    let sg = sge(&x.a, 12288, 2000);
    send(x, 3, SendOp::RdmaWrite { remote_addr: va + 20000, rkey }, sg, n0);
    let sg = sge(&x.a, 30000, 2000);
    send(x, 4, SendOp::RdmaRead { remote_addr: va + 20000, rkey }, sg, n1);
    let sg = sge(&x.a, 40000, 8);
    send(x, 5, SendOp::FetchAdd { remote_addr: va + 40000, rkey, add: 7 }, sg, n0);
    x.sim.run_idle(LIMIT);
    let wcs = x.sim.ep(x.a.ep).poll_cq(x.a.send_cq, usize::MAX);
    assert_eq!(statuses(&wcs).iter().map(|s| s.1).collect::<Vec<_>>(), [WcStatus::Success; 5]);
    let mut rwcs = x.sim.ep(x.b.ep).poll_cq(x.b.recv_cq, usize::MAX);
    rwcs.sort_by_key(|w| w.wr_id);
    assert_eq!(statuses(&rwcs), [(10, WcStatus::Success), (11, WcStatus::Success)]);
    assert!(rwcs.iter().all(|w| w.qp_num == x.recv_qpn), "completions name the XRC_RECV QP");
    assert_eq!((rwcs[0].byte_len, rwcs[1].byte_len), (3000, 100));
    assert_eq!(read(&x.b, 0, 3000), d0);
    assert_eq!(read(&x.b, 8192, 100), d1);
    assert_eq!(read(&x.b, 20000, 2000), d2);
    assert_eq!(read(&x.a, 30000, 2000), d2, "READ back through the other SRQ's PD");
    assert_eq!(read(&x.b, 40000, 8), 7u64.to_le_bytes());
}

#[test]
fn one_xrc_send_qp_reaches_two_srqs_of_one_domain() {
    let mut x = setup(LinkConfig::default(), 1);
    traffic(&mut x);
    // The domain is busy while the SRQs and the XRC_RECV QP are in it.
    let (xrcd, srqs, recv_qpn) = (x.xrcd, x.srqs, x.recv_qpn);
    let ep = x.sim.ep(x.b.ep);
    assert_eq!(ep.close_xrcd(xrcd), Err(VerbsError::XrcdInUse(xrcd.0)));
    ep.destroy_qp(recv_qpn).unwrap();
    assert_eq!(ep.close_xrcd(xrcd), Err(VerbsError::XrcdInUse(xrcd.0)));
    for s in srqs {
        ep.destroy_xrc_srq(s);
    }
    assert_eq!(ep.close_xrcd(xrcd), Ok(()));
    assert_eq!(ep.close_xrcd(xrcd), Err(VerbsError::NoSuchXrcd(xrcd.0)));
}

#[test]
fn xrc_survives_a_lossy_link() {
    for seed in 0..6 {
        let link = LinkConfig { loss: 0.1, duplicate: 0.05, reorder: 0.05, ..LinkConfig::default() };
        let mut x = setup(link, seed);
        traffic(&mut x);
    }
}

#[test]
fn misuse_is_refused_at_the_verbs() {
    let mut x = setup(LinkConfig::default(), 2);
    let (a, b) = (&x.a, &x.b);
    let (a_ep, b_ep, bpd, brcq, bva, brkey) = (a.ep, b.ep, b.pd, b.recv_cq, b.va, b.rkey);
    let asg = sge(a, 0, 8);
    let epb = x.sim.ep(b_ep);
    assert_eq!(epb.create_xrc_qp(QpInitAttr::new(QpType::XrcRecv, bpd, brcq), None), Err(VerbsError::MissingXrcd));
    assert_eq!(epb.create_qp(QpInitAttr::new(QpType::XrcRecv, bpd, brcq)), Err(VerbsError::MissingXrcd));
    let srq = x.srqs[0];
    assert!(epb.create_qp(QpInitAttr { srq: Some(srq), ..QpInitAttr::new(QpType::Rc, bpd, brcq) }).is_err());
    // An XRC_RECV QP takes no sends and no receives; XRC_SEND no receives.
    let e = epb.post_send(x.recv_qpn, SendWr::new(1, SendOp::Send, vec![]));
    assert!(e.is_err());
    let e = x.sim.ep(a_ep).post_recv(x.send_qpn, RecvWr { wr_id: 1, sg_list: asg });
    assert!(e.is_err());
    // No FLUSH or ATOMIC WRITE on XRC (annex A14 has no opcodes for them).
    let wr = SendWr::new(1, SendOp::AtomicWrite { remote_addr: bva, rkey: brkey, value: [1; 8] }, vec![]);
    assert!(matches!(x.sim.ep(a_ep).post_send(x.send_qpn, wr), Err(VerbsError::UnsupportedOp { .. })));
}

/// A request naming `srqn` is NAKed (Invalid Request): the sender's WR
/// fails with REM_INV_REQ_ERR, the XRC_RECV QP goes to ERR, and neither
/// the SRQs' WQEs nor the memory change.
fn refused(srqn: impl Fn(&mut Xrc) -> u32) {
    let mut x = setup(LinkConfig::default(), 3);
    let srq = x.srqs[0];
    recv(&mut x, srq, 10, 0, 4096);
    let n = srqn(&mut x);
    fill(&x.a, 0, 64, 9);
    let sg = sge(&x.a, 0, 64);
    send(&mut x, 1, SendOp::Send, sg.clone(), n);
    let (va, rkey) = (x.b.va, x.b.rkey);
    send(&mut x, 2, SendOp::RdmaWrite { remote_addr: va + 1000, rkey }, sg, n);
    x.sim.run_idle(LIMIT);
    let wcs = x.sim.ep(x.a.ep).poll_cq(x.a.send_cq, usize::MAX);
    assert_eq!(statuses(&wcs), [(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)]);
    let ep = x.sim.ep(x.b.ep);
    assert_eq!(ep.query_qp(x.recv_qpn).unwrap().0, QpState::Err);
    assert_eq!(ep.stats().drops_for(Drop::XrcSrqInvalid), 1);
    assert!(ep.poll_cq(x.b.recv_cq, usize::MAX).is_empty(), "no completion on the SRQ's CQ");
    assert_eq!(read(&x.b, 0, 64), vec![0; 64]);
    assert_eq!(read(&x.b, 1000, 64), vec![0; 64]);
}

#[test]
fn a_request_naming_an_srq_of_another_domain_is_naked() {
    refused(|x| {
        let ep = x.sim.ep(x.b.ep);
        let other = ep.open_xrcd();
        let srq = ep.create_xrc_srq(x.b.pd, other, x.b.recv_cq, 8, 0).unwrap();
        ep.srq_num(srq).unwrap()
    });
}

#[test]
fn a_request_naming_no_srq_or_an_ordinary_one_is_naked() {
    refused(|_| 0xff_fff0);
    refused(|x| {
        let ep = x.sim.ep(x.b.ep);
        let srq = ep.create_srq(x.b.pd, 8, 0);
        srq.0 as u32
    });
}
