//! The raw UDP baselines `scripts/bench.sh` compares rdma-perf with, on
//! loopback, one sender thread and one receiver thread in one process
//! (as `rdma-perf --loopback` runs):
//!
//! - `bw MODE SIZE SECS`: datagrams of SIZE bytes for SECS seconds;
//!   MODE is `plain` (one send and one receive system call per datagram),
//!   `mmsg` (sendmmsg/recvmmsg of 32) or `gso` (UDP_SEGMENT sends of up to
//!   64 segments, UDP_GRO receives). Prints the receiver's figures.
//!   `gso-roce` sends as this backend sends RC WRITEs of SIZE bytes at a
//!   4096-byte MTU, without any engine work: on a connected socket (as the
//!   backend sends to its one peer), each WRITE as two UDP_SEGMENT
//!   messages in one `sendmmsg`, since its FIRST packet is 16
//!   bytes (the RETH) longer than the rest (4,128 and 4,112 bytes after
//!   the UDP header): FIRST with the second packet, then the others. The
//!   floor of `rdma-perf write-bw` given the wire format. SIZE is taken
//!   in whole 4096-byte packets, at least three.
//! - `pingpong SIZE ITERS POLL`: a SIZE-byte ping-pong on connected
//!   sockets (`send`/`recv`: the cheapest system calls there are); POLL is
//!   `busy` (non-blocking receives in a loop) or `block`. Prints round trips.
//! - `pingpong-unconnected SIZE ITERS POLL`: the same from unconnected
//!   sockets (`send_to`/`recv`). This backend's IPv4 RoCE v2 packets first
//!   left this way: the ICRC covers the IPv4 Identification, and Linux
//!   writes a fixed one (0, with DF) only on unconnected sockets; a
//!   connected socket numbers its datagrams from a random start, which
//!   the backend now learns by probing (`rdma_link::udp`'s connected
//!   sends) and then sends connected. The cost unconnected sends add.
//! - `pingpong-roce SIZE ITERS POLL`: the same with the system calls an RC
//!   ping-pong over RoCE v2 makes: each side sends its message and a
//!   20-byte ACK-sized datagram behind it in one `sendmmsg` of one
//!   UDP_SEGMENT message from an unconnected socket, and takes them with
//!   `recvmmsg` on a UDP_GRO socket. The floor of rdma-perf's round trip
//!   without any engine work.
//! - `pingpong-roce-connected SIZE ITERS POLL`: `pingpong-roce` from
//!   connected sockets: the floor if the Identification problem were
//!   solved (how low a RoCE v2 round trip over UDP sockets could go).
//!
//! Output: one JSON object.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;

fn setopt(s: &UdpSocket, level: i32, name: i32, v: i32) {
    // SAFETY: an int option on our socket.
    let r = unsafe { libc::setsockopt(s.as_raw_fd(), level, name, (&v as *const i32).cast(), 4) };
    assert_eq!(r, 0, "setsockopt {name}: {}", std::io::Error::last_os_error());
}

/// One message header per iovec, for sendmmsg/recvmmsg.
fn headers(iov: &mut [libc::iovec]) -> Vec<libc::mmsghdr> {
    iov.iter_mut()
        .map(|v| {
            // SAFETY: a zeroed msghdr is valid; the iovec is set below.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect()
}

fn bw(mode: &str, size: usize, secs: f64) {
    let rx = UdpSocket::bind("127.0.0.2:0").unwrap();
    let dest = rx.local_addr().unwrap();
    setopt(&rx, libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20);
    rx.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    if mode == "gso" || mode == "gso-roce" {
        setopt(&rx, libc::SOL_UDP, UDP_GRO, 1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stop_tx = stop.clone();
    let mode_tx = mode.to_string();
    let sender = std::thread::spawn(move || {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        if mode_tx == "gso-roce" {
            setopt(&tx, libc::SOL_SOCKET, libc::SO_SNDBUF, 8 << 20);
            tx.connect(dest).unwrap();
            return send_writes(&tx, size, &stop_tx);
        }
        tx.connect(dest).unwrap();
        setopt(&tx, libc::SOL_SOCKET, libc::SO_SNDBUF, 8 << 20);
        let segs = if mode_tx == "gso" { (65000 / size).clamp(1, 64) } else { 1 };
        if mode_tx == "gso" {
            setopt(&tx, libc::SOL_UDP, UDP_SEGMENT, size as i32);
        }
        let buf = vec![0x5au8; size * segs];
        let fd = tx.as_raw_fd();
        while !stop_tx.load(Ordering::Relaxed) {
            if mode_tx == "mmsg" {
                let mut iov: Vec<libc::iovec> =
                    (0..32).map(|_| libc::iovec { iov_base: buf.as_ptr() as *mut _, iov_len: size }).collect();
                let mut msgs = headers(&mut iov);
                // SAFETY: valid headers and buffers.
                unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), 32, 0) };
            } else {
                let _ = tx.send(&buf);
            }
        }
    });
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    let mut datagrams = 0u64;
    let fd = rx.as_raw_fd();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        if mode == "mmsg" {
            let mut bufs = vec![[0u8; 9000]; 32];
            let mut iov: Vec<libc::iovec> =
                bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
            let mut msgs = headers(&mut iov);
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 100_000_000 };
            // SAFETY: valid headers and buffers.
            let n = unsafe { libc::recvmmsg(fd, msgs.as_mut_ptr(), 32, libc::MSG_WAITFORONE, &mut ts) };
            for m in msgs.iter().take(n.max(0) as usize) {
                bytes += u64::from(m.msg_len);
                datagrams += 1;
            }
        } else if let Ok(n) = rx.recv(&mut buf) {
            bytes += n as u64;
            // gso-roce: its segments are 4,112 and 4,128 bytes.
            let segment = if mode == "gso-roce" { 4112 } else { size };
            datagrams += (n as u64) / (segment as u64).max(1);
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    println!(
        "{{\"test\":\"udp-bw\",\"mode\":\"{mode}\",\"size\":{size},\"gbps\":{},\"mpps\":{}}}",
        bytes as f64 * 8.0 / elapsed / 1e9,
        datagrams as f64 / elapsed / 1e6
    );
}

/// Makes `h` a UDP_SEGMENT message of `segment`-byte segments, its
/// control message written into `control`, which must outlive the send.
fn set_segment(h: &mut libc::msghdr, control: &mut [u64; 4], segment: u16) {
    h.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE/CMSG_FIRSTHDR/CMSG_DATA stay within `control`
    // (32 bytes; one control message of a u16 takes 20).
    unsafe {
        h.msg_controllen = libc::CMSG_SPACE(2) as usize;
        let c = libc::CMSG_FIRSTHDR(h);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), segment);
    }
}

