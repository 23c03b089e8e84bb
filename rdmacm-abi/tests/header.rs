//! The C header check: every size and offset of ibverbs-abi's
//! `rdmacm::abi` (the structs applications see: `rdma_cm_id`,
//! `rdma_event_channel`, `rdma_cm_event`, `rdma_conn_param`,
//! `rdma_ud_param`, `rdma_addrinfo`, ...) asserted by a C program compiled
//! against the system's `<rdma/rdma_cma.h>` (Debian's librdmacm-dev); the
//! program then runs linked against this build's librdmacm.so.1 and
//! libibverbs.so.1 and checks the calls from C: the channel fd, events,
//! the ID's fields, rdma_create_qp's objects, and misuse (NULL, destroyed
//! or wrong-state IDs, bad addresses) answered with -1 and errno.

mod common;

use std::process::Command;

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#define CHECK(c) do { if (!(c)) { printf("FAILED line %d: %s (errno %d)\n", __LINE__, #c, errno); return 1; } } while (0)

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;
	if (poll(&p, 1, 5000) != 1 || !(p.revents & POLLIN)) {
		printf("FAILED: the channel fd did not become readable for %s\n", rdma_event_str(want));
		return NULL;
	}
	if (rdma_get_cm_event(ch, &ev) || ev->event != want) {
		printf("FAILED: wanted %s, got %s\n", rdma_event_str(want), ev ? rdma_event_str(ev->event) : "nothing");
		return NULL;
	}
	return ev;
}

