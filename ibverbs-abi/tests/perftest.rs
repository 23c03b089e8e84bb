//! perftest's binaries, unmodified, over the library through softroce-run:
//! both sides over the library (bandwidth and latency tests), and one side
//! against this project's `rdma-perf` (which speaks perftest's exchange).
//! Each test skips with a message when its binary is absent (apt-get
//! install perftest); perftest links libmlx5.so.1 and libefa.so.1, which
//! the launcher points at the library's stand-ins.

mod common;

use std::path::PathBuf;
use std::process::Output;
use std::sync::Mutex;
use std::time::Duration;

static SERIAL: Mutex<()> = Mutex::new(());
const LIMIT: Duration = Duration::from_secs(120);

/// The result row of perftest's table (the line after the `#bytes` header):
/// its numbers.
fn result_row(o: &Output) -> Vec<f64> {
    let text = String::from_utf8_lossy(&o.stdout);
    let mut lines = text.lines().skip_while(|l| !l.trim_start().starts_with("#bytes"));
    lines.next();
    lines.next().map(|l| l.split_whitespace().filter_map(|w| w.parse().ok()).collect()).unwrap_or_default()
}

/// Runs `bin` as server and client (both over the library) with `iters`
/// iterations and checks both exit 0 and report `size` bytes x `iters`,
/// and a positive bandwidth (bw tests) or latency (lat tests).
fn both_sides(bin: &str, net: u8, port: u16, iters: u32, size: u64) {
    if common::need(bin, "perftest").is_none() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    run_both_sides(bin, net, port, iters, size, &[], LIMIT);
}

/// [`both_sides`]'s run, with `extra` arguments for both sides and a
/// time `limit` for each; the caller checks the binary and serializes.
fn run_both_sides(bin: &str, net: u8, port: u16, iters: u32, size: u64, extra: &[&str], limit: Duration) {
    let (a, b) = (format!("127.0.{net}.1"), format!("127.0.{net}.2"));
    let (p, n) = (port.to_string(), iters.to_string());
    let mut srv: Vec<&str> = vec![bin, "-d", "srv0", "-x", "0", "-p", &p, "-n", &n];
    srv.extend_from_slice(extra);
    let mut cli = srv.clone();
    cli[2] = "cli0";
    cli.push(&a);
    let (so, co) = common::pair((&format!("srv0={a}"), &srv), (&format!("cli0={b}"), &cli), port, limit);
    for (who, o) in [("server", &so), ("client", &co)] {
        assert!(
            o.status.success(),
            "{bin} {who} failed:\n--- server\n{}\n--- client\n{}",
            common::show(&so),
            common::show(&co)
        );
        let _ = o;
    }
    // The client reports for every test; bw servers report too.
    let row = result_row(&co);
    assert!(row.len() >= 4, "{bin}: no result row:\n{}", common::show(&co));
    assert_eq!(row[0], size as f64, "{bin}: message size\n{}", common::show(&co));
    assert_eq!(row[1], f64::from(iters), "{bin}: iterations\n{}", common::show(&co));
    assert!(row[2] > 0.0 && row[3] > 0.0, "{bin}: figures must be positive: {row:?}");
    println!("{bin}: {row:?}");
}

#[test]
fn ib_write_bw() {
    both_sides("ib_write_bw", 30, 18801, 2000, 65536);
}

#[test]
fn ib_send_bw() {
    both_sides("ib_send_bw", 31, 18802, 2000, 65536);
}

#[test]
fn ib_read_bw() {
    both_sides("ib_read_bw", 32, 18803, 2000, 65536);
}

#[test]
fn ib_atomic_bw() {
    both_sides("ib_atomic_bw", 33, 18804, 2000, 8);
}

#[test]
fn ib_write_lat() {
    both_sides("ib_write_lat", 34, 18805, 1000, 2);
}

#[test]
fn ib_read_lat() {
    both_sides("ib_read_lat", 35, 18806, 1000, 2);
}

