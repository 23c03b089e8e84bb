//! The extended QP from C: `ibv_create_qp_ex` with send_ops_flags,
//! `ibv_qp_to_qp_ex` and the `ibv_wr_*` posting API between two RC QPs of
//! one device (WRITE from an SGE, SEND of inline data, READ, the two
//! atomics, a WRITE with immediate; the bytes and completions checked),
//! FLUSH and ATOMIC_WRITE (the bytes, the completions, a FLUSH past the
//! region), UD sends with `ibv_wr_set_ud_addr`, and misuse: a batch with a mistake
//! (a setter before any operation, too much inline data, an operation the
//! QP was not made for, a UD send without an address) fails at
//! `ibv_wr_complete` and posts nothing; `ibv_wr_abort` posts nothing;
//! masks and flags rxe refuses are EOPNOTSUPP.

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#define SHOW(name, ret) do { long r_ = (long)(ret); int e_ = errno; printf("%s ret=%ld errno=%d\n", name, r_, e_); } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;

static struct ibv_qp *make(enum ibv_qp_type t, uint32_t mask, uint64_t ops, uint32_t create_flags) {
    struct ibv_qp_init_attr_ex a;
    memset(&a, 0, sizeof a);
    a.send_cq = cq; a.recv_cq = cq; a.qp_type = t;
    a.cap.max_send_wr = 32; a.cap.max_recv_wr = 32; a.cap.max_send_sge = 2; a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = 64;
    a.comp_mask = mask; a.pd = pd; a.send_ops_flags = ops; a.create_flags = create_flags;
    return ibv_create_qp_ex(ctx, &a);
}

static int extra_access; /* more QP access flags (FLUSH's) */

static int to_rts(struct ibv_qp *qp, uint32_t dest) {
    struct ibv_qp_attr a; memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qkey = 0x77;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | extra_access;
    int ud = qp->qp_type == IBV_QPT_UD;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS))) return -1;
    a.qp_state = IBV_QPS_RTR;
    int m = IBV_QP_STATE;
    if (!ud) {
        a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 0; a.max_dest_rd_atomic = 4; a.min_rnr_timer = 1;
        a.ah_attr.is_global = 1; a.ah_attr.port_num = 1; a.ah_attr.grh.hop_limit = 1;
        ibv_query_gid(ctx, 1, 0, &a.ah_attr.grh.dgid);
        m |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    if (ibv_modify_qp(qp, &a, m)) return -2;
    a.qp_state = IBV_QPS_RTS; a.sq_psn = 0; a.timeout = 10; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 4;
    m = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (!ud) m |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    return ibv_modify_qp(qp, &a, m) ? -3 : 0;
}

/* polls until n completions arrived (or 2 s), printing each */
static int drain(int n) {
    struct ibv_wc wc[16]; int got = 0;
    for (int i = 0; i < 2000 && got < n; i++) {
        int k = ibv_poll_cq(cq, 16, wc);
        for (int j = 0; j < k; j++)
            printf("wc wr_id=%llu status=%d opcode=%d byte_len=%u imm=%u\n", (unsigned long long)wc[j].wr_id, wc[j].status,
                   wc[j].opcode, wc[j].byte_len, (wc[j].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[j].imm_data) : 0);
        got += k > 0 ? k : 0;
        if (got < n) { struct timespec ts = { 0, 1000000 }; nanosleep(&ts, NULL); }
    }
    return got;
}

