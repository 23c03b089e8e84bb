//! The subnet management agent of every emulated switch and HCA, and
//! directed-route forwarding (IBTA 14.2.2; the rules of Linux's
//! `drivers/infiniband/core/smi.c`, reference §3.1). SMPs travel as real
//! IB packets (LRH on VL15, BTH to QP0, DETH, the MAD, ICRC, VCRC) hop by
//! hop through the fabric; a VL15 packet waits [`SMA_DELAY`] for the SMA.
//!
//! Outbound DR: the sender sets hop_ptr 1 and sends out `initial_path[1]`;
//! the node at hop h records `return_path[h]` = its ingress port and, if
//! h < hop_cnt, forwards out `initial_path[h + 1]` with hop_ptr h + 1, else
//! answers. The answer (D bit set) leaves by `return_path[h]` with hop_ptr
//! h - 1; a node receiving it with hop_ptr j > 0 sends it out
//! `return_path[j]` with hop_ptr j - 1; hop_ptr 0 means it reached the SM.

use crate::clock::Event;
use crate::fabric::Fabric;
use crate::ib::credit;
use crate::ib::engine::IbLink;
use crate::ib::vlarb::VlWeight;
use crate::ib::{PortMgmt, Queued, VL15};
use crate::topology::Node;
use core::time::Duration;
use rdma_wire::lrh::{Lnh, LrhRepr};
use rdma_wire::mad::method;
use rdma_wire::smp::{
    attr, node_type, phys_state, port_state, status, LftBlock, NodeInfoRepr, PKeyBlock, PortInfo, PortInfoRepr, Sl2Vl,
    Smp, SmpRepr, SwitchInfo, SwitchInfoRepr, VlArbBlock, VlArbEntry, PERMISSIVE_LID, SMP_LEN,
};
use rdma_wire::{BthRepr, DethRepr, IbPacket, IbRepr, Opcode, Psn, TransportRepr};
use tracing::trace;

/// How long an SMA takes to look at a VL15 packet.
pub const SMA_DELAY: Duration = Duration::from_nanos(500);
/// LinearFDBCap of the emulated switches (unicast LIDs 0..0xBFFF).
pub const LINEAR_FDB_CAP: u16 = 0xc000;

/// The IB packet that carries `smp` on VL15 from `slid` to `dlid`.
pub fn smp_frame(smp: &SmpRepr, slid: u16, dlid: u16) -> Vec<u8> {
    let mut t = TransportRepr::new(BthRepr { pkey: 0xffff, ..BthRepr::new(Opcode::UD_SEND_ONLY, 0, Psn::new(0)) });
    t.deth = Some(DethRepr { qkey: 0, src_qp: 0 });
    let repr = IbRepr { lrh: LrhRepr { vl: VL15, sl: 0, lnh: Lnh::IbaLocal, dlid, slid }, grh: None, transport: t };
    let mad = smp.to_bytes();
    let mut buf = vec![0u8; repr.buffer_len(SMP_LEN).expect("an SMP fits")];
    let n = repr.emit(&mut buf, &mad).expect("an SMP packet emits");
    buf.truncate(n);
    buf
}

/// The SMP in a VL15 frame with good CRCs, with its LRH's SLID and DLID.
pub fn parse_smp_frame(frame: &[u8]) -> Option<(SmpRepr, u16, u16)> {
    let p = IbPacket::new_checked(frame).ok()?;
    if !(p.vcrc_ok() && p.icrc_ok()) {
        return None;
    }
    let r = IbRepr::parse(&p).ok()?;
    if r.transport.bth.dest_qp != 0 {
        return None;
    }
    let t = p.transport();
    let smp = SmpRepr::parse(&Smp::new_checked(t.payload()).ok()?).ok()?;
    Some((smp, r.lrh.slid, r.lrh.dlid))
}

