//! Topologies: nodes (hosts and switches) joined by duplex links, and the
//! routes by destination IP each switch gets from a breadth-first search.

use crate::host::Host;
use crate::link::Link;
use crate::switch::{Red, Switch};
use rdma_transport::cc::DcqcnParams;
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// What a node is: an index into [`Topology::hosts`] or [`Topology::switches`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Host(usize),
    Switch(usize),
}

/// One end of a link: where it leads and whether it is sending.
#[derive(Debug, Clone, Copy)]
pub struct Port {
    pub link: Link,
    pub peer: usize,
    pub busy: bool,
}

/// The parts a topology is built from.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub link: Link,
    pub red: Red,
    /// Drop-tail limit of each switch port.
    pub buffer_bytes: u64,
    pub cc: Option<DcqcnParams>,
    pub seed: u64,
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
        }
    }

    fn add_host(&mut self, s: &Settings) -> usize {
        let (n, h) = (self.nodes.len(), self.hosts.len());
        let addr = Ipv4Addr::new(10, 0, (h >> 8) as u8, h as u8 + 1);
        self.hosts.push(Host::new(h, addr, s.seed, s.cc));
        self.nodes.push(Node::Host(h));
        self.host_nodes.push(n);
        self.ports.push(Vec::new());
        n
    }

    fn add_switch(&mut self, s: &Settings) -> usize {
        self.nodes.push(Node::Switch(self.switches.len()));
        self.switches.push(Switch::new(0, s.red, s.buffer_bytes));
        self.ports.push(Vec::new());
        self.nodes.len() - 1
    }

    /// A duplex link; returns the port numbers at `a` and at `b`.
    fn join(&mut self, a: usize, b: usize, link: Link) -> (usize, usize) {
        let mut port_at = |n: usize, peer: usize| {
            self.ports[n].push(Port { link, peer, busy: false });
            if let Node::Switch(sw) = self.nodes[n] {
                self.switches[sw].egress.push(Default::default());
            }
            self.ports[n].len() - 1
        };
        (port_at(a, b), port_at(b, a))
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
                    self.switches[*sw].routes.insert(addr, port);
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
