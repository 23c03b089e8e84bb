//! Fork safety, as pyverbs' rdmacm tests and servers that fork need it: a
//! process opens the device, forks, and the child (with the parent's
//! memory but none of its threads) opens the same device afresh and
//! talks RC to its parent over it, on one address: the child gets its
//! own engine and slot of the shared port, not the parent's, and holds
//! no copy of the parent's socket of the port.

mod common;

/// The count of sockets on the port below is one engine's (each engine of
/// a device of several has one), whatever `SOFTROCE_THREADS` the tests
/// run with.
const ONE_ENGINE: &[(&str, &str)] = &[("SOFTROCE_THREADS", "1")];

const PROGRAM: &str = r#"
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <infiniband/verbs.h>

/* How many of this process's descriptors are sockets bound to the
 * device's port (127.0.22.20:4791, from /proc/net/udp): one, its own, if
 * a forked child let go of its parent's. */
static int port_fds(void) {
    unsigned long inodes[64]; int n = 0, found = 0;
    char line[512];
    FILE *f = fopen("/proc/net/udp", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f) && n < 64) {
        char local[64]; unsigned long inode;
        if (sscanf(line, " %*d: %63s %*s %*s %*s %*s %*s %*s %*s %lu", local, &inode) == 2 && !strcmp(local, "1416007F:12B7"))
            inodes[n++] = inode;
    }
    fclose(f);
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300], target[64]; ssize_t len;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        if ((len = readlink(path, target, sizeof target - 1)) <= 0) continue;
        target[len] = 0;
        for (int i = 0; i < n; i++) {
            char want[64]; snprintf(want, sizeof want, "socket:[%lu]", inodes[i]);
            if (!strcmp(target, want)) found++;
        }
    }
    if (d) closedir(d);
    return found;
}

struct side { struct ibv_context *ctx; struct ibv_pd *pd; struct ibv_cq *cq; struct ibv_qp *qp; struct ibv_mr *mr; char buf[64]; };

static int open_side(struct side *s) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) return -1;
    s->ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (!s->ctx) return -2;
    s->pd = ibv_alloc_pd(s->ctx);
    s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
    struct ibv_qp_init_attr ia; memset(&ia, 0, sizeof ia);
    ia.send_cq = s->cq; ia.recv_cq = s->cq; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 4; ia.cap.max_recv_wr = 4; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    s->qp = ibv_create_qp(s->pd, &ia);
    s->mr = ibv_reg_mr(s->pd, s->buf, sizeof s->buf, IBV_ACCESS_LOCAL_WRITE);
    return s->pd && s->cq && s->qp && s->mr ? 0 : -3;
}

static int connect_rc(struct side *s, uint32_t dest) {
    struct ibv_qp_attr t; memset(&t, 0, sizeof t);
    t.qp_state = IBV_QPS_INIT; t.port_num = 1;
    if (ibv_modify_qp(s->qp, &t, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    t.qp_state = IBV_QPS_RTR; t.path_mtu = IBV_MTU_1024; t.dest_qp_num = dest; t.max_dest_rd_atomic = 1; t.min_rnr_timer = 1;
    t.ah_attr.is_global = 1; t.ah_attr.port_num = 1; t.ah_attr.grh.hop_limit = 1; ibv_query_gid(s->ctx, 1, 0, &t.ah_attr.grh.dgid);
    if (ibv_modify_qp(s->qp, &t, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return -2;
    t.qp_state = IBV_QPS_RTS; t.timeout = 14; t.retry_cnt = 7; t.rnr_retry = 7; t.max_rd_atomic = 1;
    return ibv_modify_qp(s->qp, &t, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) ? -3 : 0;
}

static int post_recv(struct side *s) {
    struct ibv_sge g = { (uintptr_t)s->buf, sizeof s->buf, s->mr->lkey };
    struct ibv_recv_wr w = { .wr_id = 1, .sg_list = &g, .num_sge = 1 }, *bad;
    return ibv_post_recv(s->qp, &w, &bad);
}

static int send_text(struct side *s, const char *text) {
    strcpy(s->buf, text);
    struct ibv_sge g = { (uintptr_t)s->buf, strlen(text) + 1, s->mr->lkey };
    struct ibv_send_wr w = { .wr_id = 2, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
    return ibv_post_send(s->qp, &w, &bad);
}

/* Waits up to 10 s for the completion of wr_id; its status or -1. */
static int wait_wc(struct side *s, uint64_t id) {
    struct ibv_wc wc;
    for (int i = 0; i < 10000; i++) {
        if (ibv_poll_cq(s->cq, 1, &wc) == 1 && wc.wr_id == id) return wc.status;
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    }
    return -1;
}

int main(void) {
    struct side p, c;
    if (open_side(&p)) { printf("parent open failed\n"); return 2; }
    int to_child[2], to_parent[2];
    if (pipe(to_child) || pipe(to_parent)) return 3;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int r = open_side(&c);
        printf("child open=%d qpn=%u\n", r, r ? 0 : c.qp->qp_num);
        printf("child port fds=%d\n", port_fds());
        if (r) return 10;
        uint32_t peer;
        if (write(to_parent[1], &c.qp->qp_num, 4) != 4 || read(to_child[0], &peer, 4) != 4) return 11;
        if (connect_rc(&c, peer) || post_recv(&c)) return 12;
        if (write(to_parent[1], "r", 1) != 1) return 13;
        int st = wait_wc(&c, 1);
        printf("child received status=%d text=%s\n", st, c.buf);
        if (send_text(&c, "pong from the child")) return 14;
        printf("child sent status=%d\n", wait_wc(&c, 2));
        fflush(stdout);
        return st == 0 ? 0 : 15;
    }
    uint32_t peer; char ready;
    if (read(to_parent[0], &peer, 4) != 4 || write(to_child[1], &p.qp->qp_num, 4) != 4) return 4;
    printf("parent qpn=%u\n", p.qp->qp_num);
    printf("parent port fds=%d\n", port_fds());
    if (connect_rc(&p, peer) || post_recv(&p)) return 5;
    if (read(to_parent[0], &ready, 1) != 1) return 6;
    if (send_text(&p, "ping from the parent")) return 7;
    printf("parent sent status=%d\n", wait_wc(&p, 2));
    int st = wait_wc(&p, 1);
    printf("parent received status=%d text=%s\n", st, p.buf);
    int ws = 0;
    waitpid(pid, &ws, 0);
    printf("child exit=%d\n", WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    fflush(stdout);
    return st == 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : 8;
}
"#;

#[test]
fn a_forked_child_opens_the_device_afresh_and_talks_rc_to_its_parent() {
    let Some(text) = common::run_c_with("fork", "rxe0=127.0.22.20", ONE_ENGINE, PROGRAM) else { return };
    common::check_lines(
        &text,
        &[
            "child open=0",
            // Each holds its own socket of the port: the child let go of
            // its copy of the parent's (which would outlive the parent).
            "child port fds=1",
            "parent port fds=1",
            "parent sent status=0",
            "child received status=0 text=ping from the parent",
            "child sent status=0",
            "parent received status=0 text=pong from the child",
            "child exit=0",
        ],
    );
    // The child has a slot of its own: its QPNs lie in another range.
    let qpn = |who: &str| -> u32 {
        let line = text.lines().find(|l| l.starts_with(who) && l.contains("qpn=")).expect("a QPN line");
        line.split("qpn=").nth(1).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).expect("QPN")
    };
    let shift = 24 - rdma_core_rs::share::steer::SLOT_BITS;
    assert_ne!(qpn("parent") >> shift, qpn("child") >> shift, "{text}");
}
