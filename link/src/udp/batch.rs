//! A round of sending as the kernel takes it: the messages of up to
//! [`TX_BATCH`] packets (`Batch`), each a run of equal-sized packets to one
//! destination from one send socket (one UDP_SEGMENT message when the run
//! has more than one), ready for `sendmmsg` or io_uring, and what became
//! of them (`Failures`). How the packets get into it is `send.rs`.

use super::config::TX_BATCH;
use super::connected::Connection;
use super::sys::{ip_header_len, set_control_message, set_ip_marks, sock_addr, Control, IpMarks, SocketId};
use crate::io_stats::IoStats;
use rdma_transport::{RegionMemory, Transmit};
use rdma_wire::{IdentShift, ROCE_V2_PORT};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};

/// Segments in one UDP_SEGMENT message (Linux's UDP_MAX_SEGMENTS is at least 64).
pub(super) const MAX_SEGMENTS: usize = 64;

/// One message: the packets at `order[first..first + count]`,
/// cut by the kernel every `segment` bytes when `count > 1`, all with one
/// TOS and one TTL (control messages set them for the whole message).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Message {
    pub(super) first: usize,
    pub(super) count: usize,
    pub(super) segment: usize,
}

/// The ICRC corrections for the packet lengths seen lately (bulk traffic has few).
#[derive(Debug, Default)]
pub(super) struct ShiftCache {
    pub(super) recent: Vec<IdentShift>,
}

impl ShiftCache {
    const SIZE: usize = 8;

    pub(super) fn get(&mut self, l3_len: usize) -> Option<IdentShift> {
        if let Some(s) = self.recent.iter().find(|s| s.l3_len() == l3_len) {
            return Some(*s);
        }
        let s = IdentShift::new(l3_len)?;
        if self.recent.len() == Self::SIZE {
            self.recent.remove(0);
        }
        self.recent.push(s);
        Some(s)
    }
}

/// Errors by which a kernel (or a device without checksum offload) refuses UDP_SEGMENT.
pub(super) fn gso_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP))
}

/// The socket IPv4 probes are sent to: bound to the device address, any
/// port; what it receives is thrown away.
pub(super) fn open_sink(local: IpAddr) -> io::Result<(Socket, SockAddr)> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.bind(&sock_addr(local, 0, 0))?;
    s.set_nonblocking(true)?;
    let addr = s.local_addr()?;
    Ok((s, addr))
}

/// A send socket: the TOS it is set to, and its connection.
pub(super) struct TxSocket {
    pub(super) socket: Socket,
    pub(super) tos: u8,
    pub(super) conn: Connection,
}

/// The packets of a round: what the engine said of each, and its bytes.
#[derive(Clone, Copy)]
pub(super) struct Sent<'a> {
    pub(super) meta: &'a [Transmit],
    pub(super) bufs: &'a [Box<[u8]>],
}

/// The messages of one round of sending, ready for `sendmmsg` or io_uring:
/// message `j` is the packets at `order[first..first + count]` for socket
/// `fds[j]`, its iovecs at `iovs[first..]`.
pub(super) struct Batch {
    pub(super) len: usize,
    pub(super) messages: [Message; TX_BATCH],
    pub(super) fds: [RawFd; TX_BATCH],
    /// Message `j`'s send socket, and the TOS it is set to.
    pub(super) socks: [SocketId; TX_BATCH],
    pub(super) tos: [u8; TX_BATCH],
    pub(super) msgs: [libc::mmsghdr; TX_BATCH],
    /// Up to three per packet: headers, payload, trailer.
    pub(super) iovs: [libc::iovec; 3 * TX_BATCH],
    /// Message `j`'s iovecs: the first, and how many.
    pub(super) iov_spans: [(usize, usize); TX_BATCH],
    pub(super) control: [Control; TX_BATCH],
    /// Where the payload of packet `i` given by reference is, in its locked region.
    pub(super) payloads: [*const u8; TX_BATCH],
    /// Message `j`'s IPv4 Identification, on a connected socket that numbers them.
    pub(super) idents: [Option<u16>; TX_BATCH],
    /// Whether message `j` carries its destination: a connected socket
    /// sends to its peer without one.
    pub(super) named: [bool; TX_BATCH],
}

// SAFETY: the raw pointers in the headers point into the buffers of the
// `UdpIo` that owns the batch, and `payloads` into memory regions locked
// for the round; they are only used while the `UdpIo` is borrowed mutably
// (and the regions locked), on whichever thread holds it.
unsafe impl Send for Batch {}

