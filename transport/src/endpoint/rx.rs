//! The receive path: parse a packet of the device's link kind (RoCE v2,
//! RoCE v1 or native IB), check its ICRC (recovering an unknown IPv4
//! Identification) and VCRC, count CE marks, check P_Key, transport and
//! source address against the QP, and hand it to the completer
//! (responses) or the responder (requests).

use super::Endpoint;
use crate::events::AsyncEvent;
use crate::framing::LinkKind;
use crate::mcast::{is_multicast_gid, is_multicast_lid, MULTICAST_QPN};
use crate::net_header::NetHeader;
use crate::qp::{AddressVector, QpState, QpType, ECN_CE, ECN_MASK};
use crate::responder::RespCtx;
use crate::stats::Drop;
use crate::time::Instant;
use crate::wr::roce_packet_type;
use core::net::IpAddr;
use rdma_wire::mad::GSI_QPN;
use rdma_wire::{DatagramHeaders, IbPacket, Opcode, Operation, RoceV1Packet, RoceV2Packet, Transport, TransportPacket};

/// Who sent a packet, as the link addresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    /// RoCE: the source IP address or GID.
    Gid(IpAddr),
    /// Native IB: the source LID, and the source GID when a GRH came.
    Lid(u16, Option<IpAddr>),
}

impl Peer {
    /// Whether the packet came from the peer `av` names.
    #[inline]
    fn is(self, av: &AddressVector) -> bool {
        match self {
            Peer::Gid(g) => av.dest.to_canonical() == g,
            Peer::Lid(l, _) => av.dlid == l,
        }
    }

    /// The GID to answer a MAD at, if the packet carried one.
    fn gid(self) -> Option<IpAddr> {
        match self {
            Peer::Gid(g) | Peer::Lid(_, Some(g)) => Some(g),
            Peer::Lid(_, None) => None,
        }
    }
}

/// Where a packet was addressed, for multicast delivery: a multicast GID
/// or IP address, a multicast LID (native IB without a GRH), or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Unicast,
    Group(IpAddr),
    GroupLid(u16),
}

impl To {
    fn of_gid(dst: IpAddr) -> To {
        if is_multicast_gid(dst) {
            To::Group(dst.to_canonical())
        } else {
            To::Unicast
        }
    }
}

impl Endpoint {
    /// Handles one received packet of the device's link kind: for RoCE v2
    /// the IP header through the ICRC, for RoCE v1 the GRH through the
    /// ICRC, for native IB the LRH through the VCRC (without the Ethernet
    /// header a raw link wraps them in). Anything wrong with it is counted
    /// and traced, never returned: a network peer cannot make the
    /// endpoint fail.
    pub fn handle_packet(&mut self, now: Instant, l3: &[u8]) {
        self.receive(now, l3);
        self.settle_cq_errors();
    }

    /// Handles one RoCE v2 packet a UDP socket received: `packet` runs
    /// from the BTH through the ICRC, and the IP and UDP headers the
    /// kernel took off come as the values it reported (`headers`). The
    /// same checks and outcome as [`Endpoint::handle_packet`] over the
    /// packet with those headers in front, without writing them: the ICRC
    /// is computed from the values ([`rdma_wire::icrc::roce_v2_datagram`]).
    pub fn handle_datagram(&mut self, now: Instant, headers: &DatagramHeaders, packet: &[u8]) {
        self.touch_some();
        self.stats.packets_received += 1;
        self.receive_datagram(now, headers, packet);
        self.settle_cq_errors();
    }

    fn receive(&mut self, now: Instant, l3: &[u8]) {
        // The QP it reaches, if any, is marked in `deliver`/`receive_cnp`.
        self.touch_some();
        self.stats.packets_received += 1;
        match self.port.framer.link {
            LinkKind::RoceV2 => self.receive_roce_v2(now, l3),
            LinkKind::RoceV1 => self.receive_roce_v1(now, l3),
            LinkKind::Ib => self.receive_ib(now, l3),
        }
    }

