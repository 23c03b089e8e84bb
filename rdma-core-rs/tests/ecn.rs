//! ECN marks on received packets reach the engine through the UDP backend:
//! a plain UDP socket whose TOS / traffic class says CE (as a congested
//! switch would have marked it) sends correctly framed RoCE v2 WRITEs at a
//! device's QP, and the per-QP and per-device CE counters must rise by
//! exactly the number of CE packets, with either I/O driver, IPv4 and IPv6.
//! Packets marked ECT(0) (not congested) count nothing.

mod common;
use common::*;
use rdma_core_rs::*;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// DSCP 26 with CE, and with ECT(0).
const CE: u8 = 0x6b;
const ECT0: u8 = 0x6a;

/// Sets the TOS (IPv4) or traffic class (IPv6) every datagram of `s` leaves with.
fn set_tos(s: &UdpSocket, tos: u8) {
    let (level, name) = match s.local_addr().unwrap() {
        SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_TOS),
        SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_TCLASS),
    };
    let v = i32::from(tos);
    // SAFETY: an int option on a socket we own.
    let r = unsafe { libc::setsockopt(s.as_raw_fd(), level, name, (&v as *const i32).cast(), 4) };
    assert_eq!(r, 0, "setsockopt TOS: {}", std::io::Error::last_os_error());
}

/// An RDMA WRITE of `payload` to `mr` (QP `qpn`, PSN `psn`) as the plain
/// socket `from` sends it: the part after the UDP header, its ICRC over
/// the headers the kernel writes (unconnected, so IPv4 Identification 0;
/// the ICRC masks the TOS).
fn raw_write(from: &UdpSocket, to: IpAddr, qpn: u32, psn: u32, mr: &MemoryRegion, payload: &[u8]) {
    use rdma_wire::*;
    let me = from.local_addr().unwrap();
    let ip = match (me.ip(), to) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            IpRepr::V4(Ipv4Repr { dscp: 0, ecn: 0, ident: 0, dont_frag: true, ttl: 64, protocol: 17, src, dst })
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            IpRepr::V6(Ipv6Repr { traffic_class: 0, flow_label: 0, next_header: 17, hop_limit: 64, src, dst })
        }
        _ => unreachable!("one family"),
    };
    let hl = ip.header_len();
    let mut t = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, qpn, Psn::new(psn)));
    t.reth = Some(RethRepr { va: mr.addr(), rkey: mr.rkey(), dma_len: payload.len() as u32 });
    let repr =
        RoceV2Repr { ip, udp: UdpRepr { src_port: me.port(), dst_port: ROCE_V2_PORT, checksum: 0 }, transport: t };
    let mut pkt = [0u8; 512];
    let len = repr.emit(&mut pkt, payload).unwrap();
    from.send_to(&pkt[hl + 8..len], (to, ROCE_V2_PORT)).unwrap();
}

/// Sends `ce` WRITEs marked CE and `ect` marked ECT(0) from `peer_ip` to a
/// device at `dev_ip` on `driver`, and checks the counters.
fn ce_marks_are_counted(dev_ip: IpAddr, peer_ip: IpAddr, driver: IoDriver) {
    // One engine: the sender's plain socket shares the device's address
    // and port on ::1, which a device of several engines (a shared port)
    // would steer among its own sockets.
    let config = DeviceConfig { progress: Progress::Manual, io_driver: driver, threads: 1, ..DeviceConfig::default() };
    let (b, _) = Side::new(&format!("ecn-{dev_ip}-{}", driver.name()), dev_ip, QpType::Rc, config, None);
    eprintln!("{dev_ip}: driver {}", b.ctx.io_driver().name());
    let psn = 0x100;
    let peer = PeerInfo { qpn: 0x99, psn, gid: Gid::from_ip(peer_ip) };
    b.qp.connect(0x100, &peer, &ConnectOptions::default()).unwrap();
    let raw = UdpSocket::bind((peer_ip, 0)).unwrap();
    let (ce, ect) = (5u32, 3u32);
    let before = (b.ctx.stats(), b.qp.stats().unwrap());
    // ECT(0) first, then CE: each WRITE puts its PSN's byte at its own offset.
    for k in 0..ect + ce {
        set_tos(&raw, if k < ect { ECT0 } else { CE });
        raw_write(&raw, dev_ip, b.qp.qp_num(), psn + k, &b.mr, &[k as u8 + 1; 64]);
    }
    // Every WRITE executed: then every packet was received and judged.
    let start = Instant::now();
    let mut got = [0u8; 64];
    loop {
        b.ctx.progress().unwrap();
        b.mr.read(0, &mut got).unwrap();
        if got == [(ect + ce) as u8; 64]
            && b.ctx.stats().packets_received >= before.0.packets_received + u64::from(ect + ce)
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the WRITEs did not land: {:?}", b.ctx.stats());
    }
    let (s, q) = (b.ctx.stats(), b.qp.stats().unwrap());
    // With device and peer on one address (::1) the CNPs the device sends
    // to the peer's port 4791 come back to the device itself, for a QP
    // (the fake peer's) it does not have: those are the only drops.
    let stray = s.drops_for(DropReason::UnknownQp);
    let expect = if dev_ip == peer_ip { stray.min(s.cnps_sent) } else { 0 };
    assert_eq!(s.drops.values().sum::<u64>(), expect, "every WRITE accepted: {s:?}");
    assert_eq!(s.ecn_ce_received - before.0.ecn_ce_received, u64::from(ce), "device counter: {s:?}");
    assert_eq!(q.ecn_ce_received - before.1.ecn_ce_received, u64::from(ce), "QP counter");
}

