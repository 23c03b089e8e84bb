//! The receive side's parts: the `recvmmsg` buffers and headers
//! (`RxRing`), what a datagram's control messages say (`Control`), its
//! sender, and the cutting of a datagram into packets for the engine
//! (`split_datagram`, `deliver`). How the device receives is `recv.rs`.

use super::config::BATCH;
use super::sys::CMSG_SPACE_8;
use crate::io_stats::IoStats;
use rdma_transport::{Endpoint, Instant};
use rdma_wire::DatagramHeaders;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Room for the control messages of a datagram, aligned for cmsghdr:
/// UDP_GRO's segment size, the TTL and the TOS (CMSG_SPACE of an int, 24
/// bytes, each). Short of room the kernel drops the last ones (MSG_CTRUNC).
pub(super) const CMSG_ROOM: usize = 72;
const _: () = assert!(CMSG_ROOM >= 3 * CMSG_SPACE_8 && CMSG_ROOM % 8 == 0);

/// The receive buffers and the `recvmmsg` headers that point into them,
/// set up once: a poll that finds nothing costs the system call alone, and
/// a receive resets only the fields the kernel wrote in the headers it used.
pub(super) struct RxRing {
    pub(super) bufs: Vec<Box<[u8]>>,
    pub(super) control: Box<[[u64; CMSG_ROOM / 8]; BATCH]>,
    /// Zeroed once; the kernel writes `msg_namelen` bytes of each, and
    /// only those are read ([`source_address`]).
    pub(super) names: Box<[libc::sockaddr_storage; BATCH]>,
    pub(super) iovs: Box<[libc::iovec; BATCH]>,
    pub(super) msgs: Box<[libc::mmsghdr; BATCH]>,
}

// SAFETY: the raw pointers in `iovs` and `msgs` point into the heap blocks
// this struct owns (never reallocated), so they move with it between threads.
unsafe impl Send for RxRing {}

const NAME_LEN: libc::socklen_t = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;

impl RxRing {
    /// `capacity`: the longest datagram taken (longer ones are dropped as
    /// truncated). Control messages (UDP_GRO, TOS) are always taken.
    pub(super) fn new(capacity: usize) -> RxRing {
        // SAFETY: all-zero iovec, mmsghdr and sockaddr_storage are valid
        // (null pointers, zero lengths, family AF_UNSPEC).
        let (iovs, msgs, names) =
            unsafe { (Box::new(std::mem::zeroed()), Box::new(std::mem::zeroed()), Box::new(std::mem::zeroed())) };
        let mut ring = RxRing {
            bufs: (0..BATCH).map(|_| vec![0u8; capacity].into_boxed_slice()).collect(),
            control: Box::new([[0; CMSG_ROOM / 8]; BATCH]),
            names,
            iovs,
            msgs,
        };
        for i in 0..BATCH {
            let b = &mut ring.bufs[i][..];
            ring.iovs[i] = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() };
            let h = &mut ring.msgs[i].msg_hdr;
            h.msg_name = (&mut ring.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_iov = &mut ring.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = ring.control[i].as_mut_ptr().cast();
            ring.reset(i);
        }
        ring
    }

    /// Gives header `i` back its buffer sizes, which the kernel overwrote.
    pub(super) fn reset(&mut self, i: usize) {
        let m = &mut self.msgs[i];
        m.msg_len = 0;
        m.msg_hdr.msg_namelen = NAME_LEN;
        m.msg_hdr.msg_controllen = CMSG_ROOM;
        m.msg_hdr.msg_flags = 0;
    }
}

/// What the control messages of a received datagram say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Control {
    /// The segment size of a UDP_GRO datagram.
    pub(super) segment: Option<usize>,
    /// The IPv4 TOS / IPv6 traffic class it arrived with (0 if not reported).
    pub(super) tos: u8,
    /// The IPv4 TTL / IPv6 hop limit it arrived with, if reported.
    pub(super) hop_limit: Option<u8>,
}

impl Control {
    /// The headers of the datagram from `src` to `dst` (the device's
    /// address or a group's), TTL 64 when the kernel did not report one.
    pub(super) fn headers(&self, src: SocketAddr, dst: IpAddr) -> DatagramHeaders {
        DatagramHeaders { src, dst, traffic_class: self.tos, hop_limit: self.hop_limit.unwrap_or(64) }
    }
}

