//! A switch's routing table: for each destination address its single
//! next hop and, where there is more than one, its equal-cost group.
//!
//! One hash probe answers both, and a group is stored once however many
//! destinations share it (a leaf's uplinks are the group of every remote
//! host), so the lines a packet reads stay few and warm on a large fabric
//! (docs/performance.md, sixth session).

use rustc_hash::FxHashMap;
use std::net::Ipv4Addr;

/// No port, or no group.
const NONE: u32 = u32::MAX;

/// A destination's entry: indexes, `NONE` where it has none.
#[derive(Debug, Clone, Copy)]
struct Next {
    port: u32,
    group: u32,
}

/// What a switch knows of one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route<'a> {
    /// The next hop when no group applies.
    pub port: Option<usize>,
    /// Equal-cost next hops, when it has a group.
    pub group: Option<&'a [usize]>,
}

/// Next hops and equal-cost groups by destination IPv4 address.
#[derive(Debug, Default, Clone)]
pub struct RouteTable {
    /// Fx hashing: addresses are few, fixed and not chosen by a peer
    /// (SipHash was 15 % of a 512-host run).
    next: FxHashMap<Ipv4Addr, Next>,
    /// The distinct groups.
    groups: Vec<Vec<usize>>,
}

impl RouteTable {
    /// `dst` leaves by `port` (when no group applies).
    pub fn set_port(&mut self, dst: Ipv4Addr, port: usize) {
        let port = u32::try_from(port).ok().filter(|&p| p != NONE).expect("a port number below 2^32 - 1");
        self.next.entry(dst).or_insert(Next { port: NONE, group: NONE }).port = port;
    }

    /// `dst` leaves by one of `ports`, as the switch's multipath mode
    /// picks. (A group it replaces stays stored: tables are built once.)
    pub fn set_group(&mut self, dst: Ipv4Addr, ports: Vec<usize>) {
        let i = match self.groups.iter().position(|g| *g == ports) {
            Some(i) => i,
            None => {
                self.groups.push(ports);
                self.groups.len() - 1
            }
        };
        self.next.entry(dst).or_insert(Next { port: NONE, group: NONE }).group = i as u32;
    }

    /// Everything known of `dst`, or `None` if nothing is.
    #[inline]
    pub fn get(&self, dst: Ipv4Addr) -> Option<Route<'_>> {
        let n = self.next.get(&dst)?;
        Some(Route {
            port: (n.port != NONE).then_some(n.port as usize),
            group: (n.group != NONE).then(|| &self.groups[n.group as usize][..]),
        })
    }

    /// The single next hop to `dst`.
    pub fn port(&self, dst: Ipv4Addr) -> Option<usize> {
        self.get(dst)?.port
    }

    /// The equal-cost group to `dst`.
    pub fn group(&self, dst: Ipv4Addr) -> Option<&[usize]> {
        self.get(dst)?.group
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_groups_are_kept_apart_and_groups_once() {
        let mut t = RouteTable::default();
        let a = |n| Ipv4Addr::new(10, 0, 0, n);
        t.set_port(a(1), 3);
        t.set_group(a(2), vec![0, 1, 2, 3]);
        t.set_group(a(3), vec![0, 1, 2, 3]);
        t.set_port(a(3), 7);
        t.set_group(a(4), vec![1, 2]);
        assert_eq!(t.get(a(1)), Some(Route { port: Some(3), group: None }));
        assert_eq!(t.get(a(2)), Some(Route { port: None, group: Some(&[0, 1, 2, 3][..]) }));
        assert_eq!(t.get(a(3)), Some(Route { port: Some(7), group: Some(&[0, 1, 2, 3][..]) }));
        assert_eq!((t.port(a(4)), t.group(a(4))), (None, Some(&[1, 2][..])));
        assert_eq!(t.get(a(5)), None);
        assert_eq!(t.groups.len(), 2, "the shared group is stored once");
        t.set_port(a(1), 4);
        assert_eq!(t.port(a(1)), Some(4), "setting again moves it");
    }
}
