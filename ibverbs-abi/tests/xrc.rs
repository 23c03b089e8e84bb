//! XRC from C (docs/xrc.md): `ibv_open_xrcd`, XRC SRQs by
//! `ibv_create_srq_ex` and `ibv_get_srq_num`, an XRC_RECV QP by
//! `ibv_create_qp_ex` with `IBV_QP_INIT_ATTR_XRCD`, one XRC_SEND QP whose
//! SENDs (`wr.qp_type.xrc.remote_srqn`, and `ibv_wr_set_xrc_srqn`) reach two
//! SRQs of the domain and whose WRITE lands through the SRQ's PD;
//! `ibv_open_qp`; the same file giving the same domain; and misuse: an SRQ
//! of another domain (REM_INV_REQ_ERR, nothing lands), an XRC_RECV QP
//! without a domain (EINVAL), closing a domain in use (EBUSY).

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define SHOW(name, ret) do { long r_ = (long)(ret); int e_ = errno; printf("%s ret=%ld errno=%d\n", name, r_, e_); } while (0)

static struct ibv_context *ctx;

static int to_rts(struct ibv_qp *qp, uint32_t dest, int send) {
    struct ibv_qp_attr t; memset(&t, 0, sizeof t);
    t.qp_state = IBV_QPS_INIT; t.port_num = 1; t.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    t.qp_state = IBV_QPS_RTR; t.path_mtu = IBV_MTU_1024; t.dest_qp_num = dest; t.max_dest_rd_atomic = 1; t.min_rnr_timer = 1;
    t.ah_attr.is_global = 1; t.ah_attr.port_num = 1; t.ah_attr.grh.hop_limit = 1; ibv_query_gid(ctx, 1, 0, &t.ah_attr.grh.dgid);
    if (ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return -2;
    if (!send) return 0;
    t.qp_state = IBV_QPS_RTS; t.timeout = 8; t.retry_cnt = 1; t.rnr_retry = 1; t.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) ? -3 : 0;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) {
    for (int i = 0; i < 3000; i++) {
        int k = ibv_poll_cq(cq, 1, wc);
        if (k == 1) return wc->status;
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    }
    return -1;
}

static struct ibv_srq *xrc_srq(struct ibv_pd *pd, struct ibv_xrcd *x, struct ibv_cq *cq) {
    struct ibv_srq_init_attr_ex a; memset(&a, 0, sizeof a);
    a.attr.max_wr = 16; a.attr.max_sge = 1;
    a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    a.srq_type = IBV_SRQT_XRC; a.pd = pd; a.xrcd = x; a.cq = cq;
    return ibv_create_srq_ex(ctx, &a);
}