impl Batch {
    pub(super) fn new() -> Batch {
        Batch {
            len: 0,
            messages: [Message::default(); TX_BATCH],
            fds: [-1; TX_BATCH],
            socks: [SocketId::default(); TX_BATCH],
            tos: [0; TX_BATCH],
            // SAFETY: all-zero iovec and mmsghdr are valid (null pointers, zero lengths).
            msgs: unsafe { std::mem::zeroed() },
            iovs: unsafe { std::mem::zeroed() },
            control: [Control::default(); TX_BATCH],
            payloads: [std::ptr::null(); TX_BATCH],
            idents: [None; TX_BATCH],
            named: [true; TX_BATCH],
            iov_spans: [(0, 0); TX_BATCH],
        }
    }

    /// Points the message headers at the packets (`tx_meta`, `tx_bufs`),
    /// their destinations and UDP_SEGMENT sizes. `tx_addrs` keeps the
    /// addresses alive.
    pub(super) fn fill(
        &mut self,
        order: &[usize],
        (local, scope_id): (IpAddr, u32),
        tx: Sent<'_>,
        tx_addrs: &mut Vec<SockAddr>,
    ) {
        let Sent { meta: tx_meta, bufs: tx_bufs } = tx;
        let hl = ip_header_len(local);
        let iov = |b: *const u8, len: usize| libc::iovec { iov_base: b as *mut _, iov_len: len };
        // Each message's iovecs, in order: one per packet, or three for a
        // packet whose payload is in its region.
        let mut n = 0;
        for j in 0..self.len {
            let m = self.messages[j];
            self.iov_spans[j] = (n, 0);
            for &i in &order[m.first..m.first + m.count] {
                let (t, buf) = (&tx_meta[i], &tx_bufs[i]);
                match &t.payload {
                    None => {
                        self.iovs[n] = iov(buf[hl + 8..].as_ptr(), t.len - hl - 8);
                        n += 1;
                    }
                    Some(r) => {
                        self.iovs[n] = iov(buf[hl + 8..].as_ptr(), r.at - hl - 8);
                        self.iovs[n + 1] = iov(self.payloads[i], r.len);
                        self.iovs[n + 2] = iov(buf[r.at..].as_ptr(), t.len - r.at);
                        n += 3;
                    }
                }
            }
            self.iov_spans[j].1 = n - self.iov_spans[j].0;
        }
        tx_addrs.clear();
        for m in &self.messages[..self.len] {
            tx_addrs.push(sock_addr(tx_meta[order[m.first]].dest, ROCE_V2_PORT, scope_id));
        }
        // One address per message.
        for (j, addr) in tx_addrs.iter().enumerate() {
            let m = self.messages[j];
            // Every header is written whole: the batch is reused, and nothing
            // of an earlier round (a UDP_SEGMENT size) may stay in it.
            // SAFETY: an all-zero mmsghdr is valid (null pointers, zero lengths).
            self.msgs[j] = unsafe { std::mem::zeroed() };
            let h = &mut self.msgs[j].msg_hdr;
            if self.named[j] {
                h.msg_name = addr.as_ptr() as *mut _;
                h.msg_namelen = addr.len();
            }
            let (first, count) = self.iov_spans[j];
            h.msg_iov = &mut self.iovs[first];
            h.msg_iovlen = count;
            if m.count > 1 {
                set_segment_size(h, &mut self.control[j], m.segment as u16);
            }
            // The TOS and TTL the engine wrote: the kernel writes its own IP header.
            let first = order[m.first];
            set_ip_marks(h, &mut self.control[j], tx_meta[first].dest, IpMarks::of(&tx_bufs[first]), self.tos[j]);
        }
    }

    /// Counts message `j` as sent.
    pub(super) fn sent(&self, j: usize, stats: &mut IoStats) {
        let m = self.messages[j];
        stats.datagrams_sent += m.count as u64;
        stats.gso_sends += u64::from(m.count > 1);
        if !self.named[j] {
            stats.connected_sends += m.count as u64;
        }
    }
}

/// The messages the kernel refused, each with its error number. Empty
/// (and so free: no allocation, nothing to clear) on every round that
/// sends, which is nearly all of them.
pub(super) struct Failures {
    /// Message, error number, whether the kernel refused it itself.
    pub(super) items: Vec<(usize, i32, bool)>,
}

