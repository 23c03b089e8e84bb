//! A C program in one process over two devices: an RC connection between
//! them carries 2000 numbered messages, posted by one thread while another
//! thread polls the send CQ, and received by a third that sleeps in
//! `epoll_wait` on the completion channel's fd; every payload is checked.
//! Then a receive CQ that nobody polls overflows and an SRQ falls below its
//! armed limit, and both events reach `ibv_get_async_event` (after `poll`
//! on the context's async fd) with the right objects, while another thread
//! keeps polling a CQ of that device.

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <infiniband/verbs.h>

#define N 2000
#define MSG 256
#define DIE(...) do { printf("FAIL " __VA_ARGS__); printf(" errno=%d\n", errno); exit(1); } while (0)

static struct ibv_context *c0, *c1;
static struct ibv_pd *pd0, *pd1;
static struct ibv_cq *scq, *rcq;
static struct ibv_comp_channel *ch;
static struct ibv_qp *q0, *q1;
static struct ibv_mr *smr, *rmr;
static char sbuf[N][MSG], rbuf[64][MSG];
static volatile int sends_done, posted, polled;

static void connect_qp(struct ibv_qp *q, struct ibv_context *peer_ctx, uint32_t peer_qpn) {
    union ibv_gid g;
    if (ibv_query_gid(peer_ctx, 1, 0, &g)) DIE("query_gid");
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) DIE("init");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = peer_qpn; a.rq_psn = 0;
    a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = g; a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) DIE("rtr");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 0; a.max_rd_atomic = 1;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                      IBV_QP_MAX_QP_RD_ATOMIC)) DIE("rts");
}

static void post_recv(int slot) {
    struct ibv_sge s = { (uintptr_t)rbuf[slot], MSG, rmr->lkey };
    struct ibv_recv_wr w = { .wr_id = slot, .sg_list = &s, .num_sge = 1 }, *bad;
    if (ibv_post_recv(q1, &w, &bad)) DIE("post_recv");
}

static void *sender(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) {
        snprintf(sbuf[i], MSG, "message %d", i);
        struct ibv_sge s = { (uintptr_t)sbuf[i], MSG, smr->lkey };
        struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED }, *bad;
        int r;
        /* As with rxe, a send slot is free once its completion is made, so
           the poster itself keeps what is unpolled within the CQ's 64. */
        while (i - polled >= 32) ;
        while ((r = ibv_post_send(q0, &w, &bad)) == ENOMEM) ; /* send queue full for a moment */
        if (r) { errno = r; DIE("post_send %d", i); }
        posted = i + 1;
    }
    return NULL;
}

static void *send_poller(void *arg) {
    (void)arg;
    struct ibv_wc wc[16];
    int got = 0;
    while (got < N) {
        int n = ibv_poll_cq(scq, 16, wc);
        if (n < 0) DIE("poll send cq");
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) DIE("send status %s", ibv_wc_status_str(wc[i].status));
            if (wc[i].wr_id != (uint64_t)got + i) DIE("send completion %llu out of order", (unsigned long long)wc[i].wr_id);
        }
        got += n;
        polled = got;
    }
    sends_done = got;
    return NULL;
}

/* Spins on a CQ of the device whose async events main waits for: an
   application that keeps polling must not hold those events back. */
static struct ibv_cq *spin_cq;
static volatile int stop_spin;
static void *spinner(void *arg) {
    (void)arg;
    struct ibv_wc wc[16];
    while (!stop_spin)
        if (ibv_poll_cq(spin_cq, 16, wc) < 0) DIE("spinner poll");
    return NULL;
}

static void *receiver(void *arg) {
    (void)arg;
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN }, out;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev)) DIE("epoll_ctl");
    if (ibv_req_notify_cq(rcq, 0)) DIE("req_notify");
    int got = 0, wakeups = 0;
    struct ibv_wc wc[16];
    while (got < N) {
        int n = epoll_wait(ep, &out, 1, 10000);
        if (n != 1) {
            int left = ibv_poll_cq(rcq, 16, wc);
            DIE("epoll_wait gave %d after %d messages (posted %d, send completions %d, completions waiting %d)",
                n, got, posted, polled, left);
        }
        struct ibv_cq *cq; void *cq_ctx;
        if (ibv_get_cq_event(ch, &cq, &cq_ctx)) DIE("get_cq_event");
        if (cq != rcq || cq_ctx != (void *)0x5eed) DIE("event of another CQ");
        ibv_ack_cq_events(cq, 1);
        wakeups++;
        if (ibv_req_notify_cq(rcq, 0)) DIE("re-arm");
        while ((n = ibv_poll_cq(rcq, 16, wc)) > 0) {
            for (int i = 0; i < n; i++) {
                char want[MSG];
                snprintf(want, MSG, "message %d", got);
                if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != MSG) DIE("recv status/len");
                if (strcmp(rbuf[wc[i].wr_id], want)) DIE("payload %d is '%s'", got, rbuf[wc[i].wr_id]);
                post_recv(wc[i].wr_id);
                got++;
            }
        }
        if (n < 0) DIE("poll recv cq");
    }
    printf("received %d messages in order, %d wakeups\n", got, wakeups);
    return NULL;
}