#[test]
fn ce_marked_packets_are_counted_per_qp_and_per_device_on_both_drivers() {
    for driver in [IoDriver::Sockets, IoDriver::IoUring] {
        let (dev_ip, peer_ip) = addresses();
        ce_marks_are_counted(dev_ip, peer_ip, driver);
    }
}

/// IPv6 on the one loopback address: device and sender both at ::1.
#[test]
fn ce_marked_ipv6_packets_are_counted_on_both_drivers() {
    let lo = IpAddr::V6(Ipv6Addr::LOCALHOST);
    for driver in [IoDriver::Sockets, IoDriver::IoUring] {
        ce_marks_are_counted(lo, lo, driver);
    }
}

/// The notification point over real sockets: a plain socket on port 4791
/// sends CE-marked WRITEs at a device QP and gets CNPs back: opcode 0x81
/// with BECN, for its own QPN (the QP's remote QPN), with DSCP 48 and not
/// ECN-capable (read with IP_RECVTOS), at most one per CNP interval (the
/// paper preset's 50 µs, set through `DeviceConfig::congestion_control`).
#[test]
fn ce_marked_writes_get_cnps_back_over_udp() {
    let (dev_ip, peer_ip) = addresses();
    let params = DcqcnParams::paper(100_000_000_000);
    let config =
        DeviceConfig { progress: Progress::Manual, congestion_control: Some(params), ..DeviceConfig::default() };
    let (b, _) = Side::new("ecn-cnp", dev_ip, QpType::Rc, config, None);
    let psn = 0x100;
    let peer_qpn = 0x99;
    let peer = PeerInfo { qpn: peer_qpn, psn, gid: Gid::from_ip(peer_ip) };
    b.qp.connect(0x100, &peer, &ConnectOptions::default()).unwrap();
    // The device sends CNPs (like ACKs) to the peer's RoCE v2 port.
    let raw = UdpSocket::bind((peer_ip, rdma_wire::ROCE_V2_PORT)).unwrap();
    raw.set_nonblocking(true).unwrap();
    let on: i32 = 1;
    // SAFETY: an int option on a socket we own.
    let r =
        unsafe { libc::setsockopt(raw.as_raw_fd(), libc::IPPROTO_IP, libc::IP_RECVTOS, (&on as *const i32).cast(), 4) };
    assert_eq!(r, 0);
    set_tos(&raw, CE);
    let n = 200u32;
    let start = Instant::now();
    let mut cnps = Vec::new();
    let mut last = start;
    let mut buf = [0u8; 2048];
    // Read as they come: ACKs and CNPs for 200 WRITEs could overflow the
    // raw socket's default buffer on a slow machine.
    let mut drain = |cnps: &mut Vec<(u8, Vec<u8>)>, last: &mut Instant| {
        while let Some((len, tos)) = recv_tos(&raw, &mut buf) {
            let p = &buf[..len];
            // ACKs come back too; CNPs are opcode 0x81.
            if p[0] == 0x81 {
                cnps.push((tos, p.to_vec()));
                *last = Instant::now();
            }
        }
    };
    for k in 0..n {
        raw_write(&raw, dev_ip, b.qp.qp_num(), psn + k, &b.mr, &[7; 64]);
        b.ctx.progress().unwrap();
        drain(&mut cnps, &mut last);
    }
    // Let a deferred CNP (marks inside the last interval) come due, and collect.
    while start.elapsed() < Duration::from_millis(300) {
        b.ctx.progress().unwrap();
        drain(&mut cnps, &mut last);
    }
    let span = last.duration_since(start);
    assert!(!cnps.is_empty(), "no CNP came back: {:?}", b.ctx.stats());
    for (tos, p) in &cnps {
        assert_eq!(*tos, 48 << 2, "DSCP 48, not ECN-capable");
        assert_eq!(p.len(), 12 + 16 + 4, "BTH, 16 reserved bytes, ICRC");
        assert_eq!(p[4] & 0x40, 0x40, "BECN");
        assert_eq!(u32::from_be_bytes([0, p[5], p[6], p[7]]), peer_qpn, "for the data sender's QP");
    }
    // All were sent between the first WRITE and the last CNP's arrival.
    let most = span.as_micros() as usize / 50 + 1;
    assert!(cnps.len() <= most, "{} CNPs in {span:?}: more than one per 50 µs", cnps.len());
    let s = b.ctx.stats();
    assert_eq!(s.cnps_sent, cnps.len() as u64, "counted: {s:?}");
    assert_eq!(b.qp.stats().unwrap().cnps_sent, cnps.len() as u64);
}

/// One datagram from a nonblocking socket with IP_RECVTOS on: (length, TOS).
fn recv_tos(s: &UdpSocket, buf: &mut [u8]) -> Option<(usize, u8)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cmsg = [0u64; 16];
    // SAFETY: msghdr points at live buffers for the duration of the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cmsg) as _;
    // SAFETY: as above.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return None;
    }
    let mut tos = None;
    // SAFETY: walking the control messages the kernel wrote into `cmsg`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                tos = Some(*libc::CMSG_DATA(c));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Some((n as usize, tos.expect("IP_RECVTOS gives the TOS")))
}
