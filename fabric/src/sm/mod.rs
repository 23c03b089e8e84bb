//! `rdma-sm`: a minimal subnet manager in the spirit of opensm (reference
//! §3.3): it discovers the subnet by directed-route SMPs, assigns LIDs,
//! computes LFTs ([`crate::ib::routing`]), programs P_Keys, PortInfo,
//! SwitchInfo, LFTs, SL2VL and VL arbitration, and moves every port
//! INIT -> ARMED -> ACTIVE in separate passes. It speaks SMPs only through
//! an [`SmpTransport`]: ibsim's socket protocol ([`ibsim`]), the
//! emulated fabric's VL15 ([`fabric_transport`]), or VL15 frames of the
//! raw native-IB backend on a network interface ([`raw_transport`]),
//! whose ports are run by port agents ([`port_agent`], with the SMA of a
//! CA port in [`ca_sma`]). [`ibsim_server`] is the
//! other way round: ibsim's server protocol in front of the emulated fabric,
//! for opensm and infiniband-diags.
//!
//! It lives in the fabric crate because it shares the routing code with
//! the fabric's own LFTs and drives the emulated fabric in-process; it
//! needs nothing the crate does not already depend on.

pub mod ca_sma;
pub mod fabric_transport;
pub mod ibsim;
pub mod ibsim_server;
pub mod port_agent;
pub mod raw_transport;

use crate::ib::routing::{self, Routing, RoutingError, Subnet};
use rdma_wire::mad::method;
use rdma_wire::smp::{
    attr, node_description, node_type, port_state, DirectedRoute, LftBlock, NodeInfo, NodeInfoRepr, PKeyBlock,
    PortInfo, PortInfoRepr, Sl2Vl, SmpRepr, SwitchInfo, SwitchInfoRepr, VlArbBlock, VlArbEntry,
};
use tracing::{debug, info};

#[derive(Debug, thiserror::Error)]
pub enum SmError {
    #[error("SMP transport: {0}")]
    Transport(String),
    #[error("no answer to {attr} along {path:?} (timed out)")]
    Timeout { attr: &'static str, path: Vec<u8> },
    #[error("{attr} along {path:?} answered with MAD status {status:#06x}")]
    Status { attr: &'static str, path: Vec<u8>, status: u16 },
    #[error("{attr} along {path:?}: malformed answer: {why}")]
    Malformed { attr: &'static str, path: Vec<u8>, why: String },
    #[error("routing: {0}")]
    Routing(#[from] RoutingError),
    #[error("after configuration {0} port(s) are not ACTIVE: {1}")]
    NotActive(usize, String),
    #[error("partition given for port GUID {0:#018x}, but the sweep found no end port with that GUID (found: {1})")]
    NoSuchPort(u64, String),
}

/// Sends one SMP and returns the answer with the same TID.
pub trait SmpTransport {
    fn exchange(&mut self, req: &SmpRepr) -> Result<SmpRepr, SmError>;
}

/// What the SM is told to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmConfig {
    pub routing: Routing,
    /// P_Key every end port gets (full member of the default partition).
    pub pkey: u16,
    /// Partitions of single end ports, by port GUID: the port's P_Key
    /// table starts with these keys (index 0, the one QPs take by
    /// default, first), and [`SmConfig::pkey`] follows, so that
    /// management traffic (the CM's MADs) still reaches every port.
    pub port_pkeys: Vec<(u64, Vec<u16>)>,
    /// SL -> VL on every port.
    pub sl2vl: [u8; 16],
    /// Low-priority VLArb entries on every port (high: none).
    pub vlarb_low: Vec<VlArbEntry>,
}

impl SmConfig {
    /// The P_Keys the end port `guid` gets, in table order: its own
    /// partitions, then the default one (unless it is among them).
    pub fn pkey_table(&self, guid: u64) -> Vec<u16> {
        let own = self.port_pkeys.iter().find(|(p, _)| *p == guid);
        let mut keys: Vec<u16> = own.map(|(_, k)| k.clone()).unwrap_or_default();
        if !keys.iter().any(|&k| k & 0x7fff == self.pkey & 0x7fff) {
            keys.push(self.pkey);
        }
        keys
    }
}

impl Default for SmConfig {
    /// opensm's defaults without QoS: SL i -> VL i (SL15 -> VL7, §2.3) cut
    /// to the VLs a port has, and equal weights.
    fn default() -> SmConfig {
        let mut sl2vl = [0u8; 16];
        for (sl, v) in sl2vl.iter_mut().enumerate() {
            *v = if sl == 15 { 7 } else { sl as u8 };
        }
        SmConfig {
            routing: Routing::MinHop,
            pkey: 0xffff,
            port_pkeys: Vec::new(),
            sl2vl,
            vlarb_low: (0..8).map(|vl| VlArbEntry { vl, weight: 4 }).collect(),
        }
    }
}

/// One node as discovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub info: NodeInfoRepr,
    pub description: String,
    /// The directed route to it (egress ports, hop 1 first).
    pub path: Vec<u8>,
    /// Per port number: its PortInfo as last read (switch port 0 included).
    pub ports: Vec<Option<PortInfoRepr>>,
}

/// The subnet the SM found and what it decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubnetView {
    pub found: Vec<Found>,
    pub subnet: Subnet,
    /// The SM's own (node, port).
    pub sm_port: (usize, u8),
    /// Per switch node: its LFT (index LID).
    pub lfts: Vec<Vec<u8>>,
}

impl SubnetView {
    pub fn sm_lid(&self) -> u16 {
        self.subnet.lids.get(&self.sm_port).copied().unwrap_or(0)
    }

