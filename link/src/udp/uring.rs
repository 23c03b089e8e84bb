//! The io_uring driver: the same sockets, packets and offloads as the
//! socket driver, with fewer system calls.
//!
//! - Receive: one multishot `recvmsg` stays armed on the receive socket and
//!   takes its buffers from a ring of buffers registered with the kernel
//!   (a provided-buffer ring). Datagrams arrive as completions, read from
//!   shared memory: a poll that finds nothing, or something, makes no
//!   system call. Each buffer holds the kernel's `recvmsg` header, the
//!   sender's address, the control messages (UDP_GRO's segment size) and
//!   the datagram; packets go to the engine in place, with the headers the
//!   socket reported, and the buffer goes back to the ring right after.
//! - Send: the messages of a round of sending (GSO runs included, for
//!   every socket at once) are one `sendmsg` request each, submitted in one
//!   `io_uring_enter` that also waits for them; UDP sends complete at once
//!   unless a socket buffer is full. Bulk payloads go straight from their
//!   memory regions, as with the socket driver: the regions stay locked
//!   until every send of the round has completed.
//!
//! The ring runs the kernel's receive work cooperatively (COOP_TASKRUN):
//! instead of interrupting this process for every datagram (which halved
//! bandwidth), the kernel flags the work and runs it at our next system
//! call; a poll that sees the flag makes one. Waiting: a blocking wait
//! sleeps on the receive socket (readable when a datagram arrives) and on
//! the ring (readable when completions wait), and never while work is
//! flagged ([`Uring::has_work`]).

use super::batch::{Batch, Failures};
use super::rx::{deliver, read_control, source_address, Control, CMSG_ROOM};
use crate::io_stats::IoStats;
use io_uring::{cqueue, opcode, types, IoUring};
use rdma_transport::{Endpoint, Instant, RegionMemory};
use std::collections::VecDeque;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;

/// Submission queue entries: a round of sends plus the receive.
const SQ_ENTRIES: u32 = 128;

/// The `user_data` of the multishot receive (sends carry their message index).
const RECV: u64 = u64::MAX;
/// The `user_data` of the request that cancels the receive on drop.
const CANCEL: u64 = u64::MAX - 1;

/// The buffer group of the receive buffers.
const GROUP: u16 = 0;

/// The kernel's `struct io_uring_recvmsg_out`, at the start of each buffer.
const OUT_HEADER: usize = 16;
/// Room for the sender's address (a `sockaddr_in6` fits).
const NAME_ROOM: usize = 32;
/// Room for the control messages: UDP_GRO's segment size, the TTL and the TOS.
const CONTROL_ROOM: usize = CMSG_ROOM;
/// Where the datagram starts in a buffer, after the header, the address
/// and the control messages.
const PAYLOAD_AT: usize = OUT_HEADER + NAME_ROOM + CONTROL_ROOM;

/// The receive buffers and the ring through which the kernel takes them:
/// one anonymous mapping, the ring first (page-aligned, as the kernel wants).
struct BufRing {
    base: NonNull<u8>,
    map_len: usize,
    entries: u16,
    buf_len: usize,
    ring_bytes: usize,
    /// The ring's tail as we last published it.
    tail: u16,
    /// The kernel may still write into the buffers: never unmap them.
    leak: bool,
}

// SAFETY: the mapping is owned by this value alone; the kernel writes into
// it only through the io_uring the same `Uring` owns.
unsafe impl Send for BufRing {}

impl BufRing {
    fn new(entries: u16, payload: usize) -> io::Result<BufRing> {
        assert!(entries.is_power_of_two());
        let page = 4096;
        let ring_bytes = (usize::from(entries) * std::mem::size_of::<types::BufRingEntry>()).next_multiple_of(page);
        let buf_len = (PAYLOAD_AT + payload).next_multiple_of(64);
        let map_len = ring_bytes + usize::from(entries) * buf_len;
        // SAFETY: a fresh private anonymous mapping, zero-filled.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        let mut r = BufRing { base, map_len, entries, buf_len, ring_bytes, tail: 0, leak: false };
        for bid in 0..entries {
            r.push(bid);
        }
        r.publish();
        Ok(r)
    }

    fn ring(&self) -> *mut types::BufRingEntry {
        self.base.as_ptr().cast()
    }

