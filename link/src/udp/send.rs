//! Sending: the engine builds up to [`TX_BATCH`] packets into the send
//! buffers; they are grouped by source port (one socket each) and
//! destination, and every run of equal-sized packets to one destination
//! (the last may be shorter) leaves as one UDP_SEGMENT message: the kernel
//! cuts it into datagrams, each a complete RoCE packet with its own BTH and
//! ICRC. All the messages of one port go in one `sendmmsg`.
//!
//! The kernel numbers the IPv4 Identification of the segments it cuts
//! from the number of the send call up (0, 1, 2, … on an unconnected
//! socket; see [`super::connected`] for a connected one), and the ICRC
//! covers that field, so the ICRC of each packet built with
//! Identification 0 is corrected by one XOR ([`rdma_wire::IdentShift`]) before
//! sending. Packets of one QP keep their order; packets of different QPs
//! need none between them.
//!
//! A packet whose payload the engine gives by reference (bulk data, see
//! `UdpIo::sends_by_reference`) leaves as three pieces: its headers, the
//! payload straight from the memory region, and pad plus ICRC. The round's
//! regions stay locked from the ICRC, computed over the bytes in the
//! region, until the kernel has copied them (the `sendmmsg` has returned,
//! or every io_uring send of the round has completed): each payload byte
//! is read twice (ICRC, kernel copy) and copied once.

use super::batch::{dest_qpn, gso_refused, send_one, send_sockets, with_locked, Batch, Message, Sent, MAX_SEGMENTS};
use super::config::{TX_BATCH, TX_BATCHES_PER_CALL};
use super::connected::{self, CHECK_EVERY, MAX_MISMATCHES};
use super::sys::{ip_header_len, sock_addr, IpMarks, SocketId};
use super::{Driver, UdpIo};
use rdma_transport::{Endpoint, Instant, RegionMemory, Transmit};
use rdma_wire::ROCE_V2_PORT;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

impl UdpIo {
    /// Sends what the engine has to send, up to [`TX_BATCHES_PER_CALL`]
    /// full rounds; [`UdpIo::sends_left`] then says whether it stopped on
    /// that budget. Returns the number of packets.
    pub fn transmit(&mut self, ep: &mut Endpoint, now: Instant) -> io::Result<usize> {
        let mut total = 0;
        self.tx_left = false;
        for round in 1.. {
            // New packets first, then the held ACKs they release. A lone new
            // packet (a ping-pong's reply) leaves at once, before those ACKs
            // are even built, and they follow in a call of their own: a
            // two-segment send of reply and ACK costs the reply about a
            // microsecond on loopback, and the peer is busy with the reply
            // when the ACK comes.
            self.tx_meta.clear();
            self.fill(ep, now, Endpoint::poll_transmit_fresh);
            if self.tx_meta.len() == 1 && self.faults.is_none() {
                self.send_batch(1);
                total += 1;
                self.tx_meta.clear();
            }
            self.fill(ep, now, Endpoint::poll_transmit);
            let k = self.tx_meta.len();
            if k == 0 {
                break;
            }
            total += k;
            if self.faults.is_some() {
                self.send_with_faults(k);
            } else {
                self.send_batch(k);
            }
            if k < TX_BATCH {
                break;
            }
            if round == TX_BATCHES_PER_CALL {
                self.tx_left = true;
                tracing::trace!(total, "transmit budget spent: the caller comes back for the rest");
                break;
            }
        }
        // Drop the round's references to memory regions now, not at the
        // next call: a region the application deregisters meanwhile is then
        // held by nothing here.
        self.tx_meta.clear();
        if let Some(c) = &mut self.capture {
            c.flush();
        }
        if let Some(f) = &mut self.faults {
            if let Some((bytes, to, port)) = f.take_held() {
                if let Some(t) = self.tx.get(&port).map(|p| &p.sockets[0]) {
                    send_one(t, &bytes, to, self.scope_id, &mut self.stats);
                }
            }
        }
        Ok(total)
    }