/// PortInfo's VLCap / OperationalVLs code for `n` data VLs.
/// The GetResp to `req` (status 0, `req`'s attribute and data), and
/// whether `req` is a Set; None for an SMP that is neither Get nor Set,
/// whose answer is then complete: status "unsupported method".
pub(crate) fn response_to(req: &SmpRepr) -> (SmpRepr, Option<bool>) {
    let mut r = *req;
    r.method = method::GET_RESP;
    r.status = 0;
    let set = match req.method {
        method::GET => Some(false),
        method::SET => Some(true),
        _ => None,
    };
    if set.is_none() {
        r.status = status::UNSUPPORTED_METHOD;
    }
    (r, set)
}

pub(crate) fn vl_code(n: u8) -> u8 {
    match n {
        0 | 1 => 1,
        2 => 2,
        3 | 4 => 3,
        5..=8 => 4,
        _ => 5,
    }
}

// The rules every emulated SMA follows, the fabric's (below) and a raw
// port's agent (`crate::sm::ca_sma`).

/// PortInfo of an emulated port: its management state `m` (with `lid` and
/// `sm_lid`, which a switch's external ports take from port 0) in the
/// state `state`/`phys`, on a link of `vls` data VLs and MTU code `mtu`
/// (a 4X link at SDR, as ibsim's ports report).
pub(crate) fn emulated_port_info(
    m: &PortMgmt,
    (lid, sm_lid): (u16, u16),
    (state, phys): (u8, u8),
    local_port_num: u8,
    vls: u8,
    mtu: u8,
) -> PortInfoRepr {
    PortInfoRepr {
        lid,
        master_sm_lid: sm_lid,
        local_port_num,
        link_width_enabled: 3,
        link_width_supported: 3,
        link_width_active: 2,
        link_speed_supported: 1,
        port_state: state,
        phys_state: phys,
        link_down_default: phys_state::POLLING,
        lmc: m.lmc,
        link_speed_active: 1,
        link_speed_enabled: 1,
        neighbor_mtu: mtu,
        vl_cap: vl_code(vls),
        vl_arb_high_cap: 8,
        vl_arb_low_cap: 8,
        mtu_cap: mtu,
        hoq_life: 0x10,
        operational_vls: m.op_vls,
        ..PortInfoRepr::default()
    }
}

/// What a PortInfo Set writes of a port's addressing: LID, SM LID, LMC
/// (not on a switch's external ports, which have none of their own).
pub(crate) fn set_addressing(m: &mut PortMgmt, pi: &PortInfoRepr) {
    m.lid = pi.lid;
    m.sm_lid = pi.master_sm_lid;
    m.lmc = pi.lmc & 7;
}

/// The PortState a Set of `req` leaves a port in that is in `cur`, with
/// its peer in `peer` (None: not known to the SMA, as on a lone HCA,
/// whose link layer alone would see it). ibsim's rules: NoChange keeps,
/// Down retrains the link to Init, Armed and Active only one step from
/// the current state and from the peer's; anything else is an invalid
/// value.
pub(crate) fn port_state_step(cur: u8, req: u8, peer: Option<u8>) -> Result<u8, u16> {
    match req {
        port_state::NO_CHANGE => Ok(cur),
        port_state::DOWN => Ok(port_state::INIT),
        s @ (port_state::ARMED | port_state::ACTIVE)
            if cur.abs_diff(s) == 1 && peer.is_none_or(|p| p.abs_diff(s) <= 1) =>
        {
            Ok(s)
        }
        _ => Err(status::INVALID_VALUE),
    }
}

impl Fabric {
    /// Queues a VL15 packet on a port (bypasses credits and arbitration).
    pub fn send_vl15(&mut self, node: usize, port: usize, f: Vec<u8>) {
        let Some(ib) = self.topo.ports[node][port].ib.as_mut() else { return };
        let wire_len = f.len();
        ib.vl15_out.push_back(Queued { frame: f, from: None, blocks: credit::blocks(wire_len), wire_len });
        self.ib_wake(node, port);
    }