#[test]
fn ib_send_lat() {
    both_sides("ib_send_lat", 36, 18807, 1000, 2);
}

/// `ib_send_lat -e` sleeps in `ibv_get_cq_event` before every poll, with
/// its send and receive CQs on one channel, and counts on one event per
/// completion: a spurious event (an armed CQ raising one for a completion
/// it held from before) made both sides hang in about half the runs.
/// Ten runs in a row, each on a fresh port (perftest's TCP exchange).
#[test]
fn ib_send_lat_with_completion_events_does_not_hang() {
    if common::need("ib_send_lat", "perftest").is_none() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for run in 0..10u16 {
        run_both_sides("ib_send_lat", 39, 18813 + run, 1000, 2, &["-e"], Duration::from_secs(20));
    }
}

/// This project's rdma-perf, built by cargo next to the launcher.
fn rdma_perf() -> Option<PathBuf> {
    let p = common::launcher().parent()?.join("rdma-perf");
    if p.is_file() {
        Some(p)
    } else {
        testkit::skip(format!("{} is not built (cargo build --bin rdma-perf)", p.display()));
        None
    }
}

fn rdma_perf_side(args: &[&str]) -> std::process::Child {
    let exe = rdma_perf().expect("checked by the caller");
    std::process::Command::new(exe)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("rdma-perf starts")
}

#[test]
fn ib_write_bw_server_with_an_rdma_perf_client() {
    if common::need("ib_write_bw", "perftest").is_none() || rdma_perf().is_none() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let port = 18811u16;
    let srv = common::spawn("srv0=127.0.37.1", &["ib_write_bw", "-d", "srv0", "-x", "0", "-p", "18811", "-n", "2000"]);
    let start = std::time::Instant::now();
    while !common::listening(port) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The port's active MTU is 1024: rdma-perf uses the same path MTU.
    let cli = rdma_perf_side(&[
        "write-bw",
        "127.0.37.1",
        "--bind",
        "127.0.37.2",
        "-m",
        "1024",
        "-p",
        "18811",
        "-n",
        "2000",
        "--quiet",
    ]);
    let (co, c_ok) = common::wait(cli, LIMIT);
    let (so, s_ok) = common::wait(srv, LIMIT);
    assert!(c_ok && s_ok, "timed out:\n{}\n{}", common::show(&so), common::show(&co));
    assert!(so.status.success(), "ib_write_bw server:\n{}", common::show(&so));
    assert!(co.status.success(), "rdma-perf client:\n{}", common::show(&co));
    let row = result_row(&so);
    assert!(row.len() >= 4 && row[0] == 65536.0 && row[1] == 2000.0, "{}", common::show(&so));
}

#[test]
fn rdma_perf_server_with_an_ib_write_bw_client() {
    if common::need("ib_write_bw", "perftest").is_none() || rdma_perf().is_none() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let port = 18812u16;
    let srv = rdma_perf_side(&["write-bw", "--bind", "127.0.38.1", "-m", "1024", "-p", "18812", "--quiet"]);
    let start = std::time::Instant::now();
    while !common::listening(port) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    let cli = common::spawn(
        "cli0=127.0.38.2",
        &["ib_write_bw", "-d", "cli0", "-x", "0", "-p", "18812", "-n", "2000", "127.0.38.1"],
    );
    let (co, c_ok) = common::wait(cli, LIMIT);
    let (so, s_ok) = common::wait(srv, LIMIT);
    assert!(c_ok && s_ok, "timed out:\n{}\n{}", common::show(&so), common::show(&co));
    assert!(so.status.success(), "rdma-perf server:\n{}", common::show(&so));
    assert!(co.status.success(), "ib_write_bw client:\n{}", common::show(&co));
    let row = result_row(&co);
    assert!(row.len() >= 4 && row[0] == 65536.0 && row[1] == 2000.0 && row[3] > 0.0, "{}", common::show(&co));
}
