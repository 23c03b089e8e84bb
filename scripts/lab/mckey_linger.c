/*
 * LD_PRELOAD for rdma-core's mckey as a sender on kernel rxe (the --trixie
 * rows of scripts/interop.sh): ibv_destroy_ah waits MCKEY_LINGER_MS
 * (default 2000) before destroying the address handle.
 *
 * Why: mckey posts its sends unsignaled, never waits for them, and tears
 * down right after posting, destroying its address handle first
 * (destroy_node: ibv_destroy_ah, then rdma_destroy_qp). rxe (Linux 6.x,
 * rdma-core's provider with a kernel AH number) puts only the AH's number
 * in a UD work request and looks the AH up when its requester gets to the
 * WQE (rxe_get_av); a send still queued when the AH is gone fails there
 * ("rxe_get_av: Unable to find AH matching ah_num", "rxe_requester: Failed
 * no address vector") and never leaves. In the single-vCPU lab guest the
 * requester's work item rarely runs before mckey reaches ibv_destroy_ah:
 * of 50 sends, 13, 1 or none went out. Destroying an AH that outstanding
 * work requests use is the application's error, so mckey is at fault, not
 * rxe; this shim only lets the requester run first. mckey is unmodified.
 *
 * Build: cc -O2 -Wall -shared -fPIC -o mckey_linger.so mckey_linger.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct ibv_ah;

int ibv_destroy_ah(struct ibv_ah *ah)
{
	static int (*real)(struct ibv_ah *);
	const char *ms = getenv("MCKEY_LINGER_MS");

	if (!real) {
		real = (int (*)(struct ibv_ah *))dlvsym(RTLD_NEXT, "ibv_destroy_ah", "IBVERBS_1.1");
		if (!real)
			real = (int (*)(struct ibv_ah *))dlsym(RTLD_NEXT, "ibv_destroy_ah");
		if (!real) {
			fprintf(stderr, "mckey_linger: no ibv_destroy_ah to call\n");
			abort();
		}
	}
	usleep((useconds_t)(ms ? atoi(ms) : 2000) * 1000);
	return real(ah);
}