    /// A VL15 packet arrives: dropped if the VL15 buffer is full (never
    /// blocking data), else handed to the SMA after [`SMA_DELAY`].
    pub(crate) fn sma_arrive(&mut self, node: usize, port: usize, f: Vec<u8>) {
        let ib = self.topo.ports[node][port].ib.as_mut().expect("an IB port");
        if ib.vl15_held >= ib.vl15_capacity {
            ib.counters.vl15_dropped += 1;
            return;
        }
        ib.vl15_held += 1;
        ib.vl15_in.push_back(f);
        self.events.schedule(self.now + SMA_DELAY, Event::Sma { node, port });
    }

    pub(crate) fn sma_event(&mut self, node: usize, port: usize) {
        let ib = self.topo.ports[node][port].ib.as_mut().expect("an IB port");
        let Some(f) = ib.vl15_in.pop_front() else { return };
        ib.vl15_held -= 1;
        let Some((smp, slid, dlid)) = parse_smp_frame(&f) else {
            ib.counters.smp_bad += 1;
            return;
        };
        self.smp_in(node, port, smp, slid, dlid);
    }

    fn is_switch(&self, node: usize) -> bool {
        matches!(self.topo.nodes[node], Node::Switch(_))
    }

    /// Sends an SMP out of fabric port `port` of `node`.
    pub fn send_smp(&mut self, node: usize, port: usize, smp: &SmpRepr, slid: u16, dlid: u16) {
        let f = smp_frame(smp, slid, dlid);
        self.send_vl15(node, port, f);
    }

    fn smp_in(&mut self, node: usize, port: usize, mut smp: SmpRepr, slid: u16, dlid: u16) {
        let in_ib = self.topo.ident[node].ib_port[port];
        let switch = self.is_switch(node);
        let Some(mut dr) = smp.dr else {
            return self.lid_routed_in(node, port, smp, slid, dlid);
        };
        let drop = |why: &str| trace!(node, port, why, "DR SMP dropped");
        if !dr.returning {
            let h = dr.hop_ptr;
            if h == 0 || h > dr.hop_cnt {
                return drop("hop pointer");
            }
            dr.return_path[usize::from(h)] = in_ib;
            if h < dr.hop_cnt {
                let out = dr.initial_path[usize::from(h) + 1];
                let Some(fp) = self.topo.ident[node].fabric_port(out).filter(|_| switch) else {
                    return drop("no such egress port");
                };
                dr.hop_ptr = h + 1;
                smp.dr = Some(dr);
                return self.send_smp(node, fp, &smp, PERMISSIVE_LID, PERMISSIVE_LID);
            }
            smp.dr = Some(dr);
            if smp.method == method::TRAP_REPRESS {
                return; // it acknowledges a trap: nothing answers it
            }
            let mut resp = self.sma(node, port, &smp);
            if let Some(d) = resp.dr.as_mut() {
                d.returning = true;
                d.hop_ptr = h - 1;
            }
            return self.send_smp(node, port, &resp, PERMISSIVE_LID, PERMISSIVE_LID);
        }
        let j = dr.hop_ptr;
        if j == 0 {
            self.sm_inbox.push((node, smp));
            return;
        }
        // hop_ptr comes off the wire (up to 64 parses): index with care.
        let back = dr.return_path.get(usize::from(j)).copied();
        let Some(fp) = back.and_then(|p| self.topo.ident[node].fabric_port(p)).filter(|_| switch) else {
            return drop("no such return port");
        };
        dr.hop_ptr = j - 1;
        smp.dr = Some(dr);
        self.send_smp(node, fp, &smp, PERMISSIVE_LID, PERMISSIVE_LID);
    }

    /// The LID a port answers to: a switch's port-0 LID, an HCA port's own.
    fn own_lid(&self, node: usize, port: usize) -> u16 {
        match self.topo.nodes[node] {
            Node::Switch(s) => self.topo.switches[s].ib.as_ref().map_or(0, |i| i.port0.lid),
            Node::Host(_) => self.topo.ports[node][port].ib.as_ref().map_or(0, |i| i.mgmt.lid),
        }
    }

