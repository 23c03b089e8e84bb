//! Captures the backend's own packets as the kernel put them on a wire and
//! checks with the wire crate that every one carries the right ICRC over
//! the real IP header the kernel wrote: DF set, the Identification the
//! kernel chose, the lengths and ports of each datagram.
//!
//! The two devices live in two network namespaces joined by a veth pair
//! that this test makes, with `gso_max_segs 1` so that the kernel cuts
//! every UDP_SEGMENT send into datagrams in software before the capture
//! point, as it does before a NIC without segmentation offload (or the
//! tap of a virtual machine). A GSO run's segments carry consecutive
//! Identifications: the ICRC of each must cover its own. By default the
//! send sockets are connected, so the kernel numbers datagrams from a
//! random start that the send path learns by probing; unconnected sends
//! (`DeviceConfig::unconnected_sends`) number each call's segments from 0.
//! Both are checked.
//!
//! The QPs are connected with traffic class DSCP 26 (0x68), and every
//! packet must carry it in its TOS / IPv6 traffic class: data packets
//! (requests, READ responses) with ECT(0) added (0x6a), ACKs as given. The
//! ICRC masks that byte, so only this check sees it. Likewise the hop
//! limit: the QPs ask for 17 (not the system's 64), and every packet must
//! leave with it as its IPv4 TTL / IPv6 hop limit.
//!
//! Needs root (namespaces, a packet socket); without it the test says so and passes.

mod common;
use common::*;
use rdma_core_rs::*;
use rdma_wire::RoceV2Packet;
use std::fs::File;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

/// Two namespaces and a veth pair between them, removed on drop.
struct Wire {
    ns: [String; 2],
    link: String,
}

