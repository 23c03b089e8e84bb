//! rdma-core's `mckey` (rdmacm-utils: `rdma_join_multicast_ex`,
//! MULTICAST_JOIN, UD sends to QPN 0xFFFFFF, `rdma_leave_multicast`)
//! between processes over this project's librdmacm.so.1 and
//! libibverbs.so.1. Addresses 127.0.21.1-9, groups 239.21.0.1-9 (the
//! multicast work's range).

mod common;

use common::*;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

fn start(c: &mut Command) -> Child {
    c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("mckey starts")
}

/// Waits until every address in `ips` has its device's RoCE socket bound,
/// then a moment for the receivers to read MULTICAST_JOIN (which attaches
/// their QPs and joins the IP group).
fn wait_for_receivers(ips: &[[u8; 4]]) {
    let t = Instant::now();
    while !ips.iter().all(|&ip| roce_bound(ip)) && t.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
}

/// What a receiver that got every message of every one of its QPs prints.
fn check_receiver(o: &Output, who: &str) {
    assert!(o.status.success(), "{who}\n{}", show(o));
    let out = stdout(o);
    for line in ["mckey: joined dgid: ::ffff:239.21.0.", "receiving data transfers", "data transfers complete"] {
        assert!(out.contains(line), "{who}: no {line:?}\n{}", show(o));
    }
}

#[test]
fn mckey_sender_and_receiver_in_two_processes() {
    let Some(_) = need("mckey", "rdmacm-utils") else { return };
    let l = launcher();
    let rx = start(&mut over_library(&l, "rxe0=127.0.21.1", &["mckey", "-m", "239.21.0.1", "-b", "127.0.21.1"]));
    wait_for_receivers(&[[127, 0, 21, 1]]);
    let (s, s_ok) = wait(
        start(&mut over_library(&l, "rxe1=127.0.21.2", &["mckey", "-m", "239.21.0.1", "-b", "127.0.21.2", "-s"])),
        LIMIT,
    );
    let (r, r_ok) = wait(rx, LIMIT);
    assert!(s_ok && r_ok, "timed out (sender {s_ok}, receiver {r_ok})\n{}\n{}", show(&s), show(&r));
    assert!(s.status.success(), "sender\n{}", show(&s));
    assert!(stdout(&s).contains("initiating data transfers"), "{}", show(&s));
    check_receiver(&r, "receiver");
}

/// One send reaches three QPs in two receiving processes: one with two
/// CM IDs (`-c 2`, two QPs on one device), one with one, on two addresses;
/// the sender is a third process on a third. Each receiver exits 0 only
/// once every one of its QPs has its 10 messages.
#[test]
fn mckey_one_sender_reaches_two_receiving_processes() {
    let Some(_) = need("mckey", "rdmacm-utils") else { return };
    let l = launcher();
    let a =
        start(&mut over_library(&l, "rxe0=127.0.21.3", &["mckey", "-m", "239.21.0.3", "-b", "127.0.21.3", "-c", "2"]));
    let b = start(&mut over_library(&l, "rxe1=127.0.21.4", &["mckey", "-m", "239.21.0.3", "-b", "127.0.21.4"]));
    wait_for_receivers(&[[127, 0, 21, 3], [127, 0, 21, 4]]);
    let (s, s_ok) = wait(
        start(&mut over_library(&l, "rxe2=127.0.21.5", &["mckey", "-m", "239.21.0.3", "-b", "127.0.21.5", "-s"])),
        LIMIT,
    );
    let (ra, a_ok) = wait(a, LIMIT);
    let (rb, b_ok) = wait(b, LIMIT);
    assert!(s_ok && a_ok && b_ok, "timed out\n{}\n{}\n{}", show(&s), show(&ra), show(&rb));
    assert!(s.status.success(), "sender\n{}", show(&s));
    check_receiver(&ra, "receiver with two QPs");
    assert_eq!(count(&ra, "mckey: joined dgid: ::ffff:239.21.0.3"), 2, "{}", show(&ra));
    check_receiver(&rb, "receiver with one QP");
}
