//! Random misuse from C: a seeded walk of libibverbs calls over pools of
//! objects, each argument picked live, destroyed, NULL, foreign (a struct
//! the program made itself) or of the wrong type; then two threads, one
//! destroying what the other polls and posts to. The library must never
//! crash or hang, and must answer as libibverbs does: an invalid object
//! gets EINVAL (a NULL pointer with errno, or the errno returned), a live
//! one succeeds unless it is still in use (EBUSY). The program checks
//! every answer itself and prints each violation; the test wants none.

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static uint64_t rng;
static unsigned next(unsigned n) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (unsigned)(rng % n); }
static long violations, checks;
#define BAD(...) do { violations++; printf("VIOLATION "); printf(__VA_ARGS__); printf("\n"); } while (0)

enum { N = 6 };
/* A pool entry: the object, whether it is live, and what depends on it. */
struct slot { void *p; int live; int users; int pd, cq; };
static struct slot pds[N], cqs[N], mrs[N], qps[N], srqs[N], ahs[N];
static struct ibv_context *ctx;
static char buf[1 << 16];
static union { struct ibv_pd pd; struct ibv_cq cq; struct ibv_qp qp; struct ibv_mr mr; struct ibv_srq srq; struct ibv_ah ah; char raw[512]; } fake;

/* An argument of a call: 0 live, 1 destroyed, 2 NULL, 3 foreign, 4 wrong type. */
static int kind;
/* Whether `p` is a live object of any pool: malloc reuses a destroyed
 * object's address, and then that pointer names the new object. */
static int live_anywhere(void *p) {
    struct slot *pools[] = { pds, cqs, mrs, qps, srqs, ahs };
    for (int k = 0; k < 6; k++) for (int i = 0; i < N; i++) if (pools[k][i].live && pools[k][i].p == p) return 1;
    return 0;
}
static void *pick(struct slot *pool, int *idx, void *wrong) {
    int i = next(N);
    *idx = i;
    kind = next(5);
    switch (kind) {
    case 0: if (pool[i].live) return pool[i].p; kind = 2; return NULL;
    case 1: if (pool[i].p && !pool[i].live && !live_anywhere(pool[i].p)) return pool[i].p; kind = 2; return NULL;
    case 2: return NULL;
    case 3: return &fake;
    default:
        /* a dead object of another type may share its address with a live one of this type */
        for (int k = 0; k < N; k++) if (pool[k].live && pool[k].p == wrong) { kind = 2; return NULL; }
        return wrong;
    }
}
static int valid(void) { return kind == 0; }

static void want_ptr(const char *call, void *r, int ok_expected) {
    checks++;
    if (!valid()) { if (r || errno != EINVAL) BAD("%s kind=%d: ret=%p errno=%d, want NULL/EINVAL", call, kind, r, errno); }
    else if (ok_expected && !r) BAD("%s on live objects failed errno=%d", call, errno);
}
static void want_int(const char *call, int r, int ok) {
    checks++;
    if (!valid()) { if (r != EINVAL) BAD("%s kind=%d: ret=%d, want EINVAL", call, kind, r); }
    else if (r != ok) BAD("%s on a live object: ret=%d, want %d", call, r, ok);
}

