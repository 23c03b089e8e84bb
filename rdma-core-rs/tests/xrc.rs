//! XRC through the verbs API over UDP loopback: an XRC domain with two XRC
//! SRQs behind one XRC_RECV QP, one XRC_SEND QP reaching both (SEND) and
//! writing through the SRQ's PD, an SRQ of another domain NAKed, a second
//! handle from `open_qp`, and a domain that cannot close while in use.

mod common;

use common::*;
use rdma_core_rs::*;

#[test]
fn xrc_send_reaches_two_srqs_and_writes_through_one() {
    let (a, b) = pair(QpType::Rc);
    let xrcd = b.ctx.open_xrcd().unwrap();
    let srqs = [0, 1].map(|_| b.pd.create_xrc_srq(&xrcd, &b.cq, 64, 0).unwrap());
    let other = b.ctx.open_xrcd().unwrap();
    let foreign = b.pd.create_xrc_srq(&other, &b.cq, 8, 0).unwrap();
    let recv_qp = xrcd.create_recv_qp().unwrap();
    let opened = xrcd.open_qp(recv_qp.qp_num()).unwrap();
    assert!(other.open_qp(recv_qp.qp_num()).is_err(), "open_qp is for the QP's own domain");
    let send_qp = a.pd.create_qp(&QpInitAttr::new(QpType::XrcSend, &a.cq)).unwrap();
    let opts = ConnectOptions::default();
    let gid = |s: &Side| s.ctx.query_gid(0).unwrap();
    send_qp.connect(0x10, &PeerInfo { qpn: recv_qp.qp_num(), psn: 0x20, gid: gid(&b) }, &opts).unwrap();
    recv_qp.connect(0x20, &PeerInfo { qpn: send_qp.qp_num(), psn: 0x10, gid: gid(&a) }, &opts).unwrap();

    for (i, s) in srqs.iter().enumerate() {
        let wr = RecvWr { wr_id: 100 + i as u64, sg_list: vec![b.mr.sge(i * 4096, 4096).unwrap()] };
        s.srq().post_recv(&[wr]).unwrap();
    }
    a.mr.write(0, &pattern(3000, 1)).unwrap();
    a.mr.write(4096, &pattern(200, 2)).unwrap();
    let send = |id, off, len, srq: &XrcSrq| SendWr {
        xrc_srqn: srq.srq_num(),
        ..SendWr::new(id, SendOp::Send, vec![a.mr.sge(off, len).unwrap()])
    };
    let write = SendWr { xrc_srqn: srqs[1].srq_num(), ..write_wr(3, &a, 4096, 200, &b, 50_000) };
    send_qp.post_send(&[send(1, 0, 3000, &srqs[1]), send(2, 4096, 200, &srqs[0]), write]).unwrap();
    let mut sent: Vec<_> = (0..3).map(|_| a.wait_one()).map(|w| (w.wr_id, w.status)).collect();
    sent.sort_by_key(|s| s.0);
    assert_eq!(sent, [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]);
    let mut got: Vec<_> = (0..2).map(|_| b.wait_one()).collect();
    got.sort_by_key(|w| w.wr_id);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        [(100, WcStatus::Success, 200), (101, WcStatus::Success, 3000)]
    );
    assert!(got.iter().all(|w| w.qp_num == recv_qp.qp_num()));
    let mut buf = vec![0; 3000];
    b.mr.read(4096, &mut buf).unwrap();
    assert_eq!(buf, pattern(3000, 1));
    let mut buf = vec![0; 200];
    b.mr.read(0, &mut buf).unwrap();
    assert_eq!(buf, pattern(200, 2));
    b.mr.read(50_000, &mut buf).unwrap();
    assert_eq!(buf, pattern(200, 2));

    // Busy: SRQs and the QP are in the domain.
    let busy = |x: &Xrcd| matches!(x.close(), Err(Error::Verbs(VerbsError::XrcdInUse(_))));
    assert!(busy(&xrcd));
    drop(recv_qp);
    assert!(busy(&xrcd), "the handle from open_qp still holds the QP");
    drop(srqs);

    // An SRQ of another domain: NAK Invalid Request, nothing lands.
    let wr = RecvWr { wr_id: 200, sg_list: vec![b.mr.sge(8192, 64).unwrap()] };
    foreign.srq().post_recv(&[wr]).unwrap();
    send_qp.post_send(&[send(4, 0, 64, &foreign)]).unwrap();
    let wc = a.wait_one();
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::RemInvReqErr));
    assert_eq!(opened.query().unwrap().0, QpState::Err);
    let mut out = Vec::new();
    assert_eq!(b.cq.poll(&mut out, 8).unwrap(), 0);
    drop(opened);
    xrcd.close().unwrap();
    assert!(busy(&other));
    drop(foreign);
    other.close().unwrap();
}
