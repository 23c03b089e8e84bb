/* FLUSH and ATOMIC_WRITE (IBTA 1.5) between two RC QPs on two hosts, through
 * the extended-QP posting API (ibv_wr_atomic_write, ibv_wr_flush), with the
 * bytes checked on both sides. The interop rows of scripts/interop.sh
 * (--trixie) run it against kernel rxe (Linux 6.12, rdma-core 56) in the lab
 * guest, and on the host over this project's libibverbs.so.1 (softroce-run).
 *
 *   flush_atomic_write [-d DEV] [-g GIDX] [-m MTU] [-x MODE]            server (responder)
 *   flush_atomic_write [-d DEV] [-g GIDX] [-m MTU] [-x MODE] SERVER-IP  client (requester)
 *
 * The server registers a 4096-byte region (REMOTE_READ|REMOTE_WRITE|
 * FLUSH_GLOBAL) filled with a pattern and lets its QP do the same; the
 * addresses, keys, QP numbers and GIDs go over TCP port 18515 as in
 * ibv_rc_pingpong. MODE (both sides must agree):
 *   atomic-write       ATOMIC_WRITE at +64 and at +128, then an RDMA READ of
 *                      the region: every completion is SUCCESS with the right
 *                      opcode and byte_len, the 4096 bytes read back are the
 *                      pattern with the two 8-byte values in, and the server
 *                      finds the same bytes in its memory.
 *   flush              the same with a FLUSH after each ATOMIC_WRITE in one
 *                      batch: FLUSH(global, range 0..4096) after the first,
 *                      FLUSH(global, whole MR) after the second.
 *   flush-past         FLUSH(global, range 0..4104): past the region, so the
 *                      client's completion is REM_ACCESS_ERR and the server's
 *                      memory is untouched.
 *   atomic-write-past  ATOMIC_WRITE at +4096 (past the region): the same.
 *   In both misuse modes the server's QP must then be in IBV_QPS_ERR.
 * Exit status 0 when everything matched; the last line says what was seen.
 *
 * Built against rdma-core 44's <infiniband/verbs.h> (Debian 12's), which
 * has ibv_wr_atomic_write but not ibv_wr_flush: rdma-core 45 added wr_flush
 * as the member after wr_atomic_write in struct ibv_qp_ex, so the call goes
 * through that slot (FLUSH_SLOT below). Same binary on both stacks. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define PORT "18515"
#define SIZE 4096
/* rdma-core 45+ values (absent from the 44 header) */
#define ACCESS_FLUSH_GLOBAL (1 << 8)
#define QP_EX_WITH_FLUSH (1ull << 11)
#define FLUSH_GLOBAL 1
#define FLUSH_RANGE 0
#define FLUSH_MR 1
#define WC_FLUSH 8
typedef void (*wr_flush_fn)(struct ibv_qp_ex *, uint32_t rkey, uint64_t addr, size_t len, uint8_t type, uint8_t level);
#define FLUSH_SLOT(x) (*(wr_flush_fn *)(&(x)->wr_atomic_write + 1))

struct info { uint32_t qpn, psn, rkey, len; uint64_t addr; uint8_t gid[16]; };

static const char *mode = "flush";
static int fail(const char *what) { fprintf(stderr, "FAIL: %s (errno %d %s)\n", what, errno, strerror(errno)); return 1; }

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + 3); }
static const uint64_t V1 = 0x1122334455667788ull, V2 = 0xa5a5c3c30f0ff00full;

static void expected(unsigned char *e) {
    for (size_t i = 0; i < SIZE; i++) e[i] = pattern(i);
    if (!strcmp(mode, "flush") || !strcmp(mode, "atomic-write")) { memcpy(e + 64, &V1, 8); memcpy(e + 128, &V2, 8); }
}

static int tcp(const char *server) {
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = server ? 0 : AI_PASSIVE }, *res;
    if (getaddrinfo(server, PORT, &hints, &res)) return -1;
    int s = socket(res->ai_family, res->ai_socktype, 0), one = 1;
    if (s < 0) return -1;
    if (server) {
        for (int i = 0; connect(s, res->ai_addr, res->ai_addrlen); i++) {
            if (i == 50) return -1;
            usleep(100000);
        }
        return s;
    }
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, res->ai_addr, res->ai_addrlen) || listen(s, 1)) return -1;
    int c = accept(s, NULL, NULL);
    close(s);
    return c;
}

static int xfer(int s, void *out, void *in, size_t n) {
    if (write(s, out, n) != (ssize_t)n) return -1;
    size_t got = 0;
    while (got < n) { ssize_t r = read(s, (char *)in + got, n - got); if (r <= 0) return -1; got += r; }
    return 0;
}

