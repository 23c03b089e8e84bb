//! Topologies: nodes (hosts and switches) joined by duplex links, and the
//! routes by destination IP each switch gets from a breadth-first search.

use crate::host::{ack_timeout_for, Host};
use crate::ib::netfile::{NetError, NetNode};
use crate::ib::routing::{Node as RNode, Routing, RoutingError, Subnet};
use crate::ib::{IbConfig, IbPort, IbSwitch, PortMgmt};
use crate::link::Link;
use crate::multipath::Multipath;
use crate::pfc::PfcConfig;
use crate::switch::{Red, Switch};
use rdma_transport::cc::ControllerFactory;
use rdma_transport::sim::Rng;
use rdma_transport::{AddressVector, Instant, LinkKind};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};

/// What a node is: an index into [`Topology::hosts`] or [`Topology::switches`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Host(usize),
    Switch(usize),
}

/// One end of a link: where it leads, whether it is sending, and its PFC
/// state as a transmitter of the data priority.
#[derive(Debug, Clone)]
pub struct Port {
    pub link: Link,
    pub peer: usize,
    /// The port number at `peer` of the other end.
    pub peer_port: usize,
    pub busy: bool,
    /// Data may not leave before this (the last pause frame received).
    pub paused_until: Instant,
    /// Paused time accounted up to `paused_from`, ns.
    pub paused_ns: u64,
    pub paused_from: Instant,
    /// PFC frames waiting for the wire: they go before anything else and
    /// are never paused themselves (§3.2).
    pub pfc_out: VecDeque<Vec<u8>>,
    /// The IB link layer of this port (`--link ib`).
    pub ib: Option<IbPort>,
    /// Bytes this port has put on its link (INT's txBytes).
    pub tx_bytes: u64,
}

impl Port {
    fn new(link: Link, peer: usize, peer_port: usize) -> Port {
        Port {
            link,
            peer,
            peer_port,
            busy: false,
            paused_until: Instant::ZERO,
            paused_ns: 0,
            paused_from: Instant::ZERO,
            pfc_out: VecDeque::new(),
            ib: None,
            tx_bytes: 0,
        }
    }

    pub fn data_paused(&self, now: Instant) -> bool {
        self.paused_until > now
    }

    /// Applies a pause of `d` (zero: resume) received at `now`; the paused
    /// time is the union of the intervals actually in force.
    pub fn pause(&mut self, now: Instant, d: core::time::Duration) {
        self.account(now);
        self.paused_until = now + d;
    }

    /// Adds the paused time up to `now`.
    pub fn account(&mut self, now: Instant) {
        let end = self.paused_until.min(now);
        if end > self.paused_from {
            self.paused_ns += (end - self.paused_from).as_nanos() as u64;
        }
        self.paused_from = now;
    }
}

/// The spines a two-tier fabric needs for `down` host links per leaf to
/// have `ratio`:1 oversubscription with one uplink per spine and every
/// link at the same rate. Real fabrics oversubscribe this way, by how many
/// of a switch's (equal-speed) ports go up, e.g. 48 down and 16 up for
/// 3:1, rather than with slower uplinks: one switch ASIC and one optic
/// per tier, and the same serialisation delay on every hop.
pub fn spines_for_oversubscription(down: usize, ratio: f64) -> Result<usize, String> {
    let spines = down as f64 / ratio;
    let n = spines.round();
    if !(ratio.is_finite() && ratio > 0.0) || n < 1.0 || (spines - n).abs() > 1e-9 {
        return Err(format!(
            "--oversubscription {ratio}: {down} host links a leaf over {ratio} is not a whole number of spines"
        ));
    }
    Ok(n as usize)
}

/// The parts a topology is built from.
#[derive(Debug, Clone)]
pub struct Settings {
    pub link: Link,
    pub red: Red,
    /// Drop-tail limit of each switch port.
    pub buffer_bytes: u64,
    /// A switch-wide pool the ports share ([`Switch::shared_bytes`]).
    pub shared_buffer_bytes: Option<u64>,
    /// What makes each host QP's congestion controller; `None`: none.
    pub cc: Option<std::sync::Arc<dyn ControllerFactory>>,
    pub seed: u64,
    /// PFC on every switch ingress for the data priority; hosts always honour pause.
    pub pfc: Option<PfcConfig>,
}

