//! Random misuse of librdmacm from C: a seeded walk of calls over pools of
//! event channels and IDs, each argument picked live, destroyed, NULL
//! (where NULL is not a valid choice), foreign (a struct the program made)
//! or of the wrong type. The library must never crash or hang, and must
//! answer -1 with errno EINVAL for every invalid object, as the calls'
//! contract says; live objects get the call's answer (a second bind and a
//! second listen EINVAL; a listen before any bind binds the ID to the IPv4
//! wildcard first, as the kernel's rdma_listen does). The program checks every
//! answer and prints each violation; the test wants none.

mod common;

use std::process::Command;
use std::time::Duration;

const PROGRAM: &str = r#"
#include <errno.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static uint64_t rng;
static unsigned next(unsigned n) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (unsigned)(rng % n); }
static long violations, checks;
#define BAD(...) do { violations++; printf("VIOLATION "); printf(__VA_ARGS__); printf("\n"); } while (0)

enum { N = 6 };
struct slot { void *p; int live; int bound; int listening; };
static struct slot chans[N], ids[N];
static union { struct rdma_cm_id id; struct rdma_event_channel ch; char raw[512]; } fake;
static int kind; /* 0 live, 1 destroyed, 2 NULL, 3 foreign, 4 wrong type */

static int live_anywhere(void *p) {
    for (int i = 0; i < N; i++) if ((chans[i].live && chans[i].p == p) || (ids[i].live && ids[i].p == p)) return 1;
    return 0;
}
static void *pick(struct slot *pool, int *idx, void *wrong) {
    int i = next(N); *idx = i; kind = next(5);
    switch (kind) {
    case 0: if (pool[i].live) return pool[i].p; kind = 2; return NULL;
    case 1: if (pool[i].p && !pool[i].live && !live_anywhere(pool[i].p)) return pool[i].p; kind = 2; return NULL;
    case 2: return NULL;
    case 3: return &fake;
    default:
        if (!wrong) { kind = 2; return NULL; }
        for (int k = 0; k < N; k++) if (pool[k].live && pool[k].p == wrong) { kind = 2; return NULL; }
        return wrong;
    }
}
static void want(const char *call, int r, int ok_ret, int ok_errno) {
    checks++;
    if (kind != 0) { if (r != -1 || errno != EINVAL) BAD("%s kind=%d: ret=%d errno=%d, want -1/EINVAL", call, kind, r, errno); }
    else if (r != ok_ret || (r == -1 && errno != ok_errno)) BAD("%s on a live object: ret=%d errno=%d, want %d/%d", call, r, errno, ok_ret, ok_errno);
}

static struct sockaddr_in me;