    /// Adds packets from `poll` to the round until it has none or the round is full.
    fn fill(
        &mut self,
        ep: &mut Endpoint,
        now: Instant,
        poll: fn(&mut Endpoint, Instant, &mut [u8]) -> Option<Transmit>,
    ) {
        while self.tx_meta.len() < TX_BATCH {
            let i = self.tx_meta.len();
            match poll(ep, now, &mut self.tx_bufs[i]) {
                Some(mut t) => {
                    if let Some(p) = t.payload.as_ref().filter(|p| !self.payload_by_reference(&p.memory)) {
                        t.len = p.inline(&mut self.tx_bufs[i], t.len);
                        t.payload = None;
                    }
                    if let Some(c) = &mut self.capture {
                        c.sent(&self.tx_bufs[i][..t.len]); // whole: a capture turns by-reference sends off
                    }
                    self.tx_meta.push(t)
                }
                None => break,
            }
        }
    }

    /// One packet per send, through the fault injector.
    fn send_with_faults(&mut self, k: usize) {
        let hl = ip_header_len(self.local);
        let Some(f) = &mut self.faults else { return };
        for i in 0..k {
            let t = &self.tx_meta[i];
            let marks = IpMarks::of(&self.tx_bufs[i]);
            let body = &mut self.tx_bufs[i][hl + 8..t.len];
            // Through the port's first socket, each packet with its TOS.
            let out = f.apply(body, (t.dest, marks), t.src_port);
            self.stats.set_faults(f.counts());
            for (bytes, to) in out {
                if let Some(s) = self.tx.get(&t.src_port).map(|p| &p.sockets[0]) {
                    send_one(s, &bytes, to, self.scope_id, &mut self.stats);
                }
            }
        }
    }

    /// Sends `tx_bufs[..k]`: the packets are grouped by source port and
    /// destination and planned into messages, which leave in one
    /// `sendmmsg` per source port, or all in one `io_uring_enter`.
    fn send_batch(&mut self, k: usize) {
        if self.tx_meta[..k].iter().all(|t| t.payload.is_none()) {
            return self.send_batch_locked(k, &[], &[]); // small packets only: nothing to lock
        }
        // The regions the payloads are in, each once (locking one twice would deadlock).
        let mut regions = std::mem::take(&mut self.tx_regions);
        for t in &self.tx_meta[..k] {
            if let Some(p) = &t.payload {
                if !regions.iter().any(|r| r.same(&p.memory)) {
                    regions.push(p.memory.clone());
                }
            }
        }
        let mut spans = std::mem::take(&mut self.tx_spans);
        with_locked(&regions, &mut spans, |spans| self.send_batch_locked(k, &regions, spans));
        regions.clear();
        spans.clear();
        (self.tx_regions, self.tx_spans) = (regions, spans);
    }