/* nothing more arrives within 50 ms */
static int quiet(void) { struct timespec ts = { 0, 50000000 }; nanosleep(&ts, NULL); struct ibv_wc wc; return ibv_poll_cq(cq, 1, &wc) == 0; }

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { printf("no device\n"); return 2; }
    ctx = ibv_open_device(list[0]);
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
    static char src[64], dst[64], rbuf[64], rd[64];
    static uint64_t counter = 5, old;
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    struct ibv_mr *msrc = ibv_reg_mr(pd, src, sizeof src, acc), *mdst = ibv_reg_mr(pd, dst, sizeof dst, acc);
    struct ibv_mr *mrb = ibv_reg_mr(pd, rbuf, sizeof rbuf, acc), *mrd = ibv_reg_mr(pd, rd, sizeof rd, acc);
    struct ibv_mr *mctr = ibv_reg_mr(pd, &counter, 8, acc), *mold = ibv_reg_mr(pd, &old, 8, acc);

    /* refused as rxe refuses them */
    errno = 0; SHOW("create_flags", make(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS, 0, 2) != NULL);
    errno = 0; SHOW("ud_read_op", make(IBV_QPT_UD, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_QP_EX_WITH_RDMA_READ, 0) != NULL);
    errno = 0; SHOW("xrcd_mask", make(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD, 0, 0) != NULL);
    errno = 0; SHOW("no_pd", make(IBV_QPT_RC, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_QP_EX_WITH_SEND, 0) != NULL);
    struct ibv_qp *plain = make(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS, 0, 0);
    SHOW("plain_made", plain == NULL);
    errno = 0; SHOW("plain_to_qp_ex", ibv_qp_to_qp_ex(plain) != NULL);

    uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                   IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    struct ibv_qp *a = make(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, ops, 0);
    struct ibv_qp *b = make(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_QP_EX_WITH_SEND, 0);
    SHOW("rc_made", a == NULL || b == NULL);
    SHOW("rts", to_rts(a, b->qp_num) || to_rts(b, a->qp_num));
    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
    printf("qp_ex same=%d\n", x && (void *)x == (void *)a && &x->qp_base == a);

    struct ibv_sge rs = { (uintptr_t)rbuf, sizeof rbuf, mrb->lkey };
    struct ibv_recv_wr rw = { .wr_id = 100, .sg_list = &rs, .num_sge = 1 }, *rbad;
    ibv_post_recv(b, &rw, &rbad); rw.wr_id = 101; ibv_post_recv(b, &rw, &rbad);
    strcpy(src, "written by ibv_wr_rdma_write");

    /* one batch: WRITE from an SGE, SEND of inline data, READ back, atomics */
    ibv_wr_start(x);
    x->wr_id = 1; x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(x, mdst->rkey, (uintptr_t)dst);
    ibv_wr_set_sge(x, msrc->lkey, (uintptr_t)src, 29);
    x->wr_id = 2;
    ibv_wr_send(x);
    ibv_wr_set_inline_data(x, "inline hello", 13);
    x->wr_id = 3;
    ibv_wr_rdma_read(x, mdst->rkey, (uintptr_t)dst);
    struct ibv_sge two[2] = { { (uintptr_t)rd, 8, mrd->lkey }, { (uintptr_t)rd + 8, 21, mrd->lkey } };
    ibv_wr_set_sge_list(x, 2, two);
    x->wr_id = 4;
    ibv_wr_atomic_fetch_add(x, mctr->rkey, (uintptr_t)&counter, 10);
    ibv_wr_set_sge(x, mold->lkey, (uintptr_t)&old, 8);
    x->wr_id = 5;
    ibv_wr_atomic_cmp_swp(x, mctr->rkey, (uintptr_t)&counter, 15, 99);
    ibv_wr_set_sge(x, mold->lkey, (uintptr_t)&old, 8);
    x->wr_id = 6;
    ibv_wr_rdma_write_imm(x, mdst->rkey, (uintptr_t)dst + 40, htonl(0xabcd));
    ibv_wr_set_sge(x, msrc->lkey, (uintptr_t)src, 4);
    SHOW("batch", ibv_wr_complete(x));
    printf("drained %d\n", drain(8));
    printf("dst \"%s\" rbuf \"%s\" rd \"%.29s\" counter %llu old %llu\n", dst, rbuf, rd, (unsigned long long)counter, (unsigned long long)old);

    /* mistakes: each batch fails at ibv_wr_complete and posts nothing */
    ibv_wr_start(x); ibv_wr_set_sge(x, msrc->lkey, (uintptr_t)src, 4);
    SHOW("setter_first", ibv_wr_complete(x));
    char big[300]; memset(big, 'x', sizeof big); /* above the 256 bytes the QP got */
    ibv_wr_start(x); x->wr_id = 7; ibv_wr_send(x); ibv_wr_set_inline_data(x, big, sizeof big);
    SHOW("inline_too_big", ibv_wr_complete(x));
    struct ibv_qp_ex *y = ibv_qp_to_qp_ex(b);
    ibv_wr_start(y); y->wr_id = 8; ibv_wr_rdma_write(y, mdst->rkey, (uintptr_t)dst); ibv_wr_set_sge(y, msrc->lkey, (uintptr_t)src, 4);
    SHOW("op_not_made_for", ibv_wr_complete(y));
    ibv_wr_start(x); x->wr_id = 9; ibv_wr_send(x); ibv_wr_set_sge(x, msrc->lkey, (uintptr_t)src, 4);
    x->wr_id = 10; ibv_wr_atomic_write(x, mdst->rkey, (uintptr_t)dst, src);
    SHOW("atomic_write_not_made_for", ibv_wr_complete(x));
    ibv_wr_start(x); x->wr_id = 11; ibv_wr_send(x); ibv_wr_set_sge(x, msrc->lkey, (uintptr_t)src, 4); ibv_wr_abort(x);
    SHOW("complete_after_abort", ibv_wr_complete(x));
    printf("quiet %d\n", quiet());

    /* FLUSH and ATOMIC_WRITE (IBTA 1.5): a QP made for them, a region that allows FLUSH */
    struct ibv_device_attr_ex dx; memset(&dx, 0, sizeof dx); ibv_query_device_ex(ctx, NULL, &dx);
    printf("caps flush_global=%d flush_persistent=%d atomic_write=%d\n", !!(dx.device_cap_flags_ex & (1ull << 38)),
           !!(dx.device_cap_flags_ex & (1ull << 39)), !!(dx.device_cap_flags_ex & (1ull << 40)));
    struct ibv_qp *f = make(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                            IBV_QP_EX_WITH_ATOMIC_WRITE | (1ull << 11) /* IBV_QP_EX_WITH_FLUSH */ | IBV_QP_EX_WITH_RDMA_WRITE, 0);
    struct ibv_qp *g = make(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD, 0, 0);
    SHOW("flush_qps", f == NULL || g == NULL || to_rts(f, g->qp_num) || to_rts(g, f->qp_num));
    static uint64_t aligned[4];
    struct ibv_mr *mfl = ibv_reg_mr(pd, aligned, sizeof aligned, acc | (1 << 8) /* IBV_ACCESS_FLUSH_GLOBAL */);
    SHOW("flush_mr", mfl == NULL);
    struct ibv_qp_ex *fx = ibv_qp_to_qp_ex(f);
    unsigned char eight[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    ibv_wr_start(fx);
    fx->wr_id = 20; fx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(fx, mfl->rkey, (uintptr_t)&aligned[1], eight);
    fx->wr_id = 21;
    /* ibv_wr_flush is rdma-core 45's: reach the slot after wr_atomic_write */
    void (**flush_slot)(struct ibv_qp_ex *, uint32_t, uint64_t, size_t, uint8_t, uint8_t) = (void *)(&fx->wr_atomic_write + 1);
    (*flush_slot)(fx, mfl->rkey, (uintptr_t)aligned, sizeof aligned, 1 /* IBV_FLUSH_GLOBAL */, 0 /* IBV_FLUSH_RANGE */);
    SHOW("flush_batch", ibv_wr_complete(fx));
    /* g's QP access lacks FLUSH: the FLUSH is an invalid request, and the
       ATOMIC_WRITE before it still completes (its response goes out first) */
    printf("flush drained %d\n", drain(2));
    printf("aligned[1] bytes %d\n", memcmp(&aligned[1], eight, 8) == 0);

    /* again, with FLUSH allowed on the QP: both succeed */
    struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
    ibv_modify_qp(f, &r, IBV_QP_STATE); ibv_modify_qp(g, &r, IBV_QP_STATE);
    extra_access = 1 << 8; /* IBV_ACCESS_FLUSH_GLOBAL */
    SHOW("flush_restate", to_rts(f, g->qp_num) || to_rts(g, f->qp_num));
    eight[0] = 42;
    ibv_wr_start(fx);
    fx->wr_id = 23; ibv_wr_atomic_write(fx, mfl->rkey, (uintptr_t)&aligned[2], eight);
    fx->wr_id = 24; (*flush_slot)(fx, mfl->rkey, (uintptr_t)aligned, sizeof aligned, 1, 0);
    SHOW("flush_batch2", ibv_wr_complete(fx));
    printf("flush2 drained %d\n", drain(2));
    printf("aligned[2] bytes %d\n", memcmp(&aligned[2], eight, 8) == 0);
    /* a FLUSH past the region: remote access error */
    ibv_wr_start(fx); fx->wr_id = 22;
    (*flush_slot)(fx, mfl->rkey, (uintptr_t)aligned, sizeof aligned + 8, 1, 0);
    SHOW("flush_past_region", ibv_wr_complete(fx));
    printf("flush past drained %d\n", drain(1));

    /* UD: a send needs ibv_wr_set_ud_addr */
    struct ibv_qp *u = make(IBV_QPT_UD, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, 0);
    struct ibv_qp *v = make(IBV_QPT_UD, IBV_QP_INIT_ATTR_PD, 0, 0);
    SHOW("ud_rts", to_rts(u, 0) || to_rts(v, 0));
    static char ubuf[40 + 64];
    struct ibv_mr *mub = ibv_reg_mr(pd, ubuf, sizeof ubuf, acc);
    struct ibv_sge us = { (uintptr_t)ubuf, sizeof ubuf, mub->lkey };
    struct ibv_recv_wr uw = { .wr_id = 200, .sg_list = &us, .num_sge = 1 };
    ibv_post_recv(v, &uw, &rbad);
    struct ibv_qp_ex *ux = ibv_qp_to_qp_ex(u);
    ibv_wr_start(ux); ux->wr_id = 12; ux->wr_flags = IBV_SEND_SIGNALED; ibv_wr_send(ux); ibv_wr_set_inline_data(ux, "ud", 3);
    SHOW("ud_no_addr", ibv_wr_complete(ux));
    struct ibv_ah_attr aa; memset(&aa, 0, sizeof aa);
    aa.is_global = 1; aa.port_num = 1; aa.grh.hop_limit = 1; ibv_query_gid(ctx, 1, 0, &aa.grh.dgid);
    struct ibv_ah *ah = ibv_create_ah(pd, &aa);
    ibv_wr_start(ux); ux->wr_id = 13; ibv_wr_send_imm(ux, htonl(77)); ibv_wr_set_ud_addr(ux, ah, v->qp_num, 0x77);
    ibv_wr_set_inline_data(ux, "ud hello", 9);
    SHOW("ud_send", ibv_wr_complete(ux));
    printf("ud drained %d\n", drain(2));
    printf("ud payload \"%s\"\n", ubuf + 40);
    printf("alive\n");
    return 0;
}
"#;

