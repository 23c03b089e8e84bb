//! The speed targets of issue 22, measured in one run (ignored by default:
//! they need a release build and a quiet machine):
//!
//! ```sh
//! cargo build --release -p ibverbs-abi -p softroce --bin rdma-perf --example rc_pingpong
//! cargo test --release -p ibverbs-abi --test speed -- --ignored --nocapture
//! ```
//!
//! - `ibv_rc_pingpong` over the library against this project's own
//!   `rc_pingpong` example: the round trip within 10%.
//! - `ib_write_bw` over the library against `rdma-perf write-bw` (both two
//!   processes, 64 KiB messages, MTU 1024): at least 0.9x.
//!
//! Each pair is run alternately three times and the best of each is kept,
//! so that a burst of load elsewhere does not decide the comparison.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const ROUNDS: usize = 3;

fn beside_launcher(rel: &str) -> Option<PathBuf> {
    let p = common::launcher().parent()?.join(rel);
    if p.is_file() {
        Some(p)
    } else {
        eprintln!("SKIP: {} is not built (see this file's header)", p.display());
        None
    }
}

/// Runs a server and a client program (not through the launcher) and
/// returns the client's stdout.
fn plain_pair(exe: &PathBuf, server: &[&str], client: &[&str], port: u16) -> String {
    let spawn = |args: &[&str]| {
        Command::new(exe).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start")
    };
    let srv = spawn(server);
    let start = std::time::Instant::now();
    while !common::listening(port) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (c, _) = common::wait(spawn(client), LIMIT);
    let (s, _) = common::wait(srv, LIMIT);
    assert!(c.status.success() && s.status.success(), "{}\n{}", common::show(&s), common::show(&c));
    String::from_utf8_lossy(&c.stdout).into_owned()
}

/// The microseconds per iteration a ping-pong prints.
fn usec_per_iter(text: &str) -> f64 {
    text.lines()
        .find(|l| l.contains("usec/iter"))
        .and_then(|l| l.split(" = ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no usec/iter in:\n{text}"))
}

#[test]
#[ignore = "a benchmark: release build, quiet machine"]
fn rc_pingpong_round_trip_within_10_percent_of_the_example() {
    let (Some(example), Some(_)) =
        (beside_launcher("examples/rc_pingpong"), common::need("ibv_rc_pingpong", "ibverbs-utils"))
    else {
        return;
    };
    let (n, s) = ("20000", "64");
    let (mut lib, mut own) = (f64::MAX, f64::MAX);
    for _ in 0..ROUNDS {
        let srv = ["ibv_rc_pingpong", "-d", "a", "-g", "0", "-p", "18951", "-n", n, "-s", s];
        let mut cli = srv.to_vec();
        cli[2] = "b";
        cli.push("127.0.60.1");
        let (_, c) = common::pair(("a=127.0.60.1", &srv), ("b=127.0.60.2", &cli), 18951, LIMIT);
        lib = lib.min(usec_per_iter(&String::from_utf8_lossy(&c.stdout)));
        let base = ["-n", n, "-s", s, "-p", "18952"];
        let srv: Vec<&str> = base.iter().copied().chain(["--bind", "127.0.60.3"]).collect();
        let cli: Vec<&str> = base.iter().copied().chain(["--bind", "127.0.60.4", "127.0.60.3"]).collect();
        own = own.min(usec_per_iter(&plain_pair(&example, &srv, &cli, 18952)));
    }
    println!(
        "round trip: ibv_rc_pingpong over the library {lib:.2} us, rc_pingpong example {own:.2} us ({:.2}x)",
        lib / own
    );
    assert!(lib <= own * 1.10, "library {lib} us vs example {own} us");
}

/// BW average (MB/s) of perftest's result row, or rdma-perf's table row.
fn bw_average(text: &str, column: usize) -> f64 {
    let mut lines = text.lines().skip_while(|l| !l.trim_start().starts_with("#bytes"));
    lines.next();
    lines
        .next()
        .and_then(|l| l.split_whitespace().nth(column))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no result row in:\n{text}"))
}

#[test]
#[ignore = "a benchmark: release build, quiet machine"]
fn ib_write_bw_at_least_0_9x_rdma_perf() {
    let (Some(perf), Some(_)) = (beside_launcher("rdma-perf"), common::need("ib_write_bw", "perftest")) else {
        return;
    };
    let (mut lib, mut own) = (0f64, 0f64);
    for _ in 0..ROUNDS {
        let srv = ["ib_write_bw", "-d", "a", "-x", "0", "-p", "18953", "-n", "20000"];
        let mut cli = srv.to_vec();
        cli[2] = "b";
        cli.push("127.0.61.1");
        let (_, c) = common::pair(("a=127.0.61.1", &srv), ("b=127.0.61.2", &cli), 18953, LIMIT);
        lib = lib.max(bw_average(&String::from_utf8_lossy(&c.stdout), 3));
        let srv = ["write-bw", "--bind", "127.0.61.3", "-m", "1024", "-p", "18954", "--quiet"];
        let cli =
            ["write-bw", "127.0.61.3", "--bind", "127.0.61.4", "-m", "1024", "-p", "18954", "-n", "20000", "--quiet"];
        // rdma-perf's row: bytes, iterations, seconds, MB/s, Mpps.
        own = own.max(bw_average(&plain_pair(&perf, &srv, &cli, 18954), 3));
    }
    println!(
        "64 KiB RDMA WRITE: ib_write_bw over the library {lib:.1} MB/s, rdma-perf {own:.1} MB/s ({:.2}x)",
        lib / own
    );
    assert!(lib >= own * 0.9, "library {lib} MB/s vs rdma-perf {own} MB/s");
}