    /// [`UdpIo::send_batch`] with the payloads' regions locked, their bytes
    /// at `spans` (address, length), in the order of `regions`.
    fn send_batch_locked(&mut self, k: usize, regions: &[RegionMemory], spans: &[(usize, usize)]) {
        let mut batch = self.batch.take().unwrap_or_else(|| Box::new(Batch::new()));
        // Seal each packet given by reference over the bytes the kernel will copy.
        for i in 0..k {
            let Some(p) = &self.tx_meta[i].payload else { continue };
            let r = regions.iter().position(|r| r.same(&p.memory)).expect("every region was collected");
            let (base, len) = spans[r];
            assert!(p.offset + p.len <= len, "the engine checked the payload against its region");
            // SAFETY: the region is locked by `with_locked` for as long as
            // this call runs, and `base..base + len` are its bytes.
            let payload = unsafe { std::slice::from_raw_parts((base + p.offset) as *const u8, p.len) };
            p.seal(&mut self.tx_bufs[i][..self.tx_meta[i].len], payload);
            batch.payloads[i] = payload.as_ptr();
            self.stats.payloads_by_reference += 1;
        }
        // Group by (port, destination), keeping each group's order: an
        // insertion sort of at most TX_BATCH indices, stable and without allocation.
        let mut order = [0usize; TX_BATCH];
        let key = |t: &Transmit| (t.src_port, t.dest);
        for i in 0..k {
            let mut j = i;
            while j > 0 && key(&self.tx_meta[order[j - 1]]) > key(&self.tx_meta[i]) {
                order[j] = order[j - 1];
                j -= 1;
            }
            order[j] = i;
        }
        let order = &order[..k];
        // The batch lives in the device (allocated once): an io_uring
        // request still queued after a failure points at live memory.
        batch.len = 0;
        let mut start = 0;
        while start < k {
            let port = self.tx_meta[order[start]].src_port;
            let mut end = start + 1;
            while end < k && self.tx_meta[order[end]].src_port == port {
                end += 1;
            }
            let from = batch.len;
            if self.tx.contains_key(&port) {
                self.plan(order, start, end, port, &mut batch);
            } else {
                self.stats.send_errors += (end - start) as u64;
                tracing::warn!(port, "no socket for UDP source port: packets not sent");
            }
            // Each message's socket: the one set to its TOS.
            for j in from..batch.len {
                let tos = IpMarks::of(&self.tx_bufs[order[batch.messages[j].first]]).tos;
                batch.socks[j] = self.socket_for(port, tos).expect("the port is reserved");
            }
            // Each socket made ready once, before the round takes any of its
            // numbers: a probe sends, and takes one itself.
            for j in from..batch.len {
                if !batch.socks[from..j].contains(&batch.socks[j]) {
                    self.prepare(batch.socks[j], self.tx_meta[order[batch.messages[j].first]].dest);
                }
            }
            // Each message's destination (none to the socket's peer) and
            // Identification (a connected IPv4 socket's next numbers, in
            // the order of the calls).
            for j in from..batch.len {
                let dest = self.tx_meta[order[batch.messages[j].first]].dest;
                let t = self.tx_socket_mut(batch.socks[j]).expect("socket_for names a socket");
                batch.named[j] = t.conn.peer != Some(dest);
                batch.idents[j] = t.conn.take_ident();
                (batch.fds[j], batch.tos[j]) = (t.socket.as_raw_fd(), t.tos);
            }
            start = end;
        }
        for j in 0..batch.len {
            self.correct_icrcs(order, batch.messages[j], batch.idents[j].unwrap_or(0));
        }
        let tx = Sent { meta: &self.tx_meta, bufs: &self.tx_bufs };
        batch.fill(order, (self.local, self.scope_id), tx, &mut self.tx_addrs);
        let failed = match &mut self.driver {
            Driver::Uring(u) => u.send(&mut batch, &mut self.stats, regions),
            Driver::Sockets(_) => send_sockets(&mut batch, &mut self.stats),
        };
        for (j, e, attempted) in failed.iter() {
            self.message_failed(
                batch.socks[j],
                order,
                batch.messages[j],
                batch.idents[j],
                &e,
                attempted,
                &batch.payloads,
            );
        }
        self.batch = Some(batch);
    }

    /// Splits the packets `order[start..end]` (one source port) into
    /// messages, appended to `batch` (their sockets still to choose).
    fn plan(&self, order: &[usize], start: usize, end: usize, port: u16, batch: &mut Batch) {
        let hl = ip_header_len(self.local);
        let body = |i: usize| self.tx_meta[i].wire_len() - hl - 8;
        // The UDP length field bounds a message's payload.
        let max_bytes = usize::from(u16::MAX) - hl - 8;
        let mut p = start;
        while p < end {
            let first = order[p];
            let (segment, dest) = (body(first), self.tx_meta[first].dest);
            let marks = IpMarks::of(&self.tx_bufs[first]);
            let qpn = dest_qpn(&self.tx_bufs[first], hl);
            let (mut count, mut bytes) = (1, segment);
            while self.offloads.gso && p + count < end && count < MAX_SEGMENTS {
                let next = order[p + count];
                let len = body(next);
                // One TOS and TTL per message: a data packet (ECT) and an
                // ACK part, and so do QPs of one destination with different TTLs.
                let same_marks = IpMarks::of(&self.tx_bufs[next]) == marks;
                // One destination QP per message: a GSO send reaches the
                // peer's host whole, and a shared port steers it by its
                // first packet (`crate::share`).
                let same_qp = dest_qpn(&self.tx_bufs[next], hl) == qpn;
                if self.tx_meta[next].dest != dest
                    || !same_marks
                    || !same_qp
                    || len > segment
                    || bytes + len > max_bytes
                {
                    break;
                }
                count += 1;
                bytes += len;
                if len < segment {
                    break; // only the last segment may be shorter
                }
            }
            let j = batch.len;
            batch.messages[j] = Message { first: p, count, segment };
            batch.socks[j] = SocketId { port, lane: 0 };
            batch.len += 1;
            p += count;
        }
    }