#[test]
fn extended_qps_post_with_the_wr_api_and_refuse_what_rxe_refuses() {
    let Some(text) = common::run_c("qp_ex", "qpex0=127.0.13.3", PROGRAM) else { return };
    let (einval, eop) = (libc::EINVAL, libc::EOPNOTSUPP);
    let expect: &[(&str, i64, Option<i32>)] = &[
        ("create_flags", 0, Some(eop)),
        ("ud_read_op", 0, Some(eop)),
        // An XRC domain is for XRC_RECV QPs (docs/xrc.md): EINVAL on RC.
        ("xrcd_mask", 0, Some(einval)),
        ("no_pd", 0, Some(einval)),
        ("plain_made", 0, None),
        ("plain_to_qp_ex", 0, Some(eop)),
        ("rc_made", 0, None),
        ("rts", 0, None),
        ("batch", 0, None),
        ("setter_first", i64::from(einval), None),
        ("inline_too_big", i64::from(einval), None),
        ("op_not_made_for", i64::from(eop), None),
        ("atomic_write_not_made_for", i64::from(eop), None),
        ("flush_qps", 0, None),
        ("flush_mr", 0, None),
        ("flush_batch", 0, None),
        ("flush_restate", 0, None),
        ("flush_batch2", 0, None),
        ("flush_past_region", 0, None),
        ("complete_after_abort", i64::from(einval), None),
        ("ud_rts", 0, None),
        ("ud_no_addr", i64::from(einval), None),
        ("ud_send", 0, None),
    ];
    common::check_calls(&text, expect);
    // The six requests completed in order with their opcodes, the two
    // receives (the SEND and the WRITE with immediate) at the other QP.
    common::check_lines(&text, &[
        "qp_ex same=1",
        "wc wr_id=1 status=0 opcode=1 byte_len=29",
        "wc wr_id=2 status=0 opcode=0 byte_len=13",
        "wc wr_id=3 status=0 opcode=2 byte_len=29",
        "wc wr_id=4 status=0 opcode=4 byte_len=8",
        "wc wr_id=5 status=0 opcode=3 byte_len=8",
        "wc wr_id=6 status=0 opcode=1 byte_len=4",
        "wc wr_id=100 status=0 opcode=128 byte_len=13",
        "wc wr_id=101 status=0 opcode=129 byte_len=4 imm=43981",
        "drained 8",
        // FETCH_ADD 5+10 = 15 (old 5); CMP_SWAP 15 -> 99 (old 15).
        "dst \"written by ibv_wr_rdma_write\" rbuf \"inline hello\" rd \"written by ibv_wr_rdma_write\" counter 99 old 15",
        "quiet 1",
        "caps flush_global=1 flush_persistent=1 atomic_write=1",
        // ATOMIC_WRITE completes as IBV_WC_ATOMIC_WRITE (9) of 8 bytes, FLUSH
        // as IBV_WC_FLUSH (8) of its length; a FLUSH the QP does not allow
        // is status 9 (remote invalid request), one past the region 10
        // (remote access error).
        "wc wr_id=20 status=0 opcode=9 byte_len=8",
        "wc wr_id=21 status=9 opcode=8",
        "aligned[1] bytes 1",
        "wc wr_id=23 status=0 opcode=9 byte_len=8",
        "wc wr_id=24 status=0 opcode=8 byte_len=32",
        "aligned[2] bytes 1",
        "wc wr_id=22 status=10",
        "wc wr_id=13 status=0 opcode=0 byte_len=9",
        "wc wr_id=200 status=0 opcode=128 byte_len=49 imm=77",
        "ud drained 2",
        "ud payload \"ud hello\"",
        "alive",
    ]);
}