/// `bw gso-roce`: WRITEs of `size` bytes until `stop`, each as two
/// UDP_SEGMENT messages (FIRST and the next packet, then the rest) in one
/// `sendmmsg` on the connected socket `tx`.
fn send_writes(tx: &UdpSocket, size: usize, stop: &AtomicBool) {
    const MTU: usize = 4096;
    let (first, other) = (12 + 16 + MTU + 4, 12 + MTU + 4);
    let packets = size.div_ceil(MTU).max(3);
    let mut head = vec![0x5au8; first + other];
    let mut rest = vec![0x5au8; other * (packets - 2)];
    let mut iov = [
        libc::iovec { iov_base: head.as_mut_ptr().cast(), iov_len: head.len() },
        libc::iovec { iov_base: rest.as_mut_ptr().cast(), iov_len: rest.len() },
    ];
    let mut control = [[0u64; 4]; 2];
    let mut m = headers(&mut iov);
    for (i, (h, segment)) in m.iter_mut().zip([first, other]).enumerate() {
        set_segment(&mut h.msg_hdr, &mut control[i], segment as u16);
    }
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: the headers point at live buffers and controls.
        // Errors are passing (a full buffer), as the other modes take them.
        let _ = unsafe { libc::sendmmsg(tx.as_raw_fd(), m.as_mut_ptr(), 2, 0) };
    }
}

/// `connected`: `send`/`recv` on connected sockets (`pingpong`), else
/// `send_to` from unconnected ones (`pingpong-unconnected`).
fn pingpong(size: usize, iters: usize, busy: bool, connected: bool) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.2:0").unwrap();
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    if connected {
        a.connect(b_addr).unwrap();
        b.connect(a_addr).unwrap();
    }
    let send = move |s: &UdpSocket, msg: &[u8], to| {
        if connected {
            s.send(msg).unwrap();
        } else {
            s.send_to(msg, to).unwrap();
        }
    };
    a.set_nonblocking(busy).unwrap();
    b.set_nonblocking(busy).unwrap();
    let recv = |s: &UdpSocket, buf: &mut [u8]| loop {
        match s.recv(buf) {
            Ok(n) => return n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("{e}"),
        }
    };
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        for _ in 0..iters + 100 {
            let n = recv(&b, &mut buf);
            send(&b, &buf[..n], a_addr);
        }
    });
    let msg = vec![7u8; size];
    let mut buf = vec![0u8; 65536];
    let rtts = round_trips(iters, || {
        send(&a, &msg, b_addr);
        recv(&a, &mut buf);
    });
    echo.join().unwrap();
    report(if connected { "udp-pingpong" } else { "udp-pingpong-unconnected" }, busy, size, rtts);
}

/// Times `iters` round trips (after 100 of warm-up), in microseconds.
fn round_trips(iters: usize, mut round_trip: impl FnMut()) -> Vec<f64> {
    let mut rtts = Vec::with_capacity(iters);
    for i in 0..iters + 100 {
        let t = Instant::now();
        round_trip();
        if i >= 100 {
            rtts.push(t.elapsed().as_nanos() as f64 / 1000.0);
        }
    }
    rtts
}

