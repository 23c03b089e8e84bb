/* ibv_wr_* against ibv_post_send for the same work, over the drop-in
 * libibverbs.so.1: two RC QPs of one device, 64-byte RDMA WRITEs posted in
 * batches of BATCH (the last of each batch signalled), a fixed number in
 * flight. Prints one line per API: "post_send|wr_api msgs_per_s N".
 * Usage: wr_vs_post MODE(post|wr) MESSAGES */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define BATCH 16
#define DEPTH 256

static struct ibv_context *ctx;

static int to_rts(struct ibv_qp *qp, uint32_t dest) {
    struct ibv_qp_attr a; memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.port_num = 1; a.ah_attr.grh.hop_limit = 1; ibv_query_gid(ctx, 1, 0, &a.ah_attr.grh.dgid);
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return -2;
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s post|wr MESSAGES\n", argv[0]); return 2; }
    int wr_api = strcmp(argv[1], "wr") == 0;
    long total = atol(argv[2]);
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { fprintf(stderr, "no device\n"); return 2; }
    ctx = ibv_open_device(list[0]);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, DEPTH, NULL, NULL, 0);
    struct ibv_qp_init_attr_ex ia; memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC; ia.pd = pd;
    ia.cap.max_send_wr = DEPTH; ia.cap.max_recv_wr = 1; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
    struct ibv_qp *a = ibv_create_qp_ex(ctx, &ia);
    struct ibv_qp_init_attr ib; memset(&ib, 0, sizeof ib);
    ib.send_cq = cq; ib.recv_cq = cq; ib.qp_type = IBV_QPT_RC; ib.cap = ia.cap;
    struct ibv_qp *b = ibv_create_qp(pd, &ib);
    if (!a || !b || to_rts(a, b->qp_num) || to_rts(b, a->qp_num)) { fprintf(stderr, "setup failed: %s\n", strerror(errno)); return 1; }
    static char src[64], dst[64];
    struct ibv_mr *ms = ibv_reg_mr(pd, src, sizeof src, 0), *md = ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
    struct ibv_sge sge = { (uintptr_t)src, 64, ms->lkey };
    struct ibv_send_wr wrs[BATCH], *bad;
    for (int i = 0; i < BATCH; i++) {
        memset(&wrs[i], 0, sizeof wrs[i]);
        wrs[i].sg_list = &sge; wrs[i].num_sge = 1; wrs[i].opcode = IBV_WR_RDMA_WRITE;
        wrs[i].wr.rdma.rkey = md->rkey; wrs[i].wr.rdma.remote_addr = (uintptr_t)dst;
        wrs[i].next = i + 1 < BATCH ? &wrs[i + 1] : NULL;
    }
    wrs[BATCH - 1].send_flags = IBV_SEND_SIGNALED;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long posted = 0, done = 0, batches_out = 0;
    struct ibv_wc wc[16];
    while (done < total) {
        while (batches_out * BATCH < DEPTH - BATCH && posted < total) {
            int rc;
            if (wr_api) {
                ibv_wr_start(x);
                for (int i = 0; i < BATCH; i++) {
                    x->wr_id = posted + i; x->wr_flags = i == BATCH - 1 ? IBV_SEND_SIGNALED : 0;
                    ibv_wr_rdma_write(x, md->rkey, (uintptr_t)dst);
                    ibv_wr_set_sge(x, ms->lkey, (uintptr_t)src, 64);
                }
                rc = ibv_wr_complete(x);
            } else {
                wrs[BATCH - 1].wr_id = posted + BATCH - 1;
                rc = ibv_post_send(a, wrs, &bad);
            }
            if (rc) { fprintf(stderr, "post failed: %s\n", strerror(rc)); return 1; }
            posted += BATCH; batches_out++;
        }
        int k = ibv_poll_cq(cq, 16, wc);
        for (int i = 0; i < k; i++) {
            if (wc[i].status) { fprintf(stderr, "completion status %d\n", wc[i].status); return 1; }
            done += BATCH; batches_out--;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%s msgs_per_s %.0f\n", wr_api ? "wr_api" : "post_send", done / s);
    return 0;
}
