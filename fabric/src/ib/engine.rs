//! The IB side of the event loop: a port sends flow-control packets first,
//! then VL15, then the data VL that VL arbitration picks among those whose
//! head packet has credit; a switch charges an arriving packet to its input
//! port's VL buffer until it leaves by the output the LFT gives, and only
//! then returns the credit upstream; a host consumes at once.

use crate::clock::Event;
use crate::fabric::Fabric;
use crate::ib::capture::{Captured, ERF_INFINIBAND, ERF_INFINIBAND_LINK};
use crate::ib::credit::{self, blocks, FC_LEN};
use crate::ib::{frame, Queued, SL2VL_DROP, VL15};
use crate::multipath::{pick, Multipath};
use crate::packet::Packet;
use crate::topology::Node;
use rdma_transport::Instant;

/// Packets a host pulls from its engine ahead of the link while none can go.
pub(crate) const HOST_AHEAD: usize = 4;

impl Fabric {
    /// Starts every IB link: the first round of (Init) flow-control packets.
    pub(crate) fn start_ib(&mut self) {
        for node in 0..self.topo.ports.len() {
            for port in 0..self.topo.ports[node].len() {
                self.events.schedule(Instant::ZERO, Event::FcPeriod { node, port });
            }
        }
    }

    /// Every data VL of the port is owed a flow-control packet; again after a period.
    pub(crate) fn ib_fc_period(&mut self, node: usize, port: usize) {
        let Some(cfg) = self.topo.ib.as_ref() else { return };
        let period = cfg.fc_period;
        let Some(ib) = self.topo.ports[node][port].ib.as_mut() else { return };
        ib.fc_dirty = (1u16 << ib.vls.len()) - 1;
        self.events.schedule(self.now + period, Event::FcPeriod { node, port });
        self.ib_wake(node, port);
    }

    /// Tries to send on an IB port (hosts first pull from their engine).
    pub(crate) fn ib_wake(&mut self, node: usize, port: usize) {
        match self.topo.nodes[node] {
            Node::Host(h) => self.ib_host_send(h),
            Node::Switch(_) => self.ib_send(node, port),
        }
    }

    /// Puts the next thing on an idle IB port's link.
    pub(crate) fn ib_send(&mut self, node: usize, port: usize) {
        let p = &mut self.topo.ports[node][port];
        if p.busy {
            return;
        }
        let Some(ib) = p.ib.as_mut() else { return };
        if let Some(frame) = ib.next_fc_packet() {
            return self.launch_fc(node, port, frame);
        }
        let next = ib.next_packet();
        if let (Some(c), Some(q)) = (self.ib_capture.as_mut(), next.as_ref()) {
            c.push(Captured { at: self.now, erf_type: ERF_INFINIBAND, bytes: q.frame.clone() });
        }
        let Some(q) = next else { return };
        if let Some((in_port, in_vl)) = q.from {
            // The packet leaves the switch: its input buffer frees and the
            // upstream hears of it.
            if let Some(iib) = self.topo.ports[node][in_port].ib.as_mut() {
                iib.free_input(in_vl, q.blocks);
            }
            if let Node::Switch(sw) = self.topo.nodes[node] {
                self.topo.switches[sw].egress[port].data_sent += 1;
            }
            if in_port != port {
                self.ib_send(node, in_port);
            }
        }
        self.launch_len(node, port, Packet::from(q.frame), q.wire_len);
    }

    fn launch_fc(&mut self, node: usize, port: usize, mut frame: [u8; FC_LEN]) {
        if let Some(c) = self.ib_capture.as_mut() {
            c.push(Captured { at: self.now, erf_type: ERF_INFINIBAND_LINK, bytes: frame.to_vec() });
        }
        let (loss, corrupt) = self.topo.ib.as_ref().map_or((0.0, 0.0), |c| (c.fc_loss, c.fc_corrupt));
        let p = &mut self.topo.ports[node][port];
        p.busy = true;
        let done = self.now + p.link.serialise(FC_LEN);
        let (peer, peer_port, delay) = (p.peer, p.peer_port, p.link.delay);
        self.events.schedule(done, Event::PortFree { node, port });
        if self.rng.chance(loss) {
            if let Some(ib) = p.ib.as_mut() {
                ib.counters.fc_lost += 1;
            }
            return;
        }
        if self.rng.chance(corrupt) {
            frame[(self.rng.below(FC_LEN as u64)) as usize] ^= 1 << self.rng.below(8);
        }
        self.events.schedule(done + delay, Event::FlowControl { node: peer, port: peer_port, frame });
    }

    /// A flow-control packet arrives: resync ABR, take the new limit, and
    /// see whether something can go now.
    pub(crate) fn ib_receive_fc(&mut self, node: usize, port: usize, frame: &[u8]) {
        let Some(ib) = self.topo.ports[node][port].ib.as_mut() else { return };
        if ib.take_fc_packet(frame) {
            self.ib_wake(node, port);
        }
    }

    /// A host port: pull packets from the engine (native IB frames) while
    /// none is ready to go, then send.
    pub(crate) fn ib_host_send(&mut self, h: usize) {
        let node = self.topo.host_nodes[h];
        loop {
            let p = &self.topo.ports[node][0];
            let Some(ib) = p.ib.as_ref() else { return };
            if !ib.wants_host_packet(p.busy, HOST_AHEAD) {
                break;
            }
            let Some(f) = self.pull(h) else { break };
            self.ib_host_enqueue(node, f.into_bytes());
        }
        self.ib_send(node, 0);
    }

