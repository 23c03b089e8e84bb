//! UCX 1.13 (Debian's ucx-utils), unmodified, over the library:
//! `ucx_perftest` server and client as two processes, over `rc_verbs`
//! (with `ud_verbs`, which UCP needs for its wire-up) and over `ud_verbs`
//! alone: UCP's tag matching, put and get, and UCT's active messages, put
//! and get. Each pair is bounded in time; a failure names the command and
//! shows the last lines of both sides. Skips (with the reason) when
//! `ucx_perftest` is not installed.
//!
//! UCX keeps only devices whose `/dev/infiniband/uverbsN` is a character
//! device it may read and write (docs/ucx.md): softroce-run presents it
//! (and `/sys/class/infiniband/NAME`) in the command's own mount namespace.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

static SERIAL: Mutex<()> = Mutex::new(());

/// The longest one side of a pair may run.
const LIMIT: Duration = Duration::from_secs(60);

/// One side: `args` under the launcher with device `device`, with `env`.
fn spawn(device: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(common::launcher())
        .args(["--device", device, "--"])
        .args(args)
        .env("SOFTROCE_LIBRARY", common::library())
        .env("SOFTROCE_RDMACM_LIBRARY", common::rdmacm())
        .env("UCX_NET_DEVICES", "rxe0:1")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("softroce-run starts")
}

/// Waits for a side; its output and whether it ended in time.
fn finish(side: Child, limit: Duration) -> (Output, bool) {
    common::wait(side, limit)
}

/// The last `n` lines of a side's stdout and stderr.
fn tail(o: &Output, n: usize) -> String {
    let mut s = String::new();
    for (what, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        let lines: Vec<&str> = text.lines().collect();
        s += &format!("--- {what} (last {} of {} lines)\n", n.min(lines.len()), lines.len());
        for l in &lines[lines.len().saturating_sub(n)..] {
            s += l;
            s.push('\n');
        }
    }
    s
}

/// One `ucx_perftest` pair over `tls`: the server on 127.0.23.`net`0, the
/// client on .`net`1, the exchange on TCP `port`; the client runs
/// `client_args`. Returns the client's `Final:` line.
fn pair(tls: &str, net: u8, port: u16, client_args: &[&str]) -> String {
    let (srv_addr, cli_addr) = (format!("127.0.23.{}", net * 10), format!("127.0.23.{}", net * 10 + 1));
    let p = port.to_string();
    let env = [("UCX_TLS", tls)];
    let srv_args = ["ucx_perftest", "-p", &p];
    let mut cli_args = vec!["ucx_perftest", &srv_addr, "-p", &p];
    cli_args.extend_from_slice(client_args);
    let command = format!(
        "UCX_TLS={tls} UCX_NET_DEVICES=rxe0:1 softroce-run --device rxe0={cli_addr} -- {} (server: softroce-run \
         --device rxe0={srv_addr} -- {})",
        cli_args.join(" "),
        srv_args.join(" ")
    );
    let srv = spawn(&format!("rxe0={srv_addr}"), &srv_args, &env);
    let start = std::time::Instant::now();
    while !common::listening(port) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    let cli = spawn(&format!("rxe0={cli_addr}"), &cli_args, &env);
    let (co, c_ok) = finish(cli, LIMIT);
    let (so, s_ok) = finish(srv, if c_ok { LIMIT } else { Duration::from_secs(5) });
    let both = || format!("{command}\n=== client\n{}=== server\n{}", tail(&co, 15), tail(&so, 15));
    assert!(c_ok && s_ok, "timed out after {LIMIT:?} (client in time: {c_ok}, server: {s_ok}): {}", both());
    assert!(co.status.success() && so.status.success(), "failed: {}", both());
    let stdout = String::from_utf8_lossy(&co.stdout);
    let fin = stdout.lines().find(|l| l.starts_with("Final:")).map(str::to_string);
    let fin = fin.unwrap_or_else(|| panic!("no Final: line: {}", both()));
    println!("{tls:18} {:40} {fin}", client_args.join(" "));
    fin
}