    /// The node with this GUID.
    pub fn by_guid(&self, guid: u64) -> Option<usize> {
        self.found.iter().position(|f| f.info.node_guid == guid)
    }
}

/// The subnet manager over one transport.
pub struct Sm<T: SmpTransport> {
    pub transport: T,
    pub config: SmConfig,
    tid: u64,
    /// SMPs sent.
    pub smps: u64,
    /// The LIDs given so far, by port GUID: kept across sweeps.
    lids: std::collections::HashMap<u64, u16>,
    /// The end ports (GUIDs) of the subnet last configured.
    configured: Vec<u64>,
}

fn attr_name(id: u16) -> &'static str {
    match id {
        attr::NODE_DESCRIPTION => "NodeDescription",
        attr::NODE_INFO => "NodeInfo",
        attr::SWITCH_INFO => "SwitchInfo",
        attr::PORT_INFO => "PortInfo",
        attr::P_KEY_TABLE => "P_KeyTable",
        attr::SL_TO_VL_TABLE => "SLtoVLMappingTable",
        attr::VL_ARB_TABLE => "VLArbitrationTable",
        attr::LINEAR_FORWARDING_TABLE => "LinearForwardingTable",
        _ => "attribute",
    }
}

impl<T: SmpTransport> Sm<T> {
    pub fn new(transport: T, config: SmConfig) -> Sm<T> {
        Sm { transport, config, tid: 0x5100_0000, smps: 0, lids: Default::default(), configured: Vec::new() }
    }

    /// One DR Get or Set; returns the answer's 64 data bytes.
    fn smp(&mut self, m: u8, path: &[u8], attr_id: u16, attr_mod: u32, data: [u8; 64]) -> Result<[u8; 64], SmError> {
        let name = attr_name(attr_id);
        let dr = DirectedRoute::outbound(path).map_err(|e| SmError::Malformed {
            attr: name,
            path: path.to_vec(),
            why: e.to_string(),
        })?;
        self.tid += 1;
        let mut req = SmpRepr::request(m, self.tid, attr_id, attr_mod, Some(dr));
        req.data = data;
        self.smps += 1;
        let resp = self.transport.exchange(&req)?;
        let bad = |why: &str| SmError::Malformed { attr: name, path: path.to_vec(), why: why.into() };
        if resp.tid != req.tid || resp.method != method::GET_RESP || resp.attr_id != attr_id {
            return Err(bad("not the GetResp of this request"));
        }
        if resp.status != 0 {
            return Err(SmError::Status { attr: name, path: path.to_vec(), status: resp.status });
        }
        Ok(resp.data)
    }

    fn get(&mut self, path: &[u8], attr_id: u16, attr_mod: u32) -> Result<[u8; 64], SmError> {
        self.smp(method::GET, path, attr_id, attr_mod, [0; 64])
    }

    fn set(&mut self, path: &[u8], attr_id: u16, attr_mod: u32, data: [u8; 64]) -> Result<[u8; 64], SmError> {
        self.smp(method::SET, path, attr_id, attr_mod, data)
    }

    fn node_info(&mut self, path: &[u8]) -> Result<NodeInfoRepr, SmError> {
        let d = self.get(path, attr::NODE_INFO, 0)?;
        Ok(NodeInfoRepr::parse(&NodeInfo::new_checked(&d[..]).expect("64 bytes")))
    }

    fn port_info(&mut self, path: &[u8], port: u8) -> Result<PortInfoRepr, SmError> {
        let d = self.get(path, attr::PORT_INFO, u32::from(port))?;
        Ok(PortInfoRepr::parse(&PortInfo::new_checked(&d[..]).expect("64 bytes")))
    }