    fn buffer(&mut self, bid: u16) -> &mut [u8] {
        let at = self.ring_bytes + usize::from(bid) * self.buf_len;
        // SAFETY: inside the mapping; the kernel hands a buffer back (in a
        // completion) before we touch it, and gets it again only via `push`.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(at), self.buf_len) }
    }

    /// Puts buffer `bid` at the ring's tail (seen by the kernel after `publish`).
    fn push(&mut self, bid: u16) {
        let addr = self.buffer(bid).as_mut_ptr() as u64;
        let slot = usize::from(self.tail & (self.entries - 1));
        // SAFETY: `slot` < entries, inside the ring part of the mapping.
        let e = unsafe { &mut *self.ring().add(slot) };
        e.set_addr(addr);
        e.set_len(self.buf_len as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field of the ring's first entry; the kernel reads
        // it with acquire ordering.
        unsafe {
            let tail = types::BufRingEntry::tail(self.ring()) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if self.leak {
            return;
        }
        // SAFETY: our own mapping, unmapped once; the ring is gone by now
        // and its receive has ended (see `Uring::drop`), so the kernel
        // writes into it no more.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

/// A receive completion taken off the queue while sends were awaited.
#[derive(Debug, Clone, Copy)]
struct Received {
    result: i32,
    flags: u32,
}

/// The io_uring driver of one device.
pub(super) struct Uring {
    // Declared first, dropped first: the ring goes before the buffers it
    // writes into.
    ring: IoUring,
    bufs: BufRing,
    /// The template of the multishot receive (name and control room).
    recv_hdr: Box<libc::msghdr>,
    rx_fd: RawFd,
    armed: bool,
    stash: VecDeque<Received>,
}

// SAFETY: `recv_hdr` holds no pointers (only lengths); the rest is owned.
unsafe impl Send for Uring {}

impl Uring {
    /// Sets up a ring on receive socket `rx_fd` and arms the receive.
    /// Fails where the kernel lacks io_uring, provided-buffer rings or
    /// multishot `recvmsg` (before Linux 6.0), or forbids io_uring.
    pub(super) fn new(rx_fd: RawFd, payload: usize) -> io::Result<Uring> {
        let ring = IoUring::builder().setup_coop_taskrun().setup_taskrun_flag().build(SQ_ENTRIES)?; // Linux 5.19
                                                                                                    // A GRO buffer holds up to 64 KiB: fewer of them.
        let entries = if payload > 16 << 10 { 32 } else { 256 };
        let bufs = BufRing::new(entries, payload)?;
        // SAFETY: the ring memory lives in `bufs`, which outlives the
        // registration (the ring is dropped first).
        unsafe { ring.submitter().register_buf_ring_with_flags(bufs.ring() as u64, entries, GROUP, 0)? };
        // SAFETY: all-zero msghdr is valid.
        let mut recv_hdr: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        recv_hdr.msg_namelen = NAME_ROOM as libc::socklen_t;
        recv_hdr.msg_controllen = CONTROL_ROOM;
        let mut u =
            Uring { ring, bufs, recv_hdr, rx_fd, armed: false, stash: VecDeque::with_capacity(usize::from(entries)) };
        u.arm()?;
        // A kernel without multishot recvmsg fails the request at once (and
        // ends it: `reap` marks it unarmed, so dropping `u` waits for nothing).
        u.ring.submitter().submit()?;
        u.reap(|_, _| {});
        if let Some(r) = u.stash.front().filter(|r| r.result < 0) {
            return Err(io::Error::from_raw_os_error(-r.result));
        }
        Ok(u)
    }

    /// The fd to sleep on: readable while completions wait.
    pub(super) fn fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Queues the multishot receive (submitted with the next system call).
    fn arm(&mut self) -> io::Result<()> {
        let e = opcode::RecvMsgMulti::new(types::Fd(self.rx_fd), &*self.recv_hdr, GROUP).build().user_data(RECV);
        // SAFETY: the msghdr template lives as long as the ring (it is boxed
        // in self); the buffers are registered.
        unsafe { self.ring.submission().push(&e) }.map_err(|_| io::Error::other("io_uring submission queue full"))?;
        self.armed = true;
        Ok(())
    }

    /// Moves completions off the queue: receives to the stash, sends to `sends`.
    fn reap(&mut self, mut sends: impl FnMut(usize, i32)) {
        for c in self.ring.completion() {
            match c.user_data() {
                RECV => {
                    if !cqueue::more(c.flags()) {
                        self.armed = false;
                    }
                    self.stash.push_back(Received { result: c.result(), flags: c.flags() });
                }
                CANCEL => {}
                j => sends(j as usize, c.result()),
            }
        }
    }

    /// Hands every datagram received so far to the engine. Returns the
    /// number of datagrams.
    pub(super) fn receive(
        &mut self,
        ep: &mut Endpoint,
        now: Instant,
        local: IpAddr,
        stats: &mut IoStats,
        tap: &mut Option<crate::capture::IpTap>,
    ) -> io::Result<usize> {
        if self.ring.submission().taskrun() {
            stats.recv_syscalls += 1;
            self.ring.submitter().submit()?;
        }
        self.reap(|_, _| {});
        let mut n = 0;
        let mut returned = false;
        while let Some(r) = self.stash.pop_front() {
            if r.result < 0 {
                match -r.result {
                    // Out of buffers: the multishot ended; the datagrams wait in the socket.
                    libc::ENOBUFS | libc::ECANCELED | libc::EINTR => {}
                    e => tracing::warn!(error = %io::Error::from_raw_os_error(e), "io_uring receive failed"),
                }
                continue;
            }
            let Some(bid) = cqueue::buffer_select(r.flags) else { continue };
            n += 1;
            self.datagram(bid, r.result as usize, ep, now, (local, stats, &mut *tap));
            self.bufs.push(bid);
            returned = true;
        }
        if returned {
            self.bufs.publish();
        }
        if let Some(t) = tap.as_mut().filter(|_| n > 0) {
            t.flush();
        }
        if !self.armed {
            self.arm()?;
            stats.recv_syscalls += 1;
            self.ring.submitter().submit()?;
        }
        Ok(n)
    }

    /// One datagram in buffer `bid`, `len` bytes written by the kernel.
    fn datagram(
        &mut self,
        bid: u16,
        len: usize,
        ep: &mut Endpoint,
        now: Instant,
        (local, stats, tap): (IpAddr, &mut IoStats, &mut Option<crate::capture::IpTap>),
    ) {
        let hdr = &*self.recv_hdr;
        let buf = self.bufs.buffer(bid);
        let Ok(out) = types::RecvMsgOut::parse(&buf[..len], hdr) else {
            stats.truncated += 1;
            return;
        };
        let payload = out.payload_data().len();
        if out.is_payload_truncated() {
            stats.datagrams_received += 1;
            stats.truncated += 1;
            tracing::debug!(len = out.incoming_payload_len(), "oversized datagram dropped");
            return;
        }
        let name = out.name_data();
        // SAFETY: all-zero sockaddr_storage is valid; at most its size is copied in.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let name_len = name.len().min(std::mem::size_of::<libc::sockaddr_storage>());
        // SAFETY: `name_len` bytes fit in `storage`.
        unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), &mut storage as *mut _ as *mut u8, name_len) };
        let Some(src) = source_address(&storage, name_len as libc::socklen_t) else {
            tracing::debug!(name_len, "datagram without a usable source address dropped");
            return;
        };
        let control = out.control_data();
        let control = if control.is_empty() {
            Control::default()
        } else {
            // SAFETY: all-zero msghdr is valid; it only frames the control bytes.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_control = control.as_ptr() as *mut _;
            h.msg_controllen = control.len();
            read_control(&h)
        };
        let at = len - payload;
        // A shared port, the only one whose GRO changes, has no io_uring.
        deliver(ep, now, buf, at, payload, control.segment, false, &control.headers(src, local), stats, tap);
    }

    /// Submits every message of `batch` and waits until each has
    /// completed (the buffers and headers are reused after, and the
    /// caller unlocks `regions`, which the payloads given by reference are
    /// in). Returns the messages the kernel refused.
    pub(super) fn send(&mut self, batch: &mut Batch, stats: &mut IoStats, regions: &[RegionMemory]) -> Failures {
        let mut failed = Failures::new();
        let mut pushed = 0;
        let mut done = 0;
        let mut errors = 0;
        while done < batch.len {
            while pushed < batch.len {
                let e = opcode::SendMsg::new(types::Fd(batch.fds[pushed]), &batch.msgs[pushed].msg_hdr)
                    .build()
                    .user_data(pushed as u64);
                // SAFETY: the header, its iovecs, address, control and the
                // packets stay alive until this function has seen every completion.
                if unsafe { self.ring.submission().push(&e) }.is_err() {
                    break; // full: submit what is queued first
                }
                pushed += 1;
            }
            stats.send_syscalls += 1;
            if let Err(e) = self.ring.submitter().submit_and_wait(1) {
                // EINTR, or EBUSY/EAGAIN until completions are reaped: retry.
                // Anything else, persisting, is a broken ring: the messages
                // not completed count as lost (the transport retransmits);
                // the batch lives in the device, so requests still queued
                // point at live memory.
                errors += 1;
                if errors > 1000 {
                    tracing::error!(error = %e, "io_uring_enter keeps failing: sends lost");
                    stats.send_errors += (batch.len - done) as u64;
                    // A send still queued may read its payload whenever the
                    // kernel gets to it: the regions it reads are never
                    // freed (a leak, on a ring that is broken anyway). The
                    // caller's own memory is never given by reference here.
                    for r in regions {
                        std::mem::forget(r.clone());
                    }
                    break;
                }
            }
            self.reap(|j, result| {
                done += 1;
                if result < 0 {
                    failed.push(j, &io::Error::from_raw_os_error(-result));
                } else {
                    batch.sent(j, stats);
                }
            });
        }
        failed
    }

    /// Whether receives wait: completions in the stash (taken while
    /// sending) or the queue, or deferred receive work in the kernel (the
    /// ring is set up for cooperative task running: the work runs at our
    /// next system call instead of interrupting us, and a wait must not
    /// sleep past it).
    pub(super) fn has_work(&mut self) -> bool {
        !self.stash.is_empty() || self.ring.submission().taskrun() || !self.ring.completion().is_empty()
    }
}

impl Uring {
    /// Cancels the multishot receive and waits for its last completion
    /// (one without the MORE flag): from then on the kernel owns none of
    /// the receive buffers. True once that completion has been seen.
    fn cancel_receive(&mut self) -> bool {
        let cancel = opcode::AsyncCancel::new(RECV).build().user_data(CANCEL);
        let deadline = std::time::Instant::now() + CANCEL_PATIENCE;
        let mut queued = false;
        while self.armed && std::time::Instant::now() < deadline {
            // SAFETY: a cancel request refers to no memory.
            if !queued && unsafe { self.ring.submission().push(&cancel) }.is_ok() {
                queued = true;
            }
            // A full queue is submitted first, making room for the cancel.
            let wait = types::Timespec::new().nsec(10_000_000);
            let args = types::SubmitArgs::new().timespec(&wait);
            if let Err(e) = self.ring.submitter().submit_with_args(1, &args) {
                // ETIME (nothing yet), EINTR, EBUSY: wait again; anything
                // else means the ring cannot make progress.
                if !matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)) {
                    tracing::warn!(error = %e, "io_uring: cannot cancel the receive");
                    self.reap(|_, _| {});
                    break;
                }
            }
            self.reap(|_, _| {});
        }
        !self.armed
    }
}

