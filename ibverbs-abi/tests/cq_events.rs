//! Completion events as libibverbs defines them: `ibv_req_notify_cq` arms
//! a CQ for one event, raised by the next completion added to *that* CQ;
//! completions it holds already, and completions of other CQs on the same
//! channel, raise none. perftest's `-e` latency loops count on it: they
//! take one event per step and poll once, so one spurious event makes the
//! two sides' counts drift until both sleep in `ibv_get_cq_event` for
//! good (`ib_send_lat -e` hung in about half the runs before).
//!
//! Two C programs over two devices in one process: one checks the rule
//! step by step, the other runs `run_iter_lat_send`'s order of calls
//! (perftest 4.5 with `-e`) for many rounds with a watchdog on every wait.

mod common;

use std::time::Duration;

/// The connection both programs use: an RC QP on each device, `rc0`
/// reporting its send and receive CQs to one channel, as perftest does.
const COMMON: &str = r#"
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define DIE(...) do { printf("FAIL " __VA_ARGS__); printf(" errno=%d\n", errno); fflush(stdout); exit(1); } while (0)
#define RX 16
#define SIZE 2

struct side {
    const char *name; int client;
    struct ibv_context *ctx; struct ibv_pd *pd; struct ibv_comp_channel *ch;
    struct ibv_cq *scq, *rcq; struct ibv_qp *qp; struct ibv_mr *mr;
    char buf[2][64];
    long scnt, rcnt, send_events, recv_events, empty_polls;
};
static struct side S[2];

static void connect_qp(struct side *s, struct side *peer) {
    union ibv_gid g;
    if (ibv_query_gid(peer->ctx, 1, 0, &g)) DIE("query_gid");
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) DIE("init");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = peer->qp->qp_num; a.rq_psn = 0;
    a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = g; a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) DIE("rtr");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 0; a.max_rd_atomic = 1;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                      IBV_QP_MAX_QP_RD_ATOMIC)) DIE("rts");
}

static void post_recv(struct side *s, int slot) {
    struct ibv_sge g = { (uintptr_t)s->buf[1], SIZE, s->mr->lkey };
    struct ibv_recv_wr w = { .wr_id = slot, .sg_list = &g, .num_sge = 1 }, *bad;
    if (ibv_post_recv(s->qp, &w, &bad)) DIE("post_recv");
}

static void post_send(struct side *s) {
    struct ibv_sge g = { (uintptr_t)s->buf[0], SIZE, s->mr->lkey };
    struct ibv_send_wr w = { .wr_id = 7, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;
    if (ibv_post_send(s->qp, &w, &bad)) DIE("%s post_send %ld", s->name, s->scnt);
}

/* `with_channel`: both CQs report to a channel (else none, for a peer
   that polls). */
static void setup(struct side *s, int with_channel) {
    s->ch = with_channel ? ibv_create_comp_channel(s->ctx) : NULL;
    s->scq = ibv_create_cq(s->ctx, 1, NULL, s->ch, 0);
    s->rcq = ibv_create_cq(s->ctx, RX, NULL, s->ch, 0);
    s->mr = ibv_reg_mr(s->pd, s->buf, sizeof s->buf, IBV_ACCESS_LOCAL_WRITE);
    if ((with_channel && !s->ch) || !s->scq || !s->rcq || !s->mr) DIE("resources");
    struct ibv_qp_init_attr ia = { .send_cq = s->scq, .recv_cq = s->rcq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 4, .max_recv_wr = RX, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64 } };
    s->qp = ibv_create_qp(s->pd, &ia);
    if (!s->qp) DIE("create_qp");
    s->send_events = s->recv_events = s->empty_polls = 0;
}

static void teardown(struct side *s) {
    if (ibv_destroy_qp(s->qp) || ibv_destroy_cq(s->scq) || ibv_destroy_cq(s->rcq) || ibv_dereg_mr(s->mr) ||
        (s->ch && ibv_destroy_comp_channel(s->ch))) DIE("teardown");
}

static void open_both(void) {
    int num;
    struct ibv_device **l = ibv_get_device_list(&num);
    if (!l || num != 2) DIE("two devices");
    S[0].name = "client"; S[0].client = 1; S[1].name = "server";
    for (int i = 0; i < 2; i++)
        if (!(S[i].ctx = ibv_open_device(l[i])) || !(S[i].pd = ibv_alloc_pd(S[i].ctx))) DIE("open");
    ibv_free_device_list(l);
}

/* Whether the channel's fd becomes readable within `ms`. */
static int event_within(struct side *s, int ms) {
    struct pollfd p = { .fd = s->ch->fd, .events = POLLIN };
    return poll(&p, 1, ms) == 1;
}