    fn lid_routed_in(&mut self, node: usize, port: usize, smp: SmpRepr, slid: u16, dlid: u16) {
        let own = self.own_lid(node, port);
        if dlid == own || dlid == PERMISSIVE_LID {
            if smp.method & method::RESP != 0 {
                self.sm_inbox.push((node, smp));
                return;
            }
            if smp.method == method::TRAP_REPRESS {
                return; // it acknowledges a trap: nothing answers it
            }
            let resp = self.sma(node, port, &smp);
            let out = match self.topo.nodes[node] {
                Node::Switch(s) => self.topo.switches[s].ib.as_ref().and_then(|i| i.route(slid)).unwrap_or(port),
                Node::Host(_) => port,
            };
            return self.send_smp(node, out, &resp, own, slid);
        }
        if let Node::Switch(s) = self.topo.nodes[node] {
            if let Some(out) = self.topo.switches[s].ib.as_ref().and_then(|i| i.route(dlid)) {
                self.send_smp(node, out, &smp, slid, dlid);
            }
        }
    }

    /// The SMA: answers a Get or Set that arrived on fabric port `port`.
    pub fn sma(&mut self, node: usize, port: usize, req: &SmpRepr) -> SmpRepr {
        let (mut r, set) = response_to(req);
        let Some(set) = set else { return r };
        match self.sma_attr(node, port, req, set) {
            Ok(data) => r.data = data,
            Err(s) => r.status = s,
        }
        r
    }

