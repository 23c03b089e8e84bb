//! UD multicast from C: `ibv_attach_mcast` of two QPs on one device, one
//! send from another device to the group (QPN 0xFFFFFF) reaching both,
//! a detached QP receiving nothing, the device limits `ibv_query_device`
//! reports (rxe's), and misuse with the kernel's errno: an RC QP, a
//! unicast GID, a detach of a group not attached (EINVAL), destroying a QP
//! still attached (EBUSY, as uverbs).

mod common;

const PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#define SHOW(name, ret) do { long r_ = (long)(ret); int e_ = errno; printf("%s ret=%ld errno=%d\n", name, r_, e_); } while (0)
#define QKEY 0x01234567

struct member { struct ibv_cq *cq; struct ibv_qp *qp; struct ibv_mr *mr; char buf[4096]; };

static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq) {
    struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
        .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 } };
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!qp) return NULL;
    struct ibv_qp_attr t; memset(&t, 0, sizeof t);
    t.qp_state = IBV_QPS_INIT; t.port_num = 1; t.qkey = QKEY;
    if (ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return NULL;
    t.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &t, IBV_QP_STATE)) return NULL;
    t.qp_state = IBV_QPS_RTS;
    if (ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_SQ_PSN)) return NULL;
    return qp;
}

static int member_init(struct member *m, struct ibv_context *ctx, struct ibv_pd *pd) {
    m->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    m->qp = m->cq ? ud_qp(pd, m->cq) : NULL;
    m->mr = ibv_reg_mr(pd, m->buf, sizeof m->buf, IBV_ACCESS_LOCAL_WRITE);
    if (!m->qp || !m->mr) return -1;
    struct ibv_sge s = { .addr = (uintptr_t)m->buf, .length = sizeof m->buf, .lkey = m->mr->lkey };
    struct ibv_recv_wr wr2 = { .wr_id = 2, .sg_list = &s, .num_sge = 1 };
    struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .next = &wr2 }, *bad;
    return ibv_post_recv(m->qp, &wr, &bad);
}

/* one completion of m's CQ within about 2 s: its status and length, or -1 */
static int wait_one(struct member *m, int ms, uint32_t *len) {
    struct ibv_wc wc;
    for (int i = 0; i < ms; i++) {
        int n = ibv_poll_cq(m->cq, 1, &wc);
        if (n > 0) { if (len) *len = wc.byte_len; return wc.status; }
        struct timespec ts = { 0, 1000000 }; nanosleep(&ts, NULL);
    }
    return -1;
}

