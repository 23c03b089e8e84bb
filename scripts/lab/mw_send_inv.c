/* A type 2 memory window invalidated by the peer's SEND with invalidate,
 * between two RC QPs on two hosts, with the bytes checked on both sides. The
 * interop rows of scripts/interop.sh (--trixie) run it against kernel rxe
 * (Linux 6.12, rdma-core 56) in the lab guest, and on the host over this
 * project's libibverbs.so.1 (softroce-run); the same binary on both stacks,
 * built against Debian 12's <infiniband/verbs.h> (classic verbs only).
 *
 *   mw_send_inv [-d DEV] [-g GIDX] [-m MTU] [-k] [-x MODE]            server: owns the window
 *   mw_send_inv [-d DEV] [-g GIDX] [-m MTU] [-k] [-x MODE] SERVER-IP  client: uses it, invalidates it
 *
 * The server registers a 4096-byte region (LOCAL_WRITE|REMOTE_WRITE|MW_BIND)
 * filled with a pattern, allocates a type 2 window and, once its QP is in
 * RTS, binds it by an IBV_WR_BIND_MW work request to [1024, 3072) of the
 * region with REMOTE_WRITE, under rkey ibv_inc_rkey(mw->rkey); it posts one
 * receive. Addresses, keys, QP numbers and GIDs go over TCP port 18515 as in
 * ibv_rc_pingpong. The client then:
 *   1. WRITEs 64 bytes through the window at its start: SUCCESS;
 *   2. SENDs 16 bytes WITH_INV of the window's rkey: SUCCESS;
 *   3. WRITEs 64 bytes through the same rkey at +128: REM_ACCESS_ERR.
 * The server checks its receive (SUCCESS, IBV_WC_RECV, 16 bytes, the
 * IBV_WC_WITH_INV flag and the window's rkey in invalidated_rkey), its
 * memory (the pattern with step 1's bytes in, nothing of step 3's) and its
 * QP (IBV_QPS_ERR after the NAK). That is MODE send-inv, the default.
 * MODE inv-twice (misuse): step 3 is a second SEND WITH_INV of the same,
 * already invalidated key, which must complete with REM_INV_REQ_ERR (NAK
 * Invalid Request); the server's second receive must not complete
 * successfully (REM_INV_REQ_ERR, or a flush once the QP is in ERR), its
 * memory hold step 1's bytes and its QP be in ERR. Both sides must agree on
 * MODE. Exit status 0 when everything matched; the last line says what was
 * seen.
 *
 * -k (kernel rxe's side): accept, in place of IBV_WC_WITH_INV (1 << 3), a
 * receive whose wc_flags have bit 2 and not bit 3, and say so. rxe writes
 * user-space completions itself with the kernel's flag values
 * (drivers/infiniband/sw/rxe/rxe_resp.c, do_complete: IB_WC_WITH_INVALIDATE,
 * 1 << 2 in include/rdma/ib_verbs.h) and rdma-core's rxe provider copies them
 * as they are (providers/rxe/rxe.c, rxe_poll_cq: memcpy), so an application
 * on rxe sees IBV_WC_IP_CSUM_OK (1 << 2) and never IBV_WC_WITH_INV; the key
 * in invalidated_rkey is right. */
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
#define WIN_OFF 1024
#define WIN_LEN 2048
#define MSG "invalidate, pls"
#define MSG2 "and once again!"

struct info { uint32_t qpn, psn, rkey, len; uint64_t addr; uint8_t gid[16]; };

static int fail(const char *what) { fprintf(stderr, "FAIL: %s (errno %d %s)\n", what, errno, strerror(errno)); return 1; }
static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + 3); }
static unsigned char written(size_t i) { return (unsigned char)(0xa0 ^ i); } /* step 1's bytes */
static unsigned char late(size_t i) { return (unsigned char)(0x5c + i); }   /* step 3's bytes */

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
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
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