/// The check common to every test: ucx_perftest is there; serialized
/// (each pair takes the machine's two cores).
fn setup() -> Option<std::sync::MutexGuard<'static, ()>> {
    common::need("ucx_perftest", "ucx-utils")?;
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The iterations of each run: enough to see it work, few enough to stay
/// well inside the limit on a busy two-core machine.
const N: [&str; 4] = ["-n", "2000", "-w", "100"];

fn with_n<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut v = args.to_vec();
    v.extend_from_slice(&N);
    v
}

#[test]
fn ucx_info_lists_the_device_with_rc_verbs_and_ud_verbs() {
    let Some(_serial) = setup() else { return };
    let side = spawn("rxe0=127.0.23.20", &["ucx_info", "-d"], &[]);
    let (o, in_time) = finish(side, LIMIT);
    assert!(in_time && o.status.success(), "ucx_info -d (softroce-run --device rxe0=127.0.23.20):\n{}", tail(&o, 30));
    let text = String::from_utf8_lossy(&o.stdout);
    // "#      Transport: rc_verbs" then "#         Device: rxe0:1".
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    for tl in ["rc_verbs", "ud_verbs"] {
        let listed =
            lines.windows(2).any(|w| w[0].ends_with(&format!("Transport: {tl}")) && w[1].ends_with("Device: rxe0:1"));
        assert!(listed, "ucx_info -d lists no {tl} on rxe0:1:\n{}", tail(&o, 60));
    }
}

#[test]
fn ucx_perftest_over_rc_verbs() {
    let Some(_serial) = setup() else { return };
    // UCP: rc_verbs for the data, ud_verbs for the wire-up (UCP refuses
    // rc_verbs alone: "no auxiliary transport").
    let ucp = "rc_verbs,ud_verbs";
    pair(ucp, 1, 23101, &with_n(&["-t", "tag_lat"]));
    pair(ucp, 2, 23102, &with_n(&["-t", "tag_bw"]));
    pair(ucp, 3, 23103, &with_n(&["-t", "tag_bw", "-s", "65536"]));
    pair(ucp, 4, 23104, &with_n(&["-t", "ucp_put_bw", "-s", "65536"]));
    pair(ucp, 5, 23105, &with_n(&["-t", "ucp_get", "-s", "65536"]));
    // UCT: the transport itself.
    let uct = ["-x", "rc_verbs", "-d", "rxe0:1"];
    pair("rc_verbs", 6, 23106, &with_n(&[&["-t", "am_lat"][..], &uct].concat()));
    pair("rc_verbs", 7, 23107, &with_n(&[&["-t", "put_bw", "-s", "65536", "-D", "zcopy"][..], &uct].concat()));
    pair("rc_verbs", 8, 23108, &with_n(&[&["-t", "get", "-s", "65536", "-D", "zcopy"][..], &uct].concat()));
}

#[test]
fn ucx_perftest_over_ud_verbs() {
    let Some(_serial) = setup() else { return };
    // UD has no RDMA: UCP emulates put and get with active messages (a get
    // waits for the server's progress: about 1 ms each in ucx_perftest,
    // whose server progresses once a millisecond in its TCP barrier).
    let ud = "ud_verbs";
    pair(ud, 11, 23111, &with_n(&["-t", "tag_lat"]));
    pair(ud, 12, 23112, &with_n(&["-t", "tag_bw"]));
    pair(ud, 13, 23113, &with_n(&["-t", "tag_bw", "-s", "65536"]));
    pair(ud, 14, 23114, &with_n(&["-t", "ucp_put_bw"]));
    pair(ud, 15, 23115, &["-t", "ucp_get", "-n", "500", "-w", "10"]);
    pair(ud, 16, 23116, &with_n(&["-t", "am_lat", "-x", "ud_verbs", "-d", "rxe0:1"]));
}