int main(void) {
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 2) { printf("no devices\n"); return 1; }
    struct ibv_context *c0 = ibv_open_device(list[0]), *c1 = ibv_open_device(list[1]);
    struct ibv_device_attr da;
    SHOW("ibv_query_device", ibv_query_device(c1, &da));
    printf("max_mcast_grp=%d max_mcast_qp_attach=%d max_total_mcast_qp_attach=%d\n",
           da.max_mcast_grp, da.max_mcast_qp_attach, da.max_total_mcast_qp_attach);
    struct ibv_pd *p0 = ibv_alloc_pd(c0), *p1 = ibv_alloc_pd(c1);

    union ibv_gid mgid; memset(&mgid, 0, sizeof mgid);
    mgid.raw[10] = 0xff; mgid.raw[11] = 0xff;
    inet_pton(AF_INET, "239.21.0.31", &mgid.raw[12]);
    union ibv_gid unicast; ibv_query_gid(c1, 1, 0, &unicast);

    static struct member sender, m1, m2;
    if (member_init(&sender, c0, p0) || member_init(&m1, c1, p1) || member_init(&m2, c1, p1)) { printf("setup\n"); return 1; }
    SHOW("attach_m1", ibv_attach_mcast(m1.qp, &mgid, 0));
    SHOW("attach_m2", ibv_attach_mcast(m2.qp, &mgid, 0));
    SHOW("attach_m2_again", ibv_attach_mcast(m2.qp, &mgid, 0));

    struct ibv_ah_attr aa; memset(&aa, 0, sizeof aa);
    aa.is_global = 1; aa.port_num = 1; aa.grh.dgid = mgid; aa.grh.hop_limit = 64;
    struct ibv_ah *ah = ibv_create_ah(p0, &aa);
    strcpy(sender.buf + 2048, "to every member");
    struct ibv_sge s = { .addr = (uintptr_t)sender.buf + 2048, .length = 16, .lkey = sender.mr->lkey };
    struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
    wr.wr.ud.ah = ah; wr.wr.ud.remote_qpn = 0xffffff; wr.wr.ud.remote_qkey = QKEY;
    SHOW("post_send", ibv_post_send(sender.qp, &wr, &bad));
    printf("sent status=%d\n", wait_one(&sender, 2000, NULL));
    uint32_t l1 = 0, l2 = 0;
    int st1 = wait_one(&m1, 2000, &l1), st2 = wait_one(&m2, 2000, &l2);
    printf("m1 status=%d len=%u data=%s\n", st1, l1, m1.buf + 40);
    printf("m2 status=%d len=%u data=%s\n", st2, l2, m2.buf + 40);

    /* detached: m1 gets nothing of the next send, m2 does */
    SHOW("detach_m1", ibv_detach_mcast(m1.qp, &mgid, 0));
    SHOW("post_send2", ibv_post_send(sender.qp, &wr, &bad));
    wait_one(&sender, 2000, NULL);
    int again = wait_one(&m2, 2000, NULL);
    printf("m2 again status=%d, m1 after detach=%d\n", again, wait_one(&m1, 200, NULL));

    /* misuse */
    struct ibv_qp_init_attr ra = { .send_cq = m1.cq, .recv_cq = m1.cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
    struct ibv_qp *rc = ibv_create_qp(p1, &ra);
    SHOW("attach_rc", ibv_attach_mcast(rc, &mgid, 0));
    SHOW("attach_unicast", ibv_attach_mcast(m1.qp, &unicast, 0));
    SHOW("detach_not_attached", ibv_detach_mcast(m1.qp, &mgid, 0));
    SHOW("attach_null_gid", ibv_attach_mcast(m1.qp, NULL, 0));
    SHOW("destroy_attached", ibv_destroy_qp(m2.qp));
    SHOW("detach_m2", ibv_detach_mcast(m2.qp, &mgid, 0));
    SHOW("destroy_detached", ibv_destroy_qp(m2.qp));
    SHOW("destroy_rc", ibv_destroy_qp(rc));
    return 0;
}
"#;

#[test]
fn attach_send_detach_and_misuse_from_c() {
    let devices = "mc0=127.0.21.31,mc1=127.0.21.32";
    let Some(text) = common::run_c("mcast", devices, PROGRAM) else { return };
    common::check_calls(
        &text,
        &[
            ("ibv_query_device", 0, None),
            ("attach_m1", 0, None),
            ("attach_m2", 0, None),
            ("attach_m2_again", 0, None),
            ("post_send", 0, None),
            ("detach_m1", 0, None),
            ("post_send2", 0, None),
            ("attach_rc", i64::from(libc::EINVAL), None),
            ("attach_unicast", i64::from(libc::EINVAL), None),
            ("detach_not_attached", i64::from(libc::EINVAL), None),
            ("attach_null_gid", i64::from(libc::EINVAL), None),
            ("destroy_attached", i64::from(libc::EBUSY), None),
            ("detach_m2", 0, None),
            ("destroy_detached", 0, None),
            ("destroy_rc", 0, None),
        ],
    );
    common::check_lines(
        &text,
        &[
            "max_mcast_grp=8192 max_mcast_qp_attach=56 max_total_mcast_qp_attach=458752",
            "sent status=0",
            "m1 status=0 len=56 data=to every member",
            "m2 status=0 len=56 data=to every member",
            "m2 again status=0, m1 after detach=-1",
        ],
    );
}