fn ip(args: &[&str]) -> std::result::Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Wire {
    fn make(tag: &str, addrs: [&str; 2]) -> std::result::Result<Wire, String> {
        let id = std::process::id() % 100_000;
        let w =
            Wire { ns: [format!("srcap-{tag}-a-{id}"), format!("srcap-{tag}-b-{id}")], link: format!("sc{tag}{id}") };
        for ns in &w.ns {
            ip(&["netns", "add", ns])?;
        }
        let peer = format!("{}p", w.link);
        ip(&["link", "add", &w.link, "netns", &w.ns[0], "type", "veth", "peer", "name", &peer, "netns", &w.ns[1]])?;
        for (k, dev) in [&w.link, &peer].into_iter().enumerate() {
            let ns = &w.ns[k];
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", dev, "mtu", "9000", "gso_max_segs", "1", "up"])?;
            ip(&["-n", ns, "addr", "add", addrs[k], "dev", dev, "nodad"])?;
        }
        Ok(w)
    }

    /// Runs `f` with the calling thread inside namespace `k` (sockets made
    /// there stay there), then moves the thread back.
    fn inside<T>(&self, k: usize, f: impl FnOnce() -> T) -> T {
        let home = File::open("/proc/thread-self/ns/net").expect("own namespace");
        let there = File::open(format!("/run/netns/{}", self.ns[k])).expect("namespace made by ip netns");
        // SAFETY: setns on this thread with namespace fds we hold open.
        assert_eq!(unsafe { libc::setns(there.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns");
        let v = f();
        assert_eq!(unsafe { libc::setns(home.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns back");
        v
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// A packet socket on `ifname` that sees every packet in and out, without
/// link headers (only ETH_P_ALL sockets see outgoing packets).
fn capture(ifname: &str) -> OwnedFd {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket calls; the fd is owned from here on.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(proto)) };
    assert!(fd >= 0, "packet socket: {}", std::io::Error::last_os_error());
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = std::ffi::CString::new(ifname).unwrap();
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(index > 0, "no interface {ifname}");
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = index as i32;
    let r = unsafe {
        libc::bind(fd.as_raw_fd(), (&sll as *const libc::sockaddr_ll).cast(), std::mem::size_of_val(&sll) as u32)
    };
    assert_eq!(r, 0, "bind packet socket: {}", std::io::Error::last_os_error());
    let size: i32 = 32 << 20;
    unsafe {
        libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, (&size as *const i32).cast(), 4);
    }
    fd
}

/// The traffic class the QPs connect with (AF31, a PFC priority's DSCP),
/// and ECN's ECT(0), which data packets add.
const DSCP_26: u8 = 26 << 2;
const ECT0: u8 = 0b10;

/// The hop limit the QPs connect with: not 64, so that a packet left with
/// the socket's TTL, not the QP's, is seen.
const HOP_LIMIT: u8 = 17;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn side(name: &str, addr: IpAddr, unconnected_sends: bool) -> Side {
    let cfg = DeviceConfig { progress: Progress::Thread, unconnected_sends, ..DeviceConfig::default() };
    Side::new(name, addr, QpType::Rc, cfg, None).0
}

fn check_the_wire(tag: &str, cidrs: [&str; 2], unconnected: bool) {
    if !is_root() {
        testkit::skip("namespaces and packet sockets need root; run as root to check the wire");
        return;
    }
    let wire = Wire::make(tag, cidrs).expect("namespaces and a veth pair");
    let addr = |c: &str| c.split('/').next().unwrap().parse::<IpAddr>().unwrap();
    let (a_ip, b_ip) = (addr(cidrs[0]), addr(cidrs[1]));
    let (a, cap) = wire.inside(0, || (side(&format!("cap-{tag}-a"), a_ip, unconnected), capture(&wire.link)));
    let b = wire.inside(1, || side(&format!("cap-{tag}-b"), b_ip, unconnected));
    assert!(a.ctx.offloads().gso, "UDP GSO is on by default");
    let opts =
        ConnectOptions { mtu: Mtu::Mtu4096, traffic_class: DSCP_26, hop_limit: HOP_LIMIT, ..ConnectOptions::default() };
    a.qp.connect(0x100, &b.info(0x200), &opts).unwrap();
    b.qp.connect(0x200, &a.info(0x100), &opts).unwrap();

    // WRITEs (runs of segments, one shorter last), a multi-packet READ (the
    // responder's runs), SEND with immediate, an atomic, and the ACKs.
    a.mr.write(0, &pattern(300_000, 1)).unwrap();
    b.mr.write(400_000, &pattern(90_000, 2)).unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(0, 4096).unwrap()] }]).unwrap();
    let wrs = vec![
        write_wr(1, &a, 0, 300_000, &b, 0),
        write_wr(2, &a, 0, 10_000, &b, 0),
        SendWr::new(
            3,
            SendOp::RdmaRead { remote_addr: b.mr.addr() + 400_000, rkey: b.mr.rkey() },
            vec![a.mr.sge(500_000, 90_000).unwrap()],
        ),
        SendWr::new(4, SendOp::SendWithImm { imm: 5 }, vec![a.mr.sge(0, 1000).unwrap()]),
        SendWr::new(
            5,
            SendOp::FetchAdd { remote_addr: b.mr.addr() + 700_000, rkey: b.mr.rkey(), add: 1 },
            vec![a.mr.sge(600_000, 8).unwrap()],
        ),
    ];
    a.qp.post_send(&wrs).unwrap();
    for _ in 0..wrs.len() {
        assert_eq!(a.wait_one().status, WcStatus::Success);
    }
    // And a WRITE the other way: requests from B, ACKs from A.
    b.qp.post_send(&[write_wr(6, &b, 0, 20_000, &a, 800_000)]).unwrap();
    // B's CQ also holds the receive of the SEND above: wait for the WRITE's.
    loop {
        let wc = b.wait_one();
        assert_eq!(wc.status, WcStatus::Success);
        if wc.wr_id == 6 {
            break;
        }
    }
    let (mut written, mut read) = (vec![0u8; 300_000], vec![0u8; 90_000]);
    b.mr.read(0, &mut written).unwrap();
    a.mr.read(500_000, &mut read).unwrap();
    assert!(written == pattern(300_000, 1), "the WRITE's data did not arrive intact");
    assert!(read == pattern(90_000, 2), "the READ's data did not arrive intact");
    let sent = a.ctx.stats().packets_sent + b.ctx.stats().packets_sent;
    let gso = a.ctx.io_stats().gso_sends + b.ctx.io_stats().gso_sends;
    assert!(gso > 0 || a.ctx.engines() > 1, "no UDP_SEGMENT send happened: {:?}", a.ctx.io_stats());
    let (a_io, b_io) = (a.ctx.io_stats(), b.ctx.io_stats());
    let connected = a_io.connected_sends + b_io.connected_sends;
    // Only the socket driver connects (see `DeviceConfig::unconnected_sends`).
    let unconnected = unconnected || a.ctx.io_driver() != IoDriver::Sockets;
    if unconnected {
        assert_eq!(connected, 0, "unconnected sends: asked for, or io_uring");
    } else {
        assert_eq!(connected, sent, "every packet should leave on a connected socket: {a_io:?}");
        assert_eq!(a_io.ident_mismatches + b_io.ident_mismatches, 0, "mispredicted Identifications");
        if a_ip.is_ipv4() {
            assert!(a_io.ident_probes > 0 && b_io.ident_probes > 0, "IPv4 sockets are probed before they send");
        }
    }

    let (mut seen, mut nonzero_ident, mut idents) = (0u64, 0u64, std::collections::HashSet::new());
    // Packets per (sender is A, is an ACK), each with its TOS checked.
    let mut kinds = std::collections::HashMap::<(bool, bool), u64>::new();
    let mut buf = vec![0u8; 65536];
    let start = Instant::now();
    while seen < sent && start.elapsed() < Duration::from_secs(5) {
        // SAFETY: receives into `buf`, of its length.
        let n = unsafe { libc::recv(cap.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n <= 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let bytes = &buf[..n as usize];
        let Ok(p) = RoceV2Packet::new_checked(bytes) else { continue };
        assert!(n as usize <= 4200, "a datagram of {n} bytes: the capture saw an unsegmented GSO send");
        if let Some(ip) = p.ipv4() {
            assert!(ip.dont_frag(), "DF must be set");
            nonzero_ident += u64::from(ip.ident() != 0);
            idents.insert(ip.ident());
        }
        assert!(p.icrc_ok(), "wrong ICRC on the wire: {:02x?}", &bytes[..48.min(bytes.len())]);
        let (tos, hop_limit) = match (p.ipv4(), p.ipv6()) {
            (Some(h), _) => (h.dscp() << 2 | h.ecn(), h.ttl()),
            (_, Some(h)) => (h.traffic_class(), h.hop_limit()),
            _ => unreachable!("a checked packet is IPv4 or IPv6"),
        };
        let op = p.transport().bth().opcode();
        let ack = matches!(op, rdma_wire::Opcode::RC_ACKNOWLEDGE | rdma_wire::Opcode::RC_ATOMIC_ACKNOWLEDGE);
        let want = if ack { DSCP_26 } else { DSCP_26 | ECT0 };
        assert_eq!(tos, want, "TOS of a {op:?} on the wire");
        assert_eq!(hop_limit, HOP_LIMIT, "TTL / hop limit of a {op:?} on the wire");
        let from_a = match p.ipv4() {
            Some(h) => IpAddr::V4(h.src()) == a_ip,
            None => p.ipv6().map(|h| IpAddr::V6(h.src())) == Some(a_ip),
        };
        *kinds.entry((from_a, ack)).or_default() += 1;
        let sport = p.udp().src_port();
        assert!(sport >= 0xc000, "UDP source port {sport:#x} outside 0xC000..0xFFFF");
        seen += 1;
    }
    assert_eq!(seen, sent, "captured {seen} of the {sent} packets sent");
    for from_a in [true, false] {
        for ack in [true, false] {
            assert!(
                kinds.get(&(from_a, ack)).is_some_and(|&n| n > 0),
                "no packet (from A: {from_a}, ACK: {ack}): {kinds:?}"
            );
        }
    }
    // Nobody marked CE on the way (a CE mark would be counted).
    assert_eq!(a.ctx.stats().ecn_ce_received + b.ctx.stats().ecn_ce_received, 0);
    // The Identifications of GSO runs.
    if a_ip.is_ipv4() {
        assert!(nonzero_ident > 0, "no segment after the first of a GSO run was captured");
        // Unconnected: each call's segments count from 0, so few distinct
        // numbers; connected: a counter per socket, so about one per packet.
        let spread = idents.len() as u64 * 4 > seen;
        assert_eq!(spread, !unconnected, "{} distinct Identifications in {seen} packets", idents.len());
    }
    drop((a, b));
}

#[test]
fn every_ipv4_packet_on_the_wire_has_a_correct_icrc_over_the_kernels_ip_header() {
    check_the_wire("4", ["10.211.0.1/24", "10.211.0.2/24"], false);
}

#[test]
fn every_ipv4_packet_from_unconnected_sockets_has_a_correct_icrc() {
    check_the_wire("4u", ["10.212.0.1/24", "10.212.0.2/24"], true);
}

#[test]
fn every_ipv6_packet_on_the_wire_has_a_correct_icrc() {
    check_the_wire("6", ["fd00:211::1/64", "fd00:211::2/64"], false);
}
