//! librdmacm's synchronous mode from C: IDs made with no event channel
//! (`rdma_create_id(NULL, ...)`, as libfabric's verbs provider makes them),
//! whose calls block until their event and leave it in `id->event`;
//! `rdma_get_request` on a synchronous listener. `id->pd` is the device's
//! default PD as soon as `id->verbs` is set (bind, resolve, a request's new
//! ID), as librdmacm has it: a QP of the application's own on it works.
//! `rdma_listen` on an ID never bound binds it first (the kernel's rule)
//! and a client connects to it. Two processes (a fork),
//! each with a device of its own on 127.0.191.x, over this build's
//! librdmacm.so.1 and libibverbs.so.1. The C program compiles against the
//! system's `<rdma/rdma_cma.h>` (librdmacm-dev).

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
static const char SERVER[] = "127.0.191.1", CLIENT[] = "127.0.191.2";

static struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* One completion of the CQ within 10 s. */
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

static struct ibv_qp_init_attr qp_attr(void)
{
	/* No CQs: rdma_create_qp makes them, as librdmacm does. */
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	return a;
}

static int server(int port_out)
{
	who = "server";
	struct rdma_cm_id *listen, *conn = NULL;
	CHECK(rdma_create_id(NULL, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(listen->channel != NULL && listen->event == NULL);
	struct sockaddr_in a = sin_of(SERVER, 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&a) == 0);
	/* a device's address: id->verbs and its default PD, as librdmacm's ucma_get_device */
	CHECK(listen->verbs && listen->pd && listen->pd->context == listen->verbs);
	uint16_t port = ntohs(rdma_get_src_port(listen));
	CHECK(port != 0); /* picked at bind time */
	CHECK(rdma_listen(listen, 4) == 0);
	CHECK(ntohs(rdma_get_src_port(listen)) == port);

	/* A listener never bound: rdma_listen binds it to the IPv4 wildcard
	 * first, as the kernel's does (here the process's one device), its
	 * port picked then; a second listen is refused. */
	struct rdma_cm_id *unbound, *conn2 = NULL;
	CHECK(rdma_create_id(NULL, &unbound, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_listen(unbound, 1) == 0);
	uint16_t port2 = ntohs(rdma_get_src_port(unbound));
	CHECK(port2 != 0 && port2 != port && unbound->verbs);
	struct sockaddr_in *local = (struct sockaddr_in *)rdma_get_local_addr(unbound);
	char ip[INET_ADDRSTRLEN];
	CHECK(local->sin_family == AF_INET && inet_ntop(AF_INET, &local->sin_addr, ip, sizeof ip));
	CHECK(strcmp(ip, SERVER) == 0);
	errno = 0;
	CHECK(rdma_listen(unbound, 1) == -1 && errno == EINVAL);
	CHECK(write(port_out, &port, sizeof port) == sizeof port);
	CHECK(write(port_out, &port2, sizeof port2) == sizeof port2);

	/* Blocks until the client's REQ. */
	CHECK(rdma_get_request(listen, &conn) == 0 && conn && conn != listen);
	CHECK(conn->event && conn->event->event == RDMA_CM_EVENT_CONNECT_REQUEST && conn->event->id == conn);
	CHECK(conn->event->listen_id == listen);
	CHECK(conn->channel && conn->channel != listen->channel); /* a channel of its own */
	CHECK(conn->event->param.conn.private_data_len >= 10);
	CHECK(memcmp(conn->event->param.conn.private_data, "sync hello", 10) == 0);
	CHECK(conn->verbs == listen->verbs);
	CHECK(conn->pd && conn->pd->context == conn->verbs); /* before any QP */

	struct ibv_qp_init_attr qa = qp_attr();
	CHECK(rdma_create_qp(conn, NULL, &qa) == 0 && conn->qp && conn->recv_cq && conn->pd);
	char buf[64] = { 0 };
	struct ibv_mr *mr = ibv_reg_mr(conn->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(conn->qp, &rwr, &bad) == 0);

	/* Blocks until ESTABLISHED (the RTU); the request's event is acked. */
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7 };
	CHECK(rdma_accept(conn, &p) == 0);
	CHECK(conn->event && conn->event->event == RDMA_CM_EVENT_ESTABLISHED && conn->event->status == 0);

	struct ibv_wc wc;
	CHECK(poll_one(conn->recv_cq, &wc) == 1);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.byte_len == 16);
	CHECK(memcmp(buf, "over a sync id!", 16) == 0);

	/* DISCONNECTED: the client's DREQ (queued), or the DREP to ours. */
	CHECK(rdma_disconnect(conn) == 0);
	CHECK(conn->event && conn->event->event == RDMA_CM_EVENT_DISCONNECTED);
	rdma_destroy_qp(conn);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(rdma_destroy_id(conn) == 0); /* acks conn->event, destroys its channel */

	/* The client's connection to the listener that was never bound. */
	CHECK(rdma_get_request(unbound, &conn2) == 0 && conn2 && conn2->event->listen_id == unbound);
	qa = qp_attr();
	CHECK(rdma_create_qp(conn2, NULL, &qa) == 0);
	CHECK(rdma_accept(conn2, &p) == 0);
	CHECK(conn2->event && conn2->event->event == RDMA_CM_EVENT_ESTABLISHED);
	CHECK(rdma_disconnect(conn2) == 0);
	CHECK(conn2->event && conn2->event->event == RDMA_CM_EVENT_DISCONNECTED);
	rdma_destroy_qp(conn2);
	CHECK(rdma_destroy_id(conn2) == 0);
	CHECK(rdma_destroy_id(unbound) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	printf("server OK\n");
	return 0;
}

/* A synchronous ID from `src` to the server's `port`, its address and
 * route resolved and its QP made: ready to connect. */
static int routed_id_with_qp(struct rdma_cm_id **id, struct sockaddr_in *src, uint16_t port)
{
	struct sockaddr_in dst = sin_of(SERVER, port);
	struct ibv_qp_init_attr qa = qp_attr();
	CHECK(rdma_create_id(NULL, id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(*id, (struct sockaddr *)src, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(rdma_resolve_route(*id, 2000) == 0);
	CHECK(rdma_create_qp(*id, NULL, &qa) == 0);
	return 0;
}

static int client(int port_in)
{
	who = "client";
	uint16_t port, port2;
	CHECK(read(port_in, &port, sizeof port) == sizeof port);
	CHECK(read(port_in, &port2, sizeof port2) == sizeof port2);
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in src = sin_of(CLIENT, 0), dst = sin_of(SERVER, port);

	/* Each call returns with its event in id->event: no rdma_get_cm_event. */
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED && id->verbs);
	CHECK(id->pd && id->pd->context == id->verbs);
	CHECK(rdma_resolve_route(id, 2000) == 0);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
	struct ibv_qp_init_attr qa = qp_attr();
	CHECK(rdma_create_qp(id, NULL, &qa) == 0 && id->qp && id->send_cq);
	struct rdma_conn_param p = { .private_data = "sync hello", .private_data_len = 10,
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &p) == 0);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED && id->event->status == 0);
	CHECK(id->event->param.conn.qp_num != 0);

	char buf[16] = "over a sync id!";
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf, 0);
	CHECK(mr);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(ibv_post_send(id->qp, &swr, &bad) == 0);
	struct ibv_wc wc;
	CHECK(poll_one(id->send_cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 9);

	CHECK(rdma_disconnect(id) == 0);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_DISCONNECTED);
	rdma_destroy_qp(id);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(rdma_destroy_id(id) == 0);

	/* The server's listener that was never bound (its rdma_listen bound it). */
	CHECK(routed_id_with_qp(&id, &src, port2) == 0);
	CHECK(rdma_connect(id, &p) == 0);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED && id->event->status == 0);
	CHECK(rdma_disconnect(id) == 0);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_DISCONNECTED);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);

	/* A port nobody listens on: rdma_connect fails with ECONNREFUSED, the
	 * REJECTED event (reason 8) left in id->event. */
	uint16_t none = port;
	while (none == port || none == port2 || none == 0)
		none++;
	CHECK(routed_id_with_qp(&id, &src, none) == 0);
	errno = 0;
	CHECK(rdma_connect(id, &p) == -1 && errno == ECONNREFUSED);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_REJECTED && id->event->status == 8);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);

	/* An asynchronous ID made synchronous by rdma_migrate_id(id, NULL). */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 && id->channel == ch);
	CHECK(rdma_migrate_id(id, NULL) == 0 && id->channel != ch);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_migrate_id(id, ch) == 0 && id->channel == ch && id->event == NULL); /* back */
	CHECK(rdma_resolve_route(id, 2000) == 0 && id->event == NULL);
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(rdma_ack_cm_event(ev) == 0);
	/* A QP of the application's own on the ID's PD and a CQ of its context
	 * (pyverbs' external-QP rdmacm test): id->pd is there without rdma_create_qp. */
	CHECK(id->pd && id->pd->context == id->verbs && id->qp == NULL);
	struct ibv_cq *ext_cq = ibv_create_cq(id->verbs, 4, NULL, NULL, 0);
	CHECK(ext_cq);
	qa = qp_attr();
	qa.send_cq = qa.recv_cq = ext_cq;
	struct ibv_qp *ext_qp = ibv_create_qp(id->pd, &qa);
	CHECK(ext_qp);
	CHECK(ibv_destroy_qp(ext_qp) == 0 && ibv_destroy_cq(ext_cq) == 0);
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
		/* Each process its own device, set before the library reads it. */
		setenv("SOFTROCE_DEVICES", "rxe1=127.0.191.2", 1);
		close(fds[1]);
		int r = client(fds[0]);
		fflush(stdout);
		_exit(r);
	}
	setenv("SOFTROCE_DEVICES", "rxe0=127.0.191.1", 1);
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
fn synchronous_ids_block_in_each_call_between_two_processes() {
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        testkit::skip("<rdma/rdma_cma.h> is not installed (apt-get install librdmacm-dev)");
        return;
    }
    let dir = common::link_dir("sync");
    let exe = common::compile_c(&dir, "sync_mode", PROGRAM, &["-lrdmacm", "-libverbs"], "");
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