/// How long dropping a device waits for the kernel to end its receive.
const CANCEL_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

impl Drop for Uring {
    fn drop(&mut self) {
        if !self.armed || self.cancel_receive() {
            return; // the ring goes first (field order), then the buffers
        }
        // SAFETY (of not unmapping): the multishot receive has not ended,
        // so the kernel may still write a datagram into any buffer of the
        // ring, even after the ring's fd is closed (its teardown runs
        // asynchronously). Unmapping would let that write land in whatever
        // is mapped there next; leaking the mapping is safe.
        tracing::error!("io_uring: the receive did not end; its buffers are leaked, not unmapped");
        self.bufs.leak = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dropping a ring whose submission queue is full still cancels the
    /// receive and sees it end before the buffers go (the cancel used to
    /// be skipped when it found no room, and the buffers unmapped).
    #[test]
    fn the_receive_ends_before_the_buffers_go_even_with_a_full_submission_queue() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut u = match Uring::new(rx.as_raw_fd(), 2048) {
            Ok(u) => u,
            Err(e) => {
                testkit::skip(format!("io_uring is unavailable: {e}"));
                return;
            }
        };
        assert!(u.armed);
        let nop = opcode::Nop::new().build().user_data(7);
        // SAFETY: a no-op refers to no memory.
        while unsafe { u.ring.submission().push(&nop) }.is_ok() {}
        assert!(u.cancel_receive(), "the receive ended");
        assert!(!u.armed);
    }
}
