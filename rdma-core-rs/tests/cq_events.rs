//! Completion events through the verbs API: `req_notify` arms a CQ for
//! the next completion added to it, and only that raises its event; the
//! completions it holds from before, and those of another CQ on the same
//! channel, raise none (libibverbs' rule, which perftest's `-e` loops
//! count on: see ibverbs-abi/tests/cq_events.rs for the C side).

mod common;
use common::*;
use rdma_core_rs::*;
use std::time::Duration;

const NONE_WITHIN: Option<Duration> = Some(Duration::from_millis(100));

#[test]
fn an_armed_cq_raises_its_event_only_for_completions_added_after_the_arming() {
    // Manual progress on the side with the channel: its waits drive it.
    let (ctx, b) = manual_against_threaded("ev");
    let ch = ctx.create_comp_channel().unwrap();
    let (scq, rcq) = (ctx.create_cq(16, Some(&ch)).unwrap(), ctx.create_cq(16, Some(&ch)).unwrap());
    let pd = ctx.alloc_pd().unwrap();
    let qp = pd.create_qp(&QpInitAttr { recv_cq: &rcq, ..QpInitAttr::new(QpType::Rc, &scq) }).unwrap();
    let mr = pd.reg_mr(64, Access::ALL).unwrap();
    connect_to_side(&qp, &ctx, &b);
    let recv = |id| RecvWr { wr_id: id, sg_list: vec![mr.sge(0, 8).unwrap()] };
    qp.post_recv(&[recv(1), recv(2)]).unwrap();
    let b_recv = |id| RecvWr { wr_id: id, sg_list: vec![b.mr.sge(0, 8).unwrap()] };
    b.qp.post_recv(&[b_recv(1), b_recv(2)]).unwrap();
    let send = |id| SendWr::new(id, SendOp::Send, vec![mr.sge(0, 8).unwrap()]);

    // A send completion left in the send CQ, unpolled.
    scq.req_notify(false).unwrap();
    qp.post_send(&[send(1)]).unwrap();
    assert_eq!(ch.get_cq_event(WAIT).unwrap(), Some(scq.id()));
    // Arming both: the completion held from before raises nothing.
    scq.req_notify(false).unwrap();
    rcq.req_notify(false).unwrap();
    assert_eq!(ch.get_cq_event(NONE_WITHIN).unwrap(), None, "an event for a completion from before the arming");
    // A receive: the receive CQ's event, and not the send CQ's.
    b.qp.post_send(&[SendWr::new(9, SendOp::Send, vec![b.mr.sge(0, 8).unwrap()])]).unwrap();
    assert_eq!(ch.get_cq_event(WAIT).unwrap(), Some(rcq.id()));
    assert_eq!(ch.get_cq_event(NONE_WITHIN).unwrap(), None, "the send CQ's event for another CQ's completion");
    // A new send completion: the send CQ's event, though it was never polled.
    qp.post_send(&[send(2)]).unwrap();
    assert_eq!(ch.get_cq_event(WAIT).unwrap(), Some(scq.id()));
    let mut out = Vec::new();
    assert_eq!(scq.poll(&mut out, 4).unwrap(), 2);
    assert_eq!(rcq.poll(&mut out, 4).unwrap(), 1);
    // Polled empty, then armed: the next receive raises the event again.
    rcq.req_notify(false).unwrap();
    b.qp.post_send(&[SendWr::new(10, SendOp::Send, vec![b.mr.sge(0, 8).unwrap()])]).unwrap();
    assert_eq!(ch.get_cq_event(WAIT).unwrap(), Some(rcq.id()));
    assert_eq!(ch.get_cq_event(NONE_WITHIN).unwrap(), None);
}

#[test]
fn a_cq_armed_for_solicited_completions_wakes_only_for_a_solicited_message_or_an_error() {
    let (ctx, b) = manual_against_threaded("sol");
    let ch = ctx.create_comp_channel().unwrap();
    let (scq, rcq) = (ctx.create_cq(16, Some(&ch)).unwrap(), ctx.create_cq(16, Some(&ch)).unwrap());
    let pd = ctx.alloc_pd().unwrap();
    let qp = pd.create_qp(&QpInitAttr { recv_cq: &rcq, ..QpInitAttr::new(QpType::Rc, &scq) }).unwrap();
    let mr = pd.reg_mr(64, Access::ALL).unwrap();
    connect_to_side(&qp, &ctx, &b);
    qp.post_recv(&(1..=4).map(|id| RecvWr { wr_id: id, sg_list: vec![mr.sge(0, 8).unwrap()] }).collect::<Vec<_>>())
        .unwrap();
    let b_send = |id, solicited| SendWr { solicited, ..SendWr::new(id, SendOp::Send, vec![b.mr.sge(0, 8).unwrap()]) };
    let mut out = Vec::new();
    let receive = |out: &mut Vec<WorkCompletion>| {
        let n = rcq.wait(out, 4, WAIT).unwrap();
        assert_eq!(n, 1, "the receive completed");
    };

    // An ordinary SEND completes a receive but raises no solicited event.
    rcq.req_notify(true).unwrap();
    b.qp.post_send(&[b_send(1, false)]).unwrap();
    receive(&mut out);
    assert_eq!(ch.get_cq_event(NONE_WITHIN).unwrap(), None, "an unsolicited SEND woke a solicited-only CQ");
    // A SEND with the solicited-event bit does.
    b.qp.post_send(&[b_send(2, true)]).unwrap();
    assert_eq!(ch.get_cq_event(WAIT).unwrap(), Some(rcq.id()));
    receive(&mut out);
    // Asking for any completion widens a solicited-only arming.
    rcq.req_notify(true).unwrap();
    rcq.req_notify(false).unwrap();
    b.qp.post_send(&[b_send(3, false)]).unwrap();
    assert_eq!(ch.get_cq_event(WAIT).unwrap(), Some(rcq.id()));
    receive(&mut out);
    // An error wakes it too: the QP to ERR flushes the last receive.
    rcq.req_notify(true).unwrap();
    qp.modify(&QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() }).unwrap();
    assert_eq!(ch.get_cq_event(WAIT).unwrap(), Some(rcq.id()), "a flushed receive is an error completion");
    receive(&mut out);
    assert_eq!(out.last().map(|w| w.status), Some(WcStatus::WrFlushErr));
}
