//! The driver of every link: a loop between the engine and a [`Link`].
//! It wraps each packet the engine writes (RoCE v1: GRH..ICRC; native IB:
//! LRH..VCRC) in an Ethernet header, and hands the engine the packet of
//! each frame of the right EtherType that arrives. A RoCE v2 link (the UDP
//! backend as a link) takes the engine's packets as they are, and gives
//! each received packet with its headers as typed values, which go to the
//! engine as such (`Endpoint::handle_datagram`).
//!
//! Destination MAC addresses: a RoCE v1 GID is made from its port's MAC
//! (EUI-64), so the MAC comes from the GID; an IB packet names a LID,
//! which this driver maps to the MAC it last heard that LID from (the
//! SLID of received frames addressed to this port's LID), broadcasting
//! until it has heard from it, as a learning switch floods unknown
//! destinations. The engine drops packets for another LID
//! (`Drop::LidMismatch`).

use rdma_link::io_stats::IoStats;
use rdma_link::{ethertype, mac_of_gid, Link, Mac, BROADCAST, ETH_HEADER};
use rdma_transport::{Endpoint, Instant, LinkKind, MAX_PACKET};
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;

/// Frames received per call of [`FrameIo::receive`].
pub const RX_BATCH: usize = 32;
/// Frames sent per call of [`FrameIo::transmit`] before it yields the
/// device lock (the caller comes back for the rest).
pub const TX_PER_CALL: usize = 256;

/// The frame driver of one device.
pub(crate) struct FrameIo {
    link: Box<dyn Link>,
    kind: LinkKind,
    /// The EtherType of the link's frames; `None` on RoCE v2 (no Ethernet
    /// header).
    ethertype: Option<u16>,
    /// Bytes of Ethernet header in front of each packet (0 on RoCE v2).
    eth: usize,
    mac: Mac,
    tx: Vec<u8>,
    rx: Vec<u8>,
    /// LID to MAC, learned from received IB frames.
    lids: HashMap<u16, Mac>,
    tx_left: bool,
    pub(crate) stats: IoStats,
}

