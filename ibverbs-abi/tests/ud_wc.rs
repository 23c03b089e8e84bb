//! What a UD receive completion says about its packet, read as UCX's
//! `ud_verbs` reads it: `wc.sl` carries the RoCE packet type (ConnectX's
//! CQE field: 0xA for RoCE v2 over IPv4), through `ibv_poll_cq` and
//! `ibv_wc_read_sl`, and the GRH area's destination address is where that
//! type says. UCX 1.13 takes `sl & 7 == 2` to mean "the destination GID is
//! the last 4 bytes of the GRH area" and else compares 16 bytes; with `sl`
//! 0 it dropped every UD packet, so `ud_verbs` never answered a peer
//! (`UD endpoint ... unhandled timeout error`).

mod common;

const PROGRAM: &str = r#"
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#define DIE(what) do { printf("failed %s\n", what); return 1; } while (0)

/* What UCX 1.13's uct_ud_iface_check_grh accepts: the destination GID
 * of the GRH area, 4 bytes (at its end) when sl says IPv4, else 16. */
static int ucx_accepts(const uint8_t *grh, int sl, const union ibv_gid *own) {
    if ((sl & 7) == 2)
        return memcmp(grh + 36, own->raw + 12, 4) == 0;
    return memcmp(grh + 24, own->raw, 16) == 0;
}

int main(void) {
    struct ibv_device **l = ibv_get_device_list(NULL);
    if (!l || !l[0]) DIE("device list");
    struct ibv_context *ctx = ibv_open_device(l[0]);
    if (!ctx) DIE("open");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq_init_attr_ex ca = { .cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS };
    struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
    struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
    if (!pd || !cqx || !cq) DIE("pd or cq");
    union ibv_gid own;
    if (ibv_query_gid(ctx, 1, 0, &own)) DIE("query_gid");

    static uint8_t buf[2][40 + 64];
    static char out[16] = "ud datagram";
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *mo = ibv_reg_mr(pd, out, sizeof out, IBV_ACCESS_LOCAL_WRITE);
    if (!mr || !mo) DIE("reg_mr");

    /* Two UD QPs: one completes on a plain CQ, one on an extended CQ. */
    struct ibv_qp *qp[2];
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_init_attr ia; memset(&ia, 0, sizeof ia);
        ia.send_cq = cq; ia.recv_cq = i ? ibv_cq_ex_to_cq(cqx) : cq; ia.qp_type = IBV_QPT_UD;
        ia.cap.max_send_wr = 4; ia.cap.max_recv_wr = 4; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
        qp[i] = ibv_create_qp(pd, &ia);
        if (!qp[i]) DIE("create_qp");
        struct ibv_qp_attr a; memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qkey = 0x1ee7a330;
        if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) DIE("init");
        a.qp_state = IBV_QPS_RTR;
        if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE)) DIE("rtr");
        a.qp_state = IBV_QPS_RTS;
        if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) DIE("rts");
        memset(buf[i], 0xff, sizeof buf[i]);
        struct ibv_sge rs = { (uintptr_t)buf[i], sizeof buf[i], mr->lkey };
        struct ibv_recv_wr rw = { .wr_id = 10 + i, .sg_list = &rs, .num_sge = 1 }, *rb;
        if (ibv_post_recv(qp[i], &rw, &rb)) DIE("post_recv");
    }
    /* As UCX builds its address handles on RoCE v2. */
    struct ibv_ah_attr aa; memset(&aa, 0, sizeof aa);
    aa.is_global = 1; aa.port_num = 1; aa.grh.hop_limit = 255; aa.grh.flow_label = 1;
    aa.dlid = 0xc000; aa.grh.dgid = own;
    struct ibv_ah *ah = ibv_create_ah(pd, &aa);
    if (!ah) DIE("create_ah");
    for (int i = 0; i < 2; i++) {
        struct ibv_sge ss = { (uintptr_t)out, 12, mo->lkey };
        struct ibv_send_wr sw = { .wr_id = i + 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                                  .send_flags = IBV_SEND_SIGNALED }, *sb;
        sw.wr.ud.ah = ah; sw.wr.ud.remote_qpn = qp[i]->qp_num; sw.wr.ud.remote_qkey = 0x1ee7a330;
        if (ibv_post_send(qp[0], &sw, &sb)) DIE("post_send");
    }

    int plain = 0, ext = 0;
    for (int t = 0; t < 5000 && (plain < 1 || ext < 1); t++) {
        struct ibv_wc wc[4];
        int n = ibv_poll_cq(cq, 4, wc);
        for (int k = 0; k < n; k++) {
            if (wc[k].opcode != IBV_WC_RECV) continue;
            printf("poll_cq status=%d len=%u grh=%d sl=0x%x ucx_accepts=%d\n", wc[k].status, wc[k].byte_len,
                   !!(wc[k].wc_flags & IBV_WC_GRH), wc[k].sl, ucx_accepts(buf[0], wc[k].sl, &own));
            plain++;
        }
        struct ibv_poll_cq_attr pa = { 0 };
        if (ibv_start_poll(cqx, &pa) == 0) {
            do {
                int sl = ibv_wc_read_sl(cqx);
                printf("read_sl status=%d sl=0x%x ucx_accepts=%d\n", cqx->status, sl, ucx_accepts(buf[1], sl, &own));
                ext++;
            } while (ibv_next_poll(cqx) == 0);
            ibv_end_poll(cqx);
        }
        if (n == 0) nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    }
    printf("payload \"%s\"\n", (char *)buf[0] + 40);
    ibv_destroy_ah(ah);
    for (int i = 0; i < 2; i++) ibv_destroy_qp(qp[i]);
    ibv_dereg_mr(mr); ibv_dereg_mr(mo);
    ibv_destroy_cq(cq); ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
    ibv_dealloc_pd(pd); ibv_close_device(ctx); ibv_free_device_list(l);
    return 0;
}
"#;

#[test]
fn ud_receive_reports_the_roce_packet_type_in_sl() {
    let Some(text) = common::run_c("ud_wc", "rxe0=127.0.23.9", PROGRAM) else { return };
    common::check_lines(
        &text,
        &[
            "poll_cq status=0 len=52 grh=1 sl=0xa ucx_accepts=1",
            "read_sl status=0 sl=0xa ucx_accepts=1",
            "payload \"ud datagram\"",
        ],
    );
}
