/* A verbs process driven line by line on stdin (replies on stdout), for
 * the shared-device tests: RC QPs to named peers and one UD QP, over the
 * first device (rxe0 in SOFTROCE_DEVICES). argv[1] is its name. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define DEPTH 64
#define MSG 64
#define QKEY 0x11111111

struct rc { char peer[16]; struct ibv_qp *qp; struct ibv_cq *cq; char bufs[DEPTH][MSG]; struct ibv_mr *mr; };
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct rc rcs[8];
static int nrc;
static struct ibv_qp *ud;
static struct ibv_cq *ud_scq, *ud_rcq;
static char ud_bufs[DEPTH][40 + MSG];
static struct ibv_mr *ud_mr;
static char me[16];

static void gid_hex(char *out) {
    union ibv_gid g; ibv_query_gid(ctx, 1, 0, &g);
    for (int i = 0; i < 16; i++) sprintf(out + 2 * i, "%02x", g.raw[i]);
}

static void parse_gid(const char *hex, union ibv_gid *g) {
    for (int i = 0; i < 16; i++) { unsigned v; sscanf(hex + 2 * i, "%2x", &v); g->raw[i] = v; }
}

static struct rc *find(const char *peer) {
    for (int i = 0; i < nrc; i++) if (!strcmp(rcs[i].peer, peer)) return &rcs[i];
    return NULL;
}

/* Waits up to 10 s for one completion on cq; its status, -1 on timeout. */
static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc) {
    for (int i = 0; i < 100000; i++) {
        if (ibv_poll_cq(cq, 1, wc) == 1) return wc->status;
        nanosleep(&(struct timespec){ 0, 100000 }, NULL);
    }
    return -1;
}

static int post_rc_recv(struct rc *r, int i) {
    struct ibv_sge g = { (uintptr_t)r->bufs[i], MSG, r->mr->lkey };
    struct ibv_recv_wr w = { .wr_id = i, .sg_list = &g, .num_sge = 1 }, *bad;
    return ibv_post_recv(r->qp, &w, &bad);
}

static int post_ud_recv(int i) {
    struct ibv_sge g = { (uintptr_t)ud_bufs[i], 40 + MSG, ud_mr->lkey };
    struct ibv_recv_wr w = { .wr_id = i, .sg_list = &g, .num_sge = 1 }, *bad;
    return ibv_post_recv(ud, &w, &bad);
}