    /// The heavy sweep: BFS by directed route from the SM's port.
    pub fn discover(&mut self) -> Result<SubnetView, SmError> {
        let me = self.node_info(&[])?;
        let sm_port = me.local_port_num;
        let mut v = SubnetView::default();
        let mut nodes: Vec<routing::Node> = Vec::new();
        let mut queue = std::collections::VecDeque::new();
        let add = |v: &mut SubnetView, nodes: &mut Vec<routing::Node>, info: NodeInfoRepr, path: Vec<u8>| {
            let n = usize::from(info.num_ports) + 1;
            let switch = info.node_type == node_type::SWITCH;
            let mut port_guids = vec![info.node_guid; n];
            if !switch {
                port_guids[usize::from(info.local_port_num).min(n - 1)] = info.port_guid;
            }
            nodes.push(routing::Node { guid: info.node_guid, switch, ports: vec![None; n], port_guids });
            v.found.push(Found { info, description: String::new(), path, ports: vec![None; n] });
            v.found.len() - 1
        };
        add(&mut v, &mut nodes, me, Vec::new());
        v.sm_port = (0, sm_port);
        queue.push_back((0usize, vec![sm_port]));
        if me.node_type == node_type::SWITCH {
            // An SM on a switch's port 0 explores every port.
            queue.clear();
            for p in 1..=me.num_ports {
                queue.push_back((0, vec![p]));
            }
        }
        while let Some((from, path)) = queue.pop_front() {
            let out = *path.last().expect("a non-empty path");
            let from_path = &v.found[from].path;
            let pi = self.port_info(from_path.clone().as_slice(), out)?;
            v.found[from].ports[usize::from(out)] = Some(pi);
            if pi.port_state == port_state::DOWN || pi.port_state == port_state::NO_CHANGE {
                continue;
            }
            let info = match self.node_info(&path) {
                Ok(i) => i,
                Err(e) => {
                    debug!(?path, %e, "no node behind a live port");
                    continue;
                }
            };
            let arrival = info.local_port_num;
            let known = v.by_guid(info.node_guid);
            let to = match known {
                Some(k) => {
                    if !nodes[k].switch {
                        if let Some(g) = nodes[k].port_guids.get_mut(usize::from(arrival)) {
                            *g = info.port_guid;
                        }
                    }
                    k
                }
                None => {
                    let k = add(&mut v, &mut nodes, info, path.clone());
                    debug!(guid = format_args!("{:#x}", info.node_guid), ?path, "found");
                    if info.node_type == node_type::SWITCH {
                        for p in (1..=info.num_ports).filter(|&p| p != arrival) {
                            let mut next = path.clone();
                            next.push(p);
                            queue.push_back((k, next));
                        }
                        // Port 0 and the arrival port: read for the record.
                        v.found[k].ports[0] = Some(self.port_info(&path, 0)?);
                    }
                    k
                }
            };
            if let Some(slot) = nodes[from].ports.get_mut(usize::from(out)) {
                *slot = Some((to, arrival));
            }
            if let Some(slot) = nodes[to].ports.get_mut(usize::from(arrival)) {
                *slot = Some((from, out));
            }
            let p = v.found[to].path.clone();
            v.found[to].ports[usize::from(arrival)] = Some(self.port_info(&p, arrival)?);
        }
        for i in 0..v.found.len() {
            let p = v.found[i].path.clone();
            v.found[i].description = node_description(&self.get(&p, attr::NODE_DESCRIPTION, 0)?);
        }
        v.subnet = Subnet { nodes, lids: Default::default() };
        info!(nodes = v.found.len(), "heavy sweep complete");
        Ok(v)
    }

    /// The first P_KeyTable block of the end port `guid` (None: a
    /// switch, which gets the default partition's key alone).
    fn pkey_block(&self, guid: Option<u64>) -> PKeyBlock {
        let keys = match guid {
            Some(g) => self.config.pkey_table(g),
            None => vec![self.config.pkey],
        };
        let mut pk = PKeyBlock([0; 32]);
        for (slot, k) in pk.0.iter_mut().zip(keys) {
            *slot = k;
        }
        pk
    }

    /// Assigns LIDs and computes LFTs.
    pub fn plan(&mut self, v: &mut SubnetView) -> Result<(), SmError> {
        v.subnet.assign_lids_keeping(v.sm_port, &self.lids)?;
        v.lfts = v.subnet.route(&self.config.routing)?;
        Ok(())
    }

