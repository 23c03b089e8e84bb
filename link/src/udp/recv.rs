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
        let bytes = || rx_ring.msgs[..n].iter().map(|m| m.msg_len as usize).sum();
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