    #[inline(never)]
    fn receive_roce_v1(&mut self, now: Instant, packet: &[u8]) {
        let p = match RoceV1Packet::new_checked(packet) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "malformed RoCE v1 packet");
                self.stats.drop(Drop::Malformed, 0);
                return;
            }
        };
        if !p.icrc_ok() {
            self.stats.drop(Drop::IcrcMismatch, 0);
            return;
        }
        let grh = p.grh();
        let to = To::of_gid(IpAddr::V6(grh.dst()));
        // Frames reach us by MAC; the GRH must name this port (or a group) too.
        if to == To::Unicast && IpAddr::V6(grh.dst()).to_canonical() != self.port.framer.local.to_canonical() {
            tracing::debug!(dgid = %grh.dst(), "RoCE v1 packet for another GID");
            self.stats.drop(Drop::GidMismatch, 0);
            return;
        }
        let src = Peer::Gid(IpAddr::V6(grh.src()).to_canonical());
        let ecn = grh.traffic_class() & ECN_MASK;
        self.dispatch(now, &p.transport(), src, to, ecn, NetHeader::Bytes(&packet[..40]), roce_packet_type::ROCE_V1);
    }

    #[inline(never)]
    fn receive_ib(&mut self, now: Instant, packet: &[u8]) {
        let p = match IbPacket::new_checked(packet) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "malformed IB packet");
                self.stats.drop(Drop::Malformed, 0);
                return;
            }
        };
        // The VCRC first: a link-level error, checked hop by hop.
        if !p.vcrc_ok() {
            self.stats.drop(Drop::VcrcMismatch, 0);
            return;
        }
        if !p.icrc_ok() {
            self.stats.drop(Drop::IcrcMismatch, 0);
            return;
        }
        let lrh = p.lrh();
        // 0xFFFF is the permissive LID, which any port accepts; a
        // multicast LID reaches every member port (the SM's forwarding).
        let group_lid = is_multicast_lid(lrh.dlid());
        if lrh.dlid() != self.port.framer.lid && lrh.dlid() != 0xffff && !group_lid {
            tracing::debug!(dlid = lrh.dlid(), lid = self.port.framer.lid, "IB packet for another LID");
            self.stats.drop(Drop::LidMismatch, 0);
            return;
        }
        let (src, ecn, grh, to) = match p.grh() {
            Some(g) => {
                let gid = IpAddr::V6(g.src()).to_canonical();
                let to = if group_lid { To::of_gid(IpAddr::V6(g.dst())) } else { To::Unicast };
                (Peer::Lid(lrh.slid(), Some(gid)), g.traffic_class() & ECN_MASK, &packet[8..48], to)
            }
            None => {
                let to = if group_lid { To::GroupLid(lrh.dlid()) } else { To::Unicast };
                (Peer::Lid(lrh.slid(), None), 0, &packet[..0], to)
            }
        };
        self.dispatch(now, &p.transport(), src, to, ecn, NetHeader::Bytes(grh), lrh.sl());
    }

    fn receive_datagram(&mut self, now: Instant, headers: &DatagramHeaders, packet: &[u8]) {
        if self.port.framer.link != LinkKind::RoceV2 {
            tracing::debug!(link = ?self.port.framer.link, "a UDP datagram for a device that is not RoCE v2");
            self.stats.drop(Drop::Malformed, 0);
            return;
        }
        // The ICRC's pseudo-header also checks that the headers can carry
        // the packet (family, lengths): one pass over them.
        let checked = TransportPacket::new_checked(packet).and_then(|t| {
            // The parse proved the packet ends in an ICRC.
            let body = &packet[..packet.len() - rdma_wire::transport_packet::ICRC_LEN];
            Ok((t, rdma_wire::icrc::roce_v2_datagram(headers, body)?))
        });
        let (t, computed) = match checked {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "malformed packet");
                self.stats.drop(Drop::Malformed, 0);
                return;
            }
        };
        let carried = t.icrc();
        let v4 = headers.dst.is_ipv4();
        if computed != carried {
            // As in receive_roce_v2: the IPv4 Identification a socket does not show.
            let l3_len = headers.headers_len() + packet.len();
            let recovered = match &mut self.port.ident_recovery {
                Some(r) if v4 => r.recover(l3_len, computed, carried).is_some(),
                _ => false,
            };
            if !recovered {
                self.stats.drop(Drop::IcrcMismatch, 0);
                return;
            }
            self.stats.ipv4_ident_recovered += 1;
        }
        let sl = if v4 { roce_packet_type::ROCE_V2_IPV4 } else { roce_packet_type::ROCE_V2_IPV6 };
        let (src, to) = (Peer::Gid(headers.source()), To::of_gid(headers.dst));
        self.dispatch(now, &t, src, to, headers.ecn(), NetHeader::Datagram(headers, packet.len()), sl);
    }

    fn receive_roce_v2(&mut self, now: Instant, l3: &[u8]) {
        let p = match RoceV2Packet::new_checked(l3) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "malformed packet");
                self.stats.drop(Drop::Malformed, 0);
                return;
            }
        };
        let (computed, carried) = (p.computed_icrc(), p.transport().icrc());
        if computed != carried {
            // Behind a UDP socket the IPv4 Identification is unknown (taken
            // as 0): solve for it rather than skip the check (see rdma_wire::ident).
            let recovered = match (&mut self.port.ident_recovery, p.ipv4()) {
                (Some(r), Some(_)) => r.recover(l3.len(), computed, carried).is_some(),
                _ => false,
            };
            if !recovered {
                self.stats.drop(Drop::IcrcMismatch, 0);
                return;
            }
            self.stats.ipv4_ident_recovered += 1;
        }
        let (src, dst, ecn, ip_len, sl) = match (p.ipv4(), p.ipv6()) {
            (Some(h), _) => (IpAddr::V4(h.src()), IpAddr::V4(h.dst()), h.ecn(), 20, roce_packet_type::ROCE_V2_IPV4),
            (_, Some(h)) => (
                IpAddr::V6(h.src()).to_canonical(),
                IpAddr::V6(h.dst()),
                h.traffic_class() & 3,
                40,
                roce_packet_type::ROCE_V2_IPV6,
            ),
            _ => unreachable!("a checked packet is IPv4 or IPv6"),
        };
        self.dispatch(now, &p.transport(), Peer::Gid(src), To::of_gid(dst), ecn, NetHeader::Bytes(&l3[..ip_len]), sl);
    }

    /// The checks and the hand-off common to every link kind, for a packet
    /// whose CRCs are good: `net` is where its IP header or GRH is (what a
    /// UD receive gets in its first 40 bytes); `sl` what a
    /// UD receive of it reports as its SL (the LRH's on IB, the packet type
    /// on RoCE: [`roce_packet_type`]).
    #[inline]
    #[allow(clippy::too_many_arguments)] // what every link kind hands on, one value each
    fn dispatch(
        &mut self,
        now: Instant,
        t: &TransportPacket<&[u8]>,
        src: Peer,
        to: To,
        ecn: u8,
        net: NetHeader<'_>,
        sl: u8,
    ) {
        let ce = ecn & ECN_MASK == ECN_CE;
        if ce {
            self.stats.ecn_ce_received += 1;
        }
        let bth = t.bth();
        let qpn = bth.dest_qp();
        if t.info().transport == Transport::Cnp {
            self.receive_cnp(now, qpn, bth.pkey(), src);
            return;
        }
        // QP1 is no QP of the table (created QPs start at 0x11): the one
        // comparison the GSI adds to the path of every other packet.
        if qpn == GSI_QPN {
            self.receive_gsi(t, src);
            return;
        }
        if qpn == MULTICAST_QPN {
            self.receive_mcast(now, t, src, to, ce, net, sl);
            return;
        }
        self.deliver(now, t, qpn, src, ce, net, sl);
    }

    /// A multicast packet (DQPN 0xFFFFFF): a copy to every QP attached to
    /// the group it was sent to, each through the checks of its own QP
    /// (P_Key, UD, Q_Key, a receive WQE), as rxe's `rxe_rcv_mcast_pkt`.
    /// No group, or a unicast destination: dropped, and no QP sees it.
    #[allow(clippy::too_many_arguments)] // the packet and what its link said of it
    fn receive_mcast(
        &mut self,
        now: Instant,
        t: &TransportPacket<&[u8]>,
        src: Peer,
        to: To,
        ce: bool,
        net: NetHeader<'_>,
        sl: u8,
    ) {
        if t.info().transport != Transport::Ud {
            self.stats.drop(Drop::WrongTransport, MULTICAST_QPN);
            return;
        }
        let members = match to {
            To::Group(gid) => self.mcast.members(gid),
            To::GroupLid(lid) => self.mcast.members_by_lid(lid),
            To::Unicast => None,
        };
        let Some(members) = members else {
            tracing::debug!(?to, "multicast packet for no group of this device");
            self.stats.drop(Drop::NoMulticastGroup, MULTICAST_QPN);
            return;
        };
        tracing::trace!(?to, members = members.as_slice().len(), "multicast packet");
        for &qpn in members.as_slice() {
            self.deliver(now, t, qpn, src, ce, net, sl);
        }
    }

    /// The checks of QP `qpn` and the hand-off to its completer or responder.
    #[inline]
    #[allow(clippy::too_many_arguments)] // the packet and what its link said of it
    fn deliver(
        &mut self,
        now: Instant,
        t: &TransportPacket<&[u8]>,
        qpn: u32,
        src: Peer,
        ce: bool,
        net: NetHeader<'_>,
        sl: u8,
    ) {
        let bth = t.bth();
        let agenda_on = self.agenda_on();
        let Some(qp) = self.qps.get_mut(qpn) else {
            self.stats.drop(Drop::UnknownQp, qpn);
            return;
        };
        if agenda_on {
            self.sched.agenda.get_mut().mark(qpn);
        }
        if bth.pkey() & 0x7fff != qp.params.pkey & 0x7fff {
            self.stats.drop(Drop::PkeyMismatch, qpn);
            return;
        }
        // Bit 15 is the membership: two limited members of a partition
        // may not talk to each other (IBTA 10.9.3).
        if bth.pkey() & 0x8000 == 0 && qp.params.pkey & 0x8000 == 0 {
            self.stats.drop(Drop::PkeyLimitedMembers, qpn);
            return;
        }
        let transport_ok = match (t.info().transport, qp.init.qp_type) {
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud) => true,
            // XRC: requests go to the target, responses to the initiator.
            (Transport::Xrc, QpType::XrcRecv) => t.info().is_request,
            (Transport::Xrc, QpType::XrcSend) => !t.info().is_request,
            _ => false,
        };
        if !transport_ok {
            self.stats.drop(Drop::WrongTransport, qpn);
            return;
        }
        if qp.init.qp_type != QpType::Ud && qp.params.av.is_some_and(|av| !src.is(&av)) {
            self.stats.drop(Drop::AddressMismatch, qpn);
            return;
        }
        // Counted for the QP only once the packet is known to be its own.
        if ce {
            qp.stats.ecn_ce_received += 1;
            tracing::trace!(qpn, "CE-marked packet received");
        }
        let was_error = qp.state == QpState::Err;
        let op = t.info().operation;
        let is_response =
            matches!(op, Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::RdmaReadResponse);
        // The notification point: CE-marked data (a request or a READ
        // response) of a connected QP that can answer. Unmarked traffic never gets here.
        if ce
            && qp.init.qp_type != QpType::Ud
            && qp.can_receive()
            && qp.params.av.is_some()
            && !matches!(op, Operation::Acknowledge | Operation::AtomicAcknowledge)
        {
            qp.cc.get_or_insert_with(Default::default).on_ce_marked(now, &self.cc.np, &mut qp.timers);
        }
        if is_response {
            // A controller hears of positive answers only: a NAK's PSN
            // names what did not arrive, and times nothing.
            let comp = qp.cc.as_ref().and_then(|cc| cc.rate.as_ref()).map(|_| qp.req.sq.comp_psn());
            qp.handle_response(now, t, &self.mrs, &mut self.cqs, &mut self.stats);
            if let (Some(comp), Some(cc)) = (comp, qp.cc.as_mut()) {
                let positive = op != Operation::Acknowledge || t.aeth().is_some_and(|a| a.syndrome().is_ack());
                if positive {
                    let acked = qp.req.sq.comp_psn().distance_from(comp);
                    cc.on_ack(now, t.bth().psn(), acked, &mut qp.stats, &mut self.stats, &mut qp.timers);
                }
            }
        } else {
            if let Some(xrcd) = qp.xrcd {
                // The XRC SRQ the XRCETH names, if it is one of this QP's
                // domain: its PD and CQ serve this request; else the
                // responder NAKs it (Invalid Request) and touches nothing.
                qp.xrc_target = t.xrceth().and_then(|x| self.srqs.xrc_target(x.xrc_srq(), xrcd));
            }
            let mut ctx =
                RespCtx { mrs: &self.mrs, cqs: &mut self.cqs, srqs: &mut self.srqs, stats: &mut self.stats, net, sl };
            qp.handle_request(t, &mut ctx);
            if let Some(rkey) = qp.take_invalidation() {
                // A SEND with invalidate completed: the responder checked
                // the key. On a device of several engines another engine
                // may have invalidated or freed the window since (they
                // share the window table): then it is unbound already.
                let pd = qp.xrc_target.map_or(qp.init.pd, |(_, pd, _)| pd);
                if let Err(e) = self.mrs.invalidate(rkey, pd, Some(qpn)) {
                    tracing::debug!(qpn, error = %e, "a checked invalidation found the window changed");
                }
                // A region other QPs may use changed.
                self.sched.agenda.get_mut().mark_all();
            }
        }
        if !was_error && qp.state == QpState::Err {
            self.events.push_back(AsyncEvent::QpFatal(qpn));
        }
    }

    /// A packet for QP1 (its ICRC checked): a UD SEND Only whose P_Key is
    /// in the port's table goes to the GSI's MAD checks; anything else is
    /// dropped with its reason.
    fn receive_gsi(&mut self, t: &TransportPacket<&[u8]>, src: Peer) {
        if t.bth().opcode() != Opcode::UD_SEND_ONLY {
            self.stats.drop(Drop::WrongTransport, GSI_QPN);
            return;
        }
        let pkey = t.bth().pkey() & 0x7fff;
        if !self.port.pkeys.iter().any(|k| k & 0x7fff == pkey) {
            self.stats.drop(Drop::PkeyMismatch, GSI_QPN);
            return;
        }
        let Some(deth) = t.deth() else {
            self.stats.drop(Drop::Malformed, GSI_QPN);
            return;
        };
        let Some(gid) = src.gid() else {
            self.stats.drop(Drop::MadNoGid, GSI_QPN);
            return;
        };
        if let Peer::Lid(slid, _) = src {
            // The answer goes back to the LID the MAD came from.
            self.port.paths.set(gid, slid);
        }
        let src = gid;
        let gsi = self.gsi.get();
        gsi.receive(src, deth.qkey(), deth.src_qp(), t.payload(), &mut self.stats);
    }

    /// A CNP (its ICRC checked): for one of our RC/UC QPs, from that QP's
    /// peer, it is counted and, with congestion control on, cuts the QP's
    /// rate; anything else is dropped with its reason, so that a stray or
    /// forged CNP cannot slow a QP it does not belong to.
    fn receive_cnp(&mut self, now: Instant, qpn: u32, pkey: u16, src: Peer) {
        let agenda_on = self.agenda_on();
        let Some(qp) = self.qps.get_mut(qpn) else {
            self.stats.drop(Drop::UnknownQp, qpn);
            return;
        };
        // Only a QP that exists: a forged QPN must not enter the agenda.
        if agenda_on {
            self.sched.agenda.get_mut().mark(qpn);
        }
        let why = if qp.init.qp_type == QpType::Ud {
            Some(Drop::WrongTransport)
        } else if pkey & 0x7fff != qp.params.pkey & 0x7fff {
            Some(Drop::PkeyMismatch)
        } else if qp.params.av.is_none_or(|av| !src.is(&av)) {
            Some(Drop::AddressMismatch)
        } else {
            None
        };
        if let Some(why) = why {
            self.stats.drop(why, qpn);
            return;
        }
        self.stats.cnps_received += 1;
        qp.stats.cnps_received += 1;
        tracing::debug!(qpn, "CNP received");
        if let Some(cc) = qp.cc.as_mut() {
            cc.on_cnp(now, &mut qp.stats, &mut self.stats, &mut qp.timers);
        }
    }

    /// Asks for the state of the QP whose timer is likely the device's
    /// next, for a simulator that knows this device's deadline comes
    /// before its next packet (a QP the pacer releases, on a host of
    /// hundreds of QPs, is cold by then). A hint like [`Self::prefetch_for`].
    pub fn prefetch_due(&self) {
        let Ok(agenda) = self.sched.agenda.try_borrow() else { return };
        if let Some(qp) = agenda.earliest_hint().and_then(|qpn| self.qps.get(qpn)) {
            qp.prefetch(false);
        }
    }

    /// A hint: a packet with these bytes (as [`Endpoint::handle_packet`]
    /// takes them) is about to arrive, so the state of the QP it is for
    /// is asked into the cache now. Changes nothing; a packet it cannot
    /// read is ignored.
    ///
    /// `deep` asks instead for what the QP points to (its oldest WQEs),
    /// which reads the QP itself: for a packet whose QP was asked for
    /// shallowly one event earlier (`Qp::prefetch`).
    pub fn prefetch_for(&self, l3: &[u8], deep: bool) {
        if let Some(qp) = self.port.framer.dest_qpn(l3).and_then(|qpn| self.qps.get(qpn)) {
            qp.prefetch(deep);
        }
    }
}
