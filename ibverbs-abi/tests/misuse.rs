//! Misuse from C gets libibverbs' answers, an error return and errno, and
//! the process keeps running: NULL and destroyed objects, a bad work
//! request in a chain, a QP transition the state machine refuses,
//! `ibv_reg_mr` of an unmapped range, destroying what is still in use.

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>

/* the call first, then errno: argument evaluation order is unspecified */
#define SHOW(name, ret) do { long r_ = (long)(ret); int e_ = errno; printf("%s ret=%ld errno=%d\n", name, r_, e_); } while (0)

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { printf("no device\n"); return 2; }
    struct ibv_context *ctx = ibv_open_device(list[0]);
    if (!ctx) { printf("open failed errno=%d\n", errno); return 2; }

    errno = 0; SHOW("alloc_pd_null", ibv_alloc_pd(NULL) != NULL);
    struct ibv_port_attr pa;
    SHOW("query_port_2", ibv_query_port(ctx, 2, &pa));
    union ibv_gid gid;
    errno = 0; SHOW("query_gid_past_table", ibv_query_gid(ctx, 1, 99, &gid));
    memset(&gid, 0xff, sizeof gid);
    errno = 0; SHOW("query_gid_empty", ibv_query_gid(ctx, 1, 5, &gid));
    { int z = 1; for (int i = 0; i < 16; i++) z &= gid.raw[i] == 0; printf("empty_gid_zero ret=%d errno=0\n", z); }
    struct ibv_gid_entry ge;
    SHOW("query_gid_ex_empty", ibv_query_gid_ex(ctx, 1, 5, &ge, 0));
    SHOW("query_gid_ex_past_table", ibv_query_gid_ex(ctx, 1, 99, &ge, 0));
    errno = 0; SHOW("create_cq_0", ibv_create_cq(ctx, 0, NULL, NULL, 0) != NULL);

    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);

    /* an unmapped range */
    size_t len = 1 << 16;
    void *gone = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(gone, len);
    errno = 0; SHOW("reg_mr_unmapped", ibv_reg_mr(pd, gone, len, IBV_ACCESS_LOCAL_WRITE) != NULL);
    errno = 0; SHOW("reg_mr_null_pd", ibv_reg_mr(NULL, &num, sizeof num, 0) != NULL);
    errno = 0; SHOW("reg_mr_remote_write_without_local", ibv_reg_mr(pd, &num, sizeof num, IBV_ACCESS_REMOTE_WRITE) != NULL);

    static char buf[4096];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    SHOW("reg_mr_ok", mr == NULL);
    SHOW("dealloc_pd_in_use", ibv_dealloc_pd(pd));

    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 4; ia.cap.max_recv_wr = 4; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    errno = 0; SHOW("create_qp_bad_cq", ({ struct ibv_qp_init_attr b = ia; b.send_cq = (struct ibv_cq *)&b; ibv_create_qp(pd, &b) != NULL; }));
    errno = 0; SHOW("create_qp_bad_type", ({ struct ibv_qp_init_attr b = ia; b.qp_type = 77; ibv_create_qp(pd, &b) != NULL; }));
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    SHOW("create_qp_ok", qp == NULL);
    SHOW("destroy_cq_in_use", ibv_destroy_cq(cq));

    /* RESET -> RTR: the state machine refuses it */
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    SHOW("modify_reset_to_rtr", ibv_modify_qp(qp, &a, IBV_QP_STATE));
    SHOW("qp_state_after", qp->state);

    /* a chain whose second request has an opcode that does not exist */
    struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
    struct ibv_send_wr w2, w1, *bad = NULL;
    memset(&w1, 0, sizeof w1); memset(&w2, 0, sizeof w2);
    w1.wr_id = 1; w1.sg_list = &sge; w1.num_sge = 1; w1.opcode = IBV_WR_SEND; w1.next = &w2;
    w2.wr_id = 2; w2.sg_list = &sge; w2.num_sge = 1; w2.opcode = 99;
    /* in RESET a post is refused at the first request */
    SHOW("post_send_in_reset", ibv_post_send(qp, &w1, &bad));
    SHOW("bad_wr_is_first", bad == &w1 ? 1 : 0);
    a.qp_state = IBV_QPS_INIT; a.pkey_index = 0; a.port_num = 1; a.qp_access_flags = 0;
    SHOW("modify_to_init", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
    struct ibv_recv_wr r2, r1, *rbad = NULL;
    memset(&r1, 0, sizeof r1); memset(&r2, 0, sizeof r2);
    r1.wr_id = 1; r1.sg_list = &sge; r1.num_sge = 1; r1.next = &r2;
    r2.wr_id = 2; r2.sg_list = NULL; r2.num_sge = 3; /* NULL list with entries */
    SHOW("post_recv_bad_second", ibv_post_recv(qp, &r1, &rbad));
    SHOW("bad_recv_is_second", rbad == &r2 ? 1 : 0);
    w1.next = &w2;
    bad = NULL;
    a.qp_state = IBV_QPS_ERR;
    SHOW("modify_to_err", ibv_modify_qp(qp, &a, IBV_QP_STATE));
    SHOW("post_send_bad_opcode", ibv_post_send(qp, &w1, &bad));
    SHOW("bad_wr_is_second", bad == &w2 ? 1 : 0);

    SHOW("destroy_qp", ibv_destroy_qp(qp));
    SHOW("destroy_qp_again", ibv_destroy_qp(qp));
    SHOW("modify_destroyed_qp", ibv_modify_qp(qp, &a, IBV_QP_STATE));
    SHOW("dereg_mr", ibv_dereg_mr(mr));
    SHOW("dereg_mr_again", ibv_dereg_mr(mr));
    SHOW("destroy_cq", ibv_destroy_cq(cq));
    SHOW("destroy_cq_again", ibv_destroy_cq(cq));
    SHOW("dealloc_pd", ibv_dealloc_pd(pd));
    SHOW("dealloc_pd_again", ibv_dealloc_pd(pd));
    SHOW("dealloc_pd_null", ibv_dealloc_pd(NULL));
    errno = 0; SHOW("comp_channel_null_ctx", ibv_create_comp_channel(NULL) != NULL);
    /* ibv_init_ah_from_wc on an IPv4 device: RoCE v2 puts the IPv4 header
       in the last 20 bytes of the GRH area; the sender is its source */
    {
        struct ibv_wc wc; memset(&wc, 0, sizeof wc); wc.wc_flags = IBV_WC_GRH;
        unsigned char grh[40]; memset(grh, 0, sizeof grh);
        grh[20] = 0x45; grh[21] = 0x68;
        grh[32] = 127; grh[33] = 0; grh[34] = 0; grh[35] = 9;
        struct ibv_ah_attr ah; memset(&ah, 0xaa, sizeof ah);
        int r = ibv_init_ah_from_wc(ctx, 1, &wc, (struct ibv_grh *)grh, &ah);
        const uint8_t *g = ah.grh.dgid.raw;
        printf("init_ah_from_wc ret=%d errno=0 global=%d tclass=%d dgid=%02x%02x:%d.%d.%d.%d zeros=%d\n", r,
               ah.is_global, ah.grh.traffic_class, g[10], g[11], g[12], g[13], g[14], g[15],
               g[0] == 0 && g[5] == 0 && g[9] == 0);
    }
    SHOW("close_device", ibv_close_device(ctx));
    errno = 0; SHOW("close_device_again", ibv_close_device(ctx));
    ibv_free_device_list(list);
    printf("alive\n");
    return 0;
}
"#;

