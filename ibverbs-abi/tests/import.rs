//! Sharing objects between contexts of one process, from C:
//! `ibv_import_device` on a dup of a context's `cmd_fd` opens the same
//! device (and owns the descriptor), `ibv_import_pd` and `ibv_import_mr`
//! find a PD and an MR by handle, a QP made in the imported PD carries a
//! WRITE into the imported MR's keys, and unimporting frees the imported
//! objects alone (the originals hold on; an original PD cannot go while an
//! import of it lives). A descriptor of no context, or an unknown handle,
//! is refused and leaves the caller's descriptor open.

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define SHOW(name, ret) do { long r_ = (long)(ret); int e_ = errno; printf("%s ret=%ld errno=%d\n", name, r_, e_); } while (0)

static int to_rts(struct ibv_context *ctx, struct ibv_qp *qp, uint32_t dest) {
    struct ibv_qp_attr a; memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.port_num = 1; a.ah_attr.grh.hop_limit = 1; ibv_query_gid(ctx, 1, 0, &a.ah_attr.grh.dgid);
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return -2;
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) ? -3 : 0;
}

int main(void) {
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num < 1) { printf("no device\n"); return 2; }
    struct ibv_context *a = ibv_open_device(list[0]);
    struct ibv_pd *pda = ibv_alloc_pd(a), *pda2 = ibv_alloc_pd(a);
    printf("pd handles distinct %d\n", pda->handle != pda2->handle);
    static char buf[64];
    struct ibv_mr *mra = ibv_reg_mr(pda, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

    int null_fd = open("/dev/null", O_RDONLY);
    errno = 0; SHOW("import_not_a_context", ibv_import_device(null_fd) != NULL);
    printf("caller_fd_still_open %d\n", fcntl(null_fd, F_GETFD) >= 0);
    int fd = dup(a->cmd_fd);
    struct ibv_context *b = ibv_import_device(fd);
    SHOW("import_device", b == NULL);
    printf("same device %d\n", b && strcmp(ibv_get_device_name(b->device), ibv_get_device_name(a->device)) == 0);
    errno = 0; SHOW("import_pd_unknown", ibv_import_pd(b, 0x7fffffff) != NULL);
    struct ibv_pd *pdb = ibv_import_pd(b, pda->handle);
    SHOW("import_pd", pdb == NULL);
    printf("imported pd context_b=%d handle_same=%d\n", pdb->context == b, pdb->handle == pda->handle);
    errno = 0; SHOW("import_mr_unknown", ibv_import_mr(pdb, 0x7fffffff) != NULL);
    struct ibv_mr *mrb = ibv_import_mr(pdb, mra->handle);
    SHOW("import_mr", mrb == NULL);
    printf("imported mr keys_same=%d addr_null=%d length=%zu\n", mrb->lkey == mra->lkey && mrb->rkey == mra->rkey, mrb->addr == NULL, mrb->length);

    /* a QP in b's imported PD writes into the MR through a QP of a */
    struct ibv_cq *cqa = ibv_create_cq(a, 16, NULL, NULL, 0), *cqb = ibv_create_cq(b, 16, NULL, NULL, 0);
    struct ibv_qp_init_attr ia; memset(&ia, 0, sizeof ia);
    ia.qp_type = IBV_QPT_RC; ia.cap.max_send_wr = 4; ia.cap.max_recv_wr = 4; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    ia.send_cq = ia.recv_cq = cqb; struct ibv_qp *qb = ibv_create_qp(pdb, &ia);
    ia.send_cq = ia.recv_cq = cqa; struct ibv_qp *qa = ibv_create_qp(pda, &ia);
    SHOW("qps", qa == NULL || qb == NULL || to_rts(b, qb, qa->qp_num) || to_rts(a, qa, qb->qp_num));
    static char src[16] = "imported write";
    struct ibv_mr *ms = ibv_reg_mr(pdb, src, sizeof src, 0);
    struct ibv_sge s = { (uintptr_t)src, 15, ms->lkey };
    struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
    w.wr.rdma.rkey = mrb->rkey; w.wr.rdma.remote_addr = (uintptr_t)buf;
    SHOW("post", ibv_post_send(qb, &w, &bad));
    struct ibv_wc wc; int got = 0;
    for (int i = 0; i < 2000 && !got; i++) { got = ibv_poll_cq(cqb, 1, &wc); if (!got) nanosleep(&(struct timespec){ 0, 1000000 }, NULL); }
    printf("write status=%d buf \"%s\"\n", got ? wc.status : -1, buf);

    SHOW("dealloc_original_while_imported", ibv_dealloc_pd(pda));
    ibv_unimport_mr(mrb);
    ibv_unimport_pd(pdb);   /* while a QP and an MR made in it live */
    SHOW("mr_a_still_registered", ibv_dereg_mr(mra));
    SHOW("destroy_qp_b", ibv_destroy_qp(qb));
    SHOW("dereg_src", ibv_dereg_mr(ms));
    SHOW("destroy_qp_a", ibv_destroy_qp(qa));
    ibv_destroy_cq(cqa); ibv_destroy_cq(cqb);
    SHOW("dealloc_original", ibv_dealloc_pd(pda));
    SHOW("close_b", ibv_close_device(b));
    errno = 0; SHOW("fd_closed_with_b", fcntl(fd, F_GETFD));
    printf("alive\n");
    return 0;
}
"#;

#[test]
fn contexts_pds_and_mrs_are_imported_within_the_process() {
    let Some(text) = common::run_c("import", "imp0=127.0.13.7", PROGRAM) else { return };
    let expect: &[(&str, i64, Option<i32>)] = &[
        ("import_not_a_context", 0, Some(libc::EOPNOTSUPP)),
        ("import_device", 0, None),
        ("import_pd_unknown", 0, Some(libc::EINVAL)),
        ("import_pd", 0, None),
        ("import_mr_unknown", 0, Some(libc::EINVAL)),
        ("import_mr", 0, None),
        ("qps", 0, None),
        ("post", 0, None),
        ("dealloc_original_while_imported", i64::from(libc::EBUSY), None),
        ("mr_a_still_registered", 0, None),
        ("destroy_qp_b", 0, None),
        ("dereg_src", 0, None),
        ("destroy_qp_a", 0, None),
        ("dealloc_original", 0, None),
        ("close_b", 0, None),
        ("fd_closed_with_b", -1, Some(libc::EBADF)),
    ];
    common::check_calls(&text, expect);
    common::check_lines(
        &text,
        &[
            "pd handles distinct 1",
            "caller_fd_still_open 1",
            "same device 1",
            "imported pd context_b=1 handle_same=1",
            "imported mr keys_same=1 addr_null=1 length=64",
            "write status=0 buf \"imported write\"",
            "alive",
        ],
    );
}