int main(void)
{
	Dl_info info;
	if (dladdr((void *)rdma_create_id, &info))
		printf("rdma_create_id from %s\n", info.dli_fname);

	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && ch->fd >= 0);
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 0); /* nothing yet */

	int ctx_token;
	struct rdma_cm_id *id = NULL;
	CHECK(rdma_create_id(ch, &id, &ctx_token, RDMA_PS_TCP) == 0 && id);
	CHECK(id->context == &ctx_token && id->channel == ch && id->ps == RDMA_PS_TCP && id->qp_type == IBV_QPT_RC);
	CHECK(id->verbs == NULL && id->qp == NULL);

	/* Misuse before anything is resolved. */
	errno = 0; CHECK(rdma_resolve_route(id, 1000) == -1 && errno == EINVAL);
	errno = 0; CHECK(rdma_accept(id, NULL) == -1);
	/* rdma_listen on an idle ID binds it first, as the kernel's does (on
	 * another ID, so that this one stays idle); it listens only once. */
	struct rdma_cm_id *idle = NULL;
	CHECK(rdma_create_id(ch, &idle, NULL, RDMA_PS_TCP) == 0 && idle);
	CHECK(rdma_listen(idle, 1) == 0 && idle->verbs && rdma_get_src_port(idle) != 0);
	errno = 0; CHECK(rdma_listen(idle, 1) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id(idle) == 0);
	errno = 0; CHECK(rdma_destroy_id(NULL) == -1 && errno == EINVAL);
	errno = 0; CHECK(rdma_destroy_id((struct rdma_cm_id *)&ctx_token) == -1 && errno == EINVAL);
	/* No channel: a synchronous ID, with a channel of its own. */
	struct rdma_cm_id *sid = NULL, *req = NULL;
	CHECK(rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP) == 0 && sid && sid != id);
	CHECK(sid->channel && sid->channel != ch && sid->channel->fd >= 0 && sid->event == NULL);
	errno = 0; CHECK(rdma_migrate_id(sid, NULL) == -1 && errno == EINVAL); /* already synchronous */
	CHECK(rdma_destroy_id(sid) == 0);
	errno = 0; CHECK(rdma_get_request(id, &req) == -1 && errno == EINVAL); /* not synchronous */
	errno = 0; CHECK(rdma_create_id(ch, &id, NULL, 0x4242) == -1 && errno == EINVAL);
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	errno = 0; CHECK(rdma_bind_addr(id, (struct sockaddr *)&un) == -1 && errno == EAFNOSUPPORT);
	struct sockaddr_in src = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET, .sin_port = htons(7777) };
	inet_pton(AF_INET, "127.0.173.99", &src.sin_addr); /* no device has it */
	inet_pton(AF_INET, "127.0.173.1", &dst.sin_addr);
	errno = 0; CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 1000) == -1 && errno == ENODEV);
	errno = 0; CHECK(rdma_join_multicast(id, (struct sockaddr *)&dst, NULL) == -1 && errno == EINVAL); /* no device yet */

	/* Address and route: events on the fd, the ID's fields filled. */
	inet_pton(AF_INET, "127.0.173.2", &src.sin_addr);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 1000) == 0);
	struct rdma_cm_event *ev = next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(ev && ev->id == id && ev->listen_id == NULL && ev->status == 0);
	CHECK(rdma_ack_cm_event(ev) == 0);
	errno = 0; CHECK(rdma_ack_cm_event(ev) == -1 && errno == EINVAL);
	CHECK(id->verbs != NULL && id->port_num == 1);
	CHECK(rdma_get_dst_port(id) == htons(7777) && rdma_get_src_port(id) != 0);
	struct sockaddr_in *la = (struct sockaddr_in *)rdma_get_local_addr(id);
	struct sockaddr_in *pa = (struct sockaddr_in *)rdma_get_peer_addr(id);
	CHECK(la->sin_family == AF_INET && la->sin_addr.s_addr == src.sin_addr.s_addr);
	CHECK(pa->sin_family == AF_INET && pa->sin_addr.s_addr == dst.sin_addr.s_addr);
	CHECK(strcmp(ibv_get_device_name(id->verbs->device), "rxe0") == 0);
	CHECK(rdma_resolve_route(id, 1000) == 0);
	ev = next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(ev && ev->id == id);
	CHECK(rdma_ack_cm_event(ev) == 0);

	/* Multicast (docs/multicast.md): a route-resolved ID may not join (as
	 * the kernel); a bound UD ID gets MULTICAST_JOIN with the group's UD
	 * address and the join's context; leaving twice, an IPv6 group and a
	 * bad join_ex are refused with librdmacm's and the kernel's errno. */
	struct sockaddr_in grp = { .sin_family = AF_INET };
	inet_pton(AF_INET, "239.21.0.9", &grp.sin_addr);
	errno = 0; CHECK(rdma_join_multicast(id, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL);
	struct rdma_cm_id *mid = NULL;
	CHECK(rdma_create_id(ch, &mid, NULL, RDMA_PS_UDP) == 0);
	struct sockaddr_in mbind = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.0.173.2", &mbind.sin_addr);
	CHECK(rdma_bind_addr(mid, (struct sockaddr *)&mbind) == 0);
	CHECK(mid->verbs != NULL && mid->pd != NULL && mid->pd->context == mid->verbs); /* librdmacm's device PD */
	CHECK(rdma_join_multicast(mid, (struct sockaddr *)&grp, &ctx_token) == 0);
	ev = next_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK(ev && ev->id == mid && ev->status == 0);
	CHECK(ev && ev->param.ud.qp_num == 0xffffff && ev->param.ud.qkey == 0x01234567);
	CHECK(ev && ev->param.ud.private_data == &ctx_token && ev->param.ud.ah_attr.is_global == 1);
	CHECK(ev && ev->param.ud.ah_attr.grh.dgid.raw[10] == 0xff && ev->param.ud.ah_attr.grh.dgid.raw[11] == 0xff
	      && memcmp(&ev->param.ud.ah_attr.grh.dgid.raw[12], &grp.sin_addr, 4) == 0);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_leave_multicast(mid, (struct sockaddr *)&grp) == 0);
	errno = 0; CHECK(rdma_leave_multicast(mid, (struct sockaddr *)&grp) == -1 && errno == EADDRNOTAVAIL);
	struct sockaddr_in6 grp6 = { .sin6_family = AF_INET6 };
	inet_pton(AF_INET6, "ff0e::21:9", &grp6.sin6_addr);
	errno = 0; CHECK(rdma_join_multicast(mid, (struct sockaddr *)&grp6, NULL) == -1 && errno == 524);
	struct rdma_cm_join_mc_attr_ex mx = { .comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS, .addr = (struct sockaddr *)&grp };
	errno = 0; CHECK(rdma_join_multicast_ex(mid, &mx, NULL) == -1 && errno == EINVAL); /* no join flags */
	CHECK(rdma_destroy_id(mid) == 0);

	/* A non-blocking channel with nothing queued. */
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
	errno = 0; CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN);

	/* rdma_create_qp hands out libibverbs' own objects, in INIT. */
	errno = 0; CHECK(rdma_connect(id, NULL) == -1); /* no QP yet */
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	CHECK(cq);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	CHECK(id->qp && id->qp->context == id->verbs && id->qp->qp_num != 0 && id->qp->send_cq == cq);
	errno = 0; CHECK(rdma_create_qp(id, NULL, &qa) == -1 && errno == EINVAL); /* one QP per ID */
	struct ibv_qp_attr attr; struct ibv_qp_init_attr init;
	CHECK(ibv_query_qp(id->qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_INIT);
	struct ibv_recv_wr rwr = { .wr_id = 1 }, *bad;
	CHECK(ibv_post_recv(id->qp, &rwr, &bad) == 0);
	rdma_destroy_qp(id);
	CHECK(id->qp == NULL);
	CHECK(ibv_destroy_cq(cq) == 0);

	/* Options, strings, devices, addresses. */
	uint8_t tos = 32;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) == 0);
	errno = 0; CHECK(rdma_set_option(id, RDMA_OPTION_ID, 99, &tos, sizeof tos) == -1 && errno == EINVAL);
	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0);
	CHECK(rdma_event_str(1000) != NULL);
	int n = 0;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n == 1 && devs[0] == id->verbs && devs[1] == NULL);
	rdma_free_devices(devs);
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_UDP }, *res = NULL;
	CHECK(rdma_getaddrinfo("127.0.173.2", "7174", &hints, &res) == 0 && res);
	CHECK(res->ai_src_addr && res->ai_src_addr->sa_family == AF_INET && res->ai_dst_addr == NULL);
	CHECK(((struct sockaddr_in *)res->ai_src_addr)->sin_port == htons(7174));
	CHECK(res->ai_port_space == RDMA_PS_UDP && res->ai_qp_type == IBV_QPT_UD && res->ai_next == NULL);
	rdma_freeaddrinfo(res);
	errno = 0; CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &res) == -1);

	/* A listener on the wildcard address takes the process's device. */
	struct rdma_cm_id *lid;
	CHECK(rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_port = htons(7475) };
	CHECK(rdma_bind_addr(lid, (struct sockaddr *)&any) == 0 && lid->verbs == id->verbs);
	CHECK(rdma_listen(lid, 4) == 0);
	CHECK(rdma_destroy_id(lid) == 0);

	CHECK(rdma_destroy_id(id) == 0);
	errno = 0; CHECK(rdma_destroy_id(id) == -1 && errno == EINVAL); /* a destroyed ID */
	errno = 0; CHECK(rdma_resolve_route(id, 1000) == -1 && errno == EINVAL);
	rdma_destroy_event_channel(ch);
	printf("OK\n");
	return 0;
}
"#;

#[test]
fn layouts_match_rdma_cma_h_and_the_calls_behave_from_c() {
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        testkit::skip("<rdma/rdma_cma.h> is not installed (apt-get install librdmacm-dev)");
        return;
    }
    let dir = common::link_dir("header");
    let mut src = String::from(PROGRAM);
    src.push_str("\n/* The layouts of ibverbs-abi's rdmacm::abi. */\n");
    for (expr, value) in ibverbs_abi::rdmacm::abi::layout() {
        src.push_str(&format!("_Static_assert({expr} == {value}, \"{expr} is {value} in Rust\");\n"));
    }
    let exe = common::compile_c(&dir, "header", &src, &["-lrdmacm", "-libverbs", "-ldl"], " (a layout differs?)");
    let run = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTROCE_DEVICES", "rxe0=127.0.173.2")
        .output()
        .expect("run the C program");
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success() && text.contains("\nOK\n"), "{}", common::show(&run));
    assert!(text.contains(&format!("rdma_create_id from {}", dir.join("librdmacm.so.1").display())), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