impl Failures {
    pub(super) fn new() -> Failures {
        Failures { items: Vec::new() }
    }

    pub(super) fn push(&mut self, j: usize, e: &io::Error) {
        self.items.push((j, e.raw_os_error().unwrap_or(libc::EIO), true));
    }

    /// Message `j` was not sent because one before it failed.
    pub(super) fn push_behind(&mut self, j: usize, e: &io::Error) {
        self.items.push((j, e.raw_os_error().unwrap_or(libc::EIO), false));
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (usize, io::Error, bool)> + '_ {
        self.items.iter().map(|&(j, errno, attempted)| (j, io::Error::from_raw_os_error(errno), attempted))
    }
}

/// The destination QPN of the packet in `buf`, whose IP header is `hl`
/// bytes (BTH bytes 5..8, after the UDP header).
pub(super) fn dest_qpn(buf: &[u8], hl: usize) -> Option<[u8; 3]> {
    buf.get(hl + 8 + 5..hl + 8 + 8).and_then(|b| b.try_into().ok())
}

/// The socket driver: one `sendmmsg` per run of messages on one socket.
pub(super) fn send_sockets(batch: &mut Batch, stats: &mut IoStats) -> Failures {
    let mut failed = Failures::new();
    let mut sent = 0;
    while sent < batch.len {
        let fd = batch.fds[sent];
        let mut end = sent + 1;
        while end < batch.len && batch.fds[end] == fd {
            end += 1;
        }
        stats.send_syscalls += 1;
        // SAFETY: the headers point at live buffers, addresses and control messages.
        let r = unsafe { libc::sendmmsg(fd, batch.msgs[sent..end].as_mut_ptr(), (end - sent) as u32, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            failed.push(sent, &e);
            if batch.idents[sent].is_some() {
                // The socket's numbering is in doubt from here: its other
                // messages go again one by one, after a probe.
                for j in sent + 1..end {
                    failed.push_behind(j, &e);
                }
                sent = end;
                continue;
            }
            sent += 1;
            continue;
        }
        for j in sent..sent + r as usize {
            batch.sent(j, stats);
        }
        sent += r as usize;
    }
    failed
}

/// Attaches a UDP_SEGMENT control message of `size` to `h`.
pub(super) fn set_segment_size(h: &mut libc::msghdr, room: &mut Control, size: u16) {
    set_control_message(h, room, libc::SOL_UDP, libc::UDP_SEGMENT, size);
}

/// Sends one datagram from `socket` to `to` (destination, TOS and TTL);
/// false if the kernel refused it (counted and traced).
pub(super) fn send_one(
    socket: &TxSocket,
    bytes: &[u8],
    to: (IpAddr, IpMarks),
    scope_id: u32,
    stats: &mut IoStats,
) -> bool {
    let (socket, sock_tos) = (&socket.socket, socket.tos);
    let (dest, marks) = to;
    stats.send_syscalls += 1;
    let addr = sock_addr(dest, ROCE_V2_PORT, scope_id);
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut _, iov_len: bytes.len() };
    let mut control = Control::default();
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_name = addr.as_ptr() as *mut _;
    h.msg_namelen = addr.len();
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    set_ip_marks(&mut h, &mut control, dest, marks, sock_tos);
    // SAFETY: the header points at `bytes`, `addr` and `control`, all alive for the call.
    let r = unsafe { libc::sendmsg(socket.as_raw_fd(), &h, 0) };
    let r = if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) };
    match r {
        Ok(()) => {
            stats.datagrams_sent += 1;
            true
        }
        Err(e) => {
            stats.send_errors += 1;
            tracing::warn!(error = %e, %dest, "send failed");
            false
        }
    }
}

/// Locks every region of `regions`, notes where its bytes are (address,
/// length) in `spans`, and runs `f` on them with all the locks held: the
/// pieces of a scattered send then cannot change between the ICRC and the
/// kernel's copy. Recursive so that the guards live on the stack, without
/// an allocation; a round has a handful of regions at most.
pub(super) fn with_locked<R>(
    regions: &[RegionMemory],
    spans: &mut Vec<(usize, usize)>,
    f: impl FnOnce(&[(usize, usize)]) -> R,
) -> R {
    match regions.split_first() {
        None => f(spans),
        Some((r, rest)) => {
            let guard = r.lock();
            spans.push((guard.as_ptr() as usize, guard.len()));
            with_locked(rest, spans, f)
        }
    }
}