    /// XORs into the ICRC of each packet of `m` the difference its
    /// Identification makes: `base` for the first, counting up for the
    /// segments after it. Twice undoes it.
    fn correct_icrcs(&mut self, order: &[usize], m: Message, base: u16) {
        if !self.local.is_ipv4() || (base == 0 && m.count == 1) {
            return; // IPv6 has no Identification; 0 needs no correction
        }
        for k in 0..m.count {
            let ident = base.wrapping_add(k as u16);
            if ident != 0 {
                self.correct_one(order[m.first + k], ident);
            }
        }
    }

    /// A message the kernel refused (`attempted`), or one behind it on the
    /// same connected IPv4 socket, whose numbers are then in doubt. A
    /// refused single packet is lost (the transport retransmits); the
    /// others are resent packet by packet, and a refused UDP_SEGMENT turns
    /// GSO off when the kernel or device cannot do it at all.
    #[allow(clippy::too_many_arguments)]
    fn message_failed(
        &mut self,
        sock: SocketId,
        order: &[usize],
        m: Message,
        base: Option<u16>,
        e: &io::Error,
        attempted: bool,
        payloads: &[*const u8; TX_BATCH],
    ) {
        if base.is_some() {
            // The call may or may not have taken its number: learn it again.
            if let Some(t) = self.tx_socket_mut(sock) {
                t.conn.next_ident = None;
            }
        }
        if m.count == 1 && attempted {
            self.stats.send_errors += 1;
            tracing::warn!(error = %e, "send failed");
            return;
        }
        if m.count > 1 && attempted && self.offloads.gso && gso_refused(e) {
            self.offloads.gso = false;
            tracing::warn!(error = %e, "the kernel refuses UDP_SEGMENT: sending one datagram per packet from now on");
        }
        self.correct_icrcs(order, m, base.unwrap_or(0)); // back to Identification 0
        let hl = ip_header_len(self.local);
        for &i in &order[m.first..m.first + m.count] {
            // Each its own call, with its own number.
            self.prepare(sock, self.tx_meta[i].dest);
            let Some(t) = self.tx_socket_mut(sock) else { return };
            let ident = t.conn.take_ident();
            if let Some(id) = ident {
                self.correct_one(i, id);
            }
            let scope_id = self.scope_id;
            let Some(t) = self.tx.get_mut(&sock.port).and_then(|p| p.sockets.get_mut(sock.lane)) else { return };
            let meta = &self.tx_meta[i];
            let buf = &self.tx_bufs[i];
            let to = (meta.dest, IpMarks::of(buf));
            let ok = match &meta.payload {
                None => send_one(t, &buf[hl + 8..meta.len], to, scope_id, &mut self.stats),
                Some(p) => {
                    // SAFETY: as in send_batch_locked, whose regions are still locked.
                    let payload = unsafe { std::slice::from_raw_parts(payloads[i], p.len) };
                    let whole = [&buf[hl + 8..p.at], payload, &buf[p.at..meta.len]].concat();
                    send_one(t, &whole, to, scope_id, &mut self.stats)
                }
            };
            if !ok && ident.is_some() {
                t.conn.next_ident = None;
            }
        }
    }

    /// XORs into the ICRC of packet `i` (built with Identification 0) the
    /// difference `ident` makes (one correction per packet length, cached).
    fn correct_one(&mut self, i: usize, ident: u16) {
        let (len, l3_len) = (self.tx_meta[i].len, self.tx_meta[i].wire_len());
        if let Some(s) = self.shifts.get(l3_len) {
            let icrc = &mut self.tx_bufs[i][len - 4..len];
            let fixed = u32::from_le_bytes((&*icrc).try_into().expect("4 bytes")) ^ s.difference(ident);
            icrc.copy_from_slice(&fixed.to_le_bytes());
        }
    }

    /// Makes the send socket `sock` ready to send to `dest`: connected to
    /// its first peer if the device connects, and for IPv4 its next
    /// Identification known (probed, or checked every [`CHECK_EVERY`] sends).
    fn prepare(&mut self, sock: SocketId, dest: IpAddr) {
        if !self.connect {
            return;
        }
        let (scope_id, ipv4) = (self.scope_id, self.local.is_ipv4());
        let Some(t) = self.tx_socket_mut(sock) else { return };
        if t.conn.peer.is_none() {
            if let Err(e) = t.socket.connect(&sock_addr(dest, ROCE_V2_PORT, scope_id)) {
                return self.unconnect_all(&format!("cannot connect a send socket to {dest}: {e}"));
            }
            t.conn = connected::Connection { peer: Some(dest), next_ident: None, sends: 0 };
        }
        if ipv4 && (t.conn.next_ident.is_none() || t.conn.sends >= CHECK_EVERY) {
            self.probe(sock);
        }
    }

