//! The RDMA CM between two processes on ONE address (docs/shared-device.md):
//! both open the same device (`rxe0`, one GID, UDP 4791 shared), the
//! server's REQs are steered to it by their service ID and every later CM
//! message by the communication ID its receiver allocated. Debian's
//! rping (RC, READ/WRITE/SEND), ucmatose (RC) and udaddy (UD through
//! SIDR); a second listener on a port the first holds is refused, as the
//! kernel refuses it host-wide. Addresses 127.0.22.71-101.

mod common;

use common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// Kills a server the test left running.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn both_ok(s: &std::process::Output, c: &std::process::Output) {
    assert!(s.status.success(), "server\n{}", show(s));
    assert!(c.status.success(), "client\n{}", show(c));
}

#[test]
fn rping_server_and_client_on_one_address() {
    let Some(_) = need("rping", "rdmacm-utils") else { return };
    let l = launcher();
    let dev = "rxe0=127.0.22.71";
    let srv = over_library(&l, dev, &["rping", "-s", "-a", "127.0.22.71", "-V", "-C", "50"]);
    let cli = over_library(&l, dev, &["rping", "-c", "-a", "127.0.22.71", "-V", "-C", "50", "-v"]);
    let (s, c) = pair(srv, cli, [127, 0, 22, 71], LIMIT);
    both_ok(&s, &c);
    assert_eq!(count(&c, "ping data: rdma-ping-"), 50, "{}", show(&c));
}

#[test]
fn ucmatose_and_udaddy_server_and_client_on_one_address() {
    let Some(_) = need("ucmatose", "rdmacm-utils") else { return };
    let l = launcher();
    for (tool, host) in [("ucmatose", 81), ("udaddy", 91)] {
        let ip = format!("127.0.22.{host}");
        let dev = format!("rxe0={ip}");
        let srv = over_library(&l, &dev, &[tool, "-b", &ip, "-c", "4", "-C", "20"]);
        let cli = over_library(&l, &dev, &[tool, "-s", &ip, "-c", "4", "-C", "20"]);
        let (s, c) = pair(srv, cli, [127, 0, 22, host], LIMIT);
        both_ok(&s, &c);
        for o in [&s, &c] {
            assert!(stdout(o).contains("test complete"), "{tool}\n{}", show(o));
        }
    }
}

#[test]
fn a_port_another_process_of_the_device_listens_on_is_refused() {
    let Some(_) = need("ucmatose", "rdmacm-utils") else { return };
    let l = launcher();
    let dev = "rxe0=127.0.22.101";
    let mut srv = over_library(&l, dev, &["ucmatose", "-b", "127.0.22.101", "-p", "7400", "-c", "1", "-C", "1"]);
    let srv = srv.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let srv = KillOnDrop(Some(srv.spawn().expect("server")));
    let start = std::time::Instant::now();
    while !roce_bound([127, 0, 22, 101]) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let second = over_library(&l, dev, &["ucmatose", "-b", "127.0.22.101", "-p", "7400", "-c", "1", "-C", "1"]);
    let (o, done) = wait(spawn(second), LIMIT);
    assert!(done && !o.status.success(), "{}", show(&o));
    let text = format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("Address already in use") || text.contains("-98"), "{}", show(&o));
    drop(srv);
}
