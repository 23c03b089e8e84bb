//! Thread and parent domains from C: `ibv_alloc_td`, `ibv_alloc_parent_domain`
//! (with a thread domain and custom allocators), a QP and an extended CQ made
//! in the parent domain carrying traffic, and the uses each holds: the PD and
//! the thread domain cannot go before the parent domain, nor the parent
//! domain before its QP and CQ (EBUSY); a plain PD where a parent domain is
//! required, or unknown masks, are EINVAL.

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define SHOW(name, ret) do { long r_ = (long)(ret); int e_ = errno; printf("%s ret=%ld errno=%d\n", name, r_, e_); } while (0)

static void *my_alloc(struct ibv_pd *pd, void *ctx, size_t size, size_t align, uint64_t type) { return IBV_ALLOCATOR_USE_DEFAULT; }
static void my_free(struct ibv_pd *pd, void *ctx, void *ptr, uint64_t type) {}

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { printf("no device\n"); return 2; }
    struct ibv_context *ctx = ibv_open_device(list[0]);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_td_init_attr ta = { 0 };
    struct ibv_td *td = ibv_alloc_td(ctx, &ta);
    SHOW("alloc_td", td == NULL);
    ta.comp_mask = 1; errno = 0; SHOW("td_bad_mask", ibv_alloc_td(ctx, &ta) != NULL);

    struct ibv_parent_domain_init_attr pa; memset(&pa, 0, sizeof pa);
    pa.pd = pd; pa.td = td; pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    pa.alloc = my_alloc; pa.free = my_free; pa.pd_context = &num;
    struct ibv_pd *pad = ibv_alloc_parent_domain(ctx, &pa);
    SHOW("alloc_parent_domain", pad == NULL);
    struct ibv_parent_domain_init_attr bad = pa; bad.comp_mask = 1 << 7;
    errno = 0; SHOW("pad_bad_mask", ibv_alloc_parent_domain(ctx, &bad) != NULL);
    bad = pa; bad.pd = pad;
    errno = 0; SHOW("pad_of_pad", ibv_alloc_parent_domain(ctx, &bad) != NULL);
    bad = pa; bad.alloc = NULL;
    errno = 0; SHOW("pad_half_allocators", ibv_alloc_parent_domain(ctx, &bad) != NULL);

    struct ibv_cq_init_attr_ex ca; memset(&ca, 0, sizeof ca);
    ca.cqe = 16; ca.wc_flags = IBV_WC_STANDARD_FLAGS; ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD; ca.parent_domain = pd;
    errno = 0; SHOW("cq_in_plain_pd", ibv_create_cq_ex(ctx, &ca) != NULL);
    ca.parent_domain = pad;
    struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
    SHOW("cq_in_parent_domain", cqx == NULL);
    struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);

    struct ibv_qp_init_attr ia; memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_UD;
    ia.cap.max_send_wr = 4; ia.cap.max_recv_wr = 4; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pad, &ia);
    SHOW("qp_in_parent_domain", qp == NULL);
    printf("qp_pd_is_pad %d\n", qp && qp->pd == pad);
    struct ibv_qp_attr a; memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qkey = 5;
    ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    a.qp_state = IBV_QPS_RTR; ibv_modify_qp(qp, &a, IBV_QP_STATE);
    a.qp_state = IBV_QPS_RTS; ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    /* memory registered in the PD serves the parent domain's QP, as in its PD */
    static char buf[40 + 32] , out[16] = "via parent";
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *mo = ibv_reg_mr(pad, out, sizeof out, IBV_ACCESS_LOCAL_WRITE);
    SHOW("mr_in_parent_domain", mo == NULL);
    struct ibv_sge rs = { (uintptr_t)buf, sizeof buf, mr->lkey }, ss = { (uintptr_t)out, 11, mo->lkey };
    struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rb;
    ibv_post_recv(qp, &rw, &rb);
    struct ibv_ah_attr aa; memset(&aa, 0, sizeof aa);
    aa.is_global = 1; aa.port_num = 1; aa.grh.hop_limit = 1; ibv_query_gid(ctx, 1, 0, &aa.grh.dgid);
    struct ibv_ah *ah = ibv_create_ah(pad, &aa);
    struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sb;
    sw.wr.ud.ah = ah; sw.wr.ud.remote_qpn = qp->qp_num; sw.wr.ud.remote_qkey = 5;
    SHOW("send", ibv_post_send(qp, &sw, &sb));
    struct ibv_poll_cq_attr pq = { 0 }; int got = 0;
    for (int i = 0; i < 2000 && got < 2; i++) {
        if (ibv_start_poll(cqx, &pq) == 0) {
            do { printf("wc wr_id=%llu status=%d\n", (unsigned long long)cqx->wr_id, cqx->status); got++; } while (ibv_next_poll(cqx) == 0);
            ibv_end_poll(cqx);
        } else nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    }
    printf("payload \"%s\"\n", buf + 40);

    SHOW("dealloc_pd_under_pad", ibv_dealloc_pd(pd));
    SHOW("dealloc_td_in_use", ibv_dealloc_td(td));
    SHOW("dealloc_pad_in_use", ibv_dealloc_pd(pad));
    ibv_destroy_ah(ah); ibv_dereg_mr(mo); ibv_destroy_qp(qp);
    SHOW("dealloc_pad_cq_left", ibv_dealloc_pd(pad));
    SHOW("destroy_cq", ibv_destroy_cq(cq));
    SHOW("dealloc_pad", ibv_dealloc_pd(pad));
    SHOW("dealloc_td", ibv_dealloc_td(td));
    ibv_dereg_mr(mr);
    SHOW("dealloc_pd", ibv_dealloc_pd(pd));
    printf("alive\n");
    return 0;
}
"#;

#[test]
fn parent_domains_and_thread_domains_hold_their_uses_and_carry_traffic() {
    let Some(text) = common::run_c("parent_domain", "pad0=127.0.13.6", PROGRAM) else { return };
    let (einval, ebusy) = (libc::EINVAL, i64::from(libc::EBUSY));
    let expect: &[(&str, i64, Option<i32>)] = &[
        ("alloc_td", 0, None),
        ("td_bad_mask", 0, Some(einval)),
        ("alloc_parent_domain", 0, None),
        ("pad_bad_mask", 0, Some(einval)),
        ("pad_of_pad", 0, Some(einval)),
        ("pad_half_allocators", 0, Some(einval)),
        ("cq_in_plain_pd", 0, Some(einval)),
        ("cq_in_parent_domain", 0, None),
        ("qp_in_parent_domain", 0, None),
        ("mr_in_parent_domain", 0, None),
        ("send", 0, None),
        ("dealloc_pd_under_pad", ebusy, None),
        ("dealloc_td_in_use", ebusy, None),
        ("dealloc_pad_in_use", ebusy, None),
        ("dealloc_pad_cq_left", ebusy, None),
        ("destroy_cq", 0, None),
        ("dealloc_pad", 0, None),
        ("dealloc_td", 0, None),
        ("dealloc_pd", 0, None),
    ];
    common::check_calls(&text, expect);
    common::check_lines(
        &text,
        &["qp_pd_is_pad 1", "wc wr_id=2 status=0", "wc wr_id=1 status=0", "payload \"via parent\"", "alive"],
    );
}
