//! Debian's unmodified qperf (0.4.11) over this project's librdmacm.so.1
//! and libibverbs.so.1: a server and a client as two processes on
//! 127.0.190.1 and 127.0.190.2, every RC test of qperf's RDMA list with
//! `-cm1` (its connections made by the RDMA CM), one second each.
//!
//! qperf's server forks a child per test, which opens the device, binds
//! an RDMA CM ID to port 0, sends that port to the client (before it
//! listens: qperf 0.4.11) and ends the test with SIGALRM. So this covers
//! the port picked at bind time, a REQ that arrives between bind and
//! listen, and `ibv_get_cq_event` returning EINTR (see docs/rdma-cm.md).
//! The UC and UD tests address without a GRH, which no RoCE device takes:
//! `qperf_grh_less_tests_on_native_ib_devices` runs them, and the RC tests
//! without `-cm1`, on native IB devices (`NAME=ib:IFNAME`) between two
//! network namespaces (root).

mod common;

use common::*;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// qperf's RDMA tests that can run on RoCE (RC, through the RDMA CM).
const TESTS: &[&str] = &[
    "rc_bw",
    "rc_bi_bw",
    "rc_lat",
    "rc_rdma_read_bw",
    "rc_rdma_read_lat",
    "rc_rdma_write_bw",
    "rc_rdma_write_lat",
    "rc_rdma_write_poll_lat",
    "rc_compare_swap_mr",
    "rc_fetch_add_mr",
    "ver_rc_compare_swap",
    "ver_rc_fetch_add",
];

/// A TCP port nobody listens on now, for qperf's control connection (its
/// default, 19765, may be taken by a qperf server of someone else).
fn free_tcp_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a TCP port");
    l.local_addr().expect("its address").port()
}

/// The last `n` lines of a program's stdout and stderr.
fn tail(o: &Output, n: usize) -> String {
    let mut s = String::new();
    for (name, text) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let text = String::from_utf8_lossy(text);
        let lines: Vec<&str> = text.lines().collect();
        s.push_str(&format!("--- {name} (last {n} lines)\n"));
        for l in &lines[lines.len().saturating_sub(n)..] {
            s.push_str(l);
            s.push('\n');
        }
    }
    s
}

#[test]
fn qperf_rc_tests_with_the_rdma_cm() {
    let Some(_) = need("qperf", "qperf") else { return };
    let l = launcher();
    let port = free_tcp_port().to_string();
    let srv_args = ["qperf", "-lp", &port];
    let mut cli_args = vec!["qperf", "-cm1", "-t", "1", "-lp", &port, "127.0.190.1"];
    cli_args.extend_from_slice(TESTS);
    let server_cmd = format!("softroce-run --device rxe0=127.0.190.1 -- {}", srv_args.join(" "));
    let client_cmd = format!("softroce-run --device rxe1=127.0.190.2 -- {}", cli_args.join(" "));

    let mut srv = over_library(&l, "rxe0=127.0.190.1", &srv_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the qperf server starts");
    // The server is up once its control port listens.
    let start = Instant::now();
    let port_n: u16 = port.parse().expect("a port");
    let listening = |p: u16| {
        let hex = format!(":{p:04X}");
        std::fs::read_to_string("/proc/net/tcp").unwrap_or_default().lines().any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() > 3 && c[1].ends_with(&hex) && c[3] == "0A"
        })
    };
    while !listening(port_n) && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // About 2 s a test here; a hang is cut at 120 s.
    let cli = over_library(&l, "rxe1=127.0.190.2", &cli_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the qperf client starts");
    let (c, in_time) = wait(cli, Duration::from_secs(120));
    // The server runs until killed (qperf's servers serve forever).
    let _ = srv.kill();
    let s = srv.wait_with_output().expect("the server's output");

    let out = String::from_utf8_lossy(&c.stdout).into_owned();
    let report = || {
        format!(
            "qperf failed\nserver: {server_cmd}\n{}\nclient: {client_cmd}\nstatus {:?}, in time: {in_time}\n{}",
            tail(&s, 20),
            c.status,
            tail(&c, 40)
        )
    };
    assert!(in_time && c.status.success(), "{}", report());
    for bad in ["failed", "unexpected", "error", "rejected", "timed out"] {
        assert!(!out.to_lowercase().contains(bad), "{bad:?} in the output\n{}", report());
    }
    // Each test printed its name and a figure.
    let lines: Vec<&str> = out.lines().collect();
    for t in TESTS {
        let at = lines.iter().position(|l| l.trim_end() == format!("{t}:"));
        let figure = at.and_then(|i| lines.get(i + 1)).map(|l| l.trim_start());
        assert!(
            figure.is_some_and(|f| ["bw", "latency", "msg_rate"].iter().any(|k| f.starts_with(k))),
            "{t}: no result line\n{}",
            report()
        );
    }
    eprintln!("{out}");
}

