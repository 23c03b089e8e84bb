//! The extended CQ from C: `ibv_create_cq_ex` with the standard fields and
//! both timestamps, traffic between two RC QPs polled with
//! `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` and read with the
//! `ibv_wc_read_*` calls (opcode, length, QP, immediate, flags, and
//! timestamps within the clock readings around the poll), a completion
//! channel event on it, `ibv_poll_cq` on the same CQ after an extended poll
//! (nothing lost or reordered), `ibv_query_rt_values_ex` and the clock in
//! `ibv_query_device_ex`; and what rxe refuses (fields it lacks, flags,
//! sizes and vectors out of range).

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
static uint64_t now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec; }

static struct ibv_cq_ex *make(uint32_t cqe, uint64_t wc_flags, uint32_t mask, uint32_t flags, uint32_t vector, struct ibv_comp_channel *ch) {
    struct ibv_cq_init_attr_ex a; memset(&a, 0, sizeof a);
    a.cqe = cqe; a.wc_flags = wc_flags; a.comp_mask = mask; a.flags = flags; a.comp_vector = vector; a.channel = ch;
    return ibv_create_cq_ex(ctx, &a);
}

static int connect_rc(struct ibv_qp *qp, uint32_t dest) {
    struct ibv_qp_attr a; memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.port_num = 1; a.ah_attr.grh.hop_limit = 1; ibv_query_gid(ctx, 1, 0, &a.ah_attr.grh.dgid);
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return -2;
    a.qp_state = IBV_QPS_RTS; a.timeout = 10; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) ? -3 : 0;
}

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { printf("no device\n"); return 2; }
    ctx = ibv_open_device(list[0]);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_device_attr_ex dx; memset(&dx, 0, sizeof dx);
    SHOW("query_device_ex", ibv_query_device_ex(ctx, NULL, &dx));
    printf("clock khz=%llu mask_all=%d\n", (unsigned long long)dx.hca_core_clock, dx.completion_timestamp_mask == ~0ull);
    struct ibv_values_ex v; memset(&v, 0, sizeof v); v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    uint64_t t0 = now(CLOCK_MONOTONIC);
    SHOW("rt_values", ibv_query_rt_values_ex(ctx, &v));
    uint64_t rt = (uint64_t)v.raw_clock.tv_sec * 1000000000ull + v.raw_clock.tv_nsec, t1 = now(CLOCK_MONOTONIC);
    printf("rt_within %d\n", rt >= t0 && rt <= t1);

    uint64_t std_flags = IBV_WC_STANDARD_FLAGS;
    errno = 0; SHOW("cvlan", make(10, IBV_WC_EX_WITH_CVLAN, 0, 0, 0, NULL) != NULL);
    errno = 0; SHOW("tm_info", make(10, IBV_WC_EX_WITH_TM_INFO, 0, 0, 0, NULL) != NULL);
    errno = 0; SHOW("ignore_overrun", make(10, 0, IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN, 0, NULL) != NULL);
    errno = 0; SHOW("too_big", make(dx.orig_attr.max_cqe + 1, 0, 0, 0, 0, NULL) != NULL);
    errno = 0; SHOW("bad_vector", make(10, 0, 0, 0, ctx->num_comp_vectors + 1, NULL) != NULL);
    struct ibv_cq_ex *st = make(10, 0, IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CREATE_CQ_ATTR_SINGLE_THREADED, 0, NULL);
    SHOW("single_threaded", st == NULL);
    if (st) ibv_destroy_cq(ibv_cq_ex_to_cq(st));

    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    struct ibv_cq_ex *cq = make(100, std_flags | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, 0, 0, 0, ch);
    SHOW("cq_ex", cq == NULL);
    struct ibv_cq *base = ibv_cq_ex_to_cq(cq);
    printf("readers ts=%d cvlan_null=%d\n", cq->read_completion_ts != NULL, cq->read_cvlan == NULL);
    struct ibv_poll_cq_attr pa = { 0 };
    SHOW("empty", ibv_start_poll(cq, &pa));

    struct ibv_qp_init_attr ia; memset(&ia, 0, sizeof ia);
    ia.send_cq = base; ia.recv_cq = base; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 64; ia.cap.max_recv_wr = 64; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
    SHOW("connect", connect_rc(a, b->qp_num) || connect_rc(b, a->qp_num));
    static char buf[64], rbuf[64 * 32];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_recv_wr *rbad; struct ibv_send_wr *sbad;
    for (int i = 0; i < 32; i++) {
        struct ibv_sge s = { (uintptr_t)rbuf + 64 * i, 64, rmr->lkey };
        struct ibv_recv_wr r = { .wr_id = 1000 + i, .sg_list = &s, .num_sge = 1 };
        ibv_post_recv(b, &r, &rbad);
    }
    /* armed, one SEND with immediate: one event on the channel */
    SHOW("arm", ibv_req_notify_cq(base, 0));
    struct ibv_sge s = { (uintptr_t)buf, 11, mr->lkey };
    struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(4242) };
    uint64_t before = now(CLOCK_MONOTONIC), wbefore = now(CLOCK_REALTIME);
    SHOW("post", ibv_post_send(a, &w, &sbad));
    struct ibv_cq *ev_cq; void *ev_ctx;
    SHOW("event", ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
    printf("event_cq_same %d\n", ev_cq == base);
    ibv_ack_cq_events(base, 1);
    int got = 0, ret, ordered = 1; uint64_t last = 0;
    for (int i = 0; i < 2000 && got < 2; i++) {
        ret = ibv_start_poll(cq, &pa);
        if (ret == ENOENT) { struct timespec ts = { 0, 1000000 }; nanosleep(&ts, NULL); continue; }
        do {
            uint64_t ts = ibv_wc_read_completion_ts(cq), wall = ibv_wc_read_completion_wallclock_ns(cq);
            uint64_t after = now(CLOCK_MONOTONIC), wafter = now(CLOCK_REALTIME);
            if (ts < last) ordered = 0;
            last = ts;
            printf("wc wr_id=%llu status=%d opcode=%d len=%u qp_ok=%d imm=%u flags=%u ts_within=%d wall_within=%d\n",
                   (unsigned long long)cq->wr_id, cq->status, ibv_wc_read_opcode(cq), ibv_wc_read_byte_len(cq),
                   ibv_wc_read_qp_num(cq) == (ibv_wc_read_opcode(cq) == IBV_WC_RECV ? b->qp_num : a->qp_num),
                   (ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM) ? ntohl(ibv_wc_read_imm_data(cq)) : 0, ibv_wc_read_wc_flags(cq),
                   ts >= before && ts <= after, wall >= wbefore && wall <= wafter);
            got++;
        } while (ibv_next_poll(cq) == 0);
        ibv_end_poll(cq);
    }
    printf("got %d ordered %d\n", got, ordered);

    /* 20 SENDs; one extended poll takes the first completion, the rest
       (buffered by it or not) come from ibv_poll_cq, none lost, in order */
    for (int i = 0; i < 20; i++) {
        struct ibv_send_wr x = { .wr_id = 100 + i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
        ibv_post_send(a, &x, &sbad);
    }
    struct timespec pause = { 0, 30000000 }; nanosleep(&pause, NULL);
    while ((ret = ibv_start_poll(cq, &pa)) == ENOENT) nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    /* sends complete in order 100.., receives 1001..; the first was either */
    int sends = 0, recvs = 0, inorder = 1; uint64_t next_s = 100, next_r = 1001;
    if (cq->wr_id >= 1000) { if (cq->wr_id != next_r++) inorder = 0; recvs++; } else { if (cq->wr_id != next_s++) inorder = 0; sends++; }
    ibv_end_poll(cq);
    for (int i = 0; i < 2000 && sends + recvs < 40; i++) {
        struct ibv_wc wc[8];
        int k = ibv_poll_cq(base, 8, wc);
        for (int j = 0; j < k; j++) {
            if (wc[j].opcode == IBV_WC_SEND) { if (wc[j].wr_id != next_s++) inorder = 0; sends++; }
            else { if (wc[j].wr_id != next_r++) inorder = 0; recvs++; }
        }
        if (k == 0) nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    }
    printf("rest sends=%d recvs=%d inorder=%d\n", sends, recvs, inorder);
    SHOW("destroy_qp", ibv_destroy_qp(a) || ibv_destroy_qp(b));
    SHOW("destroy_cq", ibv_destroy_cq(base));
    printf("alive\n");
    return 0;
}
"#;

#[test]
fn extended_cqs_poll_read_and_stamp_completions() {
    let Some(text) = common::run_c("cq_ex", "cqex0=127.0.13.4", PROGRAM) else { return };
    let (einval, eop) = (libc::EINVAL, libc::EOPNOTSUPP);
    let expect: &[(&str, i64, Option<i32>)] = &[
        ("query_device_ex", 0, None),
        ("rt_values", 0, None),
        ("cvlan", 0, Some(eop)),
        ("tm_info", 0, Some(eop)),
        ("ignore_overrun", 0, Some(eop)),
        ("too_big", 0, Some(einval)),
        ("bad_vector", 0, Some(einval)),
        ("single_threaded", 0, None),
        ("cq_ex", 0, None),
        ("empty", i64::from(libc::ENOENT), None),
        ("connect", 0, None),
        ("arm", 0, None),
        ("post", 0, None),
        ("event", 0, None),
        ("destroy_qp", 0, None),
        ("destroy_cq", 0, None),
    ];
    common::check_calls(&text, expect);
    common::check_lines(
        &text,
        &[
            "clock khz=1000000 mask_all=1",
            "rt_within 1",
            "readers ts=1 cvlan_null=1",
            "event_cq_same 1",
            // The send completion and the receive (IBV_WC_WITH_IMM = 2), each
            // stamped between the clock readings around it.
            "wc wr_id=1 status=0 opcode=0 len=11 qp_ok=1 imm=0 flags=0 ts_within=1 wall_within=1",
            "wc wr_id=1000 status=0 opcode=128 len=11 qp_ok=1 imm=4242 flags=2 ts_within=1 wall_within=1",
            "got 2 ordered 1",
            "rest sends=20 recvs=20 inorder=1",
            "alive",
        ],
    );
}