static int connect_rc(struct rc *r, uint32_t dest, const char *gid) {
    struct ibv_qp_attr t; memset(&t, 0, sizeof t);
    t.qp_state = IBV_QPS_INIT; t.port_num = 1;
    if (ibv_modify_qp(r->qp, &t, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    for (int i = 0; i < DEPTH; i++) if (post_rc_recv(r, i)) return -4;
    t.qp_state = IBV_QPS_RTR; t.path_mtu = IBV_MTU_1024; t.dest_qp_num = dest; t.max_dest_rd_atomic = 1; t.min_rnr_timer = 1;
    t.ah_attr.is_global = 1; t.ah_attr.port_num = 1; t.ah_attr.grh.hop_limit = 64; parse_gid(gid, &t.ah_attr.grh.dgid);
    if (ibv_modify_qp(r->qp, &t, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return -2;
    /* timeout 12: 16.8 ms, retried 7 times, for packets sent while the port's steering changes */
    t.qp_state = IBV_QPS_RTS; t.timeout = 12; t.retry_cnt = 7; t.rnr_retry = 7; t.max_rd_atomic = 1;
    return ibv_modify_qp(r->qp, &t, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) ? -3 : 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(me, sizeof me, "%s", argc > 1 ? argv[1] : "?");
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1 || !(ctx = ibv_open_device(list[0]))) { printf("error open\n"); return 2; }
    pd = ibv_alloc_pd(ctx);
    ud_scq = ibv_create_cq(ctx, DEPTH, NULL, NULL, 0);
    ud_rcq = ibv_create_cq(ctx, DEPTH, NULL, NULL, 0);
    struct ibv_qp_init_attr ia; memset(&ia, 0, sizeof ia);
    ia.send_cq = ud_scq; ia.recv_cq = ud_rcq; ia.qp_type = IBV_QPT_UD;
    ia.cap.max_send_wr = DEPTH; ia.cap.max_recv_wr = DEPTH; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    ud = ibv_create_qp(pd, &ia);
    ud_mr = ibv_reg_mr(pd, ud_bufs, sizeof ud_bufs, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_qp_attr t; memset(&t, 0, sizeof t);
    t.qp_state = IBV_QPS_INIT; t.port_num = 1; t.qkey = QKEY;
    if (!ud || !ud_mr || ibv_modify_qp(ud, &t, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) { printf("error ud\n"); return 3; }
    for (int i = 0; i < DEPTH; i++) post_ud_recv(i);
    t.qp_state = IBV_QPS_RTR; ibv_modify_qp(ud, &t, IBV_QP_STATE);
    t.qp_state = IBV_QPS_RTS; t.sq_psn = 0; ibv_modify_qp(ud, &t, IBV_QP_STATE | IBV_QP_SQ_PSN);
    char gid[33]; gid_hex(gid);
    printf("ready %s %u\n", gid, ud->qp_num);

    char line[256], a[64], b[64];
    unsigned n, q;
    while (fgets(line, sizeof line, stdin)) {
        if (sscanf(line, "rc %63s", a) == 1) {
            struct rc *r = &rcs[nrc++];
            snprintf(r->peer, sizeof r->peer, "%s", a);
            r->cq = ibv_create_cq(ctx, 2 * DEPTH, NULL, NULL, 0);
            memset(&ia, 0, sizeof ia);
            ia.send_cq = r->cq; ia.recv_cq = r->cq; ia.qp_type = IBV_QPT_RC;
            ia.cap.max_send_wr = DEPTH; ia.cap.max_recv_wr = DEPTH; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
            r->qp = ibv_create_qp(pd, &ia);
            r->mr = ibv_reg_mr(pd, r->bufs, sizeof r->bufs, IBV_ACCESS_LOCAL_WRITE);
            printf("rc %s %u\n", a, r->qp ? r->qp->qp_num : 0);
        } else if (sscanf(line, "connect %63s %u %63s", a, &q, b) == 3) {
            struct rc *r = find(a);
            printf("connected %s %d\n", a, r ? connect_rc(r, q, b) : -9);
        } else if (sscanf(line, "send %63s %u", a, &n) == 2) {
            struct rc *r = find(a);
            int bad = r ? 0 : -9;
            static char out[MSG];
            struct ibv_mr *mr = ibv_reg_mr(pd, out, sizeof out, IBV_ACCESS_LOCAL_WRITE);
            for (unsigned i = 0; r && i < n && !bad; i++) {
                snprintf(out, sizeof out, "%s->%s #%u", me, a, i);
                struct ibv_sge g = { (uintptr_t)out, strlen(out) + 1, mr->lkey };
                struct ibv_send_wr w = { .wr_id = 1000 + i, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *badw;
                struct ibv_wc wc;
                if (ibv_post_send(r->qp, &w, &badw)) bad = -8;
                else bad = wait_one(r->cq, &wc);
                if (!bad && (wc.opcode != IBV_WC_SEND || wc.wr_id != 1000 + i)) bad = -7;
            }
            ibv_dereg_mr(mr);
            printf("sent %s %u %d\n", a, n, bad);
        } else if (sscanf(line, "recv %63s %u", a, &n) == 2) {
            struct rc *r = find(a);
            unsigned ok = 0;
            for (unsigned i = 0; r && i < n; i++) {
                struct ibv_wc wc;
                if (wait_one(r->cq, &wc) || wc.opcode != IBV_WC_RECV) break;
                char want[MSG]; snprintf(want, sizeof want, "%s->%s #%u", a, me, i);
                if (!strcmp(r->bufs[wc.wr_id], want)) ok++;
                post_rc_recv(r, wc.wr_id);
            }
            printf("received %s %u\n", a, ok);
        } else if (sscanf(line, "udsend %u %63s %u %63s", &q, b, &n, a) == 4) {
            struct ibv_ah_attr aa; memset(&aa, 0, sizeof aa);
            aa.is_global = 1; aa.port_num = 1; aa.grh.hop_limit = 64; parse_gid(b, &aa.grh.dgid);
            struct ibv_ah *ah = ibv_create_ah(pd, &aa);
            static char out[MSG];
            struct ibv_mr *mr = ibv_reg_mr(pd, out, sizeof out, IBV_ACCESS_LOCAL_WRITE);
            int bad = ah ? 0 : -9;
            for (unsigned i = 0; i < n && !bad; i++) {
                snprintf(out, sizeof out, "%s #%u", a, i);
                struct ibv_sge g = { (uintptr_t)out, strlen(out) + 1, mr->lkey };
                struct ibv_send_wr w = { .wr_id = 2000 + i, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *badw;
                w.wr.ud.ah = ah; w.wr.ud.remote_qpn = q; w.wr.ud.remote_qkey = QKEY;
                struct ibv_wc wc;
                if (ibv_post_send(ud, &w, &badw)) bad = -8;
                else bad = wait_one(ud_scq, &wc);
                /* paced: UD has no flow control, and the receiver takes its time on two cores */
                nanosleep(&(struct timespec){ 0, 2000000 }, NULL);
            }
            ibv_dereg_mr(mr);
            if (ah) ibv_destroy_ah(ah);
            printf("udsent %u %d\n", n, bad);
        } else if (sscanf(line, "udrecv %u %63s", &n, a) == 2) {
            unsigned ok = 0;
            for (unsigned i = 0; i < n; i++) {
                struct ibv_wc wc;
                if (wait_one(ud_rcq, &wc) || wc.opcode != IBV_WC_RECV) break;
                char want[MSG]; snprintf(want, sizeof want, "%s #%u", a, i);
                if (!strcmp(ud_bufs[wc.wr_id] + 40, want)) ok++;
                post_ud_recv(wc.wr_id);
            }
            printf("udreceived %u\n", ok);
        } else if (!strncmp(line, "quit", 4)) {
            return 0;
        } else {
            printf("error unknown command %s", line);
        }
    }
    return 0;
}