#[derive(Debug)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub hosts: Vec<Host>,
    pub switches: Vec<Switch>,
    pub ports: Vec<Vec<Port>>,
    /// The node index of each host.
    pub host_nodes: Vec<usize>,
    /// Host indices.
    pub senders: Vec<usize>,
    pub receivers: Vec<usize>,
    /// (switch index, port) whose queue and link are the bottleneck under study.
    pub bottleneck: (usize, usize),
    /// Switch indices of the leaves and of the spines (two-tier fabrics only).
    pub leaves: Vec<usize>,
    pub spines: Vec<usize>,
    /// Rail-optimized: NICs per server (host h is NIC h % rails of server
    /// h / rails); 0 on other topologies.
    pub rails: usize,
    /// IB: the LID of each node (0: none yet), and of each host address
    /// (what a path record would tell a host).
    pub lids: Vec<u16>,
    pub lid_of: HashMap<Ipv4Addr, u16>,
    pub ib: Option<IbConfig>,
    /// Each node as an SM sees it.
    pub ident: Vec<Ident>,
}

/// A node's IB identity: GUID, NodeDescription, port count, and the IB
/// port number of each fabric port (IB ports without a cable have none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    pub guid: u64,
    pub name: String,
    pub num_ports: u8,
    pub ib_port: Vec<u8>,
}

impl Ident {
    /// The fabric port of IB port `p`.
    pub fn fabric_port(&self, p: u8) -> Option<usize> {
        self.ib_port.iter().position(|&q| q == p)
    }

    /// A CA port's GUID (ibsim's: node GUID + port); a switch's is its node GUID.
    pub fn port_guid(&self, switch: bool, p: u8) -> u64 {
        if switch {
            self.guid
        } else {
            self.guid + u64::from(p)
        }
    }
}

impl Topology {
    fn empty() -> Topology {
        Topology {
            nodes: Vec::new(),
            hosts: Vec::new(),
            switches: Vec::new(),
            ports: Vec::new(),
            host_nodes: Vec::new(),
            senders: Vec::new(),
            receivers: Vec::new(),
            bottleneck: (0, 0),
            leaves: Vec::new(),
            spines: Vec::new(),
            rails: 0,
            lids: Vec::new(),
            lid_of: HashMap::new(),
            ib: None,
            ident: Vec::new(),
        }
    }