    /// Learns (or checks) the next Identification of the IPv4 send socket `sock`.
    fn probe(&mut self, sock: SocketId) {
        let t = self.tx.get_mut(&sock.port).and_then(|p| p.sockets.get_mut(sock.lane));
        let (Some((sink, sink_addr)), Some(t)) = (&self.sink, t) else { return };
        let port = sock.port;
        let predicted = t.conn.next_ident;
        match connected::probe(&t.socket, sink, sink_addr) {
            Ok(ident) => {
                self.stats.ident_probes += 1;
                t.conn.next_ident = Some(ident.wrapping_add(1));
                t.conn.sends = 0;
                if predicted.is_some_and(|p| p != ident) {
                    self.stats.ident_mismatches += 1;
                    tracing::warn!(
                        port,
                        ?predicted,
                        ident,
                        "a send socket's IPv4 Identification was not the one predicted"
                    );
                    if self.stats.ident_mismatches >= MAX_MISMATCHES {
                        self.unconnect_all("the IPv4 Identification was mispredicted too often");
                    }
                }
            }
            Err(e) if connected::is_permanent(&e) => {
                self.unconnect_all(&format!("cannot learn the IPv4 Identification of a connected socket: {e}"))
            }
            Err(e) => {
                // This socket sends unconnected this round, and connects again at the next.
                tracing::debug!(port, error = %e, "a probe failed: disconnecting the socket");
                if let Err(e) = connected::disconnect(&t.socket) {
                    return self.unconnect_all(&format!("cannot disconnect a send socket: {e}"));
                }
                t.conn = connected::Connection::default();
            }
        }
    }

