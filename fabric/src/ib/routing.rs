//! Subnet routing as opensm does it (reference §3.4, §3.5, §7): LIDs in
//! opensm's order, min-hop LFTs balanced by port load, and Up*/Down* from
//! chosen roots. Pure: the SM runs it on what it discovered, the fabric on
//! its own topology.

use std::collections::VecDeque;

/// One node of a subnet: ports are numbered as IB numbers them (switch
/// port 0 is the switch itself; CA ports start at 1), each `Some((node,
/// port))` where a cable leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub guid: u64,
    pub switch: bool,
    /// Index = port number; entry 0 of a CA is unused.
    pub ports: Vec<Option<(usize, u8)>>,
    /// Index = port number: a switch's LID at 0, a CA port's at its number.
    pub port_guids: Vec<u64>,
}

impl Node {
    /// The port numbers that exist (1.. for both kinds).
    pub fn port_numbers(&self) -> impl Iterator<Item = u8> + '_ {
        (1..self.ports.len()).map(|p| p as u8)
    }
}

/// A subnet: nodes and, once assigned, each end port's LID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subnet {
    pub nodes: Vec<Node>,
    /// (node, port) -> LID; a switch has one at port 0.
    pub lids: std::collections::BTreeMap<(usize, u8), u16>,
}

/// How LFTs are computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routing {
    MinHop,
    /// Up*/Down* ranked from these switch GUIDs; none found: min-hop (as opensm).
    UpDown {
        roots: Vec<u64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    #[error("subnet has more end ports than unicast LIDs (0x0001-0xBFFF)")]
    OutOfLids,
    #[error("LID {lid:#x} of node {node} is unreachable from switch {from}")]
    Unreachable { lid: u16, node: usize, from: usize },
}

pub const MAX_UNICAST_LID: u16 = 0xbfff;