/* Takes one event (it must come within 5 s); returns its CQ. */
static struct ibv_cq *take_event(struct side *s, const char *waiting_for) {
    if (!event_within(s, 5000)) DIE("no event within 5 s (waiting for %s)", waiting_for);
    struct ibv_cq *cq; void *cctx;
    if (ibv_get_cq_event(s->ch, &cq, &cctx)) DIE("get_cq_event");
    ibv_ack_cq_events(cq, 1);
    return cq;
}

/* Polls `cq` until it has given `n` completions (10 s at most). */
static void drain(struct ibv_cq *cq, int n, const char *what) {
    struct ibv_wc wc;
    for (int tries = 0; n > 0; tries++) {
        int got = ibv_poll_cq(cq, 1, &wc);
        if (got < 0) DIE("poll %s", what);
        if (got == 1 && wc.status != IBV_WC_SUCCESS) DIE("%s status %s", what, ibv_wc_status_str(wc.status));
        n -= got;
        if (tries > 10000000) DIE("%s: completions missing", what);
    }
}
"#;

/// The rule, one step at a time, on the client's channel (its send and
/// receive CQs both report to it); the server only polls.
const RULE: &str = r#"
int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    open_both();
    struct side *c = &S[0], *srv = &S[1];
    setup(c, 1); setup(srv, 0);
    connect_qp(c, srv); connect_qp(srv, c);
    for (int k = 0; k < RX; k++) { post_recv(c, k); post_recv(srv, k); }

    /* 1. A send whose completion stays in the send CQ, unpolled. */
    if (ibv_req_notify_cq(c->scq, 0)) DIE("arm send CQ");
    post_send(c);
    if (take_event(c, "the first send") != c->scq) DIE("the first event is not the send CQ's");
    drain(srv->rcq, 1, "server recv");
    printf("step 1: one event for the send CQ's first completion\n");

    /* 2. Both CQs armed, the send CQ holding that completion: nothing is
       raised by the arming itself. */
    if (ibv_req_notify_cq(c->scq, 0) || ibv_req_notify_cq(c->rcq, 0)) DIE("arm both");
    if (event_within(c, 200)) DIE("an event came from arming a CQ that holds an old completion");
    printf("step 2: arming a CQ that holds a completion raised no event\n");

    /* 3. A completion for the receive CQ: its event, and none for the
       send CQ, which received nothing new. */
    post_send(srv);
    drain(srv->scq, 1, "server send");
    if (take_event(c, "the receive") != c->rcq) DIE("the event after a receive is the send CQ's");
    if (event_within(c, 300)) {
        struct ibv_cq *cq = take_event(c, "nothing");
        DIE("a second event, for the %s CQ, after one receive", cq == c->scq ? "send" : "receive");
    }
    printf("step 3: a receive raised one event, the receive CQ's\n");

    /* 4. A new completion for the send CQ, still armed and never polled
       since: its event comes. */
    post_send(c);
    if (take_event(c, "the second send") != c->scq) DIE("the event after the second send is not the send CQ's");
    drain(srv->rcq, 1, "server recv");
    if (event_within(c, 200)) DIE("an extra event after the second send");
    drain(c->scq, 2, "client send");
    drain(c->rcq, 1, "client recv");
    printf("step 4: a send completing on the armed send CQ raised its event\n");

    /* 5. An armed CQ that was polled empty meanwhile still gets its event
       from the next completion (the polls are not taken for new ones). */
    if (ibv_req_notify_cq(c->rcq, 0)) DIE("re-arm recv");
    post_send(srv);
    drain(srv->scq, 1, "server send");
    if (take_event(c, "the second receive") != c->rcq) DIE("the second receive's event is not the receive CQ's");
    drain(c->rcq, 1, "client recv");
    printf("step 5: the next receive raised the receive CQ's event\n");

    teardown(c); teardown(srv);
    printf("done\n");
    return 0;
}
"#;

/// perftest 4.5's `run_iter_lat_send` with `-e`, client and server as two
/// threads: before each poll, `ctx_notify_events` takes any event of the
/// channel, acks it and re-arms *that event's* CQ; then one poll of the CQ
/// the step wants (the receive CQ, or the send CQ after a send), which may
/// come back empty. A wait that sees no event for 5 s is a hang.
const SEND_LAT: &str = r#"
static int ITERS = 1000, ROUNDS = 20;

static void report(struct side *s, const char *what) {
    printf("%s %s: scnt %ld rcnt %ld events send %ld recv %ld, empty polls %ld\n", s->name, what,
           s->scnt, s->rcnt, s->send_events, s->recv_events, s->empty_polls);
}