int main(void) {
    int num;
    struct ibv_device **l = ibv_get_device_list(&num);
    if (!l || num != 2) DIE("two devices");
    c0 = ibv_open_device(l[0]); c1 = ibv_open_device(l[1]);
    if (!c0 || !c1) DIE("open");
    pd0 = ibv_alloc_pd(c0); pd1 = ibv_alloc_pd(c1);
    ch = ibv_create_comp_channel(c1);
    scq = ibv_create_cq(c0, 64, NULL, NULL, 0);
    rcq = ibv_create_cq(c1, 128, (void *)0x5eed, ch, 0);
    if (!pd0 || !pd1 || !ch || !scq || !rcq) DIE("resources");
    smr = ibv_reg_mr(pd0, sbuf, sizeof sbuf, 0);
    rmr = ibv_reg_mr(pd1, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
    if (!smr || !rmr) DIE("reg_mr");
    struct ibv_qp_init_attr ia = { .send_cq = scq, .recv_cq = scq, .qp_type = IBV_QPT_RC,
                                   .cap = { .max_send_wr = 32, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 } };
    q0 = ibv_create_qp(pd0, &ia);
    ia.send_cq = rcq; ia.recv_cq = rcq;
    q1 = ibv_create_qp(pd1, &ia);
    if (!q0 || !q1) DIE("create_qp");
    connect_qp(q0, c1, q1->qp_num);
    connect_qp(q1, c0, q0->qp_num);
    for (int i = 0; i < 64; i++) post_recv(i); /* receives are posted in INIT or later */

    pthread_t t[3];
    pthread_create(&t[0], NULL, receiver, NULL);
    pthread_create(&t[1], NULL, send_poller, NULL);
    pthread_create(&t[2], NULL, sender, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("sent %d messages\n", sends_done);

    /* A receive CQ that nobody polls: the library makes it at least 63
       deep (cq->cqe says how deep); that many and more messages overflow it. */
    struct ibv_cq *tiny = ibv_create_cq(c1, 2, (void *)0x7177, NULL, 0);
    struct ibv_cq *scq2 = ibv_create_cq(c0, 16, NULL, NULL, 0);
    ia.send_cq = scq2; ia.recv_cq = scq2;
    struct ibv_qp *a0 = ibv_create_qp(pd0, &ia);
    ia.send_cq = tiny; ia.recv_cq = tiny; ia.cap.max_recv_wr = 256;
    struct ibv_qp *a1 = ibv_create_qp(pd1, &ia);
    if (!tiny || !scq2 || !a0 || !a1) DIE("overflow resources");
    int extra = tiny->cqe + 8;
    printf("tiny CQ: asked 2, made %d\n", tiny->cqe);
    connect_qp(a0, c1, a1->qp_num);
    connect_qp(a1, c0, a0->qp_num);
    for (int i = 0; i < extra; i++) {
        struct ibv_sge s = { (uintptr_t)rbuf[i % 64], MSG, rmr->lkey };
        struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
        if (ibv_post_recv(a1, &w, &bad)) DIE("post_recv a1");
    }
    for (int i = 0; i < extra; i++) {
        struct ibv_sge s = { (uintptr_t)sbuf[i], MSG, smr->lkey };
        struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED }, *bad;
        int r;
        struct ibv_wc wc[16];
        while ((r = ibv_post_send(a0, &w, &bad)) == ENOMEM)
            ibv_poll_cq(scq2, 16, wc); /* the sender's own CQ is drained */
        if (r) { errno = r; DIE("post_send a0 %d", i); }
        while (ibv_poll_cq(scq2, 16, wc) > 0) ;
    }
    /* An SRQ of 8 receives armed at 4: the fifth message takes it below. */
    struct ibv_srq_init_attr si = { .attr = { .max_wr = 8, .max_sge = 1 } };
    struct ibv_srq *srq = ibv_create_srq(pd1, &si);
    struct ibv_cq *scq3 = ibv_create_cq(c0, 16, NULL, NULL, 0), *rcq3 = ibv_create_cq(c1, 16, NULL, NULL, 0);
    if (!srq || !scq3 || !rcq3) DIE("srq resources");
    ia.send_cq = scq3; ia.recv_cq = scq3; ia.srq = NULL; ia.cap.max_recv_wr = 64;
    struct ibv_qp *b0 = ibv_create_qp(pd0, &ia);
    ia.send_cq = rcq3; ia.recv_cq = rcq3; ia.srq = srq;
    struct ibv_qp *b1 = ibv_create_qp(pd1, &ia);
    if (!b0 || !b1) DIE("srq qps");
    connect_qp(b0, c1, b1->qp_num);
    connect_qp(b1, c0, b0->qp_num);
    for (int i = 0; i < 8; i++) {
        struct ibv_sge s = { (uintptr_t)rbuf[8 + i], MSG, rmr->lkey };
        struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
        if (ibv_post_srq_recv(srq, &w, &bad)) DIE("post_srq_recv");
    }
    struct ibv_srq_attr sa = { .srq_limit = 4 };
    if (ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT)) DIE("arm the SRQ limit");
    pthread_t spin;
    spin_cq = rcq3;
    pthread_create(&spin, NULL, spinner, NULL);
    for (int i = 0; i < 5; i++) {
        struct ibv_sge s = { (uintptr_t)sbuf[i], MSG, smr->lkey };
        struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED }, *bad;
        if (ibv_post_send(b0, &w, &bad)) DIE("post_send b0");
    }

    int cq_err = 0, srq_limit = 0;
    while (!cq_err || !srq_limit) {
        struct pollfd pfd = { .fd = c1->async_fd, .events = POLLIN };
        if (poll(&pfd, 1, 10000) != 1) DIE("no async event within 10 s (cq error %d, srq limit %d)", cq_err, srq_limit);
        struct ibv_async_event e;
        if (ibv_get_async_event(c1, &e)) DIE("get_async_event");
        printf("async event %s\n", ibv_event_type_str(e.event_type));
        if (e.event_type == IBV_EVENT_CQ_ERR && e.element.cq == tiny) cq_err = 1;
        if (e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && e.element.srq == srq) srq_limit = 1;
        ibv_ack_async_event(&e);
    }
    stop_spin = 1;
    pthread_join(spin, NULL);
    printf("async events: CQ error of the tiny CQ, SRQ limit of the SRQ\n");
    printf("done\n");
    return 0;
}
"#;

