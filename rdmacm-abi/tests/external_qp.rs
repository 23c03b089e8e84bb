//! Connections of a QP the application moves itself (librdmacm's
//! "external QP", as pyverbs' `test_rdmacm_async_traffic_external_qp`
//! uses it), from C: `rdma_connect`/`rdma_accept` with `conn_param.qp_num`
//! on IDs without a QP, `rdma_init_qp_attr` for INIT, RTR and RTS,
//! CONNECT_RESPONSE and `rdma_establish` on the active side; the ECE
//! vendor ID each side sets arrives at the other; `rdma_disconnect` leaves
//! the QPs where the application put them; misuse gets EINVAL. Two
//! processes (a fork), each with a device of its own on 127.0.192.x, over
//! this build's librdmacm.so.1 and libibverbs.so.1.

mod common;

use std::process::Command;
use std::time::Duration;

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { printf("%s FAILED line %d: %s (errno %d %s)\n", who, __LINE__, #c, errno, strerror(errno)); fflush(stdout); return 1; } } while (0)

static const char *who = "?";
static const char SERVER[] = "127.0.192.1", CLIENT[] = "127.0.192.2";

static struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	time_t end = time(NULL) + 10;
	while (time(NULL) < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n;
		usleep(100);
	}
	return 0;
}

/* The next event on ch, which must be `want`; acked. Its conn param is copied. */
static int next_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		      struct rdma_cm_id **id, struct rdma_conn_param *param)
{
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != want) {
		printf("%s: got %s (status %d), wanted %s\n", who, rdma_event_str(ev->event), ev->status,
		       rdma_event_str(want));
		return 1;
	}
	CHECK(ev->status == 0);
	if (id)
		*id = ev->id;
	if (param)
		*param = ev->param.conn;
	CHECK(rdma_ack_cm_event(ev) == 0);
	return 0;
}

/* The application's own RC QP on the ID's PD, with its own CQ. */
static struct ibv_qp *own_qp(struct rdma_cm_id *id, struct ibv_cq **cq)
{
	*cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	if (!*cq)
		return NULL;
	struct ibv_qp_init_attr a = { .send_cq = *cq, .recv_cq = *cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	return ibv_create_qp(id->pd, &a);
}

/* INIT, RTR, RTS with the CM's attributes; the RTR ones are kept in *rtr. */
static int move_qp(struct rdma_cm_id *id, struct ibv_qp *qp, struct ibv_qp_attr *rtr)
{
	for (int s = IBV_QPS_INIT; s <= IBV_QPS_RTS; s++) {
		struct ibv_qp_attr a = { .qp_state = s };
		int mask = 0;
		CHECK(rdma_init_qp_attr(id, &a, &mask) == 0);
		CHECK(a.qp_state == s && (mask & IBV_QP_STATE));
		if (s == IBV_QPS_RTR) {
			CHECK(mask & IBV_QP_AV && mask & IBV_QP_DEST_QPN && mask & IBV_QP_RQ_PSN && mask & IBV_QP_PATH_MTU);
			*rtr = a;
		}
		if (s == IBV_QPS_RTS)
			CHECK(mask & IBV_QP_SQ_PSN && mask & IBV_QP_TIMEOUT && mask & IBV_QP_MAX_QP_RD_ATOMIC);
		CHECK(ibv_modify_qp(qp, &a, mask) == 0);
	}
	return 0;
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

static int server(int port_out)
{
	who = "server";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *listen, *conn;
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in a = sin_of(SERVER, 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&a) == 0);
	CHECK(rdma_listen(listen, 4) == 0);
	uint16_t port = ntohs(rdma_get_src_port(listen));
	CHECK(write(port_out, &port, sizeof port) == sizeof port);

	struct rdma_conn_param req;
	if (next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &conn, &req))
		return 1;
	CHECK(conn->qp == NULL && conn->pd);
	struct ibv_ece ece;
	CHECK(rdma_get_remote_ece(conn, &ece) == 0 && ece.vendor_id == 0x1234);
	struct ibv_cq *cq;
	struct ibv_qp *qp = own_qp(conn, &cq);
	CHECK(qp);
	struct ibv_qp_attr rtr;
	if (move_qp(conn, qp, &rtr))
		return 1;
	CHECK(rtr.dest_qp_num == req.qp_num); /* the client's own QP, from its REQ */
	CHECK(qp_state(qp) == IBV_QPS_RTS);

	char buf[64] = { 0 };
	struct ibv_mr *mr = ibv_reg_mr(conn->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(qp, &rwr, &bad) == 0);

	struct ibv_ece mine = { .vendor_id = 0x5678 };
	CHECK(rdma_set_local_ece(conn, &mine) == 0);
	errno = 0;
	CHECK(rdma_accept(conn, NULL) == -1 && errno == EINVAL); /* no QP anywhere */
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7,
		.qp_num = qp->qp_num };
	CHECK(rdma_accept(conn, &p) == 0);
	if (next_event(ch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL))
		return 1;

	struct ibv_wc wc;
	CHECK(poll_one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.byte_len == 13);
	CHECK(memcmp(buf, "external qp!", 13) == 0);
	memcpy(buf, "and back", 9);
	sge.length = 9;
	struct ibv_send_wr swr = { .wr_id = 8, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *sbad;
	CHECK(ibv_post_send(qp, &swr, &sbad) == 0);
	CHECK(poll_one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 8);

	if (next_event(ch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL))
		return 1;
	CHECK(rdma_disconnect(conn) == 0);
	CHECK(qp_state(qp) == IBV_QPS_RTS); /* the application's to move, not the CM's */
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dereg_mr(mr) == 0);
	CHECK(rdma_destroy_id(conn) == 0 && rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(ch);
	printf("server OK\n");
	return 0;
}

