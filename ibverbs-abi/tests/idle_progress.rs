//! The idle-progress thread answers a peer promptly while the application
//! polls its CQs only now and then: here a thread that polls an empty CQ
//! once a millisecond, as `ucx_perftest`'s server does in the TCP barrier
//! that ends a one-sided test (it polls its socket for 1 ms, then calls
//! `ucp_worker_progress`, which polls the CQs). The thread took those
//! polls for an application that takes its own packets and rested 2 ms at
//! a time without watching the device, so each RDMA READ of the peer
//! waited for the next of those polls: `ucp_get` took 1.1 ms instead of 9 µs,
//! and `put_bw`'s 64 KiB WRITEs their ACKs for milliseconds.
//!
//! One C program, two devices in one process: the requester (rxe0) reads
//! 8 bytes from the target (rxe1) 300 times and measures each READ; the
//! target's only calls are that timer's polls.

mod common;

const PROGRAM: &str = r#"
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define DIE(what) do { printf("failed %s\n", what); exit(1); } while (0)
#define READS 300

struct side { struct ibv_context *ctx; struct ibv_pd *pd; struct ibv_cq *cq; struct ibv_qp *qp; struct ibv_mr *mr;
              uint64_t buf[8]; };
static struct side S[2];
static volatile int done;

static double now_us(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void connect_qp(struct side *s, struct side *peer) {
    union ibv_gid g;
    if (ibv_query_gid(peer->ctx, 1, 0, &g)) DIE("query_gid");
    struct ibv_qp_attr a; memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) DIE("init");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = peer->qp->qp_num;
    a.max_dest_rd_atomic = 4; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = g; a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) DIE("rtr");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 4;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                      IBV_QP_MAX_QP_RD_ATOMIC)) DIE("rts");
}

/* The target's only calls: a poll of its (empty) CQ every millisecond. */
static void *timer_polls(void *arg) {
    struct side *t = arg; struct ibv_wc wc;
    while (!done) { ibv_poll_cq(t->cq, 1, &wc); usleep(1000); }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int num;
    struct ibv_device **l = ibv_get_device_list(&num);
    if (!l || num != 2) DIE("two devices");
    for (int i = 0; i < 2; i++) {
        struct side *s = &S[i];
        if (!(s->ctx = ibv_open_device(l[i])) || !(s->pd = ibv_alloc_pd(s->ctx))) DIE("open");
        s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
        s->mr = ibv_reg_mr(s->pd, s->buf, sizeof s->buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
        struct ibv_qp_init_attr ia = { .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
            .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
        if (!s->cq || !s->mr || !(s->qp = ibv_create_qp(s->pd, &ia))) DIE("resources");
    }
    ibv_free_device_list(l);
    connect_qp(&S[0], &S[1]); connect_qp(&S[1], &S[0]);
    S[1].buf[0] = 0x1122334455667788ull;
    pthread_t th;
    if (pthread_create(&th, NULL, timer_polls, &S[1])) DIE("thread");
    usleep(20000);

    static double lat[READS];
    for (int i = 0; i < READS; i++) {
        S[0].buf[0] = 0;
        struct ibv_sge g = { (uintptr_t)S[0].buf, 8, S[0].mr->lkey };
        struct ibv_send_wr w = { .wr_id = i, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
                                 .send_flags = IBV_SEND_SIGNALED }, *bad;
        w.wr.rdma.remote_addr = (uintptr_t)S[1].buf; w.wr.rdma.rkey = S[1].mr->rkey;
        double t0 = now_us();
        if (ibv_post_send(S[0].qp, &w, &bad)) DIE("post_send");
        struct ibv_wc wc; int got;
        while ((got = ibv_poll_cq(S[0].cq, 1, &wc)) == 0)
            if (now_us() - t0 > 5e6) DIE("no completion within 5 s");
        if (got < 0 || wc.status != IBV_WC_SUCCESS) DIE("read");
        lat[i] = now_us() - t0;
        if (S[0].buf[0] != 0x1122334455667788ull) DIE("read data");
    }
    done = 1;
    pthread_join(th, NULL);
    qsort(lat, READS, sizeof lat[0], cmp);
    printf("reads %d median_us %.1f p90_us %.1f\n", READS, lat[READS / 2], lat[READS * 9 / 10]);
    return 0;
}
"#;

#[test]
fn a_peer_is_answered_promptly_while_the_application_polls_only_from_a_timer() {
    let Some(text) = common::run_c("idle_progress", "rxe0=127.0.23.12,rxe1=127.0.23.13", PROGRAM) else { return };
    let field = |k: &str| -> f64 {
        text.split_whitespace()
            .skip_while(|w| *w != k)
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in:\n{text}"))
    };
    let median = field("median_us");
    // Waiting for the timer's polls: a whole period, never less than its
    // 1 ms sleep (1,083 µs measured: each READ is posted right after the
    // poll that completed the one before). Answered by the idle-progress
    // thread: about 20 µs; 130 to 320 µs on a two-core machine loaded by
    // other work (load average 11 to 15).
    assert!(median < 700.0, "a READ took {median} µs (median): the target waited for its timer's polls\n{text}");
}