/// qperf's tests that address without a GRH (LID only): UC and UD always,
/// RC without `-cm1` (its own exchange over the TCP control connection,
/// `ibv_modify_qp` with a DLID and `is_global = 0`).
const GRH_LESS_TESTS: &[&str] = &[
    "uc_bw",
    "uc_bi_bw",
    "uc_lat",
    "uc_rdma_write_bw",
    "uc_rdma_write_lat",
    "uc_rdma_write_poll_lat",
    "ud_bw",
    "ud_bi_bw",
    "ud_lat",
    "rc_bw",
    "rc_bi_bw",
    "rc_lat",
    "rc_rdma_read_bw",
    "rc_rdma_read_lat",
    "rc_rdma_write_bw",
    "rc_rdma_write_lat",
    "rc_rdma_write_poll_lat",
    "rc_compare_swap_mr",
    "rc_fetch_add_mr",
    "ver_rc_compare_swap",
    "ver_rc_fetch_add",
];

/// One-way UC and UD streams whose receiver must get some of what was
/// sent. The two-way ones are only required to report: with no link-level
/// flow control on a raw link (docs/ibverbs-abi.md, "qperf on native IB
/// devices"), an end that is starved of CPU while its peer streams at it
/// drops what its socket cannot hold, and a 64 KiB UC message of 32
/// packets needs every one of them.
const MUST_RECEIVE: &[&str] = &["uc_bw", "uc_rdma_write_bw", "ud_bw"];

/// A process that is killed when dropped (a test that panics must not
/// leave a server running in a namespace it is about to delete).
struct Killed(Option<std::process::Child>);

