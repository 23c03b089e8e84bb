//! The IB side of the event loop: a port sends flow-control packets first,
//! then VL15, then the data VL that VL arbitration picks among those whose
//! head packet has credit; a switch charges an arriving packet to its input
//! port's VL buffer until it leaves by the output the LFT gives, and only
//! then returns the credit upstream; a host consumes at once. Written once
//! over a `Site`, for both loops (see `crate::handlers`).

use crate::clock::Event;
use crate::ib::capture::{ERF_INFINIBAND, ERF_INFINIBAND_LINK};
use crate::ib::credit::{blocks, FC_LEN};
use crate::ib::{frame, Queued, SL2VL_DROP, VL15};
use crate::multipath::{pick, Multipath};
use crate::packet::Packet;
use crate::site::Site;
use crate::topology::{Node, Port};

/// Packets a host pulls from its engine ahead of the link while none can go.
pub(crate) const HOST_AHEAD: usize = 4;

/// The IB link layer's handlers, for every [`Site`].
pub(crate) trait IbLink: Site {
    /// Every data VL of the port is owed a flow-control packet; again after a period.
    fn ib_fc_period(&mut self, node: usize, port: usize) {
        let Some(period) = self.ib().map(|c| c.fc_period) else { return };
        let Some(ib) = self.port(node, port).ib.as_mut() else { return };
        ib.fc_dirty = (1u16 << ib.vls.len()) - 1;
        let at = self.now() + period;
        self.schedule(node, at, Event::FcPeriod { node, port });
        self.ib_wake(node, port);
    }

    /// Tries to send on an IB port (hosts first pull from their engine).
    fn ib_wake(&mut self, node: usize, port: usize) {
        match self.node(node) {
            Node::Host(h) => self.ib_host_send(h),
            Node::Switch(_) => self.ib_send(node, port),
        }
    }

    /// Puts the next thing on an idle IB port's link.
    fn ib_send(&mut self, node: usize, port: usize) {
        let p = self.port(node, port);
        if p.busy {
            return;
        }
        let Some(ib) = p.ib.as_mut() else { return };
        if let Some(frame) = ib.next_fc_packet() {
            return self.launch_fc(node, port, frame);
        }
        let next = ib.next_packet();
        if let (true, Some(q)) = (self.capturing(), next.as_ref()) {
            self.capture(ERF_INFINIBAND, &q.frame);
        }
        let Some(q) = next else { return };
        if let Some((in_port, in_vl)) = q.from {
            // The packet leaves the switch: its input buffer frees and the
            // upstream hears of it.
            if let Some(iib) = self.port(node, in_port).ib.as_mut() {
                iib.free_input(in_vl, q.blocks);
            }
            if let Node::Switch(sw) = self.node(node) {
                self.switch(node, sw).egress[port].data_sent += 1;
            }
            if in_port != port {
                self.ib_send(node, in_port);
            }
        }
        self.launch_len(node, port, Packet::from(q.frame), q.wire_len);
    }

    fn launch_fc(&mut self, node: usize, port: usize, mut frame: [u8; FC_LEN]) {
        if self.capturing() {
            self.capture(ERF_INFINIBAND_LINK, &frame);
        }
        let (loss, corrupt) = self.ib().map_or((0.0, 0.0), |c| (c.fc_loss, c.fc_corrupt));
        let (at, peer, peer_port) = self.occupy(node, port, FC_LEN);
        if self.rng().chance(loss) {
            if let Some(ib) = self.port(node, port).ib.as_mut() {
                ib.counters.fc_lost += 1;
            }
            return;
        }
        if self.rng().chance(corrupt) {
            let rng = self.rng();
            frame[(rng.below(FC_LEN as u64)) as usize] ^= 1 << rng.below(8);
        }
        self.schedule(peer, at, Event::FlowControl { node: peer, port: peer_port, frame });
    }

    /// A flow-control packet arrives: resync ABR, take the new limit, and
    /// see whether something can go now.
    fn ib_receive_fc(&mut self, node: usize, port: usize, frame: &[u8]) {
        let Some(ib) = self.port(node, port).ib.as_mut() else { return };
        if ib.take_fc_packet(frame) {
            self.ib_wake(node, port);
        }
    }

    /// A host port: pull packets from the engine (native IB frames) while
    /// none is ready to go, then send.
    fn ib_host_send(&mut self, h: usize) {
        let node = self.host_node(h);
        loop {
            let p = self.port(node, 0);
            let Some(ib) = p.ib.as_ref() else { return };
            if !ib.wants_host_packet(p.busy, HOST_AHEAD) {
                break;
            }
            let Some(f) = self.next_packet(h) else { break };
            self.ib_host_enqueue(node, f.into_bytes());
        }
        self.ib_send(node, 0);
    }

    /// Queues a packet of a host's engine on its port: on the data or the
    /// control SL by what it carries, on that SL's VL.
    fn ib_host_enqueue(&mut self, node: usize, f: Vec<u8>) {
        let (ports, cfg) = self.ports_and_ib(node);
        ports[0].ib.as_mut().expect("an IB port").enqueue_host(f, cfg.expect("an IB fabric"));
    }

