//! Strict parameters, as rxe answers them (rdma-core's pyverbs suite checks
//! the same): a CQ above `max_cqe` or on a completion vector the device
//! lacks, QP and SRQ capabilities above the device's limits, are EINVAL;
//! `ibv_resize_cq` grows and shrinks, and refuses (EINVAL, the CQ unchanged)
//! a size below the completions waiting in it (none is lost); `ibv_query_qp` reports the
//! PSNs that were set, for UD as for RC.

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define SHOW(name, ret) do { long r_ = (long)(ret); int e_ = errno; printf("%s ret=%ld errno=%d\n", name, r_, e_); } while (0)

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type t, struct ibv_qp_cap cap) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = t; ia.cap = cap;
    return ibv_create_qp(pd, &ia);
}

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { printf("no device\n"); return 2; }
    struct ibv_context *ctx = ibv_open_device(list[0]);
    if (!ctx) { printf("open failed errno=%d\n", errno); return 2; }
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da)) { printf("query_device failed\n"); return 2; }
    printf("limits max_cqe=%d max_qp_wr=%d max_sge=%d vectors=%d\n", da.max_cqe, da.max_qp_wr, da.max_sge, ctx->num_comp_vectors);

    errno = 0; SHOW("cq_above_max_cqe", ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0) != NULL);
    errno = 0; SHOW("cq_at_max_cqe", ibv_create_cq(ctx, da.max_cqe, NULL, NULL, 0) != NULL);
    errno = 0; SHOW("cq_bad_vector", ibv_create_cq(ctx, 100, NULL, NULL, ctx->num_comp_vectors + 1) != NULL);
    errno = 0; SHOW("cq_negative_vector", ibv_create_cq(ctx, 100, NULL, NULL, -1) != NULL);

    struct ibv_cq *cq = ibv_create_cq(ctx, 3, NULL, NULL, 0);
    printf("cq_made cqe_ok=%d\n", cq && cq->cqe >= 3);
    SHOW("resize_down", ibv_resize_cq(cq, 1));
    printf("after_down cqe_ok=%d\n", cq->cqe >= 1);
    SHOW("resize_up", ibv_resize_cq(cq, 200));
    printf("after_up cqe_ok=%d\n", cq->cqe >= 200);
    int big = cq->cqe;
    SHOW("resize_zero", ibv_resize_cq(cq, 0));
    SHOW("resize_above_max", ibv_resize_cq(cq, da.max_cqe + 1));
    printf("unchanged cqe_same=%d\n", cq->cqe == big);

    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_qp_cap ok = { 8, 8, 1, 1, 0 };
    struct ibv_qp_cap c;
    c = ok; c.max_send_wr = 0xffffffffu; errno = 0; SHOW("qp_max_send_wr", make_qp(pd, cq, IBV_QPT_UD, c) != NULL);
    c = ok; c.max_recv_wr = da.max_qp_wr + 1; errno = 0; SHOW("qp_max_recv_wr", make_qp(pd, cq, IBV_QPT_RC, c) != NULL);
    c = ok; c.max_send_sge = 0xffff; errno = 0; SHOW("qp_max_send_sge", make_qp(pd, cq, IBV_QPT_UD, c) != NULL);
    c = ok; c.max_recv_sge = da.max_sge + 1; errno = 0; SHOW("qp_max_recv_sge", make_qp(pd, cq, IBV_QPT_UC, c) != NULL);
    c = ok; c.max_inline_data = 1 << 20; errno = 0; SHOW("qp_max_inline", make_qp(pd, cq, IBV_QPT_RC, c) != NULL);
    c = ok; c.max_send_wr = da.max_qp_wr; c.max_send_sge = da.max_sge; errno = 0;
    struct ibv_qp *at_limits = make_qp(pd, cq, IBV_QPT_RC, c);
    SHOW("qp_at_limits", at_limits == NULL);
    if (at_limits) ibv_destroy_qp(at_limits);

    struct ibv_srq_init_attr sa; memset(&sa, 0, sizeof sa);
    sa.attr.max_wr = da.max_srq_wr + 1; sa.attr.max_sge = 1;
    errno = 0; SHOW("srq_max_wr", ibv_create_srq(pd, &sa) != NULL);
    sa.attr.max_wr = 16; sa.attr.max_sge = da.max_srq_sge + 1;
    errno = 0; SHOW("srq_max_sge", ibv_create_srq(pd, &sa) != NULL);
    sa.attr.max_sge = da.max_srq_sge;
    struct ibv_srq *srq = ibv_create_srq(pd, &sa);
    SHOW("srq_at_limits", srq == NULL);
    if (srq) ibv_destroy_srq(srq);

    /* a UD QP to RTS with sq_psn 0x45: the query says 0x45 */
    struct ibv_qp *ud = make_qp(pd, cq, IBV_QPT_UD, ok);
    struct ibv_qp_attr a; struct ibv_qp_init_attr ia;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.pkey_index = 0; a.port_num = 1; a.qkey = 0x123;
    SHOW("ud_init", ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
    a.qp_state = IBV_QPS_RTR;
    SHOW("ud_rtr", ibv_modify_qp(ud, &a, IBV_QP_STATE));
    a.qp_state = IBV_QPS_RTS; a.sq_psn = 0x45;
    SHOW("ud_rts", ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
    memset(&a, 0, sizeof a);
    SHOW("ud_query", ibv_query_qp(ud, &a, IBV_QP_SQ_PSN | IBV_QP_QKEY, &ia));
    printf("ud sq_psn=%u qkey=%u\n", a.sq_psn, a.qkey);

    /* 10 signalled UD sends to nobody (QP 0xfffff0 does not exist) fill a
       fresh CQ: resizing it below 10 is refused, to 10 is not */
    struct ibv_cq *cq2 = ibv_create_cq(ctx, 100, NULL, NULL, 0);
    struct ibv_qp *ud2 = make_qp(pd, cq2, IBV_QPT_UD, (struct ibv_qp_cap){ 16, 1, 1, 1, 0 });
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qkey = 0x11;
    ibv_modify_qp(ud2, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    a.qp_state = IBV_QPS_RTR; ibv_modify_qp(ud2, &a, IBV_QP_STATE);
    a.qp_state = IBV_QPS_RTS; ibv_modify_qp(ud2, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    static char buf[64];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_ah_attr aa; memset(&aa, 0, sizeof aa);
    aa.is_global = 1; aa.port_num = 1; aa.grh.hop_limit = 1;
    ibv_query_gid(ctx, 1, 0, &aa.grh.dgid);
    struct ibv_ah *ah = ibv_create_ah(pd, &aa);
    struct ibv_sge sge = { (uintptr_t)buf, 8, mr->lkey };
    for (int i = 0; i < 10; i++) {
        struct ibv_send_wr w, *bad; memset(&w, 0, sizeof w);
        w.wr_id = i; w.sg_list = &sge; w.num_sge = 1; w.opcode = IBV_WR_SEND; w.send_flags = IBV_SEND_SIGNALED;
        w.wr.ud.ah = ah; w.wr.ud.remote_qpn = 0xfffff0; w.wr.ud.remote_qkey = 0x11;
        if (ibv_post_send(ud2, &w, &bad)) { printf("post failed\n"); return 2; }
    }
    /* the device's own progress completes them; nothing is polled */
    for (int i = 0; i < 200; i++) {
        struct timespec ts = { 0, 5000000 }; nanosleep(&ts, NULL);
        if (ibv_resize_cq(cq2, 9) == EINVAL) break;
    }
    SHOW("resize_below_waiting", ibv_resize_cq(cq2, 9));
    SHOW("resize_to_waiting", ibv_resize_cq(cq2, 10));
    struct ibv_wc wc[16];
    printf("polled %d\n", ibv_poll_cq(cq2, 16, wc));

    /* an RC QP: rq_psn at RTR, sq_psn at RTS */
    struct ibv_qp *rc = make_qp(pd, cq, IBV_QPT_RC, ok);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.pkey_index = 0; a.port_num = 1;
    SHOW("rc_init", ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = rc->qp_num; a.rq_psn = 0x1234;
    a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1; a.ah_attr.port_num = 1;
    ibv_query_gid(ctx, 1, 0, &a.ah_attr.grh.dgid); a.ah_attr.grh.hop_limit = 1;
    SHOW("rc_rtr", ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
    a.qp_state = IBV_QPS_RTS; a.sq_psn = 0xabcdef; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
    SHOW("rc_rts", ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
    memset(&a, 0, sizeof a);
    SHOW("rc_query", ibv_query_qp(rc, &a, IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &ia));
    printf("rc sq_psn=%u rq_psn=%u\n", a.sq_psn, a.rq_psn);
    printf("alive\n");
    return 0;
}
"#;

#[test]
fn limits_resize_and_queried_psns_are_as_rxe_answers() {
    let Some(text) = common::run_c("limits", "lim0=127.0.13.2", PROGRAM) else { return };
    let einval = libc::EINVAL;
    // (call, return value, errno when the call reports through errno)
    let expect: &[(&str, i64, Option<i32>)] = &[
        ("cq_above_max_cqe", 0, Some(einval)),
        ("cq_at_max_cqe", 1, None),
        ("cq_bad_vector", 0, Some(einval)),
        ("cq_negative_vector", 0, Some(einval)),
        ("resize_down", 0, None),
        ("resize_up", 0, None),
        ("resize_zero", i64::from(einval), None),
        ("resize_above_max", i64::from(einval), None),
        ("qp_max_send_wr", 0, Some(einval)),
        ("qp_max_recv_wr", 0, Some(einval)),
        ("qp_max_send_sge", 0, Some(einval)),
        ("qp_max_recv_sge", 0, Some(einval)),
        ("qp_max_inline", 0, Some(einval)),
        ("qp_at_limits", 0, None),
        ("srq_max_wr", 0, Some(einval)),
        ("srq_max_sge", 0, Some(einval)),
        ("srq_at_limits", 0, None),
        ("ud_init", 0, None),
        ("ud_rtr", 0, None),
        ("ud_rts", 0, None),
        ("ud_query", 0, None),
        ("resize_below_waiting", i64::from(einval), None),
        ("resize_to_waiting", 0, None),
        ("rc_init", 0, None),
        ("rc_rtr", 0, None),
        ("rc_rts", 0, None),
        ("rc_query", 0, None),
    ];
    common::check_calls(&text, expect);
    common::check_lines(
        &text,
        &[
            "cq_made cqe_ok=1",
            "after_down cqe_ok=1",
            "after_up cqe_ok=1",
            "unchanged cqe_same=1",
            "ud sq_psn=69 qkey=291",
            "polled 10",
        ],
    );
    assert!(text.contains(&format!("rc sq_psn={} rq_psn={}", 0xabcdef, 0x1234)), "{text}");
    assert!(text.contains("limits max_cqe=4194303 max_qp_wr=16384 max_sge=32"), "{text}");
    assert!(text.contains("alive"), "{text}");
}