impl Killed {
    fn output(mut self) -> Output {
        let mut c = self.0.take().expect("a child");
        let _ = c.kill();
        c.wait_with_output().expect("its output")
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The figure qperf printed for `key` (`recv_bw`, `bw`, ...) in the
/// block of `test`, in its unit's bytes per second (0 for "0 bytes/sec").
fn figure(out: &str, test: &str, key: &str) -> Option<f64> {
    let lines: Vec<&str> = out.lines().collect();
    let at = lines.iter().position(|l| l.trim_end() == format!("{test}:"))?;
    let line = lines[at + 1..].iter().take_while(|l| l.starts_with(' ')).find(|l| {
        let t = l.trim_start();
        t.starts_with(key) && t[key.len()..].trim_start().starts_with('=')
    })?;
    let mut words = line.split('=').nth(1)?.split_whitespace();
    let v: f64 = words.next()?.replace(',', "").parse().ok()?;
    let scale = match words.next()?.chars().next()? {
        'K' => 1e3,
        'M' => 1e6,
        'G' => 1e9,
        _ => 1.0,
    };
    Some(v * scale)
}

/// Native InfiniBand devices of the drop-in library (`NAME=ib:IFNAME`)
/// at the two ends of a veth pair between two network namespaces, each
/// port at its LID (one from the LID plan, one given), and Debian's qperf
/// between them: every test it addresses without a GRH, one second each.
/// Root only (namespaces, raw sockets); skipped otherwise.
#[test]
fn qperf_grh_less_tests_on_native_ib_devices() {
    let Some(_) = need("qperf", "qperf") else { return };
    if !testkit::netns::is_root() {
        testkit::skip("native IB devices need raw sockets and network namespaces (root)");
        return;
    }
    // Namespaces ibq-a<PID>/ibq-b<PID>, ends ibq<PID>a/ibq<PID>b.
    let v = match testkit::netns::Veth::named("ibq-", "ibq", 188) {
        Ok(v) => v,
        Err(e) => {
            testkit::skip(format!("cannot make a veth pair between namespaces: {e}"));
            return;
        }
    };
    // MACs whose LID-plan LIDs are 0x0a01 and 0x0a02; an MTU that carries
    // qperf's path MTU (2048: 2156-byte frames; 4096 fits 4200).
    for (i, mac) in ["02:88:00:00:0a:01", "02:88:00:00:0a:02"].into_iter().enumerate() {
        let (ns, dev) = (&v.ns.0[i], &v.dev[i]);
        for args in [
            &["-n", ns, "link", "set", dev, "down"][..],
            &["-n", ns, "link", "set", dev, "address", mac, "mtu", "4200"],
            &["-n", ns, "link", "set", dev, "up"],
        ] {
            testkit::netns::ip(args).expect("configure the veth end");
        }
    }
    let l = launcher();
    // The server's port at the LID plan's LID, the client's at one given.
    let devs = [format!("mlx0=ib:{}:0x0b01", v.dev[0]), format!("mlx0=ib:{}", v.dev[1])];
    let side = |i: usize, args: &[&str]| {
        let mut c = v.cmd(i, l.to_str().expect("a UTF-8 path"));
        c.env("SOFTROCE_LIBRARY", libibverbs())
            .env("SOFTROCE_RDMACM_LIBRARY", librdmacm())
            .env_remove("SOFTROCE_LOG")
            .args(["--device", &devs[i], "--"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let shown = |i: usize, args: &[&str]| {
        format!("ip netns exec {} softroce-run --device {} -- {}", v.ns.0[i], devs[i], args.join(" "))
    };

    // The ports as an application sees them: IB link layer, the LIDs.
    if need("ibv_devinfo", "ibverbs-utils").is_some() {
        for (i, lid) in [(0, 0x0b01), (1, 0x0a02)] {
            let (o, ok) =
                wait(side(i, &["ibv_devinfo", "-v"]).spawn().expect("ibv_devinfo starts"), Duration::from_secs(30));
            let text = String::from_utf8_lossy(&o.stdout);
            let want = [
                "link_layer:\t\tInfiniBand".to_string(),
                format!("port_lid:\t\t{lid}"),
                "active_mtu:\t\t4096 (5)".to_string(),
                "state:\t\t\tPORT_ACTIVE (4)".to_string(),
            ];
            for w in &want {
                assert!(
                    ok && text.contains(w.as_str()),
                    "{}: no {w:?}\n{}",
                    shown(i, &["ibv_devinfo", "-v"]),
                    tail(&o, 40)
                );
            }
        }
    }

    // qperf's server listens on its control port (the namespace's own).
    let port = "19765";
    let srv_args = ["qperf", "-lp", port];
    let srv = Killed(Some(side(1, &srv_args).spawn().expect("the qperf server starts")));
    let listening = || {
        let o = v.cmd(1, "cat").arg("/proc/net/tcp").output().map(|o| o.stdout).unwrap_or_default();
        String::from_utf8_lossy(&o).lines().any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() > 3 && c[1].ends_with(":4D35") && c[3] == "0A"
        })
    };
    let start = Instant::now();
    while !listening() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cli_args = vec!["qperf", "-t", "1", "-lp", port, &v.addr[1]];
    cli_args.extend_from_slice(GRH_LESS_TESTS);
    // About 1.5 s a test; a hang is cut at 180 s.
    let (c, in_time) = wait(side(0, &cli_args).spawn().expect("the qperf client starts"), Duration::from_secs(180));
    let s = srv.output();
    let out = String::from_utf8_lossy(&c.stdout).into_owned();
    let report = |what: &str| {
        format!(
            "{what}\nserver: {}\n{}\nclient: {}\nstatus {:?}, in time: {in_time}\n{}",
            shown(1, &srv_args),
            tail(&s, 20),
            shown(0, &cli_args),
            c.status,
            tail(&c, 60)
        )
    };
    assert!(in_time && c.status.success(), "{}", report("qperf failed"));
    for bad in ["failed", "unexpected", "error", "rejected", "timed out"] {
        let hit = out.lines().find(|l| l.to_lowercase().contains(bad));
        assert!(hit.is_none(), "{}", report(&format!("{bad:?} in the output: {hit:?}")));
    }
    for t in GRH_LESS_TESTS {
        let lat = figure(&out, t, "latency");
        let rate = figure(&out, t, "msg_rate");
        let bw = figure(&out, t, "bw").or(figure(&out, t, "send_bw"));
        assert!(
            lat.is_some() || rate.is_some() || bw.is_some(),
            "{}",
            report(&format!("{t}: no result (latency, msg_rate or bw)"))
        );
        for f in [lat, rate, bw].into_iter().flatten() {
            assert!(f > 0.0, "{}", report(&format!("{t}: a figure of 0")));
        }
        if MUST_RECEIVE.contains(t) {
            let recv = figure(&out, t, "recv_bw");
            assert!(recv.is_some_and(|r| r > 0.0), "{}", report(&format!("{t}: nothing received ({recv:?})")));
        }
    }
    eprintln!("{out}");
}