/* Waits for one completion, prints it, and gives it back in *wc. */
static int next_wc(struct ibv_cq *cq, struct ibv_wc *wc) {
    for (long spins = 0;; spins++) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0) return fail("poll_cq");
        if (n == 1) break;
        if (spins > 2000000) { fprintf(stderr, "FAIL: no completion\n"); return 1; }
        usleep(10);
    }
    printf("wc wr_id=%llu status=%d (%s) opcode=%d byte_len=%u wc_flags=0x%x invalidated_rkey=0x%x\n",
           (unsigned long long)wc->wr_id, wc->status, ibv_wc_status_str(wc->status), wc->opcode, wc->byte_len,
           wc->wc_flags, wc->invalidated_rkey);
    return 0;
}

/* Waits for wr_id's completion: its status must be this (and, on success, the opcode). */
static int expect(struct ibv_cq *cq, uint64_t id, int status, int opcode) {
    struct ibv_wc wc;
    if (next_wc(cq, &wc)) return 1;
    if (wc.wr_id != id || (int)wc.status != status || (status == IBV_WC_SUCCESS && (int)wc.opcode != opcode)) {
        fprintf(stderr, "FAIL: wanted wr %llu with status %d (%s), opcode %d\n", (unsigned long long)id, status,
                ibv_wc_status_str(status), opcode);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *devname = NULL, *server = NULL;
    int gidx = 0, opt, mtu = 1024, kernel_flag = 0, twice = 0;
    while ((opt = getopt(argc, argv, "d:g:m:kx:")) != -1) {
        switch (opt) {
            case 'd': devname = optarg; break;
            case 'g': gidx = atoi(optarg); break;
            case 'm': mtu = atoi(optarg); break;
            case 'k': kernel_flag = 1; break;
            case 'x':
                if (!strcmp(optarg, "inv-twice")) twice = 1;
                else if (strcmp(optarg, "send-inv")) { fprintf(stderr, "unknown mode %s\n", optarg); return 2; }
                break;
            default: fprintf(stderr, "usage: %s [-d DEV] [-g GIDX] [-m MTU] [-k] [-x send-inv|inv-twice] [SERVER]\n", argv[0]); return 2;
        }
    }
    if (optind < argc) server = argv[optind];
    enum ibv_mtu m = mtu == 4096 ? IBV_MTU_4096 : mtu == 2048 ? IBV_MTU_2048 : mtu == 512 ? IBV_MTU_512 : IBV_MTU_1024;

    struct ibv_device **list = ibv_get_device_list(NULL), *dev = NULL;
    for (int i = 0; list && list[i]; i++)
        if (!devname || !strcmp(ibv_get_device_name(list[i]), devname)) { dev = list[i]; break; }
    if (!dev) return fail("no such device");
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx) return fail("open_device");
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da)) return fail("query_device");
    printf("%s: mem_window=%d type_2a=%d type_2b=%d max_mw=%d\n", ibv_get_device_name(dev),
           !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW), !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A),
           !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B), da.max_mw);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    if (!pd || !cq) return fail("pd/cq");
    static unsigned char buf[SIZE] __attribute__((aligned(4096)));
    static char msg[64], msg2[64];
    for (size_t i = 0; i < SIZE; i++) buf[i] = server ? 0 : pattern(i);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
    struct ibv_mr *mmsg = ibv_reg_mr(pd, msg, sizeof msg, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *mmsg2 = ibv_reg_mr(pd, msg2, sizeof msg2, IBV_ACCESS_LOCAL_WRITE);
    if (!mr || !mmsg || !mmsg2) return fail("reg_mr");
    struct ibv_qp_init_attr ia = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 8, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
    };
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!qp) return fail("create_qp");
    struct ibv_mw *mw = NULL;
    struct info me = { .qpn = qp->qp_num, .psn = (uint32_t)(getpid() * 31) & 0xffffff }, peer;
    if (!server) {
        mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
        if (!mw) return fail("alloc_mw type 2");
        me.rkey = ibv_inc_rkey(mw->rkey);
        me.addr = (uintptr_t)buf + WIN_OFF;
        me.len = WIN_LEN;
    }
    union ibv_gid g;
    if (ibv_query_gid(ctx, 1, gidx, &g)) return fail("query_gid");
    memcpy(me.gid, g.raw, 16);
    int s = tcp(server);
    if (s < 0) return fail("tcp exchange");
    if (xfer(s, &me, &peer, sizeof me)) return fail("exchange");
    if (connect_qp(qp, &peer, gidx, m, me.psn)) return 1;
    struct ibv_send_wr *bad;

    if (!server) {
        /* the window's owner: a receive for the SEND, then the bind (the QP is in RTS) */
        struct ibv_sge rs = { (uintptr_t)msg, sizeof msg, mmsg->lkey };
        struct ibv_sge rs2 = { (uintptr_t)msg2, sizeof msg2, mmsg2->lkey };
        struct ibv_recv_wr rw2 = { .wr_id = 101, .sg_list = &rs2, .num_sge = 1 };
        struct ibv_recv_wr rw = { .wr_id = 100, .sg_list = &rs, .num_sge = 1, .next = twice ? &rw2 : NULL }, *rbad;
        if (ibv_post_recv(qp, &rw, &rbad)) return fail("post_recv");
        struct ibv_send_wr bw;
        memset(&bw, 0, sizeof bw);
        bw.wr_id = 10; bw.opcode = IBV_WR_BIND_MW; bw.send_flags = IBV_SEND_SIGNALED;
        bw.bind_mw.mw = mw; bw.bind_mw.rkey = me.rkey;
        bw.bind_mw.bind_info = (struct ibv_mw_bind_info){ mr, (uintptr_t)buf + WIN_OFF, WIN_LEN, IBV_ACCESS_REMOTE_WRITE };
        if (ibv_post_send(qp, &bw, &bad)) return fail("post_send BIND_MW");
        if (expect(cq, 10, IBV_WC_SUCCESS, IBV_WC_BIND_MW)) return 1;
    }
    char sync = 'r', got;
    if (xfer(s, &sync, &got, 1)) return fail("sync");

    if (!server) {
        char verdict;
        if (read(s, &verdict, 1) != 1) return fail("client's word");
        int bad_ = 0;
        struct ibv_wc wc;
        /* the receive of the SEND with invalidate */
        if (next_wc(cq, &wc)) return 1;
        int with_inv = !!(wc.wc_flags & IBV_WC_WITH_INV);
        int kernel_bit = kernel_flag && !with_inv && (wc.wc_flags & (1 << 2));
        if (wc.wr_id != 100 || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != sizeof MSG ||
            !(with_inv || kernel_bit) || wc.invalidated_rkey != me.rkey || memcmp(msg, MSG, sizeof MSG)) {
            fprintf(stderr, "FAIL: wanted the receive SUCCESS, %zu bytes \"%s\", WITH_INV of rkey 0x%x\n", sizeof MSG,
                    MSG, me.rkey);
            bad_ = 1;
        } else if (kernel_bit) {
            printf("server: the receive has the window's rkey 0x%x; wc_flags 0x%x: no IBV_WC_WITH_INV, bit 2 "
                   "(the kernel's IB_WC_WITH_INVALIDATE) instead: rxe's flag, accepted with -k\n", me.rkey, wc.wc_flags);
        } else {
            printf("server: the receive has IBV_WC_WITH_INV and the window's rkey 0x%x\n", me.rkey);
        }
        for (size_t i = 0; i < SIZE; i++) {
            unsigned char e = i >= WIN_OFF && i < WIN_OFF + 64 ? written(i - WIN_OFF) : pattern(i);
            if (buf[i] != e) {
                fprintf(stderr, "FAIL: server memory: byte %zu is 0x%02x, wanted 0x%02x%s\n", i, buf[i], e,
                        buf[i] == late(i - WIN_OFF - 128) ? " (the write after the invalidation landed)" : "");
                bad_ = 1;
                break;
            }
        }
        if (!bad_ && !twice) printf("server memory: the first write's 64 bytes in, nothing of the write after the invalidation\n");
        if (!bad_ && twice) printf("server memory: the first write's 64 bytes in, nothing else changed\n");
        if (twice) {
            /* the second receive: the SEND that named an invalidated key must not succeed */
            if (next_wc(cq, &wc)) return 1;
            if (wc.wr_id != 101 || wc.status == IBV_WC_SUCCESS) {
                fprintf(stderr, "FAIL: the second receive (of a SEND WITH_INV of an invalidated key) completed "
                        "wr %llu with status %d\n", (unsigned long long)wc.wr_id, wc.status);
                bad_ = 1;
            } else {
                printf("server: the second receive: status=%d (%s), its buffer %s\n", wc.status,
                       ibv_wc_status_str(wc.status), msg2[0] ? "holds the payload" : "untouched");
            }
        }
        struct ibv_qp_attr qa; struct ibv_qp_init_attr qi;
        if (ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi)) return fail("query_qp");
        printf("server QP state %d\n", qa.qp_state);
        if (qa.qp_state != IBV_QPS_ERR) {
            fprintf(stderr, "FAIL: the server's QP is in state %d, not IBV_QPS_ERR\n", qa.qp_state);
            bad_ = 1;
        }
        char answer = bad_ ? 'B' : 'G';
        if (write(s, &answer, 1) != 1) return fail("answer");
        printf("%s %s (client said %c)\n", bad_ || verdict != 'G' ? "FAILED" : "PASSED", twice ? "inv-twice" : "send-inv",
               verdict);
        return bad_ || verdict != 'G';
    }

    /* the client: 1. a WRITE through the window, 2. SEND with invalidate, 3. a WRITE after it */
    static unsigned char src[128];
    for (size_t i = 0; i < 64; i++) { src[i] = written(i); src[64 + i] = late(i); }
    memcpy(msg, MSG, sizeof MSG);
    struct ibv_mr *msrc = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
    if (!msrc) return fail("reg_mr src");
    printf("client: window rkey 0x%x at 0x%llx, %u bytes\n", peer.rkey, (unsigned long long)peer.addr, peer.len);
    struct ibv_sge s1 = { (uintptr_t)src, 64, msrc->lkey };
    struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s1, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
    w.wr.rdma.rkey = peer.rkey; w.wr.rdma.remote_addr = peer.addr;
    if (ibv_post_send(qp, &w, &bad)) return fail("post_send WRITE");
    int bad_ = expect(cq, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    if (!bad_) {
        struct ibv_sge s2 = { (uintptr_t)msg, sizeof MSG, mmsg->lkey };
        struct ibv_send_wr inv = { .wr_id = 2, .sg_list = &s2, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV, .send_flags = IBV_SEND_SIGNALED };
        inv.invalidate_rkey = peer.rkey;
        if (ibv_post_send(qp, &inv, &bad)) return fail("post_send SEND_WITH_INV");
        bad_ = expect(cq, 2, IBV_WC_SUCCESS, IBV_WC_SEND);
    }
    if (!bad_ && twice) {
        struct ibv_sge s3 = { (uintptr_t)msg2, sizeof MSG2, mmsg2->lkey };
        memcpy(msg2, MSG2, sizeof MSG2);
        struct ibv_send_wr inv = { .wr_id = 4, .sg_list = &s3, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV, .send_flags = IBV_SEND_SIGNALED };
        inv.invalidate_rkey = peer.rkey;
        if (ibv_post_send(qp, &inv, &bad)) return fail("post_send the second SEND_WITH_INV");
        bad_ = expect(cq, 4, IBV_WC_REM_INV_REQ_ERR, 0);
        if (!bad_) printf("client: the second SEND WITH_INV of the key: status=%d (%s)\n", IBV_WC_REM_INV_REQ_ERR,
                          ibv_wc_status_str(IBV_WC_REM_INV_REQ_ERR));
    } else if (!bad_) {
        struct ibv_sge s3 = { (uintptr_t)src + 64, 64, msrc->lkey };
        w = (struct ibv_send_wr){ .wr_id = 3, .sg_list = &s3, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
        w.wr.rdma.rkey = peer.rkey; w.wr.rdma.remote_addr = peer.addr + 128;
        if (ibv_post_send(qp, &w, &bad)) return fail("post_send WRITE after the invalidation");
        bad_ = expect(cq, 3, IBV_WC_REM_ACCESS_ERR, 0);
        if (!bad_) printf("client: the write through the invalidated rkey: status=%d (remote access error)\n", IBV_WC_REM_ACCESS_ERR);
    }
    char verdict = bad_ ? 'B' : 'G', answer;
    if (xfer(s, &verdict, &answer, 1)) return fail("server's answer");
    printf("%s %s (server said %c)\n", bad_ || answer != 'G' ? "FAILED" : "PASSED", twice ? "inv-twice" : "send-inv",
           answer);
    return bad_ || answer != 'G';
}