static int connect_qp(struct ibv_qp *qp, struct info *peer, int gidx, enum ibv_mtu mtu, uint32_t psn) {
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | ACCESS_FLUSH_GLOBAL;
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return fail("INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = mtu; a.dest_qp_num = peer->qpn; a.rq_psn = peer->psn;
    a.max_dest_rd_atomic = 4; a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1; a.ah_attr.port_num = 1; a.ah_attr.grh.hop_limit = 1; a.ah_attr.grh.sgid_index = gidx;
    memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return fail("RTR");
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = psn; a.max_rd_atomic = 4;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_MAX_QP_RD_ATOMIC)) return fail("RTS");
    return 0;
}

/* Waits for one completion: its status, opcode and byte_len must be these. */
static int expect(struct ibv_cq *cq, uint64_t id, int status, int opcode, uint32_t len) {
    struct ibv_wc wc;
    for (long spins = 0;; spins++) {
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) return fail("poll_cq");
        if (n == 1) break;
        if (spins > 2000000) { fprintf(stderr, "FAIL: no completion for wr %llu\n", (unsigned long long)id); return 1; }
        usleep(10);
    }
    printf("wc wr_id=%llu status=%d (%s) opcode=%d byte_len=%u\n", (unsigned long long)wc.wr_id, wc.status,
           ibv_wc_status_str(wc.status), wc.opcode, wc.byte_len);
    if (wc.wr_id != id || (int)wc.status != status) {
        fprintf(stderr, "FAIL: wr %llu: wanted status %d (%s)\n", (unsigned long long)id, status,
                ibv_wc_status_str(status));
        return 1;
    }
    if (status == IBV_WC_SUCCESS && ((int)wc.opcode != opcode || wc.byte_len != len)) {
        fprintf(stderr, "FAIL: wr %llu: wanted opcode %d byte_len %u\n", (unsigned long long)id, opcode, len);
        return 1;
    }
    return 0;
}

static int check_bytes(const char *who, const unsigned char *got) {
    unsigned char e[SIZE];
    expected(e);
    for (size_t i = 0; i < SIZE; i++)
        if (got[i] != e[i]) {
            fprintf(stderr, "FAIL: %s: byte %zu is 0x%02x, wanted 0x%02x\n", who, i, got[i], e[i]);
            return 1;
        }
    printf("%s: the %d bytes are as expected\n", who, SIZE);
    return 0;
}

