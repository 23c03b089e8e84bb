//! perftest with `-R` (its connection and its exchange over the RDMA CM:
//! a control connection, then the test QPs, rdma_cm's private data and
//! SIDR for UD), both sides Debian's unmodified binaries over this
//! project's librdmacm.so.1 and libibverbs.so.1.

mod common;

use common::*;
use std::time::Duration;

fn perftest_over_rdma_cm(test: &str, extra: &[&str], net: u8) {
    let Some(_) = need(test, "perftest") else { return };
    let l = launcher();
    let (a, b) = (format!("127.0.{net}.1"), format!("127.0.{net}.2"));
    let mut sargs = vec![test, "-R", "-d", "rxe0", "-n", "200"];
    sargs.extend_from_slice(extra);
    let mut cargs = sargs.clone();
    cargs[3] = "rxe1";
    cargs.push(&a);
    let srv = over_library(&l, &format!("rxe0={a}"), &sargs);
    let cli = || over_library(&l, &format!("rxe1={b}"), &cargs);
    // perftest's client gives up on a REJ 8 for its control connection: a
    // server slow to listen (a loaded machine) gets another client.
    let early =
        |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).contains("RDMA_CM_EVENT_REJECTED; error: 8");
    let (s, c) = pair_retrying(srv, cli, [127, 0, net, 1], Duration::from_secs(60), early);
    for (who, o) in [("server", &s), ("client", &c)] {
        assert!(o.status.success(), "{test} {extra:?} {who}\n{}", show(o));
        let out = stdout(o);
        assert!(out.contains("Data ex. method : rdma_cm"), "{who}\n{}", show(o));
        // The result table: a header and one row of numbers.
        let rows = out.lines().skip_while(|l| !l.trim_start().starts_with("#bytes")).nth(1);
        let row = rows.unwrap_or_default();
        assert!(
            row.split_whitespace().next().is_some_and(|n| n.parse::<u64>().is_ok()),
            "{who}: no result row\n{}",
            show(o)
        );
        if test.ends_with("_bw") && who == "client" {
            let avg: f64 = row.split_whitespace().nth(3).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            assert!(avg > 0.0, "{who}: no bandwidth\n{}", show(o));
        }
    }
}

#[test]
fn ib_send_bw_rc() {
    perftest_over_rdma_cm("ib_send_bw", &[], 174);
}

#[test]
fn ib_write_bw_rc() {
    perftest_over_rdma_cm("ib_write_bw", &[], 175);
}

#[test]
fn ib_read_bw_rc() {
    perftest_over_rdma_cm("ib_read_bw", &[], 176);
}

#[test]
fn ib_send_lat_rc() {
    perftest_over_rdma_cm("ib_send_lat", &[], 177);
}

#[test]
fn ib_send_bw_ud_through_sidr() {
    perftest_over_rdma_cm("ib_send_bw", &["-c", "UD"], 178);
}
