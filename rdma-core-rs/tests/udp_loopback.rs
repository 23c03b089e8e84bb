//! The verbs API over real UDP sockets on loopback: two soft devices, one
//! per loopback address, exchanging RoCE v2 packets through the kernel.

mod common;
use common::*;
use rdma_core_rs::*;

#[test]
fn rc_write_and_send_arrive_byte_exact() {
    let (a, b) = pair(QpType::Rc);
    let data = pattern(100_000, 7);
    a.mr.write(0, &data).unwrap();
    let wr = SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: b.mr.addr() + 1000, rkey: b.mr.rkey() },
        vec![a.mr.sge(0, data.len() as u32).unwrap()],
    );
    a.qp.post_send(&[wr]).unwrap();
    let wc = a.wait_one();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::RdmaWrite));
    let mut got = vec![0u8; data.len()];
    b.mr.read(1000, &mut got).unwrap();
    assert_eq!(got, data);

    b.qp.post_recv(&[RecvWr { wr_id: 9, sg_list: vec![b.mr.sge(500_000, 5000).unwrap()] }]).unwrap();
    a.qp.post_send(&[SendWr::new(2, SendOp::SendWithImm { imm: 0xdead_beef }, vec![a.mr.sge(10, 3000).unwrap()])])
        .unwrap();
    assert_eq!(a.wait_one().status, WcStatus::Success);
    let r = b.wait_one();
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.imm_data),
        (9, WcStatus::Success, WcOpcode::Recv, 3000, Some(0xdead_beef))
    );
    let mut got = vec![0u8; 3000];
    b.mr.read(500_000, &mut got).unwrap();
    assert_eq!(got, &data[10..3010]);
}