    /// Programs every node, then brings every live port to ACTIVE.
    pub fn configure(&mut self, v: &mut SubnetView) -> Result<(), SmError> {
        // A mistyped GUID would leave a port in the default partition unsaid.
        let ends: Vec<u64> =
            v.found.iter().filter(|f| f.info.node_type != node_type::SWITCH).map(|f| f.info.port_guid).collect();
        if let Some((g, _)) = self.config.port_pkeys.iter().find(|(g, _)| !ends.contains(g)) {
            let found: Vec<String> = ends.iter().map(|g| format!("{g:#018x}")).collect();
            return Err(SmError::NoSuchPort(*g, found.join(", ")));
        }
        let sm_lid = v.sm_lid();
        let max_lid = v.subnet.max_lid();
        for n in 0..v.found.len() {
            let f = v.found[n].clone();
            let switch = f.info.node_type == node_type::SWITCH;
            let live = self.live_ports(v, n);
            // P_Keys: end ports and switch external ports.
            let pk = self.pkey_block(if switch { None } else { Some(f.info.port_guid) });
            let mut d = [0u8; 64];
            pk.emit(&mut d).expect("64 bytes");
            for &p in &live {
                let m = if switch { u32::from(p) << 16 } else { 0 };
                self.set(&f.path, attr::P_KEY_TABLE, m, d)?;
            }
            // LIDs and the SM's LID: switch port 0, CA ports.
            let lid_ports: Vec<u8> = if switch { vec![0] } else { live.clone() };
            for p in lid_ports {
                let Some(&lid) = v.subnet.lids.get(&(n, p)) else { continue };
                let mut pi = self.port_info(&f.path, p)?;
                pi.lid = lid;
                pi.master_sm_lid = sm_lid;
                pi.lmc = 0;
                pi.port_state = port_state::NO_CHANGE;
                pi.phys_state = 0;
                pi.operational_vls = pi.operational_vls.max(1).min(pi.vl_cap.max(1));
                let mut d = [0u8; 64];
                pi.emit(&mut d).expect("64 bytes");
                self.set(&f.path, attr::PORT_INFO, u32::from(p), d)?;
            }
            if switch {
                let d = self.get(&f.path, attr::SWITCH_INFO, 0)?;
                let mut si = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&d[..]).expect("64 bytes"));
                si.linear_fdb_top = max_lid;
                si.port_state_change = true; // writing 1 clears it
                let mut d = [0u8; 64];
                si.emit(&mut d).expect("64 bytes");
                self.set(&f.path, attr::SWITCH_INFO, 0, d)?;
                for block in 0..=usize::from(max_lid) / 64 {
                    let mut b = [0xffu8; 64];
                    for (i, e) in b.iter_mut().enumerate() {
                        if let Some(&p) = v.lfts[n].get(block * 64 + i) {
                            *e = p;
                        }
                    }
                    if block == 0 {
                        b[0] = 0xff; // LID 0 is reserved
                    }
                    let mut d = [0u8; 64];
                    LftBlock(b).emit(&mut d).expect("64 bytes");
                    self.set(&f.path, attr::LINEAR_FORWARDING_TABLE, block as u32, d)?;
                }
            }
            self.program_qos(v, n, &live)?;
        }
        info!("switches configured for unicast");
        // Two passes, as opensm's link manager: every port ARMED, then ACTIVE.
        for state in [port_state::ARMED, port_state::ACTIVE] {
            for n in 0..v.found.len() {
                let path = v.found[n].path.clone();
                for p in self.live_ports(v, n) {
                    let mut pi = self.port_info(&path, p)?;
                    if pi.port_state >= state {
                        continue;
                    }
                    pi.port_state = state;
                    pi.phys_state = 0;
                    let mut d = [0u8; 64];
                    pi.emit(&mut d).expect("64 bytes");
                    let back = self.set(&path, attr::PORT_INFO, u32::from(p), d)?;
                    v.found[n].ports[usize::from(p)] =
                        Some(PortInfoRepr::parse(&PortInfo::new_checked(&back[..]).expect("64 bytes")));
                }
            }
        }
        Ok(())
    }

    /// SL2VL and VL arbitration on every port of node `n`, cut to the VLs
    /// each port operates.
    fn program_qos(&mut self, v: &SubnetView, n: usize, live: &[u8]) -> Result<(), SmError> {
        let f = v.found[n].clone();
        let switch = f.info.node_type == node_type::SWITCH;
        let vls_of = |pi: Option<PortInfoRepr>| match pi.map_or(1, |p| p.vl_cap.max(1)) {
            1 => 1u8,
            2 => 2,
            3 => 4,
            4 => 8,
            _ => 15,
        };
        for &out in live {
            let vls = vls_of(f.ports[usize::from(out)]);
            let mut t = self.config.sl2vl;
            t.iter_mut().for_each(|vl| *vl %= vls);
            let mut d = [0u8; 64];
            Sl2Vl(t).emit(&mut d).expect("64 bytes");
            if switch {
                for inp in std::iter::once(0).chain(live.iter().copied()) {
                    self.set(&f.path, attr::SL_TO_VL_TABLE, (u32::from(inp) << 8) | u32::from(out), d)?;
                }
            } else {
                self.set(&f.path, attr::SL_TO_VL_TABLE, 0, d)?;
            }
            let pi = f.ports[usize::from(out)];
            let low_cap = pi.map_or(0, |p| p.vl_arb_low_cap);
            if low_cap > 0 {
                let mut e = [VlArbEntry::default(); 32];
                for (slot, w) in e.iter_mut().zip(self.config.vlarb_low.iter().filter(|w| w.vl < vls)) {
                    *slot = *w;
                }
                let mut d = [0u8; 64];
                VlArbBlock(e).emit(&mut d).expect("64 bytes");
                let m = (1u32 << 16) | if switch { u32::from(out) } else { 0 };
                self.set(&f.path, attr::VL_ARB_TABLE, m, d)?;
            }
        }
        Ok(())
    }

    /// Ports of node `n` with a cable (for a CA: those discovered).
    fn live_ports(&self, v: &SubnetView, n: usize) -> Vec<u8> {
        let node = &v.subnet.nodes[n];
        node.port_numbers().filter(|&p| node.ports[usize::from(p)].is_some()).collect()
    }

    /// Reads every live port back: the ones not ACTIVE.
    pub fn verify(&mut self, v: &SubnetView) -> Result<Vec<(usize, u8, u8)>, SmError> {
        let mut bad = Vec::new();
        for n in 0..v.found.len() {
            let path = v.found[n].path.clone();
            for p in self.live_ports(v, n) {
                let pi = self.port_info(&path, p)?;
                if pi.port_state != port_state::ACTIVE {
                    bad.push((n, p, pi.port_state));
                }
            }
        }
        Ok(bad)
    }

    /// Sweep, plan, configure, verify: what `--once` does.
    pub fn run_once(&mut self) -> Result<SubnetView, SmError> {
        let v = self.discover()?;
        self.bring_up(v)
    }

    /// One sweep of a resident SM: discovers the subnet and, unless it is
    /// as last configured (the same end ports, every live port ACTIVE,
    /// each end port at its LID), configures it again, every port that
    /// had a LID keeping it. `Ok(None)`: nothing to do.
    pub fn sweep(&mut self) -> Result<Option<SubnetView>, SmError> {
        let v = self.discover()?;
        if self.settled(&v) {
            return Ok(None);
        }
        self.bring_up(v).map(Some)
    }

    /// Whether `v` (just discovered) is the subnet as last configured.
    fn settled(&self, v: &SubnetView) -> bool {
        let ends = v.subnet.end_ports();
        let mut guids: Vec<u64> = ends.iter().map(|&p| v.subnet.port_guid(p)).collect();
        guids.sort_unstable();
        if self.configured.is_empty() || guids != self.configured {
            return false;
        }
        let live_active = v.found.iter().flat_map(|f| f.ports.iter().flatten()).all(|pi| {
            pi.port_state == port_state::ACTIVE
                || pi.port_state == port_state::DOWN
                || pi.port_state == port_state::NO_CHANGE
        });
        let at_their_lids = ends.iter().all(|&(n, p)| {
            let lid = v.found[n].ports.get(usize::from(p)).copied().flatten().map(|pi| pi.lid);
            lid.is_some() && lid == self.lids.get(&v.subnet.port_guid((n, p))).copied()
        });
        live_active && at_their_lids
    }

    /// Plan, configure and verify a discovered subnet; remembers its LIDs.
    fn bring_up(&mut self, mut v: SubnetView) -> Result<SubnetView, SmError> {
        self.plan(&mut v)?;
        self.configure(&mut v)?;
        let bad = self.verify(&v)?;
        if !bad.is_empty() {
            let list = bad
                .iter()
                .map(|(n, p, s)| format!("{}[{p}] state {s}", v.found[*n].description))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(SmError::NotActive(bad.len(), list));
        }
        for (&p, &lid) in &v.subnet.lids {
            self.lids.insert(v.subnet.port_guid(p), lid);
        }
        self.configured = v.subnet.end_ports().into_iter().map(|p| v.subnet.port_guid(p)).collect();
        self.configured.sort_unstable();
        info!(smps = self.smps, "SUBNET UP");
        Ok(v)
    }
}