static void step(void) {
    int i, j;
    errno = 0;
    switch (next(12)) {
    case 0: { /* alloc a PD */
        for (i = 0; i < N && pds[i].live; i++) ;
        if (i == N) break;
        struct ibv_pd *pd = ibv_alloc_pd(ctx);
        if (!pd) { BAD("alloc_pd errno=%d", errno); break; }
        pds[i] = (struct slot){ pd, 1, 0, -1, -1 };
        break; }
    case 1: { /* dealloc a PD */
        struct ibv_pd *pd = pick(pds, &i, cqs[0].p);
        int r = ibv_dealloc_pd(pd);
        want_int("dealloc_pd", r, valid() && pds[i].users ? EBUSY : 0);
        if (valid() && r == 0) pds[i].live = 0;
        break; }
    case 2: { /* a CQ */
        for (i = 0; i < N && cqs[i].live; i++) ;
        if (i == N) break;
        int cqe = next(3) ? 1 + next(64) : -1;
        struct ibv_cq *cq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
        checks++;
        if (cqe < 1) { if (cq || errno != EINVAL) BAD("create_cq(%d) ret=%p errno=%d", cqe, (void *)cq, errno); break; }
        if (!cq) { BAD("create_cq errno=%d", errno); break; }
        cqs[i] = (struct slot){ cq, 1, 0, -1, -1 };
        break; }
    case 3: { /* destroy a CQ */
        struct ibv_cq *cq = pick(cqs, &i, pds[0].p);
        int r = ibv_destroy_cq(cq);
        want_int("destroy_cq", r, valid() && cqs[i].users ? EBUSY : 0);
        if (valid() && r == 0) cqs[i].live = 0;
        break; }
    case 4: { /* register an MR on some PD */
        for (j = 0; j < N && mrs[j].live; j++) ;
        if (j == N) break;
        struct ibv_pd *pd = pick(pds, &i, cqs[1].p);
        struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
        want_ptr("reg_mr", mr, 1);
        if (mr && valid()) { mrs[j] = (struct slot){ mr, 1, 0, i, -1 }; pds[i].users++; }
        break; }
    case 5: { /* deregister */
        struct ibv_mr *mr = pick(mrs, &i, qps[0].p);
        int r = ibv_dereg_mr(mr);
        want_int("dereg_mr", r, 0);
        if (valid() && r == 0) { mrs[i].live = 0; pds[mrs[i].pd].users--; }
        break; }
    case 6: { /* a QP on some PD and CQ */
        for (j = 0; j < N && qps[j].live; j++) ;
        if (j == N) break;
        int pi, ci;
        struct ibv_pd *pd = pick(pds, &pi, mrs[0].p);
        int pd_ok = valid();
        struct ibv_cq *cq = pick(cqs, &ci, pds[1].p);
        int cq_ok = valid();
        kind = pd_ok && cq_ok ? 0 : 1;
        struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .cap = { 8, 8, 1, 1, 0 }, .qp_type = next(2) ? IBV_QPT_RC : IBV_QPT_UD };
        struct ibv_qp *qp = ibv_create_qp(pd, &a);
        want_ptr("create_qp", qp, 1);
        if (qp && valid()) { qps[j] = (struct slot){ qp, 1, 0, pi, ci }; pds[pi].users++; cqs[ci].users++; }
        break; }
    case 7: { /* destroy a QP */
        struct ibv_qp *qp = pick(qps, &i, cqs[2].p);
        int r = ibv_destroy_qp(qp);
        want_int("destroy_qp", r, 0);
        if (valid() && r == 0) { qps[i].live = 0; pds[qps[i].pd].users--; cqs[qps[i].cq].users--; }
        break; }
    case 8: { /* modify and query a QP */
        struct ibv_qp *qp = pick(qps, &i, pds[2].p);
        struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
        want_int("modify_qp", ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
        struct ibv_qp_init_attr ia;
        want_int("query_qp", ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
        break; }
    case 9: { /* an AH on some PD */
        for (j = 0; j < N && ahs[j].live; j++) ;
        if (j == N) break;
        struct ibv_pd *pd = pick(pds, &i, qps[1].p);
        struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh = { .hop_limit = 64 } };
        aa.grh.dgid.raw[10] = 0xff; aa.grh.dgid.raw[11] = 0xff; aa.grh.dgid.raw[12] = 127; aa.grh.dgid.raw[15] = 9;
        struct ibv_ah *ah = ibv_create_ah(pd, &aa);
        want_ptr("create_ah", ah, 1);
        if (ah && valid()) { ahs[j] = (struct slot){ ah, 1, 0, i, -1 }; pds[i].users++; }
        break; }
    case 10: { /* destroy an AH */
        struct ibv_ah *ah = pick(ahs, &i, mrs[1].p);
        int r = ibv_destroy_ah(ah);
        want_int("destroy_ah", r, 0);
        if (valid() && r == 0) { ahs[i].live = 0; pds[ahs[i].pd].users--; }
        break; }
    default: { /* an SRQ, made and destroyed */
        struct ibv_pd *pd = pick(pds, &i, ahs[0].p);
        struct ibv_srq_init_attr sa = { .attr = { .max_wr = 1 + next(100), .max_sge = 1 } };
        struct ibv_srq *srq = ibv_create_srq(pd, &sa);
        want_ptr("create_srq", srq, 1);
        if (srq && valid() && ibv_destroy_srq(srq) != 0) BAD("destroy_srq of a fresh SRQ");
        break; }
    }
}

/* Two threads: one polls a CQ and posts to a QP through the function
 * pointers the library gave (as the inline calls do), the other destroys
 * both under it. Calls after the destroy must fail, none may crash. */
