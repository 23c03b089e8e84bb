//! Captures the backend's own packets as the kernel put them on the
//! (loopback) wire, with a raw socket, and checks with the wire crate that
//! every one carries the right ICRC over the real IP header: DF set,
//! Identification 0, the lengths and ports the kernel wrote.
//!
//! Needs CAP_NET_RAW (root); without it the test says so and passes.

mod common;
use common::*;
use rdma_core_rs::*;
use rdma_wire::RoceV2Packet;
use socket2::{Domain, Protocol, Socket, Type};
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

#[test]
fn every_packet_on_the_wire_has_a_correct_icrc_over_the_kernels_ip_header() {
    let raw = match Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::UDP)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED: a raw socket needs CAP_NET_RAW ({e}); run as root to check the wire");
            return;
        }
    };
    raw.set_recv_buffer_size(16 << 20).unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let (a, b) = pair(QpType::Rc);
    let (a_ip, b_ip) = (a.ctx.device().addr(), b.ctx.device().addr());

    // WRITE (first/middle/last), READ (request and responses), SEND with
    // immediate, an atomic, and the ACKs of all of them.
    a.mr.write(0, &pattern(70_000, 1)).unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(0, 4096).unwrap()] }]).unwrap();
    let wrs = vec![
        SendWr::new(
            1,
            SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
            vec![a.mr.sge(0, 70_000).unwrap()],
        ),
        SendWr::new(
            2,
            SendOp::RdmaRead { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
            vec![a.mr.sge(100_000, 9000).unwrap()],
        ),
        SendWr::new(3, SendOp::SendWithImm { imm: 5 }, vec![a.mr.sge(0, 1000).unwrap()]),
        SendWr::new(
            4,
            SendOp::FetchAdd { remote_addr: b.mr.addr() + 8, rkey: b.mr.rkey(), add: 1 },
            vec![a.mr.sge(200_000, 8).unwrap()],
        ),
    ];
    a.qp.post_send(&wrs).unwrap();
    for _ in 0..4 {
        assert_eq!(a.wait_one().status, WcStatus::Success);
    }
    let sent = a.ctx.stats().packets_sent + b.ctx.stats().packets_sent;

    let mut seen = 0u64;
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 65536];
    let start = Instant::now();
    while seen < sent && start.elapsed() < Duration::from_secs(5) {
        let Ok(n) = raw.recv(&mut buf) else { continue };
        // SAFETY: recv initialised the first n bytes.
        let bytes: Vec<u8> = buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
        let (src, dst) = (&bytes[12..16], &bytes[16..20]);
        let ours = |ip: std::net::IpAddr| match ip {
            std::net::IpAddr::V4(v4) => v4.octets(),
            _ => unreachable!(),
        };
        let between = (src == ours(a_ip) && dst == ours(b_ip)) || (src == ours(b_ip) && dst == ours(a_ip));
        if !between || u16::from_be_bytes([bytes[22], bytes[23]]) != 4791 {
            continue;
        }
        let p = RoceV2Packet::new_checked(&bytes[..]).expect("a well-formed RoCE v2 packet");
        let ip = p.ipv4().unwrap();
        assert!(ip.dont_frag(), "DF must be set");
        assert_eq!(ip.ident(), 0, "the kernel wrote a nonzero Identification: the ICRC would be wrong");
        assert!(p.icrc_ok(), "wrong ICRC on the wire: {:02x?}", &bytes[..40.min(n)]);
        let sport = p.udp().src_port();
        assert!(sport >= 0xc000, "UDP source port {sport:#x} outside 0xC000..0xFFFF");
        seen += 1;
    }
    assert_eq!(seen, sent, "captured {seen} of the {sent} packets sent");
}
