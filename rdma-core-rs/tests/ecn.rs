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
    let config = DeviceConfig { progress: Progress::Manual, io_driver: driver, ..DeviceConfig::default() };
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
    assert_eq!(s.drops.values().sum::<u64>(), 0, "every WRITE accepted: {s:?}");
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