    /// The subnet as an SM sees it, from [`Self::ident`].
    pub fn subnet(&self) -> Subnet {
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let id = &self.ident[i];
                let switch = matches!(n, Node::Switch(_));
                let mut ports = vec![None; usize::from(id.num_ports) + 1];
                for (fp, p) in self.ports[i].iter().enumerate() {
                    ports[usize::from(id.ib_port[fp])] = Some((p.peer, self.ident[p.peer].ib_port[p.peer_port]));
                }
                let port_guids = (0..=id.num_ports).map(|p| id.port_guid(switch, p)).collect();
                RNode { guid: id.guid, switch, ports, port_guids }
            })
            .collect();
        Subnet { nodes, lids: Default::default() }
    }

    /// Replaces LIDs and LFTs with what `routing` computes on this fabric
    /// (LIDs in opensm's order, with host 0 as the SM's port). Call after
    /// [`Self::make_ib`].
    pub fn route_ib(&mut self, routing: &Routing) -> Result<(), RoutingError> {
        let mut sn = self.subnet();
        sn.assign_lids((self.host_nodes[0], 1))?;
        let lfts = sn.route(routing)?;
        for (&(n, _), &lid) in &sn.lids {
            self.lids[n] = lid;
        }
        self.lid_of = self.host_nodes.iter().enumerate().map(|(h, &n)| (self.hosts[h].addr, self.lids[n])).collect();
        self.sync_mgmt_lids();
        for (n, node) in self.nodes.iter().enumerate() {
            let Node::Switch(s) = *node else { continue };
            if let Some(ib) = self.switches[s].ib.as_mut() {
                ib.lft = lfts[n].clone();
            }
        }
        Ok(())
    }

    /// The fabric an ibsim net file describes: its nodes (HCAs as hosts
    /// running the engine), GUIDs, names and port numbers, so the same SM
    /// sees the same subnet on both. Every host sends and receives.
    pub fn from_netfile(nodes: &[NetNode], s: &Settings) -> Result<Topology, NetError> {
        let mut t = Topology::empty();
        let mut idx = HashMap::new();
        for n in nodes {
            let i = if n.switch { t.add_switch(s) } else { t.add_host(s) };
            t.ident[i] = Ident { guid: n.guid, name: n.name.clone(), num_ports: n.num_ports, ib_port: Vec::new() };
            idx.insert(n.name.as_str(), i);
        }
        for (ni, n) in nodes.iter().enumerate() {
            for (p, peer, q) in &n.links {
                let mi = nodes.iter().position(|m| &m.name == peer).unwrap_or(ni);
                // Each link once, from the end declared first.
                if (mi, *q) < (ni, *p) {
                    continue;
                }
                let (a, b) = (idx[n.name.as_str()], idx[peer.as_str()]);
                let (fa, fb) = t.join(a, b, s.link);
                t.ident[a].ib_port[fa] = *p;
                t.ident[b].ib_port[fb] = *q;
            }
        }
        for (n, i) in nodes.iter().zip(0..) {
            t.ident[i].num_ports = n.num_ports;
            if !n.switch && t.ports[i].len() > 1 {
                return Err(NetError::Topology(format!("{}: a host here has one cabled port", n.name)));
            }
            if !n.switch && t.ports[i].is_empty() {
                return Err(NetError::Topology(format!("{}: an HCA without a cable", n.name)));
            }
        }
        t.senders = (0..t.hosts.len()).collect();
        t.receivers = t.senders.clone();
        t.route();
        Ok(t)
    }

    /// As [`Self::make_ib`], but as a fabric no SM has configured yet:
    /// every port in Init, no LIDs, empty LFTs.
    pub fn make_ib_unconfigured(&mut self, cfg: &IbConfig) {
        self.make_ib(cfg);
        self.lids.iter_mut().for_each(|l| *l = 0);
        self.lid_of.clear();
        for p in self.ports.iter_mut().flatten().filter_map(|p| p.ib.as_mut()) {
            p.mgmt = PortMgmt::fresh();
        }
        for sw in self.switches.iter_mut().filter_map(|s| s.ib.as_mut()) {
            sw.lft.clear();
            sw.port0 = PortMgmt { state: 4, ..PortMgmt::fresh() };
        }
        self.sync_host_links();
    }

    /// A ring of `n` IB switches with one host each (switch ports: 0 to
    /// the next switch, 1 to the previous, 2 to its host). Host i is
    /// sender and receiver i. LFTs from `routing`.
    pub fn ib_ring(n: usize, s: &Settings, cfg: &IbConfig, routing: &Routing) -> Result<Topology, RoutingError> {
        let mut t = Topology::empty();
        let sws: Vec<usize> = (0..n).map(|_| t.add_switch(s)).collect();
        for i in 0..n {
            t.join(sws[i], sws[(i + 1) % n], s.link);
        }
        for &sw in &sws {
            let h = t.add_host(s);
            t.join(sw, h, s.link);
            t.senders.push(t.hosts.len() - 1);
            t.receivers.push(t.hosts.len() - 1);
        }
        t.bottleneck = (0, 0);
        t.make_ib(cfg);
        t.route_ib(routing)?;
        Ok(t)
    }

    /// Turns every link into an IB link: hosts get LIDs 1.. in host order,
    /// switches the LIDs after them, and each switch an LFT with the same
    /// next hops as its IP routes. Where there are several (an ECMP group),
    /// the destinations are spread as opensm's min-hop does: in LID order,
    /// each to the equal-cost port with the fewest routes so far (ties to
    /// the first). (DLID mod group size would send every host of a rail
    /// switch, whose LIDs are R apart, up one spine.)
    pub fn make_ib(&mut self, cfg: &IbConfig) {
        let mut next = 1u16;
        self.lids = vec![0; self.nodes.len()];
        for &n in &self.host_nodes {
            self.lids[n] = next;
            next += 1;
        }
        for (n, node) in self.nodes.iter().enumerate() {
            if let Node::Switch(_) = node {
                self.lids[n] = next;
                next += 1;
            }
        }
        self.lid_of = self.host_nodes.iter().enumerate().map(|(h, &n)| (self.hosts[h].addr, self.lids[n])).collect();
        for ports in &mut self.ports {
            for p in ports {
                p.ib = Some(IbPort::new(cfg));
            }
        }
        for (n, node) in self.nodes.iter().enumerate() {
            let Node::Switch(i) = *node else { continue };
            let sw = &mut self.switches[i];
            let mut ib = IbSwitch::new(self.ident[n].ib_port.clone(), cfg.sl2vl);
            let mut by_lid: Vec<(u16, Ipv4Addr)> = self.lid_of.iter().map(|(&a, &l)| (l, a)).collect();
            by_lid.sort_unstable();
            let mut routes_on = vec![0u32; self.ports[n].len()];
            for (lid, addr) in &by_lid {
                let (lid, addr) = (*lid, addr);
                // As `Switch::route` forwards: a non-empty group, else the
                // single port (here the group's least used member, so that
                // the LFT spreads destinations over it).
                let route = sw.routes.get(*addr);
                let group = route.and_then(|r| r.group);
                let port = match group {
                    Some(g) if !g.is_empty() => {
                        let p = *g.iter().min_by_key(|&&p| routes_on[p]).expect("not empty");
                        routes_on[p] += 1;
                        Some(p)
                    }
                    _ => route.and_then(|r| r.port),
                };
                if let Some(p) = port {
                    ib.set_route(lid, p);
                }
                if let Some(g) = group.filter(|g| g.len() > 1) {
                    ib.set_ar_group(lid, g.to_vec());
                }
            }
            sw.ib = Some(ib);
        }
        self.ib = Some(cfg.clone());
        self.sync_mgmt_lids();
    }

    /// Where a QP of another host reaches host `h`: its IP address on
    /// RoCE, its LID (on the data SL) on IB.
    pub fn av_to(&self, h: usize) -> AddressVector {
        match &self.ib {
            Some(cfg) => AddressVector::lid(self.lids[self.host_nodes[h]], cfg.data_sl),
            None => AddressVector::new(IpAddr::V4(self.hosts[h].addr)),
        }
    }

    /// Puts each host's engine on native IB framing with its port's LID
    /// (after the LIDs change).
    pub(crate) fn sync_host_links(&mut self) {
        for (h, &n) in self.host_nodes.iter().enumerate() {
            self.hosts[h].ep.set_link(LinkKind::Ib, self.lids[n]);
        }
    }

    /// Writes [`Self::lids`] into the ports' PortInfo state (as if an SM
    /// had set them): host ports and switch port 0.
    fn sync_mgmt_lids(&mut self) {
        for (n, node) in self.nodes.iter().enumerate() {
            let lid = self.lids[n];
            match *node {
                Node::Host(_) => {
                    for ib in self.ports[n].iter_mut().filter_map(|p| p.ib.as_mut()) {
                        ib.mgmt.lid = lid;
                    }
                }
                Node::Switch(s) => {
                    if let Some(ib) = self.switches[s].ib.as_mut() {
                        ib.port0.lid = lid;
                    }
                }
            }
        }
        self.sync_host_links();
    }

    fn add_host(&mut self, s: &Settings) -> usize {
        let (n, h) = (self.nodes.len(), self.hosts.len());
        // 10.0.0.1 on, one address per host (past 10.0.0.255 into 10.0.1.x).
        let addr = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 1)) + h as u32);
        let mut host = Host::new(h, addr, s.seed, s.cc.clone());
        host.ack_timeout = ack_timeout_for(s.link.rate_bps, s.buffer_bytes);
        self.hosts.push(host);
        let guid = 0x100000 + 2 * h as u64;
        self.ident.push(Ident { guid, name: format!("host{h}"), num_ports: 1, ib_port: Vec::new() });
        self.nodes.push(Node::Host(h));
        self.host_nodes.push(n);
        self.ports.push(Vec::new());
        n
    }

    fn add_switch(&mut self, s: &Settings) -> usize {
        let sw = self.switches.len();
        self.ident.push(Ident {
            guid: 0x200000 + sw as u64,
            name: format!("switch{sw}"),
            num_ports: 0,
            ib_port: Vec::new(),
        });
        self.nodes.push(Node::Switch(sw));
        let mut sw = Switch::new(0, s.red, s.buffer_bytes);
        sw.pfc = s.pfc;
        sw.shared_bytes = s.shared_buffer_bytes;
        self.switches.push(sw);
        self.ports.push(Vec::new());
        self.nodes.len() - 1
    }

    /// A duplex link; returns the port numbers at `a` and at `b`.
    fn join(&mut self, a: usize, b: usize, link: Link) -> (usize, usize) {
        let (pa, pb) = (self.ports[a].len(), self.ports[b].len() + usize::from(a == b));
        self.ports[a].push(Port::new(link, b, pb));
        self.ports[b].push(Port::new(link, a, pa));
        for (n, p) in [(a, pa), (b, pb)] {
            let id = &mut self.ident[n];
            id.ib_port.push(p as u8 + 1);
            id.num_ports = id.num_ports.max(p as u8 + 1);
        }
        for n in [a, b] {
            if let Node::Switch(sw) = self.nodes[n] {
                self.switches[sw].egress.push(Default::default());
                self.switches[sw].ingress.push(Default::default());
            }
        }
        (pa, pb)
    }

    /// Fills every switch's routing table: towards each host, the port of
    /// the first hop on a shortest path.
    fn route(&mut self) {
        let hosts: Vec<(usize, Ipv4Addr)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n {
                Node::Host(h) => Some((i, self.hosts[*h].addr)),
                Node::Switch(_) => None,
            })
            .collect();
        for (h, addr) in hosts {
            // BFS from the host; each node's parent is its next hop towards it.
            let mut next: Vec<Option<usize>> = vec![None; self.nodes.len()];
            let mut seen = vec![false; self.nodes.len()];
            seen[h] = true;
            let mut queue = VecDeque::from([h]);
            while let Some(n) = queue.pop_front() {
                for p in &self.ports[n] {
                    if !seen[p.peer] {
                        seen[p.peer] = true;
                        next[p.peer] = self.ports[p.peer].iter().position(|q| q.peer == n);
                        queue.push_back(p.peer);
                    }
                }
            }
            for (i, node) in self.nodes.iter().enumerate() {
                if let (Node::Switch(sw), Some(port)) = (node, next[i]) {
                    self.switches[*sw].routes.set_port(addr, port);
                }
            }
        }
    }

    /// N:1 incast: `n` senders and one receiver on one switch; the
    /// bottleneck is the switch's port to the receiver.
    pub fn incast(n: usize, s: &Settings) -> Topology {
        let mut t = Topology::empty();
        let sw = t.add_switch(s);
        let rx = t.add_host(s);
        let (port, _) = t.join(sw, rx, s.link);
        for _ in 0..n {
            let h = t.add_host(s);
            t.join(h, sw, s.link);
            t.senders.push(t.hosts.len() - 1);
        }
        t.receivers.push(0);
        t.bottleneck = (0, port);
        t.route();
        t
    }

    /// Head-of-line blocking (§3.4 2): switch S1 holds the victim sender
    /// VS and H2; switch S2 holds the victim receiver VR, the incast target
    /// R2 and `local` more senders to R2. Senders: VS, H2, then the local
    /// ones; receivers: VR, R2. The bottleneck is S2's port to R2.
    pub fn victim(local: usize, s: &Settings) -> Topology {
        let mut t = Topology::empty();
        let (s1, s2) = (t.add_switch(s), t.add_switch(s));
        t.join(s1, s2, s.link);
        let host_on = |t: &mut Topology, sw: usize| {
            let h = t.add_host(s);
            let (port, _) = t.join(sw, h, s.link);
            (t.hosts.len() - 1, port)
        };
        let (vs, _) = host_on(&mut t, s1);
        let (h2, _) = host_on(&mut t, s1);
        let (vr, _) = host_on(&mut t, s2);
        let (r2, port) = host_on(&mut t, s2);
        t.senders.extend([vs, h2]);
        for _ in 0..local {
            let (h, _) = host_on(&mut t, s2);
            t.senders.push(h);
        }
        t.receivers.extend([vr, r2]);
        t.bottleneck = (1, port);
        t.route();
        t
    }

    /// §3.4's minimal cyclic buffer dependency: `n` >= 3 switches in a ring,
    /// host i on switch i, and every route clockwise, so host i's flow to
    /// host i + 2 crosses switch i + 1 and each ring link carries one flow's
    /// first hop and another's second: egress i -> i+1 waits on egress
    /// i+1 -> i+2, around the ring. With `reroute`, traffic to host
    /// (n + 1) % n (the last host's flow) goes anticlockwise, which leaves
    /// switch 0 without transit and breaks the cycle. Host i is sender i
    /// and receiver i; the bottleneck studied is switch 0's clockwise port.
    pub fn ring(n: usize, reroute: bool, s: &Settings) -> Topology {
        let mut t = Topology::empty();
        let sws: Vec<usize> = (0..n).map(|_| t.add_switch(s)).collect();
        let (mut cw, mut ccw) = (vec![0; n], vec![0; n]);
        for i in 0..n {
            let (a, b) = t.join(sws[i], sws[(i + 1) % n], s.link);
            (cw[i], ccw[(i + 1) % n]) = (a, b);
        }
        for &sw in &sws {
            t.add_host(s);
            let h = t.nodes.len() - 1;
            t.join(sw, h, s.link);
            t.senders.push(t.hosts.len() - 1);
            t.receivers.push(t.hosts.len() - 1);
        }
        t.route();
        for d in 0..n {
            let addr = t.hosts[d].addr;
            for i in (0..n).filter(|&i| i != d) {
                let port = if reroute && d == (n + 1) % n { ccw[i] } else { cw[i] };
                t.switches[i].routes.set_port(addr, port);
            }
        }
        t.bottleneck = (0, cw[0]);
        t
    }

    /// Leaf-spine: `leaves` leaf switches with `per_leaf` hosts each, every
    /// leaf joined to each of `spines` spine switches; a leaf reaches a host
    /// on another leaf over any spine, chosen per packet by the 5-tuple hash
    /// (so per flow) unless [`Self::set_multipath`] says otherwise. Host h
    /// is on leaf h / per_leaf. Receiver: host 0; senders: every other host,
    /// those on other leaves first. The bottleneck is leaf 0's port to host 0.
    /// Every link has the same rate, so the oversubscription of a leaf is
    /// per_leaf : spines ([`Self::oversubscription`]).
    pub fn leaf_spine(leaves: usize, spines: usize, per_leaf: usize, s: &Settings) -> Topology {
        let leaf_of: Vec<usize> = (0..leaves * per_leaf).map(|h| h / per_leaf).collect();
        Topology::two_tier(leaves, spines, &leaf_of, s)
    }

    /// Rail-optimized (NVIDIA DGX SuperPOD style): `servers` servers of
    /// `rails` NICs each; NIC i of every server is cabled to rail switch i,
    /// and the rail switches are leaves joined by `spines` spines. Host h
    /// is NIC h % rails of server h / rails (ranks numbered server-major,
    /// as launchers number GPUs), so it hangs off rail switch h % rails:
    /// traffic between the same NIC of two servers stays on its rail
    /// switch, and only traffic between rails crosses a spine.
    pub fn rail_optimized(servers: usize, rails: usize, spines: usize, s: &Settings) -> Topology {
        let leaf_of: Vec<usize> = (0..servers * rails).map(|h| h % rails).collect();
        let mut t = Topology::two_tier(rails, spines, &leaf_of, s);
        t.rails = rails;
        t
    }

    /// Two tiers: leaves 0.. (switches 0..leaves), spines after them, every
    /// leaf joined once to every spine (leaf ports 0..spines go up), then
    /// host h on leaf `leaf_of[h]`. Equal-cost groups up from a leaf to
    /// every host on another leaf: all its spine ports.
    fn two_tier(leaves: usize, spines: usize, leaf_of: &[usize], s: &Settings) -> Topology {
        let mut t = Topology::empty();
        let leaf: Vec<usize> = (0..leaves).map(|_| t.add_switch(s)).collect();
        let spine: Vec<usize> = (0..spines).map(|_| t.add_switch(s)).collect();
        t.leaves = (0..leaves).collect();
        t.spines = (leaves..leaves + spines).collect();
        for &l in &leaf {
            for &sp in &spine {
                t.join(l, sp, s.link);
            }
        }
        let mut port0 = 0;
        for (h, &l) in leaf_of.iter().enumerate() {
            t.add_host(s);
            let node = t.nodes.len() - 1;
            let (port, _) = t.join(leaf[l], node, s.link);
            if h == 0 {
                port0 = port;
            }
        }
        let n = t.hosts.len();
        let home = leaf_of.first().copied().unwrap_or(0);
        t.receivers.push(0);
        t.senders.extend((0..n).filter(|&h| leaf_of[h] != home).chain((1..n).filter(|&h| leaf_of[h] == home)));
        t.bottleneck = (home, port0);
        t.route();
        // Up from a leaf: every spine is an equal-cost next hop (ports 0..spines).
        if spines > 1 {
            for (h, &lh) in leaf_of.iter().enumerate() {
                let addr = t.hosts[h].addr;
                for (_, &l) in leaf.iter().enumerate().filter(|&(i, _)| i != lh) {
                    let Node::Switch(sw) = t.nodes[l] else { continue };
                    t.switches[sw].routes.set_group(addr, (0..spines).collect());
                }
            }
        }
        t
    }

    /// The oversubscription of leaf switch `leaf` (an index into
    /// [`Self::switches`]): the capacity of its links to hosts over that of
    /// its links to switches (1.0: full bisection; `None`: no uplink).
    pub fn oversubscription(&self, leaf: usize) -> Option<f64> {
        let node = self.nodes.iter().position(|n| *n == Node::Switch(leaf))?;
        let (mut down, mut up) = (0u64, 0u64);
        for p in &self.ports[node] {
            match self.nodes[p.peer] {
                Node::Host(_) => down += p.link.rate_bps,
                Node::Switch(_) => up += p.link.rate_bps,
            }
        }
        (up > 0).then(|| down as f64 / up as f64)
    }

    /// Sets how every switch picks among equal-cost next hops, each with
    /// its own generator drawn from `seed` (used only by spraying).
    pub fn set_multipath(&mut self, mode: Multipath, seed: u64) {
        for (i, sw) in self.switches.iter_mut().enumerate() {
            sw.multipath = mode;
            sw.spray_rng = Rng::new(seed ^ 0x5b7a_u64.wrapping_mul(i as u64 + 1).rotate_left(17));
        }
    }

    /// A parking lot: `hops` + 1 switches in a chain. One long flow's
    /// sender sits on the first switch and its receiver on the last; cross
    /// flow i (1..=hops) enters at switch i - 1 and leaves at switch i, so
    /// every inter-switch link carries the long flow and one cross flow.
    /// Senders: the long one, then the cross ones in order; receivers
    /// likewise. The first inter-switch link is the monitored bottleneck.
    pub fn parking_lot(hops: usize, s: &Settings) -> Topology {
        let mut t = Topology::empty();
        let sw: Vec<usize> = (0..=hops).map(|_| t.add_switch(s)).collect();
        let mut first = 0;
        for i in 1..=hops {
            let (port, _) = t.join(sw[i - 1], sw[i], s.link);
            if i == 1 {
                first = port;
            }
        }
        let host_at = |t: &mut Topology, at: usize| {
            let h = t.add_host(s);
            t.join(h, sw[at], s.link);
            t.hosts.len() - 1
        };
        let long_src = host_at(&mut t, 0);
        let long_dst = host_at(&mut t, hops);
        t.senders.push(long_src);
        t.receivers.push(long_dst);
        for i in 1..=hops {
            let src = host_at(&mut t, i - 1);
            let dst = host_at(&mut t, i);
            t.senders.push(src);
            t.receivers.push(dst);
        }
        t.bottleneck = (0, first);
        t.route();
        t
    }

    /// A dumbbell: `n` senders on one switch, `n` receivers on another,
    /// and the link between the switches as the bottleneck.
    pub fn dumbbell(n: usize, s: &Settings) -> Topology {
        let mut t = Topology::empty();
        let (left, right) = (t.add_switch(s), t.add_switch(s));
        let (port, _) = t.join(left, right, s.link);
        for _ in 0..n {
            let h = t.add_host(s);
            t.join(h, left, s.link);
            t.senders.push(t.hosts.len() - 1);
            let r = t.add_host(s);
            t.join(r, right, s.link);
            t.receivers.push(t.hosts.len() - 1);
        }
        t.bottleneck = (0, port);
        t.route();
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn paused_time_is_the_union_of_pauses_in_force() {
        let mut p = Port::new(Link::new(40_000_000_000, Duration::from_micros(1)), 0, 0);
        let t = |ns| Instant::from_nanos(ns);
        p.pause(t(100), Duration::from_nanos(50)); // [100, 150)
        p.pause(t(120), Duration::from_nanos(50)); // refresh: [100, 170)
        p.pause(t(200), Duration::from_nanos(40)); // [200, 240)
        p.pause(t(210), Duration::ZERO); // XON: [200, 210)
        p.account(t(1000));
        assert_eq!(p.paused_ns, 70 + 10);
        assert!(!p.data_paused(t(210)));
    }
}
