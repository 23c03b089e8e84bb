//! Sharing through real sockets: the registry, the kernel's socket array
//! and the steering program together, with members of one process (each
//! has its own open of the record, as separate processes would). Crashes
//! need processes of their own: `ibverbs-abi/tests/shared_device.rs`.

use super::steer::{qpn_range, COMM_ID_SLOT_SHIFT};
use crate::udp::UdpConfig;
use crate::udp::UdpIo;
use std::net::{IpAddr, UdpSocket};
use std::time::Duration;

fn shared() -> UdpConfig {
    UdpConfig { shared: true, ..UdpConfig::default() }
}

fn slot(io: &UdpIo) -> u8 {
    io.member().expect("a shared device is a member").slot()
}

/// A datagram whose BTH names `qpn`.
fn to_qp(qpn: u32) -> [u8; 32] {
    let mut p = [0u8; 32];
    p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    p
}

/// The datagrams waiting on `io`'s receive socket, up to a wait of 200 ms
/// for the first.
fn received(io: &UdpIo) -> Vec<Vec<u8>> {
    let fd = io.rx_fd();
    let mut out = Vec::new();
    if !crate::wait::poll_readable(&[fd], Duration::from_millis(200))[0] {
        return out;
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = [0u8; 2048];
    loop {
        // SAFETY: recv into our buffer on the device's socket.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            return out;
        }
        // A member's check of its own place (its keeper's probes), which
        // the engine's receive path would take.
        let probe = n as usize == super::steer::PROBE_LEN && buf[..4] == super::steer::PROBE_MAGIC.to_be_bytes();
        if !probe {
            out.push(buf[..n as usize].to_vec());
        }
    }
}

/// Sends one datagram per QPN and checks each member got exactly its own.
fn check_steering(addr: IpAddr, members: &[&UdpIo]) {
    let tx = UdpSocket::bind((addr, 0)).unwrap();
    for m in members {
        let r = qpn_range(slot(m));
        for qpn in [r.start + 0x11, r.end - 1] {
            tx.send_to(&to_qp(qpn), (addr, 4791)).unwrap();
        }
    }
    for m in members {
        let r = qpn_range(slot(m));
        let want = vec![to_qp(r.start + 0x11).to_vec(), to_qp(r.end - 1).to_vec()];
        assert_eq!(received(m), want, "slot {} got other packets than its own", slot(m));
    }
}

#[test]
fn each_member_receives_the_packets_of_its_own_qpns() {
    let addr: IpAddr = "127.0.22.10".parse().unwrap();
    let a = UdpIo::bind(addr, &shared()).unwrap();
    assert!(gro_becomes(&a, true), "alone, a member takes GRO");
    let b = UdpIo::bind(addr, &shared()).unwrap();
    assert_ne!(slot(&a), slot(&b));
    // GRO would merge packets for both into datagrams steered by their first.
    assert!(gro_becomes(&b, false) && gro_becomes(&a, false), "two members take no GRO");
    check_steering(addr, &[&a, &b]);
    // An unshared bind of the same port is refused, as before.
    let alone = UdpIo::bind(addr, &UdpConfig::default());
    assert_eq!(alone.err().map(|e| e.kind()), Some(std::io::ErrorKind::AddrInUse));
    drop(b);
    assert!(gro_becomes(&a, true), "alone again, GRO again");
}

/// The engines of one device take no GRO even while one is alone: the
/// first would turn it off when the second joins, and merged datagrams
/// still queued then come up without their segment size (see
/// `a_member_that_turns_gro_off_reads_queued_merged_datagrams_whole`).
/// Their sends keep GSO.
#[test]
fn a_member_with_plain_receive_never_takes_gro() {
    let addr: IpAddr = "127.0.22.17".parse().unwrap();
    let plain = UdpConfig { plain_receive: true, ..shared() };
    let a = UdpIo::bind(addr, &plain).unwrap();
    assert!(!gro_becomes(&a, true), "alone, a member of plain receive takes no GRO");
    assert!(a.offloads().gso && !a.offloads().gro, "{:?}", a.offloads());
    let b = UdpIo::bind(addr, &plain).unwrap();
    drop(b);
    assert!(!gro_becomes(&a, true), "nor when it is alone again");
}

/// Why: a member alone takes GRO; a GSO message queued on its socket
/// stays merged, and once a newcomer's join has turned GRO off, the
/// kernel hands it up whole and without the UDP_GRO control message that
/// says where its packets end. (The receive path cuts it where its
/// packets begin, `udp::rx::merged_segment`: the next test.)
#[test]
fn a_member_that_turns_gro_off_reads_queued_merged_datagrams_whole() {
    let addr: IpAddr = "127.0.22.16".parse().unwrap();
    let a = UdpIo::bind(addr, &shared()).unwrap();
    assert!(gro_becomes(&a, true), "alone, a member takes GRO");
    // Three segments of 100 bytes for a QP of `a`, in one GSO send.
    let msg = run_of(qpn_range(slot(&a)).start + 0x11, 3, 100);
    gso_sender(addr, 100).send_to(&msg, (addr, 4791)).unwrap();
    let b = UdpIo::bind(addr, &shared()).unwrap();
    assert!(gro_becomes(&a, false), "two members take no GRO");
    let got = received(&a);
    assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), vec![300], "one datagram of three packets");
    drop(b);
}