static struct ibv_cq *race_cq;
static struct ibv_qp *race_qp;
static volatile int stop;
static int (*poll_fn)(struct ibv_cq *, int, struct ibv_wc *);
static int (*post_fn)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
static long polled_after;
static void *poller(void *arg) {
    (void)arg;
    struct ibv_wc wc[4];
    char b[64];
    while (!stop) {
        int r = poll_fn(race_cq, 4, wc);
        if (r < 0) polled_after++;
        struct ibv_sge sge = { (uintptr_t)b, sizeof b, 0 };
        struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
        post_fn(race_qp, &wr, &bad);
    }
    return NULL;
}

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1 || !(ctx = ibv_open_device(list[0]))) { printf("no device\n"); return 2; }
    long steps = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        rng = seed * 0x9e3779b97f4a7c15ull;
        for (int k = 0; k < 1500; k++, steps++) step();
        /* tear down what is left, dependents first */
        for (int i = 0; i < N; i++) if (qps[i].live) { if (ibv_destroy_qp(qps[i].p)) BAD("cleanup qp"); qps[i].live = 0; }
        for (int i = 0; i < N; i++) if (ahs[i].live) { if (ibv_destroy_ah(ahs[i].p)) BAD("cleanup ah"); ahs[i].live = 0; }
        for (int i = 0; i < N; i++) if (mrs[i].live) { if (ibv_dereg_mr(mrs[i].p)) BAD("cleanup mr"); mrs[i].live = 0; }
        for (int i = 0; i < N; i++) if (cqs[i].live) { if (ibv_destroy_cq(cqs[i].p)) BAD("cleanup cq"); cqs[i].live = 0; }
        for (int i = 0; i < N; i++) if (pds[i].live) { if (ibv_dealloc_pd(pds[i].p)) BAD("cleanup pd"); pds[i].live = 0; }
        memset(pds, 0, sizeof pds); memset(cqs, 0, sizeof cqs); memset(mrs, 0, sizeof mrs);
        memset(qps, 0, sizeof qps); memset(ahs, 0, sizeof ahs);
    }
    for (int round = 0; round < 50; round++) {
        struct ibv_pd *pd = ibv_alloc_pd(ctx);
        race_cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
        struct ibv_qp_init_attr a = { .send_cq = race_cq, .recv_cq = race_cq, .cap = { 8, 64, 1, 1, 0 }, .qp_type = IBV_QPT_UD };
        race_qp = ibv_create_qp(pd, &a);
        if (!pd || !race_cq || !race_qp) { BAD("race setup"); break; }
        poll_fn = race_cq->context->ops.poll_cq;
        post_fn = race_qp->context->ops.post_recv;
        stop = 0;
        pthread_t t;
        pthread_create(&t, NULL, poller, NULL);
        for (volatile int spin = 0; spin < 1000 * (round % 7); spin++) ;
        int rq = ibv_destroy_qp(race_qp), rc = ibv_destroy_cq(race_cq);
        for (volatile int spin = 0; spin < 20000; spin++) ;
        stop = 1;
        pthread_join(t, NULL);
        if (rq != 0 && rq != EBUSY) BAD("race destroy_qp ret=%d", rq);
        if (rc != 0 && rc != EBUSY) BAD("race destroy_cq ret=%d", rc);
        /* after the thread stopped, the objects go for good */
        if (rq == EBUSY && ibv_destroy_qp(race_qp)) BAD("destroy_qp after the race");
        if (rc == EBUSY && ibv_destroy_cq(race_cq)) BAD("destroy_cq after the race");
        struct ibv_wc wc;
        if (poll_fn(race_cq, 1, &wc) >= 0) BAD("poll of a destroyed CQ succeeded");
        checks += 3;
        if (ibv_dealloc_pd(pd)) BAD("race dealloc_pd");
    }
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    printf("steps=%ld checks=%ld violations=%ld\n", steps, checks, violations);
    return 0;
}
"#;

#[test]
fn a_random_walk_of_misuse_gets_libibverbs_answers_and_never_crashes() {
    let Some(text) = common::run_c("misuse_walk", "walk0=127.0.13.20", PROGRAM) else { return };
    let summary = text.lines().find(|l| l.starts_with("steps=")).unwrap_or_else(|| panic!("no summary:\n{text}"));
    assert!(
        summary.ends_with("violations=0"),
        "{}",
        text.lines().filter(|l| l.starts_with("VIOLATION")).take(40).collect::<Vec<_>>().join("\n")
    );
    let checks: u64 = summary
        .split("checks=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!(checks > 10_000, "the walk checked {checks} answers: {summary}");
}
