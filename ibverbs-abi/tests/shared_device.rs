//! One device, many processes (docs/shared-device.md): processes on one
//! address each open `rxe0` (same name, same GID, UDP 4791 shared) and
//! talk over RC and UD to each other and to a process on another
//! address; one of them killed with SIGKILL leaves the others' traffic
//! working, and a new process joins afterwards. Each process is
//! `shared/mesh.c`, driven line by line. Addresses 127.0.22.51-62.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

const MESH: &str = include_str!("shared/mesh.c");
const REPLY: Duration = Duration::from_secs(30);

/// The compiled mesh program and its library directory; None after a skip.
fn mesh(tag: &str) -> Option<(PathBuf, PathBuf)> {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        testkit::skip("/usr/include/infiniband/verbs.h is absent (apt-get install libibverbs-dev)");
        return None;
    }
    common::need("cc", "gcc")?;
    let dir = common::link_dir(tag);
    let exe = common::compile(&dir, "mesh", MESH);
    Some((exe, dir))
}

/// One mesh process: its name, GID, UD QPN, and its reply lines.
struct Proc {
    name: String,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    gid: String,
    ud: u32,
}

impl Proc {
    fn start((exe, dir): &(PathBuf, PathBuf), name: &str, addr: &str) -> Proc {
        let mut child = Command::new(exe)
            .arg(name)
            .env("LD_LIBRARY_PATH", dir)
            .env("SOFTROCE_DEVICES", format!("rxe0={addr}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the mesh program");
        let stdin = child.stdin.take().expect("stdin");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        let mut p = Proc { name: name.into(), child, stdin, lines, gid: String::new(), ud: 0 };
        let ready = p.reply("start");
        let w: Vec<&str> = ready.split_whitespace().collect();
        assert_eq!(w.first(), Some(&"ready"), "{name}: {ready}");
        (p.gid, p.ud) = (w[1].to_string(), w[2].parse().expect("UD QPN"));
        p
    }

    fn reply(&mut self, what: &str) -> String {
        self.lines.recv_timeout(REPLY).unwrap_or_else(|e| panic!("{}: no answer to {what:?}: {e}", self.name))
    }

    /// Sends `cmd` and returns the answer's words after the first.
    fn ask(&mut self, cmd: &str) -> Vec<String> {
        writeln!(self.stdin, "{cmd}").expect("write a command");
        let r = self.reply(cmd);
        r.split_whitespace().skip(1).map(String::from).collect()
    }

    fn rc_to(&mut self, peer: &str) -> u32 {
        self.ask(&format!("rc {peer}"))[1].parse().expect("an RC QPN")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The slot of a QPN: its top 7 of 24 bits.
fn slot(qpn: u32) -> u32 {
    qpn >> (24 - rdma_core_rs::share::steer::SLOT_BITS)
}

/// Connects an RC QP pair between `x` and `y` and returns their QPNs.
fn connect(x: &mut Proc, y: &mut Proc) -> (u32, u32) {
    let (xn, yn) = (y.name.clone(), x.name.clone());
    let (qx, qy) = (x.rc_to(&xn), y.rc_to(&yn));
    assert_eq!(x.ask(&format!("connect {xn} {qy} {}", y.gid)), [xn.clone(), "0".into()]);
    assert_eq!(y.ask(&format!("connect {yn} {qx} {}", x.gid)), [yn.clone(), "0".into()]);
    (qx, qy)
}

/// `n` RC SENDs each way between connected `x` and `y`, every one
/// received in order with its text.
fn rc_traffic(x: &mut Proc, y: &mut Proc, n: u32) {
    rc_one_way(x, y, n);
    rc_one_way(y, x, n);
}

fn rc_one_way(a: &mut Proc, b: &mut Proc, n: u32) {
    let (an, bn) = (a.name.clone(), b.name.clone());
    assert_eq!(a.ask(&format!("send {bn} {n}")), [bn.clone(), n.to_string(), "0".into()], "{an} -> {bn}");
    assert_eq!(b.ask(&format!("recv {an} {n}")), [an.clone(), n.to_string()], "{an} -> {bn}");
}

/// `n` UD SENDs each way between `x`'s and `y`'s UD QPs, all received.
fn ud_traffic(x: &mut Proc, y: &mut Proc, n: u32) {
    ud_one_way(x, y, n);
    ud_one_way(y, x, n);
}

fn ud_one_way(a: &mut Proc, b: &mut Proc, n: u32) {
    let tag = format!("{}-ud-{}", a.name, b.name);
    assert_eq!(a.ask(&format!("udsend {} {} {n} {tag}", b.ud, b.gid)), [n.to_string(), "0".into()], "{tag}");
    assert_eq!(b.ask(&format!("udrecv {n} {tag}")), [n.to_string()], "{tag}");
}

#[test]
fn two_processes_on_one_address_talk_to_a_third_and_to_each_other_over_rc_and_ud() {
    let Some(m) = mesh("shared-mesh") else { return };
    let mut p1 = Proc::start(&m, "p1", "127.0.22.51");
    let mut p2 = Proc::start(&m, "p2", "127.0.22.51");
    let mut p3 = Proc::start(&m, "p3", "127.0.22.52");
    // One device, one GID; each process makes QPs in a range of its own.
    assert_eq!(p1.gid, p2.gid);
    assert_ne!(p1.gid, p3.gid);
    assert_ne!(slot(p1.ud), slot(p2.ud));
    for (x, y) in [(0, 2), (1, 2), (0, 1)] {
        let mut ps = [&mut p1, &mut p2, &mut p3];
        let (lo, hi) = ps.split_at_mut(y);
        let (a, b) = (&mut *lo[x], &mut *hi[0]);
        let (qa, qb) = connect(a, b);
        if a.gid == b.gid {
            assert_ne!(slot(qa), slot(qb), "{} and {} share a device: not a QPN range", a.name, b.name);
        }
        rc_traffic(a, b, 40);
        ud_traffic(a, b, 20);
    }
}

#[test]
fn a_killed_process_leaves_the_others_traffic_working_and_a_new_one_joins() {
    let Some(m) = mesh("shared-crash") else { return };
    let mut a = Proc::start(&m, "a", "127.0.22.61");
    let mut b = Proc::start(&m, "b", "127.0.22.61");
    let mut e = Proc::start(&m, "e", "127.0.22.61");
    let mut c = Proc::start(&m, "c", "127.0.22.62");
    connect(&mut a, &mut c);
    connect(&mut e, &mut c);
    connect(&mut a, &mut e);
    connect(&mut b, &mut c);
    rc_traffic(&mut a, &mut c, 10);
    rc_traffic(&mut b, &mut c, 10);
    // b's socket is in the middle of the port's group: when it goes, the
    // kernel moves e's (the last) into its place.
    b.child.kill().expect("SIGKILL b");
    b.child.wait().expect("reap b");
    rc_traffic(&mut a, &mut c, 30);
    rc_traffic(&mut e, &mut c, 30);
    rc_traffic(&mut a, &mut e, 30);
    ud_traffic(&mut e, &mut c, 10);
    ud_traffic(&mut a, &mut e, 10);
    // A newcomer takes a slot and talks to everyone.
    let mut d = Proc::start(&m, "d", "127.0.22.61");
    for p in [&mut a, &mut e, &mut c] {
        connect(&mut d, p);
        rc_traffic(&mut d, p, 20);
        ud_traffic(&mut d, p, 10);
    }
}