/// The receive path cuts such a datagram where its packets begin, however
/// short, while its member's GRO went off since the socket was last
/// drained (`UdpIo::receive`, `udp::rx::segment_size`): before, one of at
/// most 4,140 bytes (a few small SENDs or ACKs) was read as one packet,
/// failed its ICRC and was lost to UC and UD. Once drained, a datagram
/// that merely looks like a run is one packet again.
#[test]
fn a_short_merged_datagram_read_after_gro_went_off_is_cut_into_its_packets() {
    let addr: IpAddr = "127.0.22.18".parse().unwrap();
    let mut a = UdpIo::bind(addr, &shared()).unwrap();
    assert!(gro_becomes(&a, true), "alone, a member takes GRO");
    let run = run_of(qpn_range(slot(&a)).start + 0x11, 3, 100);
    gso_sender(addr, 100).send_to(&run, (addr, 4791)).unwrap();
    let b = UdpIo::bind(addr, &shared()).unwrap();
    assert!(gro_becomes(&a, false), "two members take no GRO");
    let mut ep = rdma_transport::Endpoint::new(addr);
    let (packets, cut) = receive_all(&mut a, &mut ep);
    assert_eq!((packets, cut), (3, 1), "the merged run, cut into its three packets");
    // Drained since GRO went off: the same bytes sent as one datagram
    // (GRO is off, nothing merges them) are one packet.
    UdpSocket::bind((addr, 0)).unwrap().send_to(&run, (addr, 4791)).unwrap();
    assert_eq!(receive_all(&mut a, &mut ep), (1, 0), "a lone datagram is not cut");
    drop(b);
}

/// Receives on `io` until its socket is drained, after waiting up to
/// 200 ms for the first datagram: the packets handed to the engine, and
/// the datagrams cut into several.
fn receive_all(io: &mut UdpIo, ep: &mut rdma_transport::Endpoint) -> (u64, u64) {
    let before = (io.stats.datagrams_received, io.stats.gro_receives);
    crate::wait::poll_readable(&[io.rx_fd()], Duration::from_millis(200));
    // The rest of what was sent arrives before the drain below.
    std::thread::sleep(Duration::from_millis(50));
    while io.receive(ep, rdma_transport::Instant::ZERO).unwrap() > 0 {}
    (io.stats.datagrams_received - before.0, io.stats.gro_receives - before.1)
}

/// `n` packets of `size` bytes for `qpn` from PSN 0 on, back to back:
/// what a GSO send of one QP's run carries.
fn run_of(qpn: u32, n: usize, size: usize) -> Vec<u8> {
    let mut msg = vec![0u8; n * size];
    for k in 0..n {
        let p = &mut msg[k * size..(k + 1) * size];
        p[..32].copy_from_slice(&to_qp(qpn));
        p[11] = k as u8; // the PSN's low byte
    }
    msg
}

/// A socket whose sends go out as UDP_SEGMENT runs of `seg` bytes.
fn gso_sender(addr: IpAddr, seg: i32) -> UdpSocket {
    let tx = UdpSocket::bind((addr, 0)).unwrap();
    // SAFETY: an int option on our own socket.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&tx),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&seg as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    assert_eq!(r, 0, "UDP_SEGMENT");
    tx
}