static void step(void) {
    int i, j;
    errno = 0;
    switch (next(9)) {
    case 0: /* a channel */
        for (i = 0; i < N && chans[i].live; i++) ;
        if (i < N) { struct rdma_event_channel *c = rdma_create_event_channel(); if (!c) BAD("create channel errno=%d", errno); else chans[i] = (struct slot){ c, 1, 0, 0 }; }
        break;
    case 1: { /* destroy a channel: void; never with IDs on it in this walk */
        struct rdma_event_channel *c = pick(chans, &i, ids[0].p);
        if (kind == 0) { int used = 0; for (j = 0; j < N; j++) used |= ids[j].live; if (used) break; chans[i].live = 0; }
        rdma_destroy_event_channel(c);
        break; }
    case 2: { /* an ID on some channel (NULL: a synchronous ID, valid) */
        for (j = 0; j < N && ids[j].live; j++) ;
        if (j == N) break;
        struct rdma_event_channel *c = pick(chans, &i, ids[1].p);
        struct rdma_cm_id *id = NULL;
        if (kind == 2) kind = 0; /* NULL channel is valid */
        int r = rdma_create_id(c, &id, NULL, RDMA_PS_TCP);
        want("create_id", r, 0, 0);
        if (r == 0 && kind == 0) ids[j] = (struct slot){ id, 1, 0, 0 };
        break; }
    case 3: { /* destroy an ID */
        struct rdma_cm_id *id = pick(ids, &i, chans[0].p);
        int r = rdma_destroy_id(id);
        want("destroy_id", r, 0, 0);
        if (kind == 0 && r == 0) ids[i].live = 0;
        break; }
    case 4: { /* bind to the device's address, port 0 */
        struct rdma_cm_id *id = pick(ids, &i, chans[1].p);
        int r = rdma_bind_addr(id, (struct sockaddr *)&me);
        want("bind_addr", r, kind == 0 && ids[i].bound ? -1 : 0, EINVAL);
        if (kind == 0 && r == 0) ids[i].bound = 1;
        break; }
    case 5: { /* listen */
        struct rdma_cm_id *id = pick(ids, &i, chans[2].p);
        int r = rdma_listen(id, 4);
        /* an ID listens once (the kernel's state check); an idle one is
         * bound to the IPv4 wildcard first (the kernel's rdma_listen),
         * here the process's first IPv4 device, and so is bound after */
        want("listen", r, kind == 0 && ids[i].listening ? -1 : 0, EINVAL);
        if (kind == 0 && r == 0) ids[i].listening = ids[i].bound = 1;
        break; }
    case 6: { /* an option */
        struct rdma_cm_id *id = pick(ids, &i, chans[3].p);
        uint8_t tos = 32;
        want("set_option", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1), 0, 0);
        break; }
    case 7: { /* an event from a channel with nothing pending: only for invalid ones (a live one would block) */
        struct rdma_event_channel *c = pick(chans, &i, ids[2].p);
        if (kind == 0) break;
        struct rdma_cm_event *ev = NULL;
        want("get_cm_event", rdma_get_cm_event(c, &ev), 0, 0);
        break; }
    default: { /* acknowledge something that is no event */
        kind = 3;
        want("ack_cm_event", rdma_ack_cm_event((struct rdma_cm_event *)&fake), 0, 0);
        break; }
    }
}

int main(int argc, char **argv) {
    me.sin_family = AF_INET;
    inet_pton(AF_INET, argv[1], &me.sin_addr);
    long steps = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        rng = seed * 0x9e3779b97f4a7c15ull;
        for (int k = 0; k < 500; k++, steps++) step();
        for (int i = 0; i < N; i++) if (ids[i].live) { if (rdma_destroy_id(ids[i].p)) BAD("cleanup id"); ids[i].live = 0; }
        for (int i = 0; i < N; i++) if (chans[i].live) { rdma_destroy_event_channel(chans[i].p); chans[i].live = 0; }
        memset(ids, 0, sizeof ids); memset(chans, 0, sizeof chans);
    }
    printf("steps=%ld checks=%ld violations=%ld\n", steps, checks, violations);
    return 0;
}
"#;

#[test]
fn a_random_walk_of_librdmacm_misuse_gets_einval_and_never_crashes() {
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        testkit::skip("<rdma/rdma_cma.h> is not installed (apt-get install librdmacm-dev)");
        return;
    }
    let dir = common::link_dir("walk");
    let exe = common::compile_c(&dir, "walk", PROGRAM, &["-lrdmacm", "-libverbs"], "");
    // Its own address (127.0.193.x is this file's).
    let child = Command::new(&exe)
        .arg("127.0.193.1")
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTROCE_DEVICES", "walk0=127.0.193.1")
        .env_remove("SOFTROCE_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the C program");
    let (run, in_time) = common::wait(child, Duration::from_secs(120));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(in_time && run.status.success(), "in time: {in_time}\n{}", common::show(&run));
    let text = String::from_utf8_lossy(&run.stdout);
    let summary = text.lines().find(|l| l.starts_with("steps=")).unwrap_or_else(|| panic!("no summary:\n{text}"));
    let violations: Vec<&str> = text.lines().filter(|l| l.starts_with("VIOLATION")).take(30).collect();
    assert!(summary.ends_with("violations=0"), "{summary}\n{}", violations.join("\n"));
}
