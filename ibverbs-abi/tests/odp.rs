//! On-demand paging from C: `ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND` of
//! memory that is then unmapped under the live registration, implicit ODP
//! (`addr` NULL, `length` SIZE_MAX), `ibv_advise_mr`, and the ODP caps of
//! `ibv_query_device_ex`: a peer's WRITE or READ into an unmapped page is a
//! remote access error and the process lives (no SIGSEGV), the mapped page
//! keeps its bytes.

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>

#define SHOW(name, ret) do { long r_ = (long)(ret); int e_ = errno; printf("%s ret=%ld errno=%d\n", name, r_, e_); } while (0)

static struct ibv_context *ctx;
static struct ibv_cq *cq;
static struct ibv_qp *a, *b;
static struct ibv_mr *msrc;
static char src[64] = "on demand";

static int connect_rc(struct ibv_qp *qp, uint32_t dest) {
    struct ibv_qp_attr t; memset(&t, 0, sizeof t);
    t.qp_state = IBV_QPS_INIT; t.port_num = 1; t.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    t.qp_state = IBV_QPS_RTR; t.path_mtu = IBV_MTU_1024; t.dest_qp_num = dest; t.max_dest_rd_atomic = 1; t.min_rnr_timer = 1;
    t.ah_attr.is_global = 1; t.ah_attr.port_num = 1; t.ah_attr.grh.hop_limit = 1; ibv_query_gid(ctx, 1, 0, &t.ah_attr.grh.dgid);
    if (ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return -2;
    t.qp_state = IBV_QPS_RTS; t.timeout = 8; t.retry_cnt = 1; t.rnr_retry = 1; t.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) ? -3 : 0;
}

static int reconnect(void) {
    struct ibv_wc wc; while (ibv_poll_cq(cq, 1, &wc) > 0) {}
    struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
    ibv_modify_qp(a, &r, IBV_QP_STATE); ibv_modify_qp(b, &r, IBV_QP_STATE);
    return connect_rc(a, b->qp_num) || connect_rc(b, a->qp_num);
}

/* one signalled WRITE (or READ) of n bytes between src and (rkey, addr): its status */
static int op(enum ibv_wr_opcode code, uint32_t rkey, uint64_t addr, uint32_t n) {
    struct ibv_sge s = { (uintptr_t)src, n, msrc->lkey };
    struct ibv_send_wr w = { .wr_id = 5, .sg_list = &s, .num_sge = 1, .opcode = code, .send_flags = IBV_SEND_SIGNALED }, *bad;
    w.wr.rdma.rkey = rkey; w.wr.rdma.remote_addr = addr;
    if (ibv_post_send(a, &w, &bad)) return -2;
    struct ibv_wc wc;
    for (int i = 0; i < 3000; i++) {
        if (ibv_poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 5) return wc.status;
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    }
    return -1;
}

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { printf("no device\n"); return 2; }
    ctx = ibv_open_device(list[0]);
    struct ibv_device_attr_ex dx; memset(&dx, 0, sizeof dx); ibv_query_device_ex(ctx, NULL, &dx);
    printf("odp general=%d implicit=%d rc_write=%d rc_read=%d ud_send=%d\n",
           !!(dx.odp_caps.general_caps & IBV_ODP_SUPPORT), !!(dx.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT),
           !!(dx.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE),
           !!(dx.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_READ),
           !!(dx.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND));
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp_init_attr ia; memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 8; ia.cap.max_recv_wr = 8; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    a = ibv_create_qp(pd, &ia); b = ibv_create_qp(pd, &ia);
    SHOW("connect", connect_rc(a, b->qp_num) || connect_rc(b, a->qp_num));
    msrc = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);

    /* two pages on demand; the second unmapped under the registration */
    int odp = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    char *pages = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct ibv_mr *m = ibv_reg_mr(pd, pages, 8192, odp);
    SHOW("reg_on_demand", m == NULL);
    SHOW("write_mapped", op(IBV_WR_RDMA_WRITE, m->rkey, (uintptr_t)pages + 100, 10));
    printf("page0 \"%s\"\n", pages + 100);
    /* PROT_NONE in place of the page, not a hole another mmap could fill */
    mmap(pages + 4096, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    SHOW("write_unmapped", op(IBV_WR_RDMA_WRITE, m->rkey, (uintptr_t)pages + 4096 + 8, 10));
    SHOW("reconnect1", reconnect());
    SHOW("read_unmapped", op(IBV_WR_RDMA_READ, m->rkey, (uintptr_t)pages + 4096, 8));
    SHOW("reconnect2", reconnect());
    printf("page0 intact \"%s\"\n", pages + 100);
    struct ibv_sge adv = { (uintptr_t)pages + 4096, 64, m->lkey };
    SHOW("advise_unmapped", ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &adv, 1));
    adv.addr = (uintptr_t)pages;
    SHOW("advise_mapped", ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &adv, 1));
    SHOW("dereg_on_demand", ibv_dereg_mr(m));

    /* implicit ODP: the whole address space */
    struct ibv_mr *imp = ibv_reg_mr(pd, NULL, SIZE_MAX, odp);
    SHOW("reg_implicit", imp == NULL);
    static char target[32];
    SHOW("write_implicit", op(IBV_WR_RDMA_WRITE, imp->rkey, (uintptr_t)target, 10));
    printf("target \"%s\"\n", target);
    char *hole = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* reserved, never accessible */
    SHOW("write_implicit_hole", op(IBV_WR_RDMA_WRITE, imp->rkey, (uintptr_t)hole, 10));
    SHOW("reconnect3", reconnect());
    SHOW("write_implicit_address_0", op(IBV_WR_RDMA_WRITE, imp->rkey, 0, 10));
    printf("alive\n");
    return 0;
}
"#;

#[test]
fn on_demand_regions_turn_unmapped_pages_into_access_errors() {
    let Some(text) = common::run_c("odp", "odp0=127.0.13.9", PROGRAM) else { return };
    let rem_access = 10;
    let expect: &[(&str, i64, Option<i32>)] = &[
        ("connect", 0, None),
        ("reg_on_demand", 0, None),
        ("write_mapped", 0, None),
        ("write_unmapped", rem_access, None),
        ("reconnect1", 0, None),
        ("read_unmapped", rem_access, None),
        ("reconnect2", 0, None),
        ("advise_unmapped", i64::from(libc::EFAULT), None),
        ("advise_mapped", 0, None),
        ("dereg_on_demand", 0, None),
        ("reg_implicit", 0, None),
        ("write_implicit", 0, None),
        ("write_implicit_hole", rem_access, None),
        ("reconnect3", 0, None),
        ("write_implicit_address_0", rem_access, None),
    ];
    common::check_calls(&text, expect);
    common::check_lines(
        &text,
        &[
            "odp general=1 implicit=1 rc_write=1 rc_read=1 ud_send=1",
            "page0 \"on demand\"",
            "page0 intact \"on demand\"",
            "target \"on demand\"",
            "alive",
        ],
    );
}