/// Reads the control messages of `hdr` (UDP_GRO, IP_TOS, IPV6_TCLASS,
/// IP_TTL, IPV6_HOPLIMIT).
pub(super) fn read_control(hdr: &libc::msghdr) -> Control {
    let mut out = Control::default();
    if hdr.msg_control.is_null() {
        return out;
    }
    // SAFETY: `hdr` is a header the kernel filled in; the CMSG macros stay
    // within msg_control / msg_controllen, and each read is within the
    // message's cmsg_len (checked against the data size read).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            let (level, kind, len) = ((*c).cmsg_level, (*c).cmsg_type, (*c).cmsg_len as usize);
            let data = libc::CMSG_DATA(c);
            let int =
                || (len >= libc::CMSG_LEN(4) as usize).then(|| std::ptr::read_unaligned(data.cast::<libc::c_int>()));
            match (level, kind) {
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    out.segment = int().and_then(|s| usize::try_from(s).ok()).filter(|&s| s > 0)
                }
                // IPv4 hands up the TOS as one byte.
                (libc::IPPROTO_IP, libc::IP_TOS) if len >= libc::CMSG_LEN(1) as usize => out.tos = *data,
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                    out.tos = int().and_then(|t| u8::try_from(t).ok()).unwrap_or(0)
                }
                // Both an int.
                (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                    out.hop_limit = int().and_then(|t| u8::try_from(t).ok())
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    out
}

/// Takes one datagram waiting on socket `fd` into `buf` (never blocks):
/// its length, sender and control messages; `None` when none waits. A
/// datagram too long for `buf` is counted (received, truncated) and
/// skipped, as is one without a usable sender; the packets of the others
/// are counted where they are handed on (`split_datagram`, the link
/// driver).
pub(super) fn recv_datagram(
    fd: RawFd,
    buf: &mut [u8],
    stats: &mut IoStats,
) -> io::Result<Option<(usize, SocketAddr, Control)>> {
    loop {
        // SAFETY: all-zero sockaddr_storage and msghdr are valid; every
        // pointer set below refers to a live buffer of the stated size.
        let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut control = [0u64; CMSG_ROOM / 8];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = control.as_mut_ptr().cast();
        h.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: as above.
        let len = unsafe { libc::recvmsg(fd, &mut h, libc::MSG_DONTWAIT) };
        stats.recv_syscalls += 1;
        if len < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        if h.msg_flags & libc::MSG_TRUNC != 0 {
            stats.datagrams_received += 1;
            stats.truncated += 1;
            tracing::debug!(len, "oversized datagram dropped");
            continue;
        }
        let Some(src) = source_address(&name, h.msg_namelen) else {
            tracing::debug!("datagram without a usable source address dropped");
            continue;
        };
        return Ok(Some((len as usize, src, read_control(&h))));
    }
}

/// The sender of a datagram, from the `len` bytes of socket address the
/// kernel wrote into `name`: `None` for another family or a short length.
pub(super) fn source_address(name: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = usize::try_from(len).ok()?.min(std::mem::size_of::<libc::sockaddr_storage>());
    match i32::from(name.ss_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: sockaddr_storage is aligned and sized for any address;
            // the kernel wrote a whole sockaddr_in (checked above).
            let a = unsafe { &*(name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(a.sin_port)).into())
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for a whole sockaddr_in6.
            let a = unsafe { &*(name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddrV6::new(ip, u16::from_be(a.sin6_port), a.sin6_flowinfo, a.sin6_scope_id).into())
        }
        _ => None,
    }
}

/// Hands the packets of one datagram (`len` bytes at `buf[at..]`, cut
/// every `seg` bytes if UDP_GRO coalesced it, or where its packets begin
/// if it may be merged without saying so: [`segment_size`]) to the
/// engine, each with the headers the socket reported.
#[allow(clippy::too_many_arguments)]
pub(super) fn deliver(
    ep: &mut Endpoint,
    now: Instant,
    buf: &[u8],
    at: usize,
    len: usize,
    seg: Option<usize>,
    maybe_merged: bool,
    headers: &DatagramHeaders,
    stats: &mut IoStats,
    tap: &mut Option<crate::capture::IpTap>,
) {
    split_datagram(buf, at, len, seg, maybe_merged, stats, |packet| {
        if let Some(t) = tap {
            t.received(headers, packet);
        }
        ep.handle_datagram(now, headers, packet)
    });
}

