//! The four ping-pong examples, server and client in two threads on two
//! loopback addresses, through the same TCP exchange the real tools use.

use clap::Parser;
use softroce::pingpong::{run, Args, Kind};
use std::sync::atomic::{AtomicU8, Ordering};

fn args(extra: &[&str]) -> Args {
    Args::parse_from(std::iter::once("pingpong").chain(extra.iter().copied()))
}

fn pair(kind: Kind, extra: &[&str]) {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let x = 10 + (std::process::id() % 200) as u8;
    let (s, c) = (format!("127.{x}.{}.1", 200 + n), format!("127.{x}.{}.2", 200 + n));
    // Below the kernel's ephemeral range (32768 up): the server listens on
    // every address, so a port some other test's connection was given would
    // refuse it (EADDRINUSE), and the client would only see "refused".
    let port = (24000 + (std::process::id() % 8000) as u16 + u16::from(n)).to_string();
    let mut sa = vec!["--bind", &s, "-p", &port, "-d", "rxe-srv", "-n", "200"];
    sa.extend_from_slice(extra);
    let server_args = args(&sa);
    let server = std::thread::spawn(move || run(kind, &server_args));
    let mut ca = vec!["--bind", &c, "-p", &port, "-d", "rxe-cli", "-n", "200"];
    ca.extend_from_slice(extra);
    ca.push(&s);
    let client_args = args(&ca);
    let mut r = run(kind, &client_args);
    for _ in 0..50 {
        // Again only while the server does not listen yet: any other
        // failure is the test's, and a retry would hide it behind the
        // refusals of a server that has finished.
        if !r.as_ref().is_err_and(|e| e.to_string().contains("Connection refused")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        r = run(kind, &client_args);
    }
    if let Err(e) = r {
        // say why the server never listened, if that is what happened
        let server = if server.is_finished() { format!("{:?}", server.join()) } else { "still running".into() };
        panic!("{kind:?} client: {e}; server: {server}");
    }
    server.join().unwrap().unwrap_or_else(|e| panic!("{kind:?} server: {e}"));
}

#[test]
fn rc_pingpong() {
    pair(Kind::Rc, &[]);
}

#[test]
fn rc_pingpong_with_events_and_mtu_4096() {
    pair(Kind::Rc, &["-e", "-m", "4096", "-s", "10000"]);
}

#[test]
fn uc_pingpong_with_a_traffic_class() {
    pair(Kind::Uc, &["-T", "104"]);
}

#[test]
fn ud_pingpong_with_a_traffic_class() {
    pair(Kind::Ud, &["-s", "1024", "-T", "104"]);
}

#[test]
fn ud_pingpong_goes_up_to_the_port_mtu_whatever_m_says() {
    // ibv_ud_pingpong has no -m and allows up to the port's MTU (4096 on
    // kernel Soft-RoCE over a 9000-byte link): found in the lab.
    pair(Kind::Ud, &["-s", "4096"]);
}

#[test]
fn srq_pingpong() {
    pair(Kind::Srq, &["-q", "4"]);
}

#[test]
fn bad_flags_are_refused() {
    assert!(run(Kind::Ud, &args(&["-s", "4097"])).unwrap_err().to_string().contains("port MTU (4096)"));
    assert!(run(Kind::Rc, &args(&["-m", "999"])).unwrap_err().to_string().contains("Invalid MTU"));
    assert!(run(Kind::Rc, &args(&["-g", "2"])).unwrap_err().to_string().contains("GID index 2"));
}