/// Prints the JSON line of a ping-pong.
fn report(test: &str, busy: bool, size: usize, mut rtts: Vec<f64>) {
    rtts.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let q = |p: f64| rtts[((rtts.len() as f64 - 1.0) * p) as usize];
    println!(
        "{{\"test\":\"{test}\",\"poll\":\"{}\",\"size\":{size},\"rtt_us_p50\":{},\"rtt_us_p99\":{}}}",
        if busy { "busy" } else { "block" },
        q(0.5),
        q(0.99)
    );
}

/// One side of `pingpong-roce`: UDP_GRO on.
fn roce_socket(addr: &str, busy: bool) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap();
    setopt(&s, libc::SOL_UDP, UDP_GRO, 1);
    s.set_nonblocking(busy).unwrap();
    s
}

/// Sends `msg` and a 20-byte ACK-sized segment after it to `to`, as one
/// UDP_SEGMENT message in one `sendmmsg` (as the RoCE backend sends a reply
/// with the ACK it carries). `to: None` sends on a connected socket.
fn send_with_ack(s: &UdpSocket, msg: &mut [u8], to: Option<&std::net::SocketAddr>) {
    let mut name = to.map(|to| {
        let std::net::SocketAddr::V4(to) = to else { panic!("IPv4 loopback only") };
        libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: to.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*to.ip()).to_be() },
            sin_zero: [0; 8],
        }
    });
    let mut iov = libc::iovec { iov_base: msg.as_mut_ptr().cast(), iov_len: msg.len() };
    let mut control = [0u64; 4];
    let mut m = headers(std::slice::from_mut(&mut iov));
    let h = &mut m[0].msg_hdr;
    if let Some(name) = &mut name {
        h.msg_name = (name as *mut libc::sockaddr_in).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
    }
    set_segment(h, &mut control, (msg.len() - 20) as u16);
    // SAFETY: the header points at live buffers of the stated sizes.
    let n = unsafe { libc::sendmmsg(s.as_raw_fd(), m.as_mut_ptr(), 1, 0) };
    assert_eq!(n, 1, "sendmmsg: {}", std::io::Error::last_os_error());
}

/// Receives one datagram (UDP_GRO: the message and its ACK) with `recvmmsg`.
fn recv_gro(s: &UdpSocket, buf: &mut [u8]) {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u64; 8];
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    loop {
        let mut m = headers(std::slice::from_mut(&mut iov));
        let h = &mut m[0].msg_hdr;
        h.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        h.msg_control = control.as_mut_ptr().cast();
        h.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: the header points at live buffers of the stated sizes.
        let n = unsafe { libc::recvmmsg(s.as_raw_fd(), m.as_mut_ptr(), 1, 0, std::ptr::null_mut()) };
        if n == 1 {
            return;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "recvmmsg: {e}");
        std::hint::spin_loop();
    }
}

/// `connected`: `pingpong-roce-connected`.
fn pingpong_roce(size: usize, iters: usize, busy: bool, connected: bool) {
    let (a, b) = (roce_socket("127.0.0.1:0", busy), roce_socket("127.0.0.2:0", busy));
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    if connected {
        a.connect(b_addr).unwrap();
        b.connect(a_addr).unwrap();
    }
    let (a_to, b_to) = if connected { (None, None) } else { (Some(a_addr), Some(b_addr)) };
    let len = size + 20;
    let echo = std::thread::spawn(move || {
        let (mut buf, mut reply) = (vec![0u8; 65536], vec![7u8; len]);
        for _ in 0..iters + 100 {
            recv_gro(&b, &mut buf);
            send_with_ack(&b, &mut reply, a_to.as_ref());
        }
    });
    let (mut msg, mut buf) = (vec![7u8; len], vec![0u8; 65536]);
    let rtts = round_trips(iters, || {
        send_with_ack(&a, &mut msg, b_to.as_ref());
        recv_gro(&a, &mut buf);
    });
    echo.join().unwrap();
    report(if connected { "udp-pingpong-roce-connected" } else { "udp-pingpong-roce" }, busy, size, rtts);
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let usage = "usage: udp_baseline bw plain|mmsg|gso|gso-roce SIZE SECS | pingpong|pingpong-unconnected|pingpong-roce|pingpong-roce-connected SIZE ITERS busy|block";
    match a.get(1).map(String::as_str) {
        Some("bw") if a.len() == 5 => bw(&a[2], a[3].parse().expect(usage), a[4].parse().expect(usage)),
        Some("pingpong") if a.len() == 5 => {
            pingpong(a[2].parse().expect(usage), a[3].parse().expect(usage), a[4] == "busy", true)
        }
        Some("pingpong-unconnected") if a.len() == 5 => {
            pingpong(a[2].parse().expect(usage), a[3].parse().expect(usage), a[4] == "busy", false)
        }
        Some("pingpong-roce") if a.len() == 5 => {
            pingpong_roce(a[2].parse().expect(usage), a[3].parse().expect(usage), a[4] == "busy", false)
        }
        Some("pingpong-roce-connected") if a.len() == 5 => {
            pingpong_roce(a[2].parse().expect(usage), a[3].parse().expect(usage), a[4] == "busy", true)
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