/// The receive path without the engine: cuts the datagram of `len` bytes
/// at `buf[at..]` into packets of `seg` bytes (the last may be shorter;
/// without `seg`, see [`segment_size`] for `maybe_merged`) and calls
/// `each` with each packet. A datagram that does not fit the
/// buffer is counted as truncated and dropped (the kernel hands up none;
/// this keeps the function total for the fuzzer). Returns the number of
/// packets handed on.
pub(crate) fn split_datagram(
    buf: &[u8],
    mut at: usize,
    len: usize,
    seg: Option<usize>,
    maybe_merged: bool,
    stats: &mut IoStats,
    mut each: impl FnMut(&[u8]),
) -> usize {
    let Some(end) = at.checked_add(len).filter(|&e| e <= buf.len()) else {
        stats.truncated += 1;
        tracing::debug!(at, len, "datagram outside its buffer dropped");
        return 0;
    };
    let seg = segment_size(seg, &buf[at..end], maybe_merged).unwrap_or(len.max(1));
    if seg < len {
        stats.gro_receives += 1;
    }
    let mut packets = 0;
    loop {
        let this = seg.min(end - at);
        stats.datagrams_received += 1;
        each(&buf[at..at + this]);
        packets += 1;
        at += this;
        if at >= end {
            break;
        }
    }
    packets
}

/// The largest RoCE v2 packet after its UDP header: a BTH, the longest
/// extension headers with a payload (XRCETH, RETH, immediate data), a
/// 4 KiB path MTU's payload and the ICRC. RoCE caps the path MTU at 4 KiB
/// on any Ethernet MTU.
const MAX_ROCE_UDP_PAYLOAD: usize = 12 + 28 + 4096 + 4;

/// Where the packets of `datagram` end: every `seg` bytes (UDP_GRO's
/// control message), or, for one that came without it, every
/// [`merged_segment`] bytes if it is longer than any packet, or if
/// `maybe_merged` (a shared port's member turned GRO off since its
/// socket was last found drained, so a datagram merged before may be
/// waiting: a short run, a few small SENDs, is as merged as a long one).
/// None: it is one packet. A datagram no longer than a packet is never
/// cut outside those windows, where the look for a run would cost every
/// packet a scan; inside them, a packet whose payload holds a BTH of its
/// own QP's next PSN at a 4-byte offset could be cut, and its pieces
/// would almost always fail their ICRC (on IPv4 the Identification
/// recovery lets a wrong one pass about once in 2^16).
pub(crate) fn segment_size(seg: Option<usize>, datagram: &[u8], maybe_merged: bool) -> Option<usize> {
    let len = datagram.len();
    seg.filter(|&s| s > 0 && s < len)
        .or_else(|| (len > MAX_ROCE_UDP_PAYLOAD || maybe_merged).then(|| merged_segment(datagram)).flatten())
}

