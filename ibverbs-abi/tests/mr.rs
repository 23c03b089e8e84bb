//! Memory regions from C: `ibv_reg_mr_iova2` with an iova other than the
//! address (peers and SGEs name the iova, the bytes land at the address),
//! and `ibv_rereg_mr` changing the access, the translation and the PD with
//! the keys kept, each checked with real traffic between two RC QPs of one
//! device: a WRITE the new access forbids is a remote access error, one to
//! the new translation lands in the new buffer, an SGE of a region moved to
//! another PD is a local protection error; refusals (bad flags, an unmapped
//! range) leave the region as it was.

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>

#define SHOW(name, ret) do { long r_ = (long)(ret); int e_ = errno; printf("%s ret=%ld errno=%d\n", name, r_, e_); } while (0)

static struct ibv_context *ctx;
static struct ibv_cq *cq;

static int connect_rc(struct ibv_qp *qp, uint32_t dest) {
    struct ibv_qp_attr a; memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.port_num = 1; a.ah_attr.grh.hop_limit = 1; ibv_query_gid(ctx, 1, 0, &a.ah_attr.grh.dgid);
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return -2;
    a.qp_state = IBV_QPS_RTS; a.timeout = 8; a.retry_cnt = 1; a.rnr_retry = 1; a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) ? -3 : 0;
}

/* one signalled WRITE of `len` bytes from (lkey, laddr) to (rkey, raddr); its completion status */
static int write1(struct ibv_qp *qp, uint32_t lkey, uint64_t laddr, uint32_t rkey, uint64_t raddr, uint32_t len) {
    struct ibv_sge s = { laddr, len, lkey };
    struct ibv_send_wr w = { .wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
    w.wr.rdma.rkey = rkey; w.wr.rdma.remote_addr = raddr;
    if (ibv_post_send(qp, &w, &bad)) return -1;
    struct ibv_wc wc;
    for (int i = 0; i < 3000; i++) {
        int k = ibv_poll_cq(cq, 1, &wc);
        if (k == 1 && wc.wr_id == 7) return wc.status;
        if (k == 0) nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    }
    return -2;
}

/* back to RTS after an error, with the CQ drained */
static int restate(struct ibv_qp *a, struct ibv_qp *b) {
    struct ibv_wc wc; while (ibv_poll_cq(cq, 1, &wc) > 0) {}
    struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
    ibv_modify_qp(a, &r, IBV_QP_STATE); ibv_modify_qp(b, &r, IBV_QP_STATE);
    return connect_rc(a, b->qp_num) || connect_rc(b, a->qp_num);
}

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { printf("no device\n"); return 2; }
    ctx = ibv_open_device(list[0]);
    struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp_init_attr ia; memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 8; ia.cap.max_recv_wr = 8; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
    SHOW("connect", connect_rc(a, b->qp_num) || connect_rc(b, a->qp_num));
    static char src[64] = "from the source", dst[64], dst2[64];
    int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    struct ibv_mr *ms = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);

    /* the destination addressed at iova 0x10000000 */
    uint64_t iova = 0x10000000;
    struct ibv_mr *md = ibv_reg_mr_iova2(pd, dst, sizeof dst, iova, rw);
    SHOW("iova_reg", md == NULL);
    printf("iova mr addr_is_buffer=%d\n", md && md->addr == dst);
    SHOW("write_iova", write1(a, ms->lkey, (uintptr_t)src, md->rkey, iova + 8, 16));
    printf("dst+8 \"%s\"\n", dst + 8);
    SHOW("write_raw_address", write1(a, ms->lkey, (uintptr_t)src, md->rkey, (uintptr_t)dst, 4));
    SHOW("restate1", restate(a, b));
    errno = 0; SHOW("iova_overflow", ibv_reg_mr_iova2(pd, dst, sizeof dst, ~0ull - 8, rw) != NULL);

    /* rereg: bad flags and an unmapped range are refused, the region unchanged */
    uint32_t rkey = md->rkey, lkey = md->lkey;
    errno = 0; SHOW("rereg_no_flags", ibv_rereg_mr(md, 0, NULL, NULL, 0, 0));
    errno = 0; SHOW("rereg_unknown_flag", ibv_rereg_mr(md, 1 << 5, NULL, NULL, 0, 0));
    void *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); munmap(gone, 4096);
    errno = 0; SHOW("rereg_unmapped", ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, gone, 4096, 0));
    SHOW("write_after_refusals", write1(a, ms->lkey, (uintptr_t)src, md->rkey, iova, 4));

    /* access: no remote write any more */
    SHOW("rereg_access", ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE));
    printf("keys_kept %d\n", md->rkey == rkey && md->lkey == lkey);
    SHOW("write_forbidden", write1(a, ms->lkey, (uintptr_t)src, md->rkey, iova, 4));
    SHOW("restate2", restate(a, b));

    /* translation: dst2, addressed at itself; remote write again */
    SHOW("rereg_translation", ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, NULL, dst2, sizeof dst2, rw));
    printf("translated addr_ok=%d len=%zu keys_kept=%d\n", md->addr == dst2, md->length, md->rkey == rkey);
    SHOW("write_translated", write1(a, ms->lkey, (uintptr_t)src, md->rkey, (uintptr_t)dst2, 15));
    printf("dst2 \"%s\"\n", dst2);

    /* PD: the source region moves to pd2; QP a (pd) cannot use it */
    SHOW("rereg_pd", ibv_rereg_mr(ms, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0));
    printf("pd_now_pd2 %d\n", ms->pd == pd2);
    SHOW("write_other_pd", write1(a, ms->lkey, (uintptr_t)src, md->rkey, (uintptr_t)dst2, 4));
    SHOW("dealloc_pd2_in_use", ibv_dealloc_pd(pd2));
    SHOW("restate3", restate(a, b));
    SHOW("rereg_pd_back", ibv_rereg_mr(ms, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0));
    SHOW("write_pd_back", write1(a, ms->lkey, (uintptr_t)src, md->rkey, (uintptr_t)dst2, 4));
    SHOW("dealloc_pd2", ibv_dealloc_pd(pd2));
    printf("alive\n");
    return 0;
}
"#;