/// Whether `io`'s receive socket has UDP GRO set to `on` within a second
/// (another member's keeper follows a change of the record).
fn gro_becomes(io: &UdpIo, on: bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        let (mut v, mut len) = (0i32, std::mem::size_of::<i32>() as libc::socklen_t);
        // SAFETY: reads an int option into `v`.
        let r = unsafe {
            libc::getsockopt(io.rx_fd(), libc::SOL_UDP, libc::UDP_GRO, (&mut v as *mut i32).cast(), &mut len)
        };
        if r == 0 && (v != 0) == on {
            return true;
        }
        if start.elapsed() > Duration::from_secs(1) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn leaving_moves_the_last_socket_into_the_gap_and_the_steering_follows() {
    let addr: IpAddr = "127.0.22.11".parse().unwrap();
    let a = UdpIo::bind(addr, &shared()).unwrap();
    let b = UdpIo::bind(addr, &shared()).unwrap();
    let c = UdpIo::bind(addr, &shared()).unwrap();
    check_steering(addr, &[&a, &b, &c]);
    // a was at index 0: the kernel moves c there.
    let gone = slot(&a);
    drop(a);
    check_steering(addr, &[&b, &c]);
    // A newcomer takes the free slot and the end of the array.
    let d = UdpIo::bind(addr, &shared()).unwrap();
    assert_eq!(slot(&d), gone);
    check_steering(addr, &[&b, &c, &d]);
    drop(c);
    check_steering(addr, &[&b, &d]);
}

/// CM messages on QP1: a REQ by its service to the member that claimed
/// it, a reply by the slot in its remote communication ID.
#[test]
fn cm_requests_follow_their_service_and_replies_their_comm_id() {
    let addr: IpAddr = "127.0.22.12".parse().unwrap();
    let a = UdpIo::bind(addr, &shared()).unwrap();
    let b = UdpIo::bind(addr, &shared()).unwrap();
    let services = b.member().unwrap().services();
    services.claim(0x0106_1c06).unwrap();
    // Another process's claim of it is refused (here: another member).
    let other = a.member().unwrap().services();
    assert!(
        matches!(other.claim(0x0106_1c06), Err(super::ShareError::ServiceTaken { slot, .. }) if slot == self::slot(&b))
    );
    let mad = |attr: u16, at: usize, value: &[u8]| {
        let mut p = vec![0u8; 12 + 8 + 256];
        p[7] = 1;
        p[21] = 0x07;
        p[36..38].copy_from_slice(&attr.to_be_bytes());
        p[20 + at..20 + at + value.len()].copy_from_slice(value);
        p
    };
    let tx = UdpSocket::bind((addr, 0)).unwrap();
    let req = mad(0x10, 32, &0x0000_0000_0106_1c06u64.to_be_bytes());
    tx.send_to(&req, (addr, 4791)).unwrap();
    let rep_for_a = mad(0x13, 28, &((u32::from(slot(&a)) << COMM_ID_SLOT_SHIFT) | 5).to_be_bytes());
    tx.send_to(&rep_for_a, (addr, 4791)).unwrap();
    assert_eq!(received(&b), std::slice::from_ref(&req));
    assert_eq!(received(&a), [rep_for_a]);
    // Released, the service is free for another process.
    services.release(0x0106_1c06);
    other.claim(0x0106_1c06).unwrap();
    tx.send_to(&req, (addr, 4791)).unwrap();
    assert_eq!(received(&a), [req]);
}

/// A record that has two members' places the wrong way round (as after
/// two members died at once in an order the record guessed wrong): each
/// member finds its own place with probes and the steering is right again.
#[test]
fn a_member_finds_its_place_with_probes_when_the_record_is_wrong() {
    use super::registry::Registry;
    use super::steer::{attach, build, Steering};
    let addr: IpAddr = "127.0.22.13".parse().unwrap();
    let a = UdpIo::bind(addr, &shared()).unwrap();
    let b = UdpIo::bind(addr, &shared()).unwrap();
    check_steering(addr, &[&a, &b]);
    // The wrong way round, in the record and in the kernel's program.
    let reg = Registry::open(addr, 0).unwrap();
    {
        let l = reg.lock().unwrap();
        let mut st = reg.read(&l);
        st.order.reverse();
        let slots = st.order.iter().enumerate().map(|(i, &s)| (s, i as u32)).collect();
        attach(a.rx_fd(), &build(&Steering { slots, services: Vec::new() }).unwrap()).unwrap();
        reg.write(&l, &st).unwrap();
    }
    let tx = UdpSocket::bind((addr, 0)).unwrap();
    tx.send_to(&to_qp(qpn_range(slot(&a)).start + 0x11), (addr, 4791)).unwrap();
    assert_eq!(received(&b).len(), 1, "a's packet went to b");
    // a checks its place while both sockets are read as an engine would.
    let (ma, mb) = (a.member().unwrap(), b.member().unwrap());
    std::thread::scope(|s| {
        let check = s.spawn(|| ma.verify_place());
        let mut buf = [0u8; 64];
        while !check.is_finished() {
            for (io, m) in [(&a, ma), (&b, mb)] {
                // SAFETY: recv into our buffer.
                let n = unsafe { libc::recv(io.rx_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
                if n > 0 {
                    m.take_probe(Some(&buf[..n as usize]));
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    check_steering(addr, &[&a, &b]);
}

/// A record whose members are all gone but which still holds a socket no
/// member owns (a probe's find, or the record of a dead network namespace
/// whose inode a new namespace got, as in CI's pyverbs runs): the next
/// members are recorded where the kernel puts them, from index 0, and
/// the dead member's claim is gone.
#[test]
fn a_record_left_by_members_all_gone_does_not_place_the_next_ones() {
    use super::registry::{Registry, State, UNKNOWN};
    let addr: IpAddr = "127.0.22.14".parse().unwrap();
    let reg = Registry::open(addr, 0).unwrap();
    {
        let l = reg.lock().unwrap();
        // Slot 7's life lock is free: that member is dead.
        let stale = State { order: vec![UNKNOWN, 7, UNKNOWN], services: vec![(0x0106_1d2f, 7)], pids: vec![(7, 1)] };
        reg.write(&l, &stale).unwrap();
    }
    let a = UdpIo::bind(addr, &shared()).unwrap();
    let b = UdpIo::bind(addr, &shared()).unwrap();
    let l = reg.lock().unwrap();
    let st = reg.read(&l);
    drop(l);
    assert_eq!(st.order, [slot(&a), slot(&b)], "the record places the members where the kernel did");
    assert!(st.services.is_empty(), "the dead member's service is free");
    check_steering(addr, &[&a, &b]);
}