    /// A frame reaches an IB port.
    fn ib_arrive(&mut self, node: usize, port: usize, mut f: Vec<u8>) {
        let Some(lrh) = frame::lrh(&f) else {
            if let Some(ib) = self.port(node, port).ib.as_mut() {
                ib.counters.drops += 1;
            }
            return;
        };
        let wire_len = frame::wire_len(&f);
        let n = blocks(wire_len);
        if lrh.vl == VL15 {
            // Not flow controlled; what it carries (SMPs) is the SMA's.
            return self.vl15_arrive(node, port, f);
        }
        let kind = self.node(node);
        let ib = self.port(node, port).ib.as_mut().expect("an IB port");
        let Some(c) = ib.vls.get_mut(usize::from(lrh.vl)) else {
            ib.counters.drops += 1;
            return;
        };
        if !c.rx.arrive(n) {
            return; // an overrun: counted, and never expected
        }
        match kind {
            Node::Host(h) => {
                c.rx.free(n);
                ib.fc_dirty |= 1 << lrh.vl;
                if !self.pkey_ok(lrh.slid, node, port) {
                    let ib = self.port(node, port).ib.as_mut().expect("an IB port");
                    ib.counters.pkey_violations += 1;
                    self.ib_send(node, port);
                    return;
                }
                if frame::is_data(&f) {
                    if let Some(src) = self.lid_addr(lrh.slid) {
                        *self.host(h).rx_data_bytes.entry(src).or_default() += wire_len as u64;
                    }
                }
                let now = self.now();
                self.host(h).ep.handle_packet(now, &f);
                self.service(h);
            }
            Node::Switch(sw) => {
                self.counters().packets_switched += 1;
                let out = self.ib_next_hop(node, sw, lrh.dlid);
                let (s, ports) = self.switch_and_ports(node, sw);
                let ibs = s.ib.as_ref().expect("an IB switch");
                let out = out.filter(|&o| o < ports.len());
                let vl = out.map(|o| ibs.sl2vl[port][o][usize::from(lrh.sl & 0xf)]);
                let (Some(out), Some(vl)) = (out, vl) else {
                    self.counters().unroutable += 1;
                    self.ib_drop(node, port, lrh.vl, n);
                    return;
                };
                let oib = self.port(node, out).ib.as_mut().expect("an IB port");
                if vl == SL2VL_DROP || usize::from(vl) >= oib.out.len() {
                    oib.counters.drops += 1;
                    self.ib_drop(node, port, lrh.vl, n);
                    return;
                }
                frame::set_vl(&mut f, vl);
                let q = Queued { frame: f, from: Some((port, lrh.vl)), blocks: blocks(wire_len), wire_len };
                oib.out[usize::from(vl)].push_back(q);
                self.ib_send(node, out);
            }
        }
    }

    /// The output of switch `sw` (node `node`) towards `dlid`: its LFT
    /// entry, or with `--multipath spray|adaptive` a port of the DLID's AR
    /// group, the LFT's port standing for the flow's own (ECMP) choice.
    fn ib_next_hop(&mut self, node: usize, sw: usize, dlid: u16) -> Option<usize> {
        let (s, ports) = self.switch_and_ports(node, sw);
        let ibs = s.ib.as_ref().expect("an IB switch");
        let lft = ibs.route(dlid);
        match ibs.ar_group(dlid) {
            Some(g) if s.multipath != Multipath::Ecmp => {
                let home = g.iter().position(|&p| Some(p) == lft).unwrap_or(0) as u64;
                let load =
                    |p: usize| ports.get(p).and_then(|q| q.ib.as_ref()).map_or(u64::MAX, |ib| ib.queued_packets());
                Some(pick(s.multipath, g, home, load, &mut s.spray_rng))
            }
            _ => lft,
        }
    }

    /// P_Key check at the receiving HCA (§3.7): the packet's P_Key is the
    /// sending port's P_Key at index 0 (standing for the QP's P_Key index:
    /// the engine's BTH always carries 0xFFFF), and it must match an entry
    /// of the receiving port's table: same partition, at least one full member.
    fn pkey_ok(&mut self, slid: u16, node: usize, port: usize) -> bool {
        let Some(key) = self.sender_pkey(slid) else { return true };
        let Some(rp) = self.port(node, port).ib.as_ref() else { return true };
        rp.mgmt.pkeys.iter().any(|&k| rdma_wire::smp::pkeys_match(key, k))
    }

    /// A packet dropped inside a switch still frees its input buffer.
    fn ib_drop(&mut self, node: usize, port: usize, vl: u8, n: u16) {
        let ib = self.port(node, port).ib.as_mut().expect("an IB port");
        ib.counters.drops += 1;
        ib.vls[usize::from(vl)].rx.free(n);
        ib.fc_dirty |= 1 << vl;
        self.ib_send(node, port);
    }
}

impl<S: Site + ?Sized> IbLink for S {}

/// Whether an IB fabric is stuck: data queued at switch outputs and no
/// head packet with credit anywhere (a credit loop). `Some` of the ports
/// holding data when it is; `ports` gives a node's ports.
pub(crate) fn blocked_ports<'p>(nodes: &[Node], ports: impl Fn(usize) -> &'p [Port]) -> Option<Vec<(usize, usize)>> {
    let mut blocked = Vec::new();
    for (node, n) in nodes.iter().enumerate() {
        let Node::Switch(_) = n else { continue };
        for (port, p) in ports(node).iter().enumerate() {
            let Some(ib) = &p.ib else { continue };
            if ib.has_data() {
                if ib.can_send_data() {
                    return None;
                }
                blocked.push((node, port));
            }
        }
    }
    Some(blocked)
}