int main(int argc, char **argv) {
    const char *devname = NULL, *server = NULL;
    int gidx = 0, opt, mtu = 1024;
    while ((opt = getopt(argc, argv, "d:g:m:x:")) != -1) {
        switch (opt) {
            case 'd': devname = optarg; break;
            case 'g': gidx = atoi(optarg); break;
            case 'm': mtu = atoi(optarg); break;
            case 'x': mode = optarg; break;
            default: fprintf(stderr, "usage: %s [-d DEV] [-g GIDX] [-m MTU] [-x flush|atomic-write|flush-past|atomic-write-past] [SERVER]\n", argv[0]); return 2;
        }
    }
    int flush = !strcmp(mode, "flush"), aw = !strcmp(mode, "atomic-write");
    if (!flush && !aw && strcmp(mode, "flush-past") && strcmp(mode, "atomic-write-past")) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    if (optind < argc) server = argv[optind];
    enum ibv_mtu m = mtu == 4096 ? IBV_MTU_4096 : mtu == 2048 ? IBV_MTU_2048 : mtu == 512 ? IBV_MTU_512 : IBV_MTU_1024;

    struct ibv_device **list = ibv_get_device_list(NULL), *dev = NULL;
    for (int i = 0; list && list[i]; i++)
        if (!devname || !strcmp(ibv_get_device_name(list[i]), devname)) { dev = list[i]; break; }
    if (!dev) return fail("no such device");
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx) return fail("open_device");
    struct ibv_device_attr_ex dx;
    if (ibv_query_device_ex(ctx, NULL, &dx)) return fail("query_device_ex");
    printf("%s: device_cap_flags_ex flush_global=%d flush_persistent=%d atomic_write=%d\n",
           ibv_get_device_name(dev), !!(dx.device_cap_flags_ex & (1ull << 38)),
           !!(dx.device_cap_flags_ex & (1ull << 39)), !!(dx.device_cap_flags_ex & (1ull << 40)));
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    if (!pd || !cq) return fail("pd/cq");
    static unsigned char buf[SIZE] __attribute__((aligned(4096)));
    for (size_t i = 0; i < SIZE; i++) buf[i] = pattern(i);
    if (server) memset(buf, 0, SIZE); /* the client's buffer receives the READ */
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_READ | ACCESS_FLUSH_GLOBAL);
    if (!mr) return fail("reg_mr with IBV_ACCESS_FLUSH_GLOBAL");
    struct ibv_qp_init_attr_ex ia = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0, .pd = pd,
        .cap = { .max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
        .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        .send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | QP_EX_WITH_FLUSH | IBV_QP_EX_WITH_RDMA_READ,
    };
    struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
    if (!qp) return fail("create_qp_ex with ATOMIC_WRITE|FLUSH|RDMA_READ");
    struct info me = { .qpn = qp->qp_num, .psn = (uint32_t)(getpid() * 31) & 0xffffff, .rkey = mr->rkey,
                       .len = SIZE, .addr = (uintptr_t)buf }, peer;
    union ibv_gid g;
    if (ibv_query_gid(ctx, 1, gidx, &g)) return fail("query_gid");
    memcpy(me.gid, g.raw, 16);
    int s = tcp(server);
    if (s < 0) return fail("tcp exchange");
    if (xfer(s, &me, &peer, sizeof me)) return fail("exchange");
    if (connect_qp(qp, &peer, gidx, m, me.psn)) return 1;
    char sync = 'r', got;
    if (xfer(s, &sync, &got, 1)) return fail("sync");

    if (!server) {
        /* the responder: wait for the client's word, then look at the memory */
        char verdict;
        if (read(s, &verdict, 1) != 1) return fail("client's word");
        int bad = check_bytes("server memory", buf);
        struct ibv_qp_attr qa; struct ibv_qp_init_attr qi;
        if (ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi)) return fail("query_qp");
        printf("server QP state %d\n", qa.qp_state);
        /* a NAK for an access error is fatal on the responder's side too */
        if (!flush && !aw && qa.qp_state != IBV_QPS_ERR) {
            fprintf(stderr, "FAIL: the server's QP is in state %d, not IBV_QPS_ERR\n", qa.qp_state);
            bad = 1;
        }
        char answer = bad ? 'B' : 'G';
        if (write(s, &answer, 1) != 1) return fail("answer");
        printf("%s %s (client said %c)\n", bad || verdict != 'G' ? "FAILED" : "PASSED", mode, verdict);
        return bad || verdict != 'G';
    }

    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
    int bad = 0;
    if (flush || aw) {
        ibv_wr_start(x);
        x->wr_id = 1; x->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_atomic_write(x, peer.rkey, peer.addr + 64, &V1);
        if (flush) {
            x->wr_id = 2; x->wr_flags = IBV_SEND_SIGNALED;
            FLUSH_SLOT(x)(x, peer.rkey, peer.addr, SIZE, FLUSH_GLOBAL, FLUSH_RANGE);
        }
        if (ibv_wr_complete(x)) return fail("wr_complete (atomic_write + flush range)");
        bad |= expect(cq, 1, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, 8);
        if (flush) bad |= expect(cq, 2, IBV_WC_SUCCESS, WC_FLUSH, SIZE);
        ibv_wr_start(x);
        x->wr_id = 3; x->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_atomic_write(x, peer.rkey, peer.addr + 128, &V2);
        if (flush) {
            /* whole-MR selectivity: the responder ignores the address and length */
            x->wr_id = 4; x->wr_flags = IBV_SEND_SIGNALED;
            FLUSH_SLOT(x)(x, peer.rkey, peer.addr, SIZE, FLUSH_GLOBAL, FLUSH_MR);
        }
        if (ibv_wr_complete(x)) return fail("wr_complete (atomic_write + flush MR)");
        if (!bad) bad |= expect(cq, 3, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, 8);
        if (!bad && flush) bad |= expect(cq, 4, IBV_WC_SUCCESS, WC_FLUSH, SIZE);
        if (!bad) {
            ibv_wr_start(x);
            x->wr_id = 5; x->wr_flags = IBV_SEND_SIGNALED;
            ibv_wr_rdma_read(x, peer.rkey, peer.addr);
            ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, SIZE);
            if (ibv_wr_complete(x)) return fail("wr_complete (read)");
            bad |= expect(cq, 5, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, SIZE);
        }
        if (!bad) bad |= check_bytes("read back", buf);
    } else if (!strcmp(mode, "flush-past")) {
        ibv_wr_start(x);
        x->wr_id = 6; x->wr_flags = IBV_SEND_SIGNALED;
        FLUSH_SLOT(x)(x, peer.rkey, peer.addr, SIZE + 8, FLUSH_GLOBAL, FLUSH_RANGE);
        if (ibv_wr_complete(x)) return fail("wr_complete (flush past the region)");
        bad |= expect(cq, 6, IBV_WC_REM_ACCESS_ERR, 0, 0);
    } else {
        ibv_wr_start(x);
        x->wr_id = 7; x->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_atomic_write(x, peer.rkey, peer.addr + SIZE, &V1);
        if (ibv_wr_complete(x)) return fail("wr_complete (atomic_write past the region)");
        bad |= expect(cq, 7, IBV_WC_REM_ACCESS_ERR, 0, 0);
    }
    char verdict = bad ? 'B' : 'G', answer;
    if (xfer(s, &verdict, &answer, 1)) return fail("server's answer");
    printf("%s %s (server said %c)\n", bad || answer != 'G' ? "FAILED" : "PASSED", mode, answer);
    return bad || answer != 'G';
}