impl FrameIo {
    pub(crate) fn new(link: Box<dyn Link>) -> io::Result<FrameIo> {
        let caps = link.caps();
        if caps.segmentation_offload || caps.by_reference {
            // This driver hands a link one whole packet at a time.
            tracing::debug!(?caps, "a link that offloads more than this driver uses");
        }
        let kind = caps.kind;
        let ethertype = ethertype(kind);
        let mac = link.mac();
        Ok(FrameIo {
            link,
            kind,
            ethertype,
            eth: if ethertype.is_some() { ETH_HEADER } else { 0 },
            mac,
            tx: vec![0u8; ETH_HEADER + MAX_PACKET],
            rx: vec![0u8; ETH_HEADER + MAX_PACKET + 64],
            lids: HashMap::new(),
            tx_left: false,
            stats: IoStats::default(),
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.link.fd()
    }

    /// The counters, with what a fault injector in the link did.
    pub(crate) fn stats(&self) -> IoStats {
        let mut s = self.stats.clone();
        s.set_faults(self.link.fault_counts());
        s
    }

    /// The largest Ethernet frame the link carries; `None` on RoCE v2,
    /// whose packets have no Ethernet header (the kernel sizes them).
    pub(crate) fn max_frame(&self) -> Option<usize> {
        self.ethertype.map(|_| self.link.caps().max_frame)
    }

    /// See [`Link::join_group`].
    pub(crate) fn join_group(&mut self, mgid: std::net::IpAddr) -> io::Result<()> {
        self.link.join_group(mgid)
    }

    /// See [`Link::leave_group`].
    pub(crate) fn leave_group(&mut self, mgid: std::net::IpAddr) {
        self.link.leave_group(mgid)
    }

    pub(crate) fn sends_left(&self) -> bool {
        self.tx_left
    }

    /// Hands the engine up to [`RX_BATCH`] frames; returns how many came.
    pub(crate) fn receive(&mut self, ep: &mut Endpoint, now: Instant) -> io::Result<usize> {
        let mut n = 0;
        while n < RX_BATCH {
            let Some(meta) = self.link.recv(&mut self.rx)? else { break };
            n += 1;
            let frame = &self.rx[..meta.len];
            let Some(ethertype) = self.ethertype else {
                // RoCE v2: the packet from its BTH, its headers typed.
                self.stats.datagrams_received += 1;
                match &meta.datagram {
                    Some(h) => ep.handle_datagram(now, h, frame),
                    None => tracing::debug!(len = frame.len(), "a RoCE v2 packet without its headers dropped"),
                }
                continue;
            };
            if frame.len() < ETH_HEADER || u16::from_be_bytes([frame[12], frame[13]]) != ethertype {
                continue; // other traffic on the interface (ARP, IPv6 ND, ...)
            }
            self.stats.datagrams_received += 1;
            let packet = &frame[ETH_HEADER..];
            // VL15 carries SMPs for the port's SMA (a port agent, or nobody),
            // never for the engine, which has no QP0.
            if self.kind == LinkKind::Ib && packet.first().is_some_and(|b| b >> 4 == 15) {
                tracing::trace!(len = packet.len(), "VL15 frame left to the port agent");
                continue;
            }
            // Learn only from packets addressed to this port's LID whose
            // CRCs hold: a frame for another port, or a corrupted one, must
            // not move where our packets go. The CRCs (which the engine
            // checks again) are computed only for a frame that would move
            // the table, not for every frame from a peer already known.
            if self.kind == LinkKind::Ib && packet.len() >= 8 && packet[2..4] == ep.lid().to_be_bytes() {
                let slid = u16::from_be_bytes([packet[6], packet[7]]);
                if self.lids.get(&slid) != Some(&meta.src) && crcs_hold(packet) {
                    self.stats.lids_learned += 1;
                    self.lids.insert(slid, meta.src);
                }
            }
            tracing::trace!(len = packet.len(), src = ?meta.src, "frame received");
            ep.handle_packet(now, packet);
        }
        if n > 0 {
            self.flush();
        }
        Ok(n)
    }

    /// The end of a burst: see [`Link::flush`].
    fn flush(&mut self) {
        if let Err(e) = self.link.flush() {
            tracing::warn!(error = %e, "the link could not flush");
        }
    }

    /// Sends what the engine has, up to [`TX_PER_CALL`] frames; returns how many.
    pub(crate) fn transmit(&mut self, ep: &mut Endpoint, now: Instant) -> io::Result<usize> {
        self.tx_left = false;
        let mut n = 0;
        while n < TX_PER_CALL {
            let eth = self.eth;
            let Some(t) = ep.poll_transmit(now, &mut self.tx[eth..]) else {
                if n > 0 {
                    self.flush();
                }
                return Ok(n);
            };
            debug_assert!(t.payload.is_none(), "links driven here take payloads copied");
            if let Some(ethertype) = self.ethertype {
                let packet = &self.tx[ETH_HEADER..ETH_HEADER + t.len];
                let dst = match self.kind {
                    LinkKind::Ib => self.lids.get(&u16::from_be_bytes([packet[2], packet[3]])).copied(),
                    _ => mac_of_gid(t.dest),
                }
                .unwrap_or(BROADCAST);
                self.tx[..6].copy_from_slice(&dst);
                self.tx[6..12].copy_from_slice(&self.mac);
                self.tx[12..14].copy_from_slice(&ethertype.to_be_bytes());
            }
            self.stats.send_syscalls += 1;
            match self.link.send(&self.tx[..eth + t.len]) {
                Ok(()) => self.stats.datagrams_sent += 1,
                Err(e) => {
                    // Lost like a dropped frame: the transport retransmits.
                    self.stats.send_errors += 1;
                    tracing::debug!(error = %e, len = t.len, "frame not sent");
                }
            }
            n += 1;
        }
        self.tx_left = true;
        self.flush();
        Ok(n)
    }
}

/// Whether a native IB packet's VCRC and ICRC both check.
fn crcs_hold(packet: &[u8]) -> bool {
    rdma_wire::IbPacket::new_checked(packet).is_ok_and(|p| p.vcrc_ok() && p.icrc_ok())
}
