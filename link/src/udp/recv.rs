//! Receiving: one `recvmmsg` of up to [`BATCH`] datagrams, each either one
//! RoCE packet or, with UDP_GRO, a run of packets of one size from one
//! sender that the kernel coalesced (the segment size comes in a control
//! message). Every packet is handed to the engine in place, from its BTH
//! on, with what the socket reported of the IP and UDP headers the kernel
//! took off as typed values ([`rdma_wire::DatagramHeaders`]): the sender, the TOS /
//! traffic class it arrived with (IP_RECVTOS / IPV6_RECVTCLASS), so that
//! the engine sees its ECN bits, and its TTL / hop limit (IP_RECVTTL /
//! IPV6_RECVHOPLIMIT), which a UD receive shows in its GRH area; GRO
//! coalesces only packets of one TOS and TTL.

use super::config::BATCH;
use super::rx::{deliver, read_control, source_address};
use super::{Driver, UdpIo};
use rdma_transport::{Endpoint, Instant};
use std::io;
use std::os::fd::AsRawFd;

impl UdpIo {
    /// Receives what is waiting (one `recvmmsg`) and hands each packet
    /// to the engine. Returns the number of datagrams.
    pub fn receive(&mut self, ep: &mut Endpoint, now: Instant) -> io::Result<usize> {
        let groups = self.receive_groups(ep, now);
        let rx_ring = match &mut self.driver {
            Driver::Sockets(ring) => ring,
            Driver::Uring(u) => {
                return Ok(groups + u.receive(ep, now, self.local, &mut self.stats, &mut self.capture)?);
            }
        };
        // Read before the socket: if this call drains it, it has read every
        // datagram merged before the changes of GRO this count had finished
        // (an odd count: one is under way, and a datagram may still be
        // merged and queued after the drain).
        let before = self.member.as_ref().map_or(0, |m| m.gro_offs());
        // SAFETY: every pointer refers to live buffers of the stated sizes.
        let n = unsafe {
            libc::recvmmsg(
                self.rx.as_raw_fd(),
                rx_ring.msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        self.stats.recv_syscalls += 1;
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => {
                    self.merged_window.drained(before);
                    Ok(0)
                }
                io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        // Read after the socket: the kernel leaves the segment size out of
        // a datagram read after GRO went off, even in this call.
        let after = self.member.as_ref().map_or(0, |m| m.gro_offs());
        let bytes = rx_ring.msgs[..n].iter().map(|m| m.msg_len as usize).sum();
        let maybe_merged = self.merged_window.maybe_merged(after, bytes);
        for i in 0..n {
            let m = &rx_ring.msgs[i];
            let (len, flags, namelen) = (m.msg_len as usize, m.msg_hdr.msg_flags, m.msg_hdr.msg_namelen);
            let control = read_control(&m.msg_hdr);
            if flags & libc::MSG_TRUNC != 0 {
                self.stats.datagrams_received += 1;
                self.stats.truncated += 1;
                tracing::debug!(len, "oversized datagram dropped");
            } else if self.member.as_ref().is_some_and(|m| m.take_probe(rx_ring.bufs[i].get(..len))) {
                // A member's probe of its place in the shared port.
            } else {
                match source_address(&rx_ring.names[i], namelen) {
                    Some(src) => {
                        let headers = control.headers(src, self.local);
                        let (buf, seg) = (&rx_ring.bufs[i], control.segment);
                        deliver(ep, now, buf, 0, len, seg, maybe_merged, &headers, &mut self.stats, &mut self.capture)
                    }
                    None => tracing::debug!(namelen, "datagram without a usable source address dropped"),
                }
            }
            rx_ring.reset(i);
        }
        if n < BATCH {
            // Fewer than asked for: the socket was drained.
            self.merged_window.drained(before);
        }
        if let Some(c) = self.capture.as_mut().filter(|_| n + groups > 0) {
            c.flush();
        }
        Ok(n + groups)
    }
}

/// The window in which a datagram may be merged without saying so: from
/// the moment a shared port's member turns UDP GRO off
/// ([`crate::share::Member::gro_offs`] counts it, odd while it happens)
/// until the socket is found drained after the change, or more bytes than
/// it could hold at the change were read (a receiver that never catches up
/// would otherwise look for runs in every packet: about 2-4 us for one of
/// 4 KiB).
#[derive(Debug, Default)]
pub(super) struct MergedWindow {
    /// The count (even) that the socket was last drained after.
    drained_at: u64,
    /// Bytes read since the count became `read_at` (reset when it moves:
    /// a second change opens the window again, for as much as before).
    read: usize,
    read_at: u64,
}

impl MergedWindow {
    /// Whether datagrams of `bytes`, read when the count was `now`, may be
    /// merged without saying so.
    pub(super) fn maybe_merged(&mut self, now: u64, bytes: usize) -> bool {
        if now == self.drained_at {
            return false;
        }
        if now != self.read_at {
            (self.read, self.read_at) = (0, now);
        }
        // The kernel charges a socket up to twice its buffer's setting, and
        // at least a datagram's length for each: past that, nothing read is
        // from before the change (the batch that crosses it may be).
        if now % 2 == 0 && self.read > 2 * super::sys::SOCKET_BUFFER {
            self.drained(now);
            return false;
        }
        self.read += bytes;
        true
    }

    /// A read that began when the count was `before` found the socket
    /// drained: it read every datagram merged before the changes that
    /// count had finished (while one is under way, odd, a datagram may
    /// still be merged and queued after it).
    pub(super) fn drained(&mut self, before: u64) {
        self.drained_at = before & !1;
    }
}

#[cfg(test)]
mod tests {
    use super::MergedWindow;

    /// The window opens when the count moves, survives a drain that began
    /// while the change was under way, closes at a drain after it, and
    /// closes too once more than a full socket was read.
    #[test]
    fn the_merged_window_closes_only_after_a_drain_that_follows_the_change() {
        let mut w = MergedWindow::default();
        assert!(!w.maybe_merged(0, 100), "GRO never went off");
        assert!(w.maybe_merged(1, 100), "going off");
        w.drained(1);
        assert!(w.maybe_merged(2, 100), "a drain begun while it went off may have missed a merged datagram");
        w.drained(2);
        assert!(!w.maybe_merged(2, 100), "drained after the change");
        let full = 2 * super::super::sys::SOCKET_BUFFER;
        assert!(w.maybe_merged(4, full), "as much as the socket holds may still be from before");
        assert!(w.maybe_merged(6, 100), "a second change: the window opens again for as much");
        assert!(w.maybe_merged(6, full), "the batch that crosses a full socket may hold some from before");
        assert!(!w.maybe_merged(6, 1), "past it, nothing is");
        assert!(!w.maybe_merged(6, 100), "closed until the count moves again");
    }
}