    /// Queues a packet of a host's engine on its port: on the data or the
    /// control SL by what it carries, on that SL's VL.
    fn ib_host_enqueue(&mut self, node: usize, f: Vec<u8>) {
        let cfg = self.topo.ib.as_ref().expect("an IB fabric");
        self.topo.ports[node][0].ib.as_mut().expect("an IB port").enqueue_host(f, cfg);
    }

    /// A frame reaches an IB port.
    pub(crate) fn ib_arrive(&mut self, node: usize, port: usize, mut f: Vec<u8>) {
        let Some(lrh) = frame::lrh(&f) else {
            if let Some(ib) = self.topo.ports[node][port].ib.as_mut() {
                ib.counters.drops += 1;
            }
            return;
        };
        let wire_len = frame::wire_len(&f);
        let n = blocks(wire_len);
        if lrh.vl == VL15 {
            return self.ib_arrive_vl15(node, port, f);
        }
        let ib = self.topo.ports[node][port].ib.as_mut().expect("an IB port");
        let Some(c) = ib.vls.get_mut(usize::from(lrh.vl)) else {
            ib.counters.drops += 1;
            return;
        };
        if !c.rx.arrive(n) {
            return; // an overrun: counted, and never expected
        }
        match self.topo.nodes[node] {
            Node::Host(h) => {
                c.rx.free(n);
                ib.fc_dirty |= 1 << lrh.vl;
                if !self.pkey_ok(lrh.slid, node, port) {
                    let ib = self.topo.ports[node][port].ib.as_mut().expect("an IB port");
                    ib.counters.pkey_violations += 1;
                    self.ib_send(node, port);
                    return;
                }
                if frame::is_data(&f) {
                    if let Some(src) = self.host_addr_of_lid(lrh.slid) {
                        *self.topo.hosts[h].rx_data_bytes.entry(src).or_default() += wire_len as u64;
                    }
                }
                self.topo.hosts[h].ep.handle_packet(self.now, &f);
                self.service(h);
            }
            Node::Switch(sw) => {
                self.counters.packets_switched += 1;
                let out = self.ib_next_hop(node, sw, lrh.dlid);
                let ibs = self.topo.switches[sw].ib.as_ref().expect("an IB switch");
                let out = out.filter(|&o| o < self.topo.ports[node].len());
                let vl = out.map(|o| ibs.sl2vl[port][o][usize::from(lrh.sl & 0xf)]);
                let (Some(out), Some(vl)) = (out, vl) else {
                    self.counters.unroutable += 1;
                    self.ib_drop(node, port, lrh.vl, n);
                    return;
                };
                let oib = self.topo.ports[node][out].ib.as_mut().expect("an IB port");
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
        let (switches, ports) = (&mut self.topo.switches, &self.topo.ports[node]);
        let s = &mut switches[sw];
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

    /// The IP address of the host whose port has LID `lid`.
    fn host_addr_of_lid(&self, lid: u16) -> Option<std::net::Ipv4Addr> {
        let node = self.topo.lids.iter().position(|&l| l == lid && l != 0)?;
        match self.topo.nodes[node] {
            Node::Host(h) => Some(self.topo.hosts[h].addr),
            Node::Switch(_) => None,
        }
    }

    /// P_Key check at the receiving HCA (§3.7): the packet's P_Key is the
    /// sending port's P_Key at index 0 (standing for the QP's P_Key index:
    /// the engine's BTH always carries 0xFFFF), and it must match an entry
    /// of the receiving port's table: same partition, at least one full member.
    fn pkey_ok(&self, slid: u16, node: usize, port: usize) -> bool {
        let Some(src) = self.topo.lids.iter().position(|&l| l == slid && l != 0) else { return true };
        let Some(sp) = self.topo.ports[src].first().and_then(|p| p.ib.as_ref()) else { return true };
        let Some(rp) = self.topo.ports[node][port].ib.as_ref() else { return true };
        let key = sp.mgmt.pkeys[0];
        rp.mgmt.pkeys.iter().any(|&k| rdma_wire::smp::pkeys_match(key, k))
    }

    /// A packet dropped inside a switch still frees its input buffer.
    fn ib_drop(&mut self, node: usize, port: usize, vl: u8, n: u16) {
        let ib = self.topo.ports[node][port].ib.as_mut().expect("an IB port");
        ib.counters.drops += 1;
        ib.vls[usize::from(vl)].rx.free(n);
        ib.fc_dirty |= 1 << vl;
        self.ib_send(node, port);
    }

    /// VL15: not flow controlled; dropped when its buffer is full, never
    /// blocking data. What it carries (SMPs) is for the SMA.
    fn ib_arrive_vl15(&mut self, node: usize, port: usize, f: Vec<u8>) {
        self.sma_arrive(node, port, f);
    }

    /// Queues a VL15 packet on a port (bypasses credits and arbitration).
    pub fn send_vl15(&mut self, node: usize, port: usize, f: Vec<u8>) {
        let Some(ib) = self.topo.ports[node][port].ib.as_mut() else { return };
        let wire_len = f.len();
        ib.vl15_out.push_back(Queued { frame: f, from: None, blocks: credit::blocks(wire_len), wire_len });
        self.ib_wake(node, port);
    }

    /// Whether an IB fabric is stuck: data queued at switch outputs and no
    /// head packet with credit anywhere (a credit loop).
    pub(crate) fn ib_blocked_ports(&self) -> Option<Vec<(usize, usize)>> {
        let mut ports = Vec::new();
        for (node, n) in self.topo.nodes.iter().enumerate() {
            let Node::Switch(_) = n else { continue };
            for (port, p) in self.topo.ports[node].iter().enumerate() {
                let Some(ib) = &p.ib else { continue };
                if ib.has_data() {
                    if ib.can_send_data() {
                        return None;
                    }
                    ports.push((node, port));
                }
            }
        }
        Some(ports)
    }
}