#[test]
fn threads_channels_and_async_events_from_c() {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        testkit::skip("/usr/include/infiniband/verbs.h is absent (apt-get install libibverbs-dev)");
        return;
    }
    if common::need("cc", "gcc").is_none() {
        return;
    }
    let dir = common::link_dir("threads");
    let exe = common::compile(&dir, "threads", &format!("{PROGRAM}\n"));
    let run = std::process::Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTROCE_DEVICES", "thr0=127.0.14.1,thr1=127.0.14.2")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the threads program");
    let (out, in_time) = common::wait(run, std::time::Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert!(in_time && out.status.success(), "{}", common::show(&out));
    assert!(text.contains("received 2000 messages in order"), "{text}");
    assert!(text.contains("sent 2000 messages"), "{text}");
    assert!(text.contains("async events: CQ error of the tiny CQ, SRQ limit of the SRQ"), "{text}");
    // The library rounds CQ sizes up, as providers do, and says so in cq->cqe.
    assert!(text.contains("tiny CQ: asked 2, made 63"), "{text}");
    assert!(text.contains("done"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two threads race a destroy against a create that uses the object:
/// `ibv_destroy_cq` against `ibv_create_qp` on that CQ, `ibv_dealloc_pd`
/// against `ibv_reg_mr` on that PD, and `ibv_destroy_comp_channel` against
/// `ibv_create_cq` on that channel. Exactly one may win each round: either
/// the create succeeds and the destroy says EBUSY, or the destroy succeeds
/// and the create fails with EINVAL. (Before the uses were taken with the
/// lookup, both could succeed, leaving a QP on a freed CQ.)
const RACE: &str = r#"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define ROUNDS 1500
#define DIE(...) do { printf("FAIL " __VA_ARGS__); printf(" errno=%d\n", errno); exit(1); } while (0)

static struct ibv_context *ctx;
static pthread_barrier_t start, done;
static int kind, round_no;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_comp_channel *ch;
static void *made; static int made_errno, destroyed;
static char buf[4096];

static void *creator(void *arg) {
    (void)arg;
    for (;;) {
        pthread_barrier_wait(&start);
        if (round_no < 0) return NULL;
        errno = 0;
        if (kind == 0) {
            struct ibv_qp_init_attr a;
            memset(&a, 0, sizeof a);
            a.send_cq = cq; a.recv_cq = cq; a.qp_type = IBV_QPT_RC;
            a.cap.max_send_wr = 4; a.cap.max_recv_wr = 4; a.cap.max_send_sge = 1; a.cap.max_recv_sge = 1;
            made = ibv_create_qp(pd, &a);
        } else if (kind == 1) {
            made = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
        } else {
            made = ibv_create_cq(ctx, 8, NULL, ch, 0);
        }
        made_errno = errno;
        pthread_barrier_wait(&done);
    }
}

int main(void) {
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 1) DIE("no device");
    ctx = ibv_open_device(list[0]);
    if (!ctx) DIE("open");
    pthread_barrier_init(&start, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, creator, NULL);
    const char *names[3] = { "destroy_cq/create_qp", "dealloc_pd/reg_mr", "destroy_comp_channel/create_cq" };
    for (kind = 0; kind < 3; kind++) {
        int create_won = 0, destroy_won = 0;
        for (round_no = 0; round_no < ROUNDS; round_no++) {
            if (!(pd = ibv_alloc_pd(ctx))) DIE("alloc_pd");
            if (!(ch = ibv_create_comp_channel(ctx))) DIE("create_comp_channel");
            if (!(cq = ibv_create_cq(ctx, 8, NULL, NULL, 0))) DIE("create_cq");
            pthread_barrier_wait(&start);
            if (kind == 0) destroyed = ibv_destroy_cq(cq);
            else if (kind == 1) destroyed = ibv_dealloc_pd(pd);
            else destroyed = ibv_destroy_comp_channel(ch) ? errno : 0;
            pthread_barrier_wait(&done);
            if (made && destroyed == 0)
                DIE("%s round %d: the create and the destroy both succeeded", names[kind], round_no);
            if (!made && destroyed != 0)
                DIE("%s round %d: both failed (create errno %d, destroy %d)", names[kind], round_no, made_errno, destroyed);
            if (made) {
                if (destroyed != EBUSY) DIE("%s: destroy said %d, not EBUSY", names[kind], destroyed);
                create_won++;
                int r = kind == 0 ? ibv_destroy_qp(made) : kind == 1 ? ibv_dereg_mr(made) : ibv_destroy_cq(made);
                if (r) DIE("%s: destroying what was made: %d", names[kind], r);
            } else {
                if (made_errno != EINVAL) DIE("%s: create failed with errno %d, not EINVAL", names[kind], made_errno);
                destroy_won++;
            }
            /* Whatever survived the round goes now, and must go cleanly. */
            if (kind != 0 || made) { if (ibv_destroy_cq(cq)) DIE("destroy_cq after round"); }
            if (kind != 2 || made) { if (ibv_destroy_comp_channel(ch)) DIE("destroy_comp_channel after round"); }
            if (kind != 1 || made) { if (ibv_dealloc_pd(pd)) DIE("dealloc_pd after round"); }
        }
        printf("%s: %d rounds, create first %d, destroy first %d\n", names[kind], ROUNDS, create_won, destroy_won);
    }
    round_no = -1;
    pthread_barrier_wait(&start);
    pthread_join(t, NULL);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    printf("done\n");
    return 0;
}
"#;

#[test]
fn a_destroy_racing_a_create_that_uses_the_object_lets_exactly_one_win() {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        testkit::skip("/usr/include/infiniband/verbs.h is absent (apt-get install libibverbs-dev)");
        return;
    }
    if common::need("cc", "gcc").is_none() {
        return;
    }
    let dir = common::link_dir("race");
    let exe = common::compile(&dir, "race", RACE);
    let run = std::process::Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTROCE_DEVICES", "race0=127.0.14.3")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the race program");
    let (out, in_time) = common::wait(run, std::time::Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert!(in_time && out.status.success(), "{}", common::show(&out));
    for pair in ["destroy_cq/create_qp", "dealloc_pd/reg_mr", "destroy_comp_channel/create_cq"] {
        assert!(text.contains(&format!("{pair}: 1500 rounds")), "{text}");
    }
    assert!(text.contains("done"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