static int client(int port_in)
{
	who = "client";
	uint16_t port;
	CHECK(read(port_in, &port, sizeof port) == sizeof port);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in src = sin_of(CLIENT, 0), dst = sin_of(SERVER, port);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0);
	if (next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL))
		return 1;
	CHECK(rdma_resolve_route(id, 2000) == 0);
	if (next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL))
		return 1;
	struct ibv_cq *cq;
	struct ibv_qp *qp = own_qp(id, &cq);
	CHECK(qp);

	/* Before a connection only INIT is known; nothing to establish yet. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	int mask = 0;
	CHECK(rdma_init_qp_attr(id, &a, &mask) == 0 && (mask & IBV_QP_PORT) && a.port_num == 1);
	a.qp_state = IBV_QPS_RTR;
	errno = 0;
	CHECK(rdma_init_qp_attr(id, &a, &mask) == -1 && errno == EINVAL);
	a.qp_state = IBV_QPS_SQD;
	errno = 0;
	CHECK(rdma_init_qp_attr(id, &a, &mask) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_establish(id) == -1 && errno == EINVAL);
	struct rdma_conn_param none = { .responder_resources = 1 };
	errno = 0;
	CHECK(rdma_connect(id, &none) == -1 && errno == EINVAL); /* no QP, none in qp_num */

	struct ibv_ece mine = { .vendor_id = 0x1234 };
	CHECK(rdma_set_local_ece(id, &mine) == 0);
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
		.rnr_retry_count = 7, .qp_num = qp->qp_num };
	CHECK(rdma_connect(id, &p) == 0);
	struct rdma_conn_param rep;
	if (next_event(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, NULL, &rep))
		return 1;
	CHECK(qp_state(qp) == IBV_QPS_RESET); /* nobody moved it */
	struct ibv_ece ece;
	CHECK(rdma_get_remote_ece(id, &ece) == 0 && ece.vendor_id == 0x5678);
	struct ibv_qp_attr rtr;
	if (move_qp(id, qp, &rtr))
		return 1;
	CHECK(rtr.dest_qp_num == rep.qp_num && rep.qp_num != 0);
	CHECK(rdma_establish(id) == 0);
	errno = 0;
	CHECK(rdma_establish(id) == -1 && errno == EINVAL); /* once */

	char buf[64] = "external qp!";
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	struct ibv_sge rsge = { .addr = (uintptr_t)buf + 32, .length = 32, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 5, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 13, .lkey = mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(ibv_post_send(qp, &swr, &bad) == 0);
	struct ibv_wc wc;
	int sent = 0, got = 0;
	while (!sent || !got) {
		CHECK(poll_one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS);
		if (wc.wr_id == 9)
			sent = 1;
		if (wc.wr_id == 5)
			got = wc.byte_len == 9 && memcmp(buf + 32, "and back", 9) == 0;
		CHECK(wc.wr_id == 9 || got);
	}

	CHECK(rdma_disconnect(id) == 0);
	if (next_event(ch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL))
		return 1;
	CHECK(qp_state(qp) == IBV_QPS_RTS);
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dereg_mr(mr) == 0);
	CHECK(rdma_destroy_id(id) == 0);

	/* An ID with rdma_create_qp's QP: ECE and rdma_establish are not for it. */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0);
	if (next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL))
		return 1;
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_create_qp(id, NULL, &qa) == 0 && id->qp);
	errno = 0;
	CHECK(rdma_set_local_ece(id, &mine) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_get_remote_ece(id, &ece) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_establish(id) == -1 && errno == EINVAL);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("client OK\n");
	return 0;
}

int main(void)
{
	int fds[2];
	alarm(60);
	if (pipe(fds))
		return 2;
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0) {
		setenv("SOFTROCE_DEVICES", "rxe1=127.0.192.2", 1);
		close(fds[1]);
		int r = client(fds[0]);
		fflush(stdout);
		_exit(r);
	}
	setenv("SOFTROCE_DEVICES", "rxe0=127.0.192.1", 1);
	close(fds[0]);
	int r = server(fds[1]);
	int st = 0;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("client exited with status %#x\n", st);
		r = 1;
	}
	return r;
}
"#;

#[test]
fn an_application_moves_its_own_qp_with_init_qp_attr_and_establish() {
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        testkit::skip("<rdma/rdma_cma.h> is not installed (apt-get install librdmacm-dev)");
        return;
    }
    let dir = common::link_dir("external_qp");
    let exe = common::compile_c(&dir, "external_qp", PROGRAM, &["-lrdmacm", "-libverbs"], "");
    let child = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env_remove("SOFTROCE_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the C program");
    let (run, in_time) = common::wait(child, Duration::from_secs(90));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(in_time && run.status.success(), "{} (in time: {in_time}):\n{}", exe.display(), common::show(&run));
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("server OK") && text.contains("client OK"), "{}", common::show(&run));
}