static void notify_events(struct side *s) {
    if (!event_within(s, 5000)) {
        report(s, "HANG");
        report(&S[s->client ? 1 : 0], "peer");
        exit(2);
    }
    struct ibv_cq *cq; void *cctx;
    if (ibv_get_cq_event(s->ch, &cq, &cctx)) DIE("get_cq_event");
    if (cq == s->scq) s->send_events++; else if (cq == s->rcq) s->recv_events++; else DIE("event of another CQ");
    ibv_ack_cq_events(cq, 1);
    if (ibv_req_notify_cq(cq, 0)) DIE("req_notify");
}

static void *run(void *arg) {
    struct side *s = arg;
    struct ibv_wc wc;
    s->scnt = s->rcnt = 0;
    while (s->scnt < ITERS || s->rcnt < ITERS) {
        if (s->rcnt < ITERS && !(s->scnt < 1 && s->client)) {
            notify_events(s);
            int ne = ibv_poll_cq(s->rcq, 1, &wc);
            if (ne < 0) DIE("poll recv");
            if (ne == 0) s->empty_polls++;
            else {
                if (wc.status != IBV_WC_SUCCESS) DIE("%s recv status %d", s->name, wc.status);
                s->rcnt++;
                if (s->rcnt + RX <= ITERS) post_recv(s, wc.wr_id);
            }
        }
        if (s->scnt < ITERS) {
            s->scnt++;
            post_send(s);
            notify_events(s);
            int ne = ibv_poll_cq(s->scq, 1, &wc);
            if (ne < 0) DIE("poll send");
            if (ne == 0) s->empty_polls++;
            else if (wc.status != IBV_WC_SUCCESS) DIE("%s send status %d", s->name, wc.status);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) ROUNDS = atoi(argv[1]);
    if (argc > 2) ITERS = atoi(argv[2]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    open_both();
    long empty = 0;
    for (int r = 0; r < ROUNDS; r++) {
        setup(&S[0], 1); setup(&S[1], 1);
        connect_qp(&S[0], &S[1]); connect_qp(&S[1], &S[0]);
        for (int i = 0; i < 2; i++) {
            for (int k = 0; k < RX; k++) post_recv(&S[i], k);
            if (ibv_req_notify_cq(S[i].scq, 0) || ibv_req_notify_cq(S[i].rcq, 0)) DIE("arm");
        }
        pthread_t t[2];
        pthread_create(&t[1], NULL, run, &S[1]);
        pthread_create(&t[0], NULL, run, &S[0]);
        pthread_join(t[0], NULL); pthread_join(t[1], NULL);
        /* Every completion raised its own event: none is left over, and
           (with the ACK ahead of the reply, as on loopback) no poll came
           back empty. A spurious event shows as an empty poll, then a hang. */
        for (int i = 0; i < 2; i++) {
            if (event_within(&S[i], 50)) { report(&S[i], "EXTRA"); DIE("round %d: an event left over", r); }
            if (S[i].send_events != ITERS || S[i].recv_events != ITERS) {
                report(&S[i], "EVENTS");
                DIE("round %d: %s took events for the wrong CQs", r, S[i].name);
            }
            empty += S[i].empty_polls;
        }
        teardown(&S[0]); teardown(&S[1]);
    }
    printf("rounds %d of %d iterations: no hang, %ld empty polls\n", ROUNDS, ITERS, empty);
    return 0;
}
"#;

/// Compiles `main_src` after [`COMMON`] and runs it over two devices at
/// `net`; returns its stdout, after checking it exited 0 within `limit`.
fn run_c(tag: &str, main_src: &str, net: u8, args: &[&str], limit: Duration) -> Option<String> {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        testkit::skip("/usr/include/infiniband/verbs.h is absent (apt-get install libibverbs-dev)");
        return None;
    }
    common::need("cc", "gcc")?;
    let dir = common::link_dir(tag);
    let exe = common::compile(&dir, tag, &format!("{COMMON}\n{main_src}\n"));
    let run = std::process::Command::new(&exe)
        .args(args)
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTROCE_DEVICES", format!("{tag}0=127.0.{net}.1,{tag}1=127.0.{net}.2"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the C program");
    let (out, in_time) = common::wait(run, limit);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert!(in_time && out.status.success(), "{}", common::show(&out));
    let _ = std::fs::remove_dir_all(&dir);
    Some(text)
}

#[test]
fn an_armed_cq_gets_an_event_only_for_a_completion_added_after_the_arming() {
    let Some(text) = run_c("cqrule", RULE, 15, &[], Duration::from_secs(60)) else { return };
    for step in 1..=5 {
        assert!(text.contains(&format!("step {step}:")), "step {step} missing:\n{text}");
    }
    assert!(text.contains("done"), "{text}");
}

#[test]
fn send_lat_event_loop_never_hangs() {
    let Some(text) = run_c("cqlat", SEND_LAT, 16, &["30", "500"], Duration::from_secs(120)) else { return };
    assert!(text.contains("rounds 30 of 500 iterations: no hang, 0 empty polls"), "{text}");
}