    fn sma_attr(&mut self, node: usize, port: usize, req: &SmpRepr, set: bool) -> Result<[u8; 64], u16> {
        let switch = self.is_switch(node);
        // A port the node does not have (a caller's slip): refused, not a panic.
        let Some(&in_ib) = self.topo.ident.get(node).and_then(|i| i.ib_port.get(port)) else {
            return Err(status::INVALID_VALUE);
        };
        let m = req.attr_mod;
        let mut d = [0u8; 64];
        match req.attr_id {
            attr::NODE_DESCRIPTION if !set => {
                let name = self.topo.ident[node].name.as_bytes();
                let n = name.len().min(64);
                d[..n].copy_from_slice(&name[..n]);
            }
            attr::NODE_INFO if !set => {
                let id = &self.topo.ident[node];
                NodeInfoRepr {
                    node_type: if switch { node_type::SWITCH } else { node_type::CA },
                    num_ports: id.num_ports,
                    system_image_guid: id.guid,
                    node_guid: id.guid,
                    port_guid: id.port_guid(switch, in_ib),
                    partition_cap: 32,
                    device_id: 0,
                    revision: 0,
                    local_port_num: in_ib,
                    vendor_id: 0,
                }
                .emit(&mut d)
                .expect("64 bytes");
            }
            attr::PORT_INFO => {
                let p = if m == 0 && !switch { in_ib } else { u8::try_from(m).map_err(|_| status::INVALID_VALUE)? };
                if p > self.topo.ident[node].num_ports || (!switch && p != in_ib && set) {
                    return Err(status::INVALID_VALUE);
                }
                if set {
                    let pi = PortInfoRepr::parse(&PortInfo::new_checked(&req.data[..]).expect("64 bytes"));
                    self.set_port_info(node, p, &pi)?;
                }
                self.port_info(node, p, in_ib).emit(&mut d).expect("64 bytes");
            }
            attr::SWITCH_INFO if switch => {
                let sw = self.ib_switch(node);
                if set {
                    let si = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&req.data[..]).expect("64 bytes"));
                    sw.linear_fdb_top = si.linear_fdb_top;
                    if si.port_state_change {
                        sw.port_state_change = false;
                    }
                }
                SwitchInfoRepr {
                    linear_fdb_cap: LINEAR_FDB_CAP,
                    linear_fdb_top: sw.linear_fdb_top,
                    port_state_change: sw.port_state_change,
                    partition_enforcement_cap: 32,
                    ..SwitchInfoRepr::default()
                }
                .emit(&mut d)
                .expect("64 bytes");
            }
            attr::LINEAR_FORWARDING_TABLE if switch => {
                let block = m as usize;
                if block * 64 >= usize::from(LINEAR_FDB_CAP) {
                    return Err(status::INVALID_VALUE);
                }
                let sw = self.ib_switch(node);
                if set {
                    let b = LftBlock::parse(&req.data).expect("64 bytes");
                    for (i, &e) in b.0.iter().enumerate() {
                        sw.set_ib_route((block * 64 + i) as u16, e);
                    }
                }
                let mut b = [0xffu8; 64];
                for (i, e) in b.iter_mut().enumerate() {
                    *e = sw.lft.get(block * 64 + i).copied().unwrap_or(0xff);
                }
                LftBlock(b).emit(&mut d).expect("64 bytes");
            }
            attr::P_KEY_TABLE => {
                if m & 0xffff != 0 {
                    return Err(status::INVALID_VALUE);
                }
                let mgmt = if switch {
                    let p = (m >> 16) as u8;
                    if p == 0 {
                        &mut self.ib_switch(node).port0
                    } else {
                        let fp = self.topo.ident[node].fabric_port(p).ok_or(status::INVALID_VALUE)?;
                        &mut self.topo.ports[node][fp].ib.as_mut().expect("an IB port").mgmt
                    }
                } else {
                    &mut self.topo.ports[node][port].ib.as_mut().expect("an IB port").mgmt
                };
                if set {
                    mgmt.pkeys = PKeyBlock::parse(&req.data).expect("64 bytes").0;
                }
                PKeyBlock(mgmt.pkeys).emit(&mut d).expect("64 bytes");
            }
            attr::SL_TO_VL_TABLE => {
                let cur = if switch {
                    let (i, o) = (((m >> 8) & 0xff) as u8, (m & 0xff) as u8);
                    let id = &self.topo.ident[node];
                    let fo = id.fabric_port(o).ok_or(status::INVALID_VALUE)?;
                    // Input port 0 (the switch's own SMPs) has no table of its own here.
                    let fi = if i == 0 { fo } else { id.fabric_port(i).ok_or(status::INVALID_VALUE)? };
                    &mut self.ib_switch(node).sl2vl[fi][fo]
                } else {
                    if m != 0 {
                        return Err(status::INVALID_VALUE);
                    }
                    &mut self.topo.ports[node][port].ib.as_mut().expect("an IB port").sl2vl
                };
                if set {
                    *cur = Sl2Vl::parse(&req.data).expect("64 bytes").0;
                }
                Sl2Vl(*cur).emit(&mut d).expect("64 bytes");
            }
            attr::VL_ARB_TABLE => {
                let block = m >> 16;
                if !(1..=4).contains(&block) {
                    return Err(status::INVALID_VALUE);
                }
                let fp = if switch {
                    self.topo.ident[node].fabric_port((m & 0xffff) as u8).ok_or(status::INVALID_VALUE)?
                } else {
                    port
                };
                let arb = &mut self.topo.ports[node][fp].ib.as_mut().expect("an IB port").arb;
                let (high, first) = (block >= 3, ((block - 1) % 2) as usize * 32);
                if set {
                    let b = VlArbBlock::parse(&req.data).expect("64 bytes");
                    let e: Vec<VlWeight> = b.0.iter().map(|e| VlWeight { vl: e.vl, weight: e.weight }).collect();
                    arb.set_entries(high, first, &e);
                }
                let (h, l) = arb.tables();
                let t = if high { h } else { l };
                let mut e = [VlArbEntry::default(); 32];
                for (slot, w) in e.iter_mut().zip(t.iter().skip(first)) {
                    *slot = VlArbEntry { vl: w.vl, weight: w.weight };
                }
                VlArbBlock(e).emit(&mut d).expect("64 bytes");
            }
            _ => return Err(status::UNSUPPORTED_ATTRIBUTE),
        }
        Ok(d)
    }

    fn ib_switch(&mut self, node: usize) -> &mut crate::ib::IbSwitch {
        let Node::Switch(s) = self.topo.nodes[node] else { unreachable!("callers check for a switch") };
        self.topo.switches[s].ib.as_mut().expect("an IB switch")
    }

    /// The management state of IB port `p` (switch port 0 included) and
    /// the fabric port and peer behind it.
    fn mgmt(&self, node: usize, p: u8) -> (Option<PortMgmt>, Option<(usize, usize)>) {
        if p == 0 {
            if let Node::Switch(s) = self.topo.nodes[node] {
                return (self.topo.switches[s].ib.as_ref().map(|i| i.port0), None);
            }
        }
        match self.topo.ident[node].fabric_port(p) {
            Some(fp) => {
                let port = &self.topo.ports[node][fp];
                (port.ib.as_ref().map(|i| i.mgmt), Some((port.peer, port.peer_port)))
            }
            None => (None, None),
        }
    }

    fn port_info(&self, node: usize, p: u8, in_ib: u8) -> PortInfoRepr {
        let vls = self.topo.ib.as_ref().map_or(1, |c| c.data_vls);
        let (mgmt, _) = self.mgmt(node, p);
        let switch = self.is_switch(node);
        let (state, phys) = match mgmt {
            Some(m) => (m.state, phys_state::LINK_UP),
            None => (port_state::DOWN, phys_state::POLLING),
        };
        let m = mgmt.unwrap_or_else(PortMgmt::fresh);
        // A switch's external ports carry no LID of their own.
        let (lid, sm_lid) = if switch && p != 0 {
            let (p0, _) = self.mgmt(node, 0);
            p0.map_or((0, 0), |z| (z.lid, z.sm_lid))
        } else {
            (m.lid, m.sm_lid)
        };
        // MTU 2048 (code 4) on every emulated link.
        emulated_port_info(&m, (lid, sm_lid), (state, phys), in_ib, vls, 4)
    }

    /// PortInfo Set: LID, SM LID, LMC, OperationalVLs, and a PortState
    /// step (ibsim's rules: Down resets both ends to Init; otherwise one
    /// step at a time with the peer within one step).
    fn set_port_info(&mut self, node: usize, p: u8, pi: &PortInfoRepr) -> Result<(), u16> {
        let vls = self.topo.ib.as_ref().map_or(1, |c| c.data_vls);
        if pi.operational_vls > vl_code(vls) {
            return Err(status::INVALID_VALUE);
        }
        let (mgmt, peer) = self.mgmt(node, p);
        let Some(mut m) = mgmt else { return Err(status::INVALID_VALUE) };
        let switch = self.is_switch(node);
        if !switch || p == 0 {
            set_addressing(&mut m, pi);
        }
        if pi.operational_vls != 0 {
            m.op_vls = pi.operational_vls;
        }
        let peer_state = peer.and_then(|(n, q)| self.topo.ports[n][q].ib.as_ref().map(|i| i.mgmt.state));
        // Without a cable only NoChange goes; Down retrains both ends.
        if peer_state.is_none() && pi.port_state != port_state::NO_CHANGE {
            return Err(status::INVALID_VALUE);
        }
        m.state = port_state_step(m.state, pi.port_state, peer_state)?;
        if pi.port_state == port_state::DOWN {
            if let Some((n, q)) = peer {
                self.topo.ports[n][q].ib.as_mut().expect("an IB port").mgmt.state = port_state::INIT;
            }
        }
        // Write back, and publish LIDs where the data path reads them.
        if p == 0 {
            self.ib_switch(node).port0 = m;
            self.topo.lids[node] = m.lid;
        } else if let Some(fp) = self.topo.ident[node].fabric_port(p) {
            self.topo.ports[node][fp].ib.as_mut().expect("an IB port").mgmt = m;
            if let Node::Host(h) = self.topo.nodes[node] {
                self.topo.lids[node] = m.lid;
                let addr = self.topo.hosts[h].addr;
                self.topo.lid_of.insert(addr, m.lid);
                // The host's packets carry the LID the SM gave its port.
                self.topo.hosts[h].ep.set_link(rdma_transport::LinkKind::Ib, m.lid);
            }
            // An Active port may have data waiting.
            self.ib_wake(node, fp);
        }
        Ok(())
    }
}