    /// Stops connecting: every send socket sends unconnected (IPv4
    /// Identification 0) from now on.
    fn unconnect_all(&mut self, why: &str) {
        tracing::info!(why, "sending from unconnected sockets");
        self.connect = false;
        for t in self.tx.values_mut().flat_map(|p| p.sockets.iter_mut()) {
            if t.conn.peer.is_some() {
                if let Err(e) = connected::disconnect(&t.socket) {
                    tracing::warn!(error = %e, "cannot disconnect a send socket");
                }
            }
            t.conn = connected::Connection::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::open_sink;
    use super::*;
    use crate::io_stats::IoStats;
    use crate::udp::UdpConfig;
    use socket2::Socket;

    /// A GSO message carries one TOS and one TTL for all its segments
    /// (control messages), so a run of equal-sized packets is cut where
    /// either changes: otherwise an ACK would leave ECN-capable, or data
    /// not, or one QP's packets with another's hop limit.
    #[test]
    fn a_gso_run_only_groups_packets_of_one_tos_and_ttl() {
        let local: IpAddr = "127.31.8.1".parse().unwrap();
        let dest: IpAddr = "127.31.8.2".parse().unwrap();
        let mut io = UdpIo::bind(local, &UdpConfig::default()).unwrap();
        assert!(io.offloads.gso);
        let port = io.reserve_port(0xc321).unwrap();
        let marks = [(0x6a, 64), (0x6a, 64), (0x68, 64), (0x6a, 64), (0x6a, 17), (0x6a, 17), (0x6a, 64)];
        io.tx_meta.clear();
        for (i, &(tos, ttl)) in marks.iter().enumerate() {
            io.tx_bufs[i][..9].copy_from_slice(&[0x45, tos, 0, 0, 0, 0, 0x40, 0, ttl]);
            io.tx_meta.push(Transmit { len: 1000, dest, src_port: port, released_ack: false, payload: None });
        }
        let order: Vec<usize> = (0..marks.len()).collect();
        let mut batch = Batch::new();
        io.plan(&order, 0, order.len(), port, &mut batch);
        let runs: Vec<(usize, usize)> = batch.messages[..batch.len].iter().map(|m| (m.first, m.count)).collect();
        assert_eq!(runs, [(0, 2), (2, 1), (3, 1), (4, 2), (6, 1)]);
    }

    /// A GSO message goes whole to the process its first packet is
    /// steered to on a shared port, so a run is cut where the destination
    /// QP changes (QPs of one peer sharing a source port).
    #[test]
    fn a_gso_run_only_groups_packets_for_one_destination_qp() {
        let local: IpAddr = "127.0.22.41".parse().unwrap();
        let dest: IpAddr = "127.0.22.42".parse().unwrap();
        let mut io = UdpIo::bind(local, &UdpConfig::default()).unwrap();
        let port = io.reserve_port(0xc322).unwrap();
        let qpns = [0x20011u32, 0x20011, 0x40011, 0x40011, 0x20011];
        io.tx_meta.clear();
        for (i, &qpn) in qpns.iter().enumerate() {
            io.tx_bufs[i][..9].copy_from_slice(&[0x45, 0x02, 0, 0, 0, 0, 0x40, 0, 64]);
            io.tx_bufs[i][20 + 8 + 5..20 + 8 + 8].copy_from_slice(&qpn.to_be_bytes()[1..]);
            io.tx_meta.push(Transmit { len: 1000, dest, src_port: port, released_ack: false, payload: None });
        }
        let order: Vec<usize> = (0..qpns.len()).collect();
        let mut batch = Batch::new();
        io.plan(&order, 0, order.len(), port, &mut batch);
        let runs: Vec<(usize, usize)> = batch.messages[..batch.len].iter().map(|m| (m.first, m.count)).collect();
        assert_eq!(runs, [(0, 2), (2, 2), (4, 1)]);
    }

    /// IPv6 has one loopback address, whose RoCE port two tests bind (each
    /// alone on it): held while one does, when `local` is it.
    fn ipv6_loopback(local: IpAddr) -> Option<std::sync::MutexGuard<'static, ()>> {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        local.is_ipv6().then(|| ONE.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The one-packet path (fault injection, resends after a refused
    /// message) sends with the TOS and TTL too, and the device's receive
    /// socket reads them back from the control messages: IPv4 TOS and TTL,
    /// IPv6 traffic class and hop limit. 64 is the send sockets' own TTL,
    /// sent without a control message; IPv4 TTL 0, which Linux refuses,
    /// leaves as 1.
    #[test]
    fn send_one_sets_the_tos_and_ttl_and_the_receive_side_reads_them_once_asked() {
        for local in ["127.31.9.1", "::1"] {
            let local: IpAddr = local.parse().unwrap();
            let _alone = ipv6_loopback(local);
            let mut io = UdpIo::bind(local, &UdpConfig::default()).unwrap();
            // SOFTROCE_IO_DRIVER may have armed io_uring's receive, which
            // would take the datagrams before the plain `recvmsg` below.
            io.driver = Driver::Sockets(super::super::rx::RxRing::new(rdma_transport::MAX_PACKET));
            let port = io.reserve_port(0xc322).unwrap();
            // Until the device has a UD QP, received datagrams bring their
            // TOS but not their TTL.
            let marks = IpMarks { tos: 0x6a, hop_limit: 9 };
            let mut stats = IoStats::default();
            assert!(send_one(&io.tx[&port].sockets[0], b"hello", (local, marks), 0, &mut stats));
            let got = receive_control(&io.rx);
            assert_eq!((got.tos, got.hop_limit), (0x6a, None), "{local}: the TTL is not asked for yet");
            io.want_hop_limits();
            for (tos, ttl) in [(0x6b_u8, 9_u8), (0x6a, 64), (0, 255), (0x02, 1), (0x68, 0)] {
                let marks = IpMarks { tos, hop_limit: ttl };
                assert!(send_one(&io.tx[&port].sockets[0], b"hello", (local, marks), 0, &mut stats));
                let got = receive_control(&io.rx);
                let want = if local.is_ipv4() { ttl.max(1) } else { ttl };
                assert_eq!((got.tos, got.hop_limit), (tos, Some(want)), "{local} {marks:?}");
            }
        }
    }

    /// A port sends each TOS from a socket set to it, so that no packet
    /// carries a control message (which costs a connected socket its
    /// cached route), up to [`super::super::TOS_PER_PORT`] values; a TOS
    /// past those leaves from the first socket with a control message. The
    /// receive side sees every TOS as sent, and in the order sent: the
    /// packets of one QP keep their order across the sockets.
    #[test]
    fn each_tos_leaves_from_a_socket_of_its_own_without_a_control_message_and_in_order() {
        for (local, hl) in [("127.31.10.1", 20), ("::1", 40)] {
            let local: IpAddr = local.parse().unwrap();
            let _alone = ipv6_loopback(local);
            let mut io = UdpIo::bind(local, &UdpConfig::default()).unwrap();
            // As above: the plain `recvmsg` below reads the receive socket.
            io.driver = Driver::Sockets(super::super::rx::RxRing::new(rdma_transport::MAX_PACKET));
            let port = io.reserve_port(0xc323).unwrap();
            // Data (ECT(0)), ACK, data, and a second traffic class's data
            // and ACK: four sockets; 0x22 is one TOS too many.
            let sent = [0x02_u8, 0x00, 0x02, 0x62, 0x60, 0x22, 0x00];
            io.tx_meta.clear();
            for (i, &tos) in sent.iter().enumerate() {
                let b = &mut io.tx_bufs[i];
                b[..hl + 8].fill(0);
                if local.is_ipv4() {
                    b[..9].copy_from_slice(&[0x45, tos, 0, 0, 0, 0, 0x40, 0, 64]);
                } else {
                    b[..8].copy_from_slice(&[0x60 | tos >> 4, tos << 4, 0, 0, 0, 0, 17, 64]);
                }
                // A 5-byte "packet": its number, then where the ICRC goes
                // (a connected IPv4 socket's Identification changes it).
                b[hl + 8..hl + 13].copy_from_slice(&[i as u8; 5]);
                io.tx_meta.push(Transmit {
                    len: hl + 13,
                    dest: local,
                    src_port: port,
                    released_ack: false,
                    payload: None,
                });
            }
            io.send_batch(sent.len());
            assert_eq!(io.stats.send_errors, 0);
            let tos_of_sockets: Vec<u8> = io.tx[&port].sockets.iter().map(|t| t.tos).collect();
            assert_eq!(tos_of_sockets, [0x02, 0x00, 0x62, 0x60], "{local}");
            let batch = io.batch.as_ref().unwrap();
            assert_eq!(batch.len, sent.len(), "{local}: one message per packet, the TOS changing every time");
            for (j, &tos) in sent.iter().enumerate() {
                let with_control = batch.msgs[j].msg_hdr.msg_controllen > 0;
                assert_eq!(with_control, tos == 0x22, "{local}: message {j}, TOS {tos:#x}");
            }
            for (i, &tos) in sent.iter().enumerate() {
                let (body, got) = receive(&io.rx);
                assert_eq!((body[0], got.tos), (i as u8, tos), "{local}: datagram {i}");
            }
        }
    }

    /// A round whose messages share a socket takes that socket's numbers
    /// in order, and a check falls between rounds, never inside one: a
    /// probe sent after some of the round's messages had their numbers
    /// would take one of them, and every prediction after it would be
    /// wrong (that is how per-message checks once turned connected sends
    /// off within seconds of a bandwidth test).
    #[test]
    fn checks_across_many_rounds_of_several_messages_per_socket_find_every_prediction_right() {
        let (local, dest): (IpAddr, IpAddr) = ("127.31.11.1".parse().unwrap(), "127.31.11.2".parse().unwrap());
        let _peer = std::net::UdpSocket::bind((dest, ROCE_V2_PORT)).unwrap();
        let mut io = UdpIo::bind(local, &UdpConfig::default()).unwrap();
        io.driver = Driver::Sockets(super::super::rx::RxRing::new(rdma_transport::MAX_PACKET));
        let port = io.reserve_port(0xc324).unwrap();
        // Per round: three data packets (ECT(0)) and an ACK, none of them
        // one GSO run: four messages, three on the first socket (an odd
        // count, so that a check comes due inside a round).
        let round = [(0x02_u8, 300_usize), (0x00, 100), (0x02, 200), (0x02, 250)];
        let rounds = 3 * CHECK_EVERY as usize / 2 + 7;
        for _ in 0..rounds {
            io.tx_meta.clear();
            for (i, &(tos, len)) in round.iter().enumerate() {
                io.tx_bufs[i][..9].copy_from_slice(&[0x45, tos, 0, 0, 0, 0, 0x40, 0, 64]);
                io.tx_meta.push(Transmit { len, dest, src_port: port, released_ack: false, payload: None });
            }
            io.send_batch(round.len());
        }
        if io.stats.ident_probes == 0 {
            eprintln!("SKIPPED: this kernel gives no transmit timestamps with data");
            return;
        }
        let s = &io.stats;
        assert_eq!((s.send_errors, s.ident_mismatches), (0, 0));
        assert!(io.connect, "still connected");
        assert_eq!(s.connected_sends, (rounds * round.len()) as u64, "every packet left connected");
        // The first socket took 3 numbers a round: checked at least 3 times
        // after its first probe; the ACK socket at least once after its.
        assert!(s.ident_probes >= 6, "{} probes", s.ident_probes);
    }

    /// The control messages of the next datagram on `rx` (waiting up to a second).
    fn receive_control(rx: &Socket) -> super::super::rx::Control {
        receive(rx).1
    }

    /// The next datagram on `rx`, 5 bytes, and its control messages
    /// (waiting up to a second).
    fn receive(rx: &Socket) -> ([u8; 5], super::super::rx::Control) {
        let mut data = [0u8; 64];
        let mut control = [0u64; super::super::rx::CMSG_ROOM / 8];
        for _ in 0..1000 {
            let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
            // SAFETY: all-zero msghdr is valid; the pointers set are live buffers of their lengths.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_iov = &mut iov;
            h.msg_iovlen = 1;
            h.msg_control = control.as_mut_ptr().cast();
            h.msg_controllen = std::mem::size_of_val(&control);
            // SAFETY: as above.
            let n = unsafe { libc::recvmsg(rx.as_raw_fd(), &mut h, libc::MSG_DONTWAIT) };
            if n >= 0 {
                assert_eq!(n, 5);
                assert_eq!(h.msg_flags & libc::MSG_CTRUNC, 0, "control messages cut short");
                return (data[..5].try_into().unwrap(), super::super::rx::read_control(&h));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("no datagram: {}", io::Error::last_os_error());
    }

    /// A send the send path did not count (here one made behind its back)
    /// puts the prediction off. The next check finds it, counts it and
    /// learns the number again; after [`MAX_MISMATCHES`] the device stops
    /// connecting, and its sockets write Identification 0 again.
    #[test]
    fn a_check_finds_a_wrong_prediction_and_learns_the_number_again() {
        let (local, dest): (IpAddr, IpAddr) = ("127.31.7.1".parse().unwrap(), "127.31.7.2".parse().unwrap());
        // The peer: listening, so that no ICMP error fails the sends.
        let _peer = std::net::UdpSocket::bind((dest, ROCE_V2_PORT)).unwrap();
        let mut io = UdpIo::bind(local, &UdpConfig::default()).unwrap();
        let port = io.reserve_port(0xc123).unwrap();
        let (sink, sink_addr) = open_sink(local).unwrap();
        let first = SocketId { port, lane: 0 };
        fn conn(io: &mut UdpIo) -> &mut connected::Connection {
            &mut io.tx.get_mut(&0xc123).unwrap().sockets[0].conn
        }
        let truth = |io: &UdpIo| {
            connected::probe(&io.tx[&port].sockets[0].socket, &sink, &sink_addr).map(|id| id.wrapping_add(1))
        };
        io.prepare(first, dest);
        if conn(&mut io).next_ident.is_none() {
            eprintln!("SKIPPED: this kernel gives no transmit timestamps with data");
            return;
        }
        assert_eq!(io.stats.ident_probes, 1);
        for round in 1..=MAX_MISMATCHES {
            // An outside probe takes the predicted number: the prediction is now one short.
            let predicted = conn(&mut io).next_ident.unwrap();
            let next = truth(&io).unwrap();
            assert_eq!(next, predicted.wrapping_add(1), "the outside probe took the predicted number");
            conn(&mut io).sends = CHECK_EVERY;
            io.prepare(first, dest);
            assert_eq!(io.stats.ident_mismatches, round);
            if round < MAX_MISMATCHES {
                let learned = conn(&mut io).next_ident.expect("learned again");
                assert_eq!(learned, next.wrapping_add(1), "the check's own probe took `next`");
                assert_eq!(truth(&io).unwrap(), learned.wrapping_add(1), "what the kernel writes agrees");
                // Make the outside probe above the only unseen send again.
                conn(&mut io).next_ident = Some(learned.wrapping_add(1));
            }
        }
        assert!(!io.connect, "too many wrong predictions: the device stops connecting");
        assert!(conn(&mut io).peer.is_none() && conn(&mut io).next_ident.is_none());
        assert_eq!(truth(&io).unwrap(), 1, "unconnected again: Identification 0");
    }
}