#[test]
fn misuse_from_c_returns_errors_and_the_process_lives() {
    let Some(text) = common::run_c("misuse", "mis0=127.0.13.1", PROGRAM) else { return };
    let (einval, efault, ebusy, eopnotsupp) = (libc::EINVAL, libc::EFAULT, libc::EBUSY, libc::EOPNOTSUPP);
    // (call, return value, errno when the call reports through errno)
    let expect: &[(&str, i64, Option<i32>)] = &[
        ("alloc_pd_null", 0, Some(einval)),
        ("query_port_2", i64::from(einval), None),
        ("query_gid_past_table", -1, Some(einval)),
        ("query_gid_empty", 0, None),
        ("empty_gid_zero", 1, None),
        ("query_gid_ex_empty", i64::from(libc::ENODATA), None),
        ("query_gid_ex_past_table", i64::from(einval), None),
        ("create_cq_0", 0, Some(einval)),
        ("reg_mr_unmapped", 0, Some(efault)),
        ("reg_mr_null_pd", 0, Some(einval)),
        ("reg_mr_remote_write_without_local", 0, Some(einval)),
        ("reg_mr_ok", 0, None),
        ("dealloc_pd_in_use", i64::from(ebusy), None),
        ("create_qp_bad_cq", 0, Some(einval)),
        ("create_qp_bad_type", 0, Some(eopnotsupp)),
        ("create_qp_ok", 0, None),
        ("destroy_cq_in_use", i64::from(ebusy), None),
        ("modify_reset_to_rtr", i64::from(einval), None),
        ("qp_state_after", 0, None),
        ("post_send_in_reset", i64::from(einval), None),
        ("bad_wr_is_first", 1, None),
        ("modify_to_init", 0, None),
        ("post_recv_bad_second", i64::from(einval), None),
        ("bad_recv_is_second", 1, None),
        ("modify_to_err", 0, None),
        ("post_send_bad_opcode", i64::from(einval), None),
        ("bad_wr_is_second", 1, None),
        ("destroy_qp", 0, None),
        ("destroy_qp_again", i64::from(einval), None),
        ("modify_destroyed_qp", i64::from(einval), None),
        ("dereg_mr", 0, None),
        ("dereg_mr_again", i64::from(einval), None),
        ("destroy_cq", 0, None),
        ("destroy_cq_again", i64::from(einval), None),
        ("dealloc_pd", 0, None),
        ("dealloc_pd_again", i64::from(einval), None),
        ("dealloc_pd_null", i64::from(einval), None),
        ("comp_channel_null_ctx", 0, Some(einval)),
        ("init_ah_from_wc", 0, None),
        ("close_device", 0, None),
        ("close_device_again", -1, Some(einval)),
    ];
    common::check_calls(&text, expect);
    // The sender of an IPv4 packet: ::ffff:127.0.0.9, traffic class from its TOS.
    assert!(text.contains("init_ah_from_wc ret=0 errno=0 global=1 tclass=104 dgid=ffff:127.0.0.9 zeros=1"), "{text}");
    assert!(text.contains("alive"), "{text}");
}