static char src[64] = "xrc payload", rb0[64], rb1[64], wdst[64], rb2[64];

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { printf("no device\n"); return 2; }
    ctx = ibv_open_device(list[0]);
    struct ibv_device_attr da; ibv_query_device(ctx, &da);
    printf("caps xrc=%d max_srq_ok=%d\n", !!(da.device_cap_flags & IBV_DEVICE_XRC), da.max_srq > 0);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = 0 };
    struct ibv_xrcd *x = ibv_open_xrcd(ctx, &xa);
    struct ibv_xrcd *x2 = ibv_open_xrcd(ctx, &xa);
    SHOW("open_xrcd", x == NULL || x2 == NULL || x == x2);
    /* the same file: the same domain */
    char path[] = "/tmp/xrc-test-XXXXXX";
    int fd = mkstemp(path);
    struct ibv_xrcd_init_attr fa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = fd, .oflags = O_CREAT };
    struct ibv_xrcd *f1 = ibv_open_xrcd(ctx, &fa);
    int fd2 = open(path, O_RDONLY);
    fa.fd = fd2; fa.oflags = 0;
    struct ibv_xrcd *f2 = ibv_open_xrcd(ctx, &fa);
    SHOW("same_file_same_domain", f1 != NULL && f1 == f2 ? 0 : -1);
    fa.oflags = O_CREAT | O_EXCL;
    SHOW("same_file_excl", ibv_open_xrcd(ctx, &fa) == NULL ? -1 : 0);
    SHOW("close_file_1", ibv_close_xrcd(f2));
    SHOW("close_file_2", ibv_close_xrcd(f1));
    close(fd); close(fd2); unlink(path);

    struct ibv_srq *s0 = xrc_srq(pd, x, rcq), *s1 = xrc_srq(pd, x, rcq), *foreign = xrc_srq(pd, x2, rcq);
    SHOW("create_srqs", !s0 || !s1 || !foreign);
    uint32_t n0 = 0, n1 = 0, nf = 0;
    SHOW("get_srq_num", ibv_get_srq_num(s0, &n0) | ibv_get_srq_num(s1, &n1) | ibv_get_srq_num(foreign, &nf));
    printf("srq nums distinct=%d\n", n0 != n1 && n1 != nf && n0 != nf);

    struct ibv_qp_init_attr_ex ra; memset(&ra, 0, sizeof ra);
    ra.qp_type = IBV_QPT_XRC_RECV; ra.comp_mask = IBV_QP_INIT_ATTR_XRCD; ra.xrcd = x;
    struct ibv_qp *recv = ibv_create_qp_ex(ctx, &ra);
    SHOW("create_xrc_recv", recv == NULL);
    struct ibv_qp_init_attr_ex bad; memset(&bad, 0, sizeof bad);
    bad.qp_type = IBV_QPT_XRC_RECV; bad.comp_mask = IBV_QP_INIT_ATTR_PD; bad.pd = pd;
    SHOW("xrc_recv_without_xrcd", ibv_create_qp_ex(ctx, &bad) == NULL ? -1 : 0);

    struct ibv_qp_init_attr_ex sa; memset(&sa, 0, sizeof sa);
    sa.qp_type = IBV_QPT_XRC_SEND; sa.send_cq = scq; sa.pd = pd;
    sa.cap.max_send_wr = 16; sa.cap.max_send_sge = 1;
    sa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    sa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
    struct ibv_qp *send = ibv_create_qp_ex(ctx, &sa);
    SHOW("create_xrc_send", send == NULL);
    SHOW("connect", to_rts(send, recv->qp_num, 1) || to_rts(recv, send->qp_num, 0));
    struct ibv_qp_open_attr oa = { .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
                                   .qp_num = recv->qp_num, .xrcd = x, .qp_type = IBV_QPT_XRC_RECV };
    struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
    SHOW("open_qp", opened == NULL || opened->qp_num != recv->qp_num);
    oa.xrcd = x2;
    SHOW("open_qp_other_domain", ibv_open_qp(ctx, &oa) == NULL ? -1 : 0);
    struct ibv_qp_attr qa; struct ibv_qp_init_attr qi;
    SHOW("query_recv", ibv_query_qp(recv, &qa, IBV_QP_STATE, &qi));
    printf("recv state=%d type=%d\n", qa.qp_state, qi.qp_type);

    struct ibv_mr *msrc = ibv_reg_mr(pd, src, sizeof src, 0);
    struct ibv_mr *m0 = ibv_reg_mr(pd, rb0, sizeof rb0, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *m1 = ibv_reg_mr(pd, rb1, sizeof rb1, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *m2 = ibv_reg_mr(pd, rb2, sizeof rb2, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *mw = ibv_reg_mr(pd, wdst, sizeof wdst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_sge g0 = { (uintptr_t)rb0, 64, m0->lkey }, g1 = { (uintptr_t)rb1, 64, m1->lkey }, g2 = { (uintptr_t)rb2, 64, m2->lkey };
    struct ibv_recv_wr r0 = { .wr_id = 100, .sg_list = &g0, .num_sge = 1 }, r1 = { .wr_id = 101, .sg_list = &g1, .num_sge = 1 },
                       r2 = { .wr_id = 102, .sg_list = &g2, .num_sge = 1 }, *rbad;
    SHOW("post_srq_recv", ibv_post_srq_recv(s0, &r0, &rbad) | ibv_post_srq_recv(s1, &r1, &rbad) | ibv_post_srq_recv(foreign, &r2, &rbad));

    /* SEND to SRQ 1 by post_send's remote_srqn */
    struct ibv_sge gs = { (uintptr_t)src, 12, msrc->lkey };
    struct ibv_send_wr w = { .wr_id = 1, .sg_list = &gs, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
    w.qp_type.xrc.remote_srqn = n1;
    SHOW("post_send_srq1", ibv_post_send(send, &w, &sbad));
    struct ibv_wc wc;
    SHOW("send1_wc", poll_one(scq, &wc));
    SHOW("recv1_wc", poll_one(rcq, &wc));
    printf("recv1 wr_id=%llu qp_ok=%d len=%u data=\"%s\"\n", (unsigned long long)wc.wr_id, wc.qp_num == recv->qp_num, wc.byte_len, rb1);

    /* SEND to SRQ 0 and a WRITE through the ibv_wr_* API */
    struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(send);
    ibv_wr_start(qx);
    qx->wr_id = 2; qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qx); ibv_wr_set_xrc_srqn(qx, n0); ibv_wr_set_sge(qx, msrc->lkey, (uintptr_t)src, 12);
    qx->wr_id = 3; qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qx, mw->rkey, (uintptr_t)wdst + 8); ibv_wr_set_xrc_srqn(qx, n0); ibv_wr_set_sge(qx, msrc->lkey, (uintptr_t)src, 12);
    SHOW("wr_complete", ibv_wr_complete(qx));
    SHOW("send2_wc", poll_one(scq, &wc));
    SHOW("write_wc", poll_one(scq, &wc));
    SHOW("recv0_wc", poll_one(rcq, &wc));
    printf("recv0 wr_id=%llu data=\"%s\" write=\"%s\"\n", (unsigned long long)wc.wr_id, rb0, wdst + 8);

    SHOW("close_in_use", ibv_close_xrcd(x));

    /* an SRQ of another domain: NAK invalid request, nothing lands */
    w.wr_id = 4; w.qp_type.xrc.remote_srqn = nf;
    SHOW("post_send_foreign", ibv_post_send(send, &w, &sbad));
    SHOW("foreign_wc", poll_one(scq, &wc));
    printf("foreign rb2 untouched=%d rcq_empty=%d\n", rb2[0] == 0, ibv_poll_cq(rcq, 1, &wc) == 0);

    SHOW("destroy_send", ibv_destroy_qp(send));
    SHOW("destroy_recv", ibv_destroy_qp(recv));
    SHOW("close_with_opened_qp", ibv_close_xrcd(x));
    SHOW("destroy_opened", ibv_destroy_qp(opened));
    SHOW("close_with_srqs", ibv_close_xrcd(x));
    SHOW("destroy_srqs", ibv_destroy_srq(s0) | ibv_destroy_srq(s1) | ibv_destroy_srq(foreign));
    SHOW("close_xrcd", ibv_close_xrcd(x));
    SHOW("close_xrcd2", ibv_close_xrcd(x2));
    printf("alive\n");
    return 0;
}
"#;

#[test]
fn xrc_domains_srqs_and_qps_from_c() {
    let Some(text) = common::run_c("xrc", "xrc0=127.0.13.10", PROGRAM) else { return };
    // ibv_wc_status 9: REM_INV_REQ_ERR.
    let busy = i64::from(libc::EBUSY);
    let expect: &[(&str, i64, Option<i32>)] = &[
        ("open_xrcd", 0, None),
        ("same_file_same_domain", 0, None),
        ("same_file_excl", -1, Some(libc::EEXIST)),
        ("close_file_1", 0, None),
        ("close_file_2", 0, None),
        ("create_srqs", 0, None),
        ("get_srq_num", 0, None),
        ("create_xrc_recv", 0, None),
        ("xrc_recv_without_xrcd", -1, Some(libc::EINVAL)),
        ("create_xrc_send", 0, None),
        ("connect", 0, None),
        ("open_qp", 0, None),
        ("open_qp_other_domain", -1, Some(libc::EINVAL)),
        ("query_recv", 0, None),
        ("post_srq_recv", 0, None),
        ("post_send_srq1", 0, None),
        ("send1_wc", 0, None),
        ("recv1_wc", 0, None),
        ("wr_complete", 0, None),
        ("send2_wc", 0, None),
        ("write_wc", 0, None),
        ("recv0_wc", 0, None),
        ("close_in_use", busy, None),
        ("post_send_foreign", 0, None),
        ("foreign_wc", 9, None),
        ("destroy_send", 0, None),
        ("destroy_recv", 0, None),
        ("close_with_opened_qp", busy, None),
        ("destroy_opened", 0, None),
        ("close_with_srqs", busy, None),
        ("destroy_srqs", 0, None),
        ("close_xrcd", 0, None),
        ("close_xrcd2", 0, None),
    ];
    common::check_calls(&text, expect);
    common::check_lines(
        &text,
        &[
            "caps xrc=1 max_srq_ok=1",
            "srq nums distinct=1",
            "recv state=2 type=10",
            "recv1 wr_id=101 qp_ok=1 len=12 data=\"xrc payload\"",
            "recv0 wr_id=100 data=\"xrc payload\" write=\"xrc payload\"",
            "foreign rb2 untouched=1 rcq_empty=1",
            "alive",
        ],
    );
}