impl Subnet {
    /// End ports: every switch's port 0 and every connected CA port.
    pub fn end_ports(&self) -> Vec<(usize, u8)> {
        let mut v = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.switch {
                v.push((i, 0));
            } else {
                v.extend(n.port_numbers().filter(|&p| n.ports[usize::from(p)].is_some()).map(|p| (i, p)));
            }
        }
        v
    }

    /// The GUID of end port (node, port): a switch's is its node GUID.
    pub fn port_guid(&self, (n, p): (usize, u8)) -> u64 {
        self.nodes[n].port_guids.get(usize::from(p)).copied().unwrap_or(self.nodes[n].guid)
    }

    /// opensm's order on a fresh subnet: the SM's port first, then by
    /// port GUID in network byte order compared as a little-endian u64
    /// (the byte-reversed GUID on x86), LIDs from 1 (LMC 0).
    pub fn assign_lids(&mut self, sm_port: (usize, u8)) -> Result<(), RoutingError> {
        self.assign_lids_keeping(sm_port, &std::collections::HashMap::new())
    }

    /// [`Subnet::assign_lids`] for a subnet that had LIDs: a port whose
    /// GUID `kept` names keeps its LID (as opensm's guid2lid table does
    /// across sweeps, so that a port coming back does not move the
    /// others), and the rest take the lowest LIDs no port, present or
    /// gone, holds, in that order.
    pub fn assign_lids_keeping(
        &mut self,
        sm_port: (usize, u8),
        kept: &std::collections::HashMap<u64, u16>,
    ) -> Result<(), RoutingError> {
        let mut ports = self.end_ports();
        ports.sort_by_key(|&p| (p != sm_port, self.port_guid(p).swap_bytes()));
        if ports.len() > usize::from(MAX_UNICAST_LID) {
            return Err(RoutingError::OutOfLids);
        }
        self.lids.clear();
        let mut taken = std::collections::HashSet::new();
        for &p in &ports {
            if let Some(&lid) = kept.get(&self.port_guid(p)) {
                if (1..=MAX_UNICAST_LID).contains(&lid) && taken.insert(lid) {
                    self.lids.insert(p, lid);
                }
            }
        }
        // The LIDs of ports gone stay theirs, for when they come back.
        let mut used: std::collections::HashSet<u16> = kept.values().copied().collect();
        used.extend(taken);
        let mut next = 1u16;
        for p in ports {
            if self.lids.contains_key(&p) {
                continue;
            }
            while used.contains(&next) {
                next += 1;
            }
            if next > MAX_UNICAST_LID {
                return Err(RoutingError::OutOfLids);
            }
            used.insert(next);
            self.lids.insert(p, next);
        }
        Ok(())
    }

    /// The (node, port) owning `lid`.
    pub fn owner(&self, lid: u16) -> Option<(usize, u8)> {
        self.lids.iter().find(|(_, &l)| l == lid).map(|(&k, _)| k)
    }

    pub fn max_lid(&self) -> u16 {
        self.lids.values().copied().max().unwrap_or(0)
    }

    fn switch_neighbours(&self, s: usize) -> impl Iterator<Item = (u8, usize)> + '_ {
        let n = &self.nodes[s];
        n.port_numbers().filter_map(move |p| match n.ports[usize::from(p)] {
            Some((m, _)) if self.nodes[m].switch => Some((p, m)),
            _ => None,
        })
    }

    /// Hops from every switch to switch `to` over switch links (u32::MAX: none).
    fn switch_distances(&self, to: usize) -> Vec<u32> {
        let mut d = vec![u32::MAX; self.nodes.len()];
        d[to] = 0;
        let mut q = VecDeque::from([to]);
        while let Some(s) = q.pop_front() {
            for (_, m) in self.switch_neighbours(s) {
                if d[m] == u32::MAX {
                    d[m] = d[s] + 1;
                    q.push_back(m);
                }
            }
        }
        d
    }

    /// The switch (and its port) a CA port hangs off; for a switch, itself.
    fn attachment(&self, (n, p): (usize, u8)) -> Option<(usize, u8)> {
        if self.nodes[n].switch {
            return Some((n, 0));
        }
        self.nodes[n].ports.get(usize::from(p)).copied().flatten().filter(|&(m, _)| self.nodes[m].switch)
    }

    /// LFTs for every switch: `lfts[node]` indexed by LID, 0xFF where none.
    pub fn route(&self, routing: &Routing) -> Result<Vec<Vec<u8>>, RoutingError> {
        let ranks = match routing {
            Routing::MinHop => None,
            Routing::UpDown { roots } => self.ranks(roots),
        };
        let n = self.nodes.len();
        let mut lfts = vec![Vec::new(); n];
        // Paths already routed through each (switch, port): opensm's balance.
        let mut load = vec![vec![0u32; 256]; n];
        for (s, node) in self.nodes.iter().enumerate() {
            if node.switch {
                lfts[s] = vec![0xff; usize::from(self.max_lid()) + 1];
            }
        }
        let mut by_lid: Vec<((usize, u8), u16)> = self.lids.iter().map(|(&k, &l)| (k, l)).collect();
        by_lid.sort_by_key(|&(_, l)| l);
        for ((owner, oport), lid) in by_lid {
            let Some((sw, sw_port)) = self.attachment((owner, oport)) else { continue };
            let hops = match &ranks {
                None => self.switch_distances(sw),
                Some(r) => self.updown_distances(sw, r),
            };
            for s in (0..n).filter(|&s| self.nodes[s].switch) {
                let port = if s == sw {
                    if self.nodes[owner].switch {
                        0
                    } else {
                        sw_port
                    }
                } else {
                    let best = match &ranks {
                        None => self.min_hop_ports(s, &hops.iter().map(|&h| (h, h)).collect::<Vec<_>>()),
                        Some(r) => self.updown_ports(s, &hops, r),
                    };
                    // Towards a switch opensm takes the lowest minimal port;
                    // towards an end port the least loaded one (then lowest).
                    let to_switch = self.nodes[owner].switch;
                    let key = |p: &u8| (if to_switch { 0 } else { load[s][usize::from(*p)] }, *p);
                    let Some(p) = best.into_iter().min_by_key(key) else {
                        return Err(RoutingError::Unreachable { lid, node: owner, from: s });
                    };
                    p
                };
                if !self.nodes[owner].switch && port != 0 {
                    load[s][usize::from(port)] += 1;
                }
                lfts[s][usize::from(lid)] = port;
            }
        }
        Ok(lfts)
    }

    /// Ports of switch `s` on a shortest path, by (any, down-only) distances.
    fn min_hop_ports(&self, s: usize, hops: &[(u32, u32)]) -> Vec<u8> {
        let best = self.switch_neighbours(s).map(|(_, m)| hops[m].0).min().unwrap_or(u32::MAX);
        if best == u32::MAX {
            return Vec::new();
        }
        self.switch_neighbours(s).filter(|&(_, m)| hops[m].0 == best).map(|(p, _)| p).collect()
    }

    /// Up*/Down* rank: BFS hops from the nearest root switch; `None` when
    /// no root is a switch here (min-hop then, as opensm falls back).
    fn ranks(&self, roots: &[u64]) -> Option<Vec<u32>> {
        let mut r = vec![u32::MAX; self.nodes.len()];
        let mut q = VecDeque::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.switch && roots.contains(&n.guid) {
                r[i] = 0;
                q.push_back(i);
            }
        }
        if q.is_empty() {
            return None;
        }
        while let Some(s) = q.pop_front() {
            for (_, m) in self.switch_neighbours(s) {
                if r[m] == u32::MAX {
                    r[m] = r[s] + 1;
                    q.push_back(m);
                }
            }
        }
        Some(r)
    }

    /// Whether the hop a -> b goes up: to a lower rank, or on equal rank
    /// to a lower GUID.
    fn is_up(&self, a: usize, b: usize, rank: &[u32]) -> bool {
        (rank[b], self.nodes[b].guid) < (rank[a], self.nodes[a].guid)
    }

    /// Per switch, encoded as `down << 32 | any`: `down` the hops of the
    /// shortest all-down path to switch `to`, `any` of the route it takes.
    /// A switch with a down path always takes it, so no route goes up
    /// after going down (one state per switch keeps LFTs consistent).
    fn updown_distances(&self, to: usize, rank: &[u32]) -> Vec<u32> {
        let n = self.nodes.len();
        let mut down = vec![u32::MAX; n];
        down[to] = 0;
        let mut q = VecDeque::from([to]);
        while let Some(y) = q.pop_front() {
            // x -> y down: y is below x.
            for (_, x) in self.switch_neighbours(y) {
                if down[x] == u32::MAX && !self.is_up(x, y, rank) {
                    down[x] = down[y] + 1;
                    q.push_back(x);
                }
            }
        }
        let mut any = down.clone();
        // Switches without a down path go up to the neighbour nearest the
        // destination; relax until nothing changes (small graphs).
        loop {
            let mut changed = false;
            for x in (0..n).filter(|&x| self.nodes[x].switch && down[x] == u32::MAX) {
                let best = self
                    .switch_neighbours(x)
                    .filter(|&(_, y)| self.is_up(x, y, rank) && any[y] != u32::MAX)
                    .map(|(_, y)| any[y] + 1)
                    .min();
                if let Some(b) = best.filter(|&b| b < any[x]) {
                    any[x] = b;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // Down-path switches are marked by down == any.
        (0..n).map(|i| if down[i] != u32::MAX { down[i] } else { any[i] | UP_FLAG }).collect()
    }

    fn updown_ports(&self, s: usize, hops: &[u32], rank: &[u32]) -> Vec<u8> {
        let dist = |h: u32| if h == u32::MAX { u32::MAX } else { h & !UP_FLAG };
        let goes_down = hops[s] & UP_FLAG == 0;
        let legal: Vec<(u8, usize)> = self
            .switch_neighbours(s)
            .filter(|&(_, m)| {
                if goes_down {
                    // Down, to a switch whose own route is all down.
                    !self.is_up(s, m, rank) && hops[m] & UP_FLAG == 0
                } else {
                    self.is_up(s, m, rank)
                }
            })
            .filter(|&(_, m)| hops[m] != u32::MAX && dist(hops[m]) + 1 == dist(hops[s]))
            .collect();
        legal.into_iter().map(|(p, _)| p).collect()
    }
}

const UP_FLAG: u32 = 1 << 31;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ring of `n` switches (ports: 1 host, 2 next, 3 previous) with a
    /// CA on each, GUIDs as ibsim gives them: switches 0x200000.., CAs
    /// 0x100000 + 2i (node), port GUID node + 1.
    pub fn ring(n: usize) -> Subnet {
        let mut nodes = Vec::new();
        for i in 0..n {
            let mut ports = vec![None; 4];
            ports[1] = Some((n + i, 1));
            ports[2] = Some(((i + 1) % n, 3));
            ports[3] = Some(((i + n - 1) % n, 2));
            let g = 0x200000 + i as u64;
            nodes.push(Node { guid: g, switch: true, ports, port_guids: vec![g; 4] });
        }
        for i in 0..n {
            let g = 0x100000 + 2 * i as u64;
            nodes.push(Node { guid: g, switch: false, ports: vec![None, Some((i, 1))], port_guids: vec![g, g + 1] });
        }
        Subnet { nodes, lids: Default::default() }
    }

    #[test]
    fn lids_follow_opensms_byte_reversed_order() {
        let mut s = ring(3);
        // SM on the first CA: LID 1; then switches (0x..20 reversed sorts
        // before 0x..10?), as observed on net.2sw2path4hca (§3.4).
        s.assign_lids((3, 1)).unwrap();
        let by_lid: Vec<u64> = (1..=6).map(|l| s.port_guid(s.owner(l).unwrap())).collect();
        // Reversed keys: 0x100001 -> 0x0100100000000000, 0x200000 -> 0x0000200000000000.
        assert_eq!(by_lid, [0x100001, 0x200000, 0x200001, 0x200002, 0x100003, 0x100005]);
    }

    /// Kept LIDs stay where they were, even where opensm's order would
    /// put them elsewhere; a kept LID two ports claim goes to the first in
    /// that order; the others fill the lowest LIDs free, a gone port's
    /// (0x4242's 5) not among them.
    #[test]
    fn kept_lids_stay_and_the_other_ports_take_the_lowest_free_ones() {
        let mut s = ring(3);
        // Fresh order (above): 0x100001, 0x200000, 0x200001, 0x200002, 0x100003, 0x100005.
        let kept: std::collections::HashMap<u64, u16> =
            [(0x100005, 2), (0x200001, 9), (0x200002, 9), (0x4242, 5)].into_iter().collect();
        s.assign_lids_keeping((3, 1), &kept).unwrap();
        let lid_of = |g: u64| s.lids.iter().find(|(&p, _)| s.port_guid(p) == g).map(|(_, &l)| l).unwrap();
        let got: Vec<(u64, u16)> =
            [0x100001, 0x200000, 0x200001, 0x200002, 0x100003, 0x100005].map(|g| (g, lid_of(g))).to_vec();
        assert_eq!(got, [(0x100001, 1), (0x200000, 3), (0x200001, 9), (0x200002, 4), (0x100003, 6), (0x100005, 2)]);
    }

    #[test]
    fn min_hop_lfts_are_minimal_and_updown_forbids_down_then_up() {
        for routing in [Routing::MinHop, Routing::UpDown { roots: vec![0x200000] }] {
            let mut s = ring(5);
            s.assign_lids((5, 1)).unwrap();
            let lfts = s.route(&routing).unwrap();
            for (&(owner, _), &lid) in &s.lids {
                for src in 0..5 {
                    // Walk the LFTs from src to the LID.
                    let (mut at, mut hops, mut went_down) = (src, 0, false);
                    let arrived =
                        |at: usize| at == owner || (!s.nodes[owner].switch && s.nodes[at].ports[1] == Some((owner, 1)));
                    while !arrived(at) {
                        let p = lfts[at][usize::from(lid)];
                        let (next, _) = s.nodes[at].ports[usize::from(p)].unwrap();
                        if let Routing::UpDown { .. } = routing {
                            let r = s.ranks(&[0x200000]).unwrap();
                            let up = s.is_up(at, next, &r);
                            assert!(!(up && went_down), "down then up at {at} for LID {lid}");
                            went_down |= !up;
                        }
                        at = next;
                        hops += 1;
                        assert!(hops < 10, "loop");
                    }
                    let target_sw = if s.nodes[owner].switch { owner } else { owner - 5 };
                    let ring_d = (src as i64 - target_sw as i64)
                        .rem_euclid(5)
                        .min((target_sw as i64 - src as i64).rem_euclid(5));
                    if routing == Routing::MinHop {
                        assert_eq!(hops, ring_d, "src {src} lid {lid}");
                    } else {
                        assert!(hops >= ring_d && hops <= 4);
                    }
                }
            }
        }
    }
}