#[test]
fn iova_registration_and_rereg_behave_on_the_wire() {
    let Some(text) = common::run_c("mr", "mr0=127.0.13.5", PROGRAM) else { return };
    // ibv_wc_status: 4 local protection error, 10 remote access error.
    let (loc_prot, rem_access) = (4, 10);
    let expect: &[(&str, i64, Option<i32>)] = &[
        ("connect", 0, None),
        ("iova_reg", 0, None),
        ("write_iova", 0, None),
        ("write_raw_address", rem_access, None),
        ("restate1", 0, None),
        ("iova_overflow", 0, Some(libc::EINVAL)),
        ("rereg_no_flags", -1, Some(libc::EINVAL)),
        ("rereg_unknown_flag", -1, Some(libc::EINVAL)),
        ("rereg_unmapped", -4, Some(libc::EFAULT)),
        ("write_after_refusals", 0, None),
        ("rereg_access", 0, None),
        ("write_forbidden", rem_access, None),
        ("restate2", 0, None),
        ("rereg_translation", 0, None),
        ("write_translated", 0, None),
        ("rereg_pd", 0, None),
        ("write_other_pd", loc_prot, None),
        ("dealloc_pd2_in_use", i64::from(libc::EBUSY), None),
        ("restate3", 0, None),
        ("rereg_pd_back", 0, None),
        ("write_pd_back", 0, None),
        ("dealloc_pd2", 0, None),
    ];
    common::check_calls(&text, expect);
    common::check_lines(
        &text,
        &[
            "iova mr addr_is_buffer=1",
            "dst+8 \"from the source\"",
            "keys_kept 1",
            "translated addr_ok=1 len=64 keys_kept=1",
            "dst2 \"from the source\"",
            "pd_now_pd2 1",
            "alive",
        ],
    );
}