/// The segment size of a datagram that came up without UDP_GRO's control
/// message and may be merged: one UDP GRO merged while the socket took
/// it, read after a shared port's join turned GRO off (the kernel then
/// leaves the message out: docs/shared-device.md). A run of this
/// stack's senders over loopback or a veth is one QP's packets in PSN
/// order, all of one size but the last (they cut their GSO runs at a
/// change of QP, and a GSO send arrives whole): the size at whose every
/// multiple the next packet of that QP begins, with the first's P_Key and
/// transport version 0. None if no size fits (a run that mixes QPs, as
/// GRO over a NIC may make): the datagram then fails as one packet.
fn merged_segment(d: &[u8]) -> Option<usize> {
    const BTH: usize = 12;
    let qp = |p: &[u8]| [p[2], p[3], p[5], p[6], p[7]]; // P_Key and destination QP
    let psn = |p: &[u8]| u32::from_be_bytes([0, p[9], p[10], p[11]]);
    let tver0 = |p: &[u8]| p[1] & 0x0f == 0;
    // Every packet's length is a multiple of 4 (headers, padded payload, ICRC).
    if d.len() < BTH || d.len() % 4 != 0 || !tver0(d) {
        return None;
    }
    // A packet is a BTH, headers and payload padded to 4 bytes, and an ICRC.
    let found = (BTH + 4..=MAX_ROCE_UDP_PAYLOAD.min(d.len() - 1)).step_by(4).find(|&s| {
        d.chunks(s)
            .enumerate()
            .skip(1)
            .all(|(k, p)| p.len() >= BTH + 4 && tver0(p) && qp(p) == qp(d) && psn(p) == (psn(d) + k as u32) & 0xff_ffff)
    });
    if found.is_some() || d.len() > MAX_ROCE_UDP_PAYLOAD {
        tracing::debug!(len = d.len(), segment = ?found, "a merged datagram without its segment size");
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of `n` packets of QP 0x123 from PSN 0xfffffe (it wraps), each
    /// `size` bytes but the last (`last`), merged into one datagram.
    fn merged_run(n: usize, size: usize, last: usize) -> Vec<u8> {
        let mut d = Vec::new();
        for k in 0..n {
            let mut p = vec![0x5a; if k + 1 == n { last } else { size }];
            p[..8].copy_from_slice(&[0x01, 0x00, 0xff, 0xff, 0x00, 0x00, 0x01, 0x23]); // RC SEND MIDDLE, P_Key, QP
            p[8] = 0;
            let psn = (0xff_fffe + k as u32) & 0xff_ffff;
            p[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
            d.extend_from_slice(&p);
        }
        d
    }

    /// A datagram longer than any packet, without its segment size (GRO
    /// turned off after it was merged), is cut where its packets begin:
    /// runs of one QP's 4 KiB and 1 KiB packets, with shorter last ones.
    #[test]
    fn a_merged_datagram_without_its_segment_size_is_cut_where_its_packets_begin() {
        for (n, size, last) in [(15, 4112, 4112), (16, 1052, 400), (5, 4112, 16), (4, 1040, 1040)] {
            let d = merged_run(n, size, last);
            assert!(d.len() > MAX_ROCE_UDP_PAYLOAD);
            let mut lens = Vec::new();
            let packets = split_datagram(&d, 0, d.len(), None, false, &mut IoStats::default(), |p| lens.push(p.len()));
            let mut want = vec![size; n - 1];
            want.push(last);
            assert_eq!((packets, lens), (n, want), "{n} x {size}");
        }
        // Not a run of one QP: handed on whole (its ICRC then fails).
        let mut d = merged_run(15, 4112, 4112);
        d[4112 + 7] ^= 1;
        let mut lens = Vec::new();
        split_datagram(&d, 0, d.len(), None, false, &mut IoStats::default(), |p| lens.push(p.len()));
        assert_eq!(lens, [d.len()]);
        // A packet (not longer than one can be) is never cut.
        let one = merged_run(1, 0, 4112);
        let mut lens = Vec::new();
        split_datagram(&one, 0, one.len(), None, false, &mut IoStats::default(), |p| lens.push(p.len()));
        assert_eq!(lens, [4112]);
    }

    /// While a datagram may be merged without saying so (a shared port's
    /// GRO just went off), a short run is cut too; a lone packet, a tiny
    /// datagram or one whose length no run can have is not.
    #[test]
    fn a_short_run_is_cut_only_while_it_may_be_merged() {
        let cut = |d: &[u8], maybe_merged: bool| {
            let mut lens = Vec::new();
            split_datagram(d, 0, d.len(), None, maybe_merged, &mut IoStats::default(), |p| lens.push(p.len()));
            lens
        };
        let run = merged_run(3, 80, 40);
        assert_eq!(cut(&run, true), [80, 80, 40]);
        assert_eq!(cut(&run, false), [200], "outside the window a short datagram is one packet");
        assert_eq!(cut(&merged_run(1, 0, 80), true), [80], "a lone packet");
        assert_eq!(cut(&run[..198], true), [198], "no run is 198 bytes long");
        // Tiny datagrams: the first 1-40 bytes of a run of three bare BTHs
        // with their ICRCs. Only 32, two whole packets, is a run.
        let bare = merged_run(3, 16, 16);
        for len in 1..=40 {
            let want = if len == 32 { vec![16, 16] } else { vec![len] };
            assert_eq!(cut(&bare[..len], true), want, "{len} bytes");
        }
        assert_eq!(cut(&merged_run(3, 16, 16), true), [16, 16, 16], "three bare BTHs with their ICRCs");
    }

    fn storage_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
        let a = socket2::SockAddr::from(addr);
        // SAFETY: all-zero sockaddr_storage is valid; `a.len()` bytes fit.
        let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        unsafe {
            std::ptr::copy_nonoverlapping(
                a.as_ptr().cast::<u8>(),
                (&mut s as *mut libc::sockaddr_storage).cast(),
                a.len() as usize,
            )
        };
        (s, a.len())
    }

    /// Only the bytes the kernel reported are read: a length too short for
    /// the family, or a family that is not IP, gives no sender (reading the
    /// rest would take stale bytes of an earlier datagram, or none at all).
    #[test]
    fn a_source_address_is_read_only_within_the_reported_length_and_family() {
        for addr in ["127.1.2.3:4791", "[fd00::7]:49152"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let (s, len) = storage_of(addr);
            assert_eq!(source_address(&s, len), Some(addr));
            assert_eq!(source_address(&s, len - 1), None, "{addr}: one byte short");
            assert_eq!(source_address(&s, 2), None, "{addr}: the family alone");
            assert_eq!(source_address(&s, 0), None);
            assert_eq!(source_address(&s, 10_000), Some(addr), "a length past the storage is capped");
        }
        let (mut s, len) = storage_of("127.0.0.1:1".parse().unwrap());
        s.ss_family = libc::AF_UNIX as libc::sa_family_t;
        assert_eq!(source_address(&s, len), None, "not an IP family");
    }
}
