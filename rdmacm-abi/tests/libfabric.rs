//! Debian's libfabric (1.17) over this project's libibverbs.so.1 and
//! librdmacm.so.1: `fi_pingpong` with the verbs provider's `msg`
//! endpoints, `rdm` over `ofi_rxm` (RC under a reliable-datagram layer,
//! what MPI uses) and over `ofi_rxd`, and `dgram` (UD), both sides as
//! unmodified processes under softroce-run.
//!
//! The verbs provider lists `msg` (and so `ofi_rxm`) only for a device
//! with an address on a network interface other than `lo` (it skips `lo`
//! by name), so those run between two network namespaces joined by a veth
//! pair (root only). `dgram` and `ofi_rxd` need no interface and run on
//! loopback addresses too (127.0.194.x; control ports 47700-47799).

mod common;

use common::*;
use std::process::{Command, Output};
use std::time::Duration;
use testkit::netns::{is_root, Veth};

const LIMIT: Duration = Duration::from_secs(60);

/// Whether a run printed fi_pingpong's result row for 1 KiB with all 100
/// transfers sent and acknowledged (`1k  100  =100 ...`).
fn finished(o: &Output) -> bool {
    o.status.success() && stdout(o).lines().any(|l| l.starts_with("1k ") && l.contains(" =100 "))
}

/// fi_pingpong `prov`/`ep`, 100 transfers of 1 KiB, ctrl port `port`:
/// the server from `server()`, the client from `client(server address)`.
/// A client that came before the server listened is started again.
fn pingpong(
    prov: &str,
    ep: &str,
    port: u16,
    mut server: impl FnMut(&[&str]) -> Command,
    mut client: impl FnMut(&[&str]) -> Command,
    server_addr: &str,
) {
    let port = port.to_string();
    let common = ["fi_pingpong", "-p", prov, "-e", ep, "-I", "100", "-S", "1024"];
    // The server listens on control port `port` (-B); the client connects to it (-P).
    let server_args = [&common[..], &["-B", &port]].concat();
    for attempt in 1..=10 {
        let srv =
            server(&server_args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn();
        let srv = srv.expect("start the server");
        std::thread::sleep(Duration::from_millis(500));
        let args = [&common[..], &["-P", &port, server_addr]].concat();
        let (c, c_done) = wait(
            client(&args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start the client"),
            LIMIT,
        );
        let refused = String::from_utf8_lossy(&c.stderr).contains("Connection refused")
            || String::from_utf8_lossy(&c.stdout).contains("Connection refused");
        let (s, s_done) = if refused && attempt < 10 {
            let mut srv = srv;
            let _ = srv.kill();
            (srv.wait_with_output().expect("the server's output"), true)
        } else {
            wait(srv, LIMIT)
        };
        if refused && attempt < 10 {
            eprintln!("attempt {attempt}: the client came before the server listened; a new pair");
            continue;
        }
        assert!(c_done && s_done, "{prov} {ep}: timed out\nserver\n{}\nclient\n{}", show(&s), show(&c));
        assert!(finished(&s) && finished(&c), "{prov} {ep}: {args:?}\nserver\n{}\nclient\n{}", show(&s), show(&c));
        return;
    }
}

fn veth_or_skip(tag: &str) -> Option<Veth> {
    if !is_root() {
        testkit::skip("libfabric's msg and rdm endpoints need two network namespaces (root)");
        return None;
    }
    match Veth::new(tag) {
        Ok(v) => Some(v),
        Err(e) => {
            testkit::skip(format!("cannot make a veth pair: {e}"));
            None
        }
    }
}

fn between_namespaces(tag: &str, prov: &str, ep: &str) {
    let Some(_) = need("fi_pingpong", "libfabric-bin") else { return };
    let Some(v) = veth_or_skip(tag) else { return };
    let l = launcher();
    let side = |i: usize, args: &[&str]| {
        let mut c = v.cmd(i, l.to_str().expect("a UTF-8 path"));
        c.env("SOFTROCE_LIBRARY", libibverbs())
            .env("SOFTROCE_RDMACM_LIBRARY", librdmacm())
            .env_remove("SOFTROCE_LOG")
            .args(["--device", &format!("rxe0={}", v.addr[i]), "--"])
            .args(args);
        c
    };
    pingpong(prov, ep, 47592, |a| side(0, a), |a| side(1, a), &v.addr[0]);
}

#[test]
fn msg_endpoints_between_namespaces() {
    between_namespaces("m", "verbs", "msg");
}

#[test]
fn rdm_over_rxm_between_namespaces() {
    between_namespaces("r", "verbs;ofi_rxm", "rdm");
}

#[test]
fn rdm_over_rxd_between_namespaces() {
    between_namespaces("d", "verbs;ofi_rxd", "rdm");
}

#[test]
fn dgram_between_namespaces() {
    between_namespaces("g", "verbs", "dgram");
}

fn on_loopback(prov: &str, ep: &str, host: u8, port: u16) {
    let Some(_) = need("fi_pingpong", "libfabric-bin") else { return };
    let l = launcher();
    let (a, b) = (format!("127.0.194.{host}"), format!("127.0.194.{}", host + 1));
    let side = |dev: &str, args: &[&str]| over_library(&l, &format!("rxe0={dev}"), args);
    pingpong(prov, ep, port, |x| side(&a, x), |x| side(&b, x), &a);
}

#[test]
fn dgram_on_loopback() {
    on_loopback("verbs", "dgram", 1, 47700);
}

#[test]
fn rdm_over_rxd_on_loopback() {
    on_loopback("verbs;ofi_rxd", "rdm", 3, 47701);
}
