//! Debian's ibverbs-utils, unmodified, over the library through
//! softroce-run: the device listing and info, and the four ping-pongs
//! between two processes on two loopback addresses (busy polling and
//! `-e`, sleeping on the completion channel). Each test skips with a
//! message when its binary is absent (apt-get install ibverbs-utils).

mod common;

use std::sync::Mutex;
use std::time::Duration;

/// The ping-pongs run one at a time: each is two processes with progress
/// threads, and CI machines may have two cores.
static SERIAL: Mutex<()> = Mutex::new(());

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn ibv_devices_lists_our_devices() {
    if common::need("ibv_devices", "ibverbs-utils").is_none() {
        return;
    }
    let out = common::wait(common::spawn("lst0=127.0.3.1,lst1=127.0.3.2", &["ibv_devices"]), LIMIT).0;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", common::show(&out));
    // The node GUID is the EUI-64 made from the address.
    assert!(text.contains("lst0") && text.contains("02007ffffe000301"), "{text}");
    assert!(text.contains("lst1") && text.contains("02007ffffe000302"), "{text}");
}

#[test]
fn ibv_devinfo_shows_the_port_and_the_roce_v2_gid() {
    if common::need("ibv_devinfo", "ibverbs-utils").is_none() {
        return;
    }
    let out = common::wait(common::spawn("inf0=127.0.3.3", &["ibv_devinfo", "-v"]), LIMIT).0;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", common::show(&out));
    for want in [
        "hca_id:\tinf0",
        "PORT_ACTIVE (4)",
        // As rxe on lo: the interface's MTU (65536) less rxe's 80 bytes of headers.
        "active_mtu:\t\t4096 (5)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t::ffff:127.0.3.3, RoCE v2",
        "phys_port_cnt:\t\t\t1",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
    ] {
        assert!(text.contains(want), "ibv_devinfo -v lacks {want:?}:\n{text}");
    }
}

/// Runs `ibv_<kind>_pingpong` server and client with `extra` options and
/// checks both exit 0 and print `size * iters * 2` bytes and `iters` iterations.
fn pingpong(kind: &str, extra: &[&str], net: u8, port: u16, size: u32, iters: u32) {
    let bin = format!("ibv_{kind}_pingpong");
    if common::need(&bin, "ibverbs-utils").is_none() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (a, b) = (format!("127.0.{net}.1"), format!("127.0.{net}.2"));
    let (p, s, n) = (port.to_string(), size.to_string(), iters.to_string());
    let mut srv: Vec<&str> = vec![&bin, "-d", "srv0", "-g", "0", "-p", &p, "-s", &s, "-n", &n];
    srv.extend_from_slice(extra);
    let mut cli = srv.clone();
    cli[2] = "cli0";
    cli.push(&a);
    let (so, co) = common::pair((&format!("srv0={a}"), &srv), (&format!("cli0={b}"), &cli), port, LIMIT);
    for (who, o) in [("server", &so), ("client", &co)] {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{bin} {extra:?} {who} failed:\n{}\n(other side:\n{})", common::show(o), {
            if who == "server" {
                common::show(&co)
            } else {
                common::show(&so)
            }
        });
        let bytes = u64::from(size) * u64::from(iters) * 2;
        assert!(text.contains(&format!("{bytes} bytes in ")), "{who} did not move {bytes} bytes:\n{text}");
        assert!(text.contains(&format!("{iters} iters in ")), "{who} did not do {iters} iterations:\n{text}");
        // The GIDs exchanged are the RoCE v2 GIDs of the two addresses.
        assert!(text.contains(&format!("GID ::ffff:{a}")) && text.contains(&format!("GID ::ffff:{b}")), "{text}");
    }
}

#[test]
fn rc_pingpong() {
    pingpong("rc", &[], 4, 18601, 4096, 500);
}

#[test]
fn rc_pingpong_sleeping_on_the_completion_channel() {
    pingpong("rc", &["-e"], 5, 18602, 4096, 500);
}

#[test]
fn uc_pingpong() {
    pingpong("uc", &[], 6, 18603, 4096, 500);
}

#[test]
fn uc_pingpong_with_events() {
    pingpong("uc", &["-e"], 7, 18604, 4096, 500);
}

#[test]
fn ud_pingpong() {
    // UD messages fit one MTU (1024) with the 40-byte GRH in the buffer.
    pingpong("ud", &[], 8, 18605, 512, 500);
}

#[test]
fn ud_pingpong_with_events() {
    pingpong("ud", &["-e"], 9, 18606, 512, 500);
}

#[test]
fn srq_pingpong() {
    pingpong("srq", &[], 10, 18607, 4096, 500);
}

#[test]
fn srq_pingpong_with_events() {
    pingpong("srq", &["-e"], 11, 18608, 4096, 500);
}

#[test]
fn rc_pingpong_large_messages() {
    // Many packets per message (64 KiB over a 1024-byte MTU).
    pingpong("rc", &["-m", "1024"], 12, 18609, 65536, 100);
}
