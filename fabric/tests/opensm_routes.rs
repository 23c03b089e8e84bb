//! Debian's opensm managing the emulated fabric through `ibsim-serve`
//! (issue 33): on fat trees with two and more spines, a 4-leaf leaf-spine
//! and a ring under `-R updn`, after opensm's sweep
//! - `ibroute` reads back, on every switch, the LFT opensm computed (its
//!   `opensm-lfts.dump`), and those tables connect every CA pair;
//! - the fabric's own tables (what its switches forward by) are the same;
//! - `ibtracert` between two CAs names the path the fabric computes, and a
//!   flow between them leaves through exactly the switch ports of that path
//!   and its reverse (the ACKs);
//! - a flow between every ordered CA pair completes.
//!
//! The gateway runs in this process (so the fabric can be inspected and
//! driven after opensm is done); opensm and the diags talk to it through
//! libumad2sim, as to ibsim. Skips, saying so, without opensm,
//! infiniband-diags or ibsim-utils' libumad2sim.

use core::time::Duration;
use rdma_fabric::fabric::Fabric;
use rdma_fabric::ib::netfile::{self, NetNode};
use rdma_fabric::ib::IbConfig;
use rdma_fabric::sm::fabric_transport::from_netfile;
use rdma_fabric::sm::ibsim_server::IbsimServer;
use rdma_fabric::topology::Node;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const SIM: &str = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so";
/// opensm -o on these fabrics takes well under a second; a hang fails.
const OPENSM_LIMIT: Duration = Duration::from_secs(60);

fn have_tools() -> bool {
    let missing: Vec<&str> = ["opensm", "ibroute", "ibtracert"]
        .into_iter()
        .filter(|t| {
            Command::new("sh").args(["-c", &format!("command -v {t}")]).output().map_or(true, |o| !o.status.success())
        })
        .collect();
    if !missing.is_empty() || !Path::new(SIM).exists() {
        testkit::skip(format!("needs opensm, infiniband-diags and ibsim-utils (missing: {missing:?}, {SIM})"));
        return false;
    }
    true
}

/// `spines` spine switches, `leaves` leaf switches each cabled to every
/// spine (leaf ports 1..=spines up, then hosts), `hosts` CAs per leaf.
/// Spines are declared first, as a user would write it.
fn fat_tree(spines: usize, leaves: usize, hosts: usize) -> String {
    let mut s = String::new();
    for sp in 1..=spines {
        s += &format!("Switch\t{} \"Spine{sp}\"\n", leaves.max(8));
        for l in 1..=leaves {
            s += &format!("[{l}]\t\"Leaf{l}\"[{sp}]\n");
        }
        s += "\n";
    }
    for l in 1..=leaves {
        s += &format!("Switch\t{} \"Leaf{l}\"\n", (spines + hosts).max(8));
        for sp in 1..=spines {
            s += &format!("[{sp}]\t\"Spine{sp}\"[{l}]\n");
        }
        for h in 1..=hosts {
            s += &format!("[{}]\t\"H{}\"[1]\n", spines + h, (l - 1) * hosts + h);
        }
        s += "\n";
    }
    for l in 1..=leaves {
        for h in 1..=hosts {
            s += &format!("Hca\t1 \"H{}\"\n[1]\t\"Leaf{l}\"[{}]\n\n", (l - 1) * hosts + h, spines + h);
        }
    }
    s
}

/// The issue's shape: leaves' uplinks on their high ports (7, 8), hosts
/// on 1 and 2, two-port HCAs, leaves declared before the spines.
fn fat_tree_high_uplinks() -> String {
    let mut s = String::new();
    for l in 1..=3 {
        s += &format!("Switch\t8 \"Leaf{l}\"\n[1]\t\"H{}\"[1]\n[2]\t\"H{}\"[1]\n", 2 * l - 1, 2 * l);
        s += &format!("[7]\t\"Spine1\"[{l}]\n[8]\t\"Spine2\"[{l}]\n\n");
    }
    for sp in 1..=2 {
        s += &format!("Switch\t8 \"Spine{sp}\"\n");
        for l in 1..=3 {
            s += &format!("[{l}]\t\"Leaf{l}\"[{}]\n", 6 + sp);
        }
        s += "\n";
    }
    for h in 1..=6usize {
        s += &format!("Hca\t2 \"H{h}\"\n[1]\t\"Leaf{}\"[{}]\n\n", h.div_ceil(2), 2 - h % 2);
    }
    s
}

/// A ring of `n` switches, one CA each (ports: 1 host, 2 next, 3 previous).
fn ring(n: usize) -> String {
    let mut s = String::new();
    for i in 1..=n {
        let (next, prev) = (i % n + 1, (i + n - 2) % n + 1);
        s += &format!("Switch\t8 \"S{i}\"\n[1]\t\"H{i}\"[1]\n[2]\t\"S{next}\"[3]\n[3]\t\"S{prev}\"[2]\n\n");
    }
    for i in 1..=n {
        s += &format!("Hca\t1 \"H{i}\"\n[1]\t\"S{i}\"[1]\n\n");
    }
    s
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s}"))
}

/// `0x0004 003 ...` lines (ibroute, opensm-lfts.dump) -> LID -> port.
fn parse_lft_lines(text: &str) -> BTreeMap<u16, u8> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let lid = u16::from_str_radix(w.next()?.strip_prefix("0x")?, 16).ok()?;
            Some((lid, w.next()?.parse().ok()?))
        })
        .collect()
}

/// The gateway in this process on a thread, opensm's and the tools' runs
/// in a private directory; stops the gateway and removes the directory on
/// drop.
struct Gateway {
    sock: String,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<IbsimServer>>,
}

impl Gateway {
    fn start(tag: &str, net: &str, sm_host: &str) -> Gateway {
        let sock = format!("osmroutes{}{tag}", std::process::id());
        let dir = std::env::temp_dir().join(&sock);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("cache")).unwrap();
        std::fs::create_dir_all(dir.join("dump")).unwrap();
        let t = from_netfile(net, Some(sm_host), &IbConfig::default()).expect("the net file builds a fabric");
        let mut server = IbsimServer::bind(&sock, t).expect("ibsim-serve binds its sockets");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            server.serve(&|| s.load(Ordering::Relaxed)).expect("the gateway serves");
            server
        });
        Gateway { sock, dir, stop, thread: Some(thread) }
    }

    fn tool(&self, host: &str, cmd: &str, args: &[&str]) -> Command {
        let mut c = Command::new(cmd);
        c.args(args)
            .env("IBSIM_SOCKNAME", &self.sock)
            .env("SIM_HOST", host)
            .env("LD_PRELOAD", SIM)
            .env("OSM_CACHE_DIR", self.dir.join("cache"))
            .env("OSM_TMP_DIR", self.dir.join("dump"))
            .current_dir(&self.dir);
        c
    }

    fn text(&self, host: &str, cmd: &str, args: &[&str]) -> String {
        let child = self.tool(host, cmd, args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let (o, in_time) = testkit::wait(child, Duration::from_secs(30));
        assert!(in_time && o.status.success(), "{cmd} {args:?}: {}", testkit::show(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `opensm -o` (one sweep, then exit), bounded; its log. `dumps`: with
    /// `-D 0x43` (the default 0x03 and routing, which writes
    /// opensm-lfts.dump); else at the default log level, as a user runs it
    /// (the LFT phase then follows routing without the dump's pause).
    fn opensm(&self, host: &str, extra: &[&str], dumps: bool) -> String {
        let dump = self.dir.join("dump");
        let mut args = vec!["-o", "-f", "osm.log", "--dump_files_dir", dump.to_str().unwrap()];
        if dumps {
            args.extend_from_slice(&["-D", "0x43"]);
        }
        args.extend_from_slice(extra);
        let child = self.tool(host, "opensm", &args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        // testkit::wait kills (SIGKILL: opensm waiting for its port ignores SIGTERM).
        let (out, in_time) = testkit::wait(child, OPENSM_LIMIT);
        let log = std::fs::read_to_string(self.dir.join("osm.log")).unwrap_or_default();
        assert!(in_time, "opensm -o still running after {OPENSM_LIMIT:?}, killed; osm.log:\n{log}");
        assert!(out.status.success(), "opensm -o: {}; osm.log:\n{log}", testkit::show(&out));
        assert!(log.contains("SUBNET UP"), "no SUBNET UP; osm.log:\n{log}");
        // e.g. ERR 331D: a switch's LFT, as its Set answers gave it, is not
        // the one opensm computed.
        let errs: Vec<&str> = log.lines().filter(|l| l.contains("ERR")).collect();
        assert!(
            errs.is_empty(),
            "opensm logged errors: {errs:#?}\nosm.log (whole, for the rare ERR 331D: docs/infiniband.md):\n{log}"
        );
        log
    }

    /// Stops the gateway; the fabric behind it, as opensm left it.
    fn finish(mut self) -> Fabric {
        self.stop.store(true, Ordering::Relaxed);
        let server = self.thread.take().unwrap().join().expect("the gateway thread");
        server.transport.fab
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One hop of a unicast path: (out port, the node reached, its in port).
type Hop = (u8, String, u8);

/// The netfile's cabling: (node name, port) -> (peer name, peer port).
fn cabling(nodes: &[NetNode]) -> HashMap<(String, u8), (String, u8)> {
    nodes.iter().flat_map(|n| n.links.iter().map(|(p, q, qp)| ((n.name.clone(), *p), (q.clone(), *qp)))).collect()
}

/// From CA `a` to the LID `dlid`, following `lfts` (switch name -> LID ->
/// port) over `cables`; None where a table has no entry or loops.
fn follow(
    a: &NetNode,
    dlid: u16,
    lfts: &HashMap<String, BTreeMap<u16, u8>>,
    cables: &HashMap<(String, u8), (String, u8)>,
) -> Option<Vec<Hop>> {
    let (p, _, _) = a.links[0];
    let (mut at, inp) = cables[&(a.name.clone(), p)].clone();
    let mut path = vec![(p, at.clone(), inp)];
    while let Some(lft) = lfts.get(&at) {
        let out = *lft.get(&dlid)?;
        let (next, np) = cables.get(&(at.clone(), out))?.clone();
        path.push((out, next.clone(), np));
        at = next;
        if path.len() > 16 {
            return None;
        }
    }
    Some(path)
}

/// ibtracert's hops: `[out] -> switch port {guid}[in] lid ... "Name"`.
fn tracert_hops(text: &str) -> Vec<Hop> {
    text.lines()
        .filter_map(|l| {
            let out = l.strip_prefix('[')?.split(']').next()?.parse().ok()?;
            let (_, rest) = l.split_once("} [").or_else(|| l.split_once("}["))?;
            let inp = rest.split(']').next()?.parse().ok()?;
            let name = l.rsplit('"').nth(1)?.to_string();
            Some((out, name, inp))
        })
        .collect()
}

/// opensm over the net file `net` through the gateway, then every check.
fn check(tag: &str, net: &str, sm_host: &str, extra: &[&str], dumps: bool) {
    let nodes = netfile::parse(net).expect("a valid net file");
    let cables = cabling(&nodes);
    let gw = Gateway::start(tag, net, sm_host);
    gw.opensm(sm_host, extra, dumps);

    // LIDs opensm gave: port GUID -> LID (a switch's port GUID is its node GUID).
    let g2l = std::fs::read_to_string(gw.dir.join("cache/guid2lid")).expect("opensm's guid2lid");
    let by_guid: HashMap<u64, u16> = g2l
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((hex(w.next()?), hex(w.next()?) as u16))
        })
        .collect();
    let lid_of = |n: &NetNode| {
        let g = if n.switch { n.guid } else { n.guid + u64::from(n.links[0].0) };
        *by_guid.get(&g).unwrap_or_else(|| panic!("{tag}: no LID for {} ({g:#x}) in guid2lid:\n{g2l}", n.name))
    };

    let switches: Vec<&NetNode> = nodes.iter().filter(|n| n.switch).collect();
    let cas: Vec<&NetNode> = nodes.iter().filter(|n| !n.switch).collect();
    // What ibroute reads through the gateway, per switch.
    let mut read: HashMap<String, BTreeMap<u16, u8>> = HashMap::new();
    for sw in &switches {
        let got = parse_lft_lines(&gw.text(sm_host, "ibroute", &[&lid_of(sw).to_string()]));
        read.insert(sw.name.clone(), got);
    }
    // ... is what opensm computed (its dump).
    if dumps {
        let dump = std::fs::read_to_string(gw.dir.join("dump/opensm-lfts.dump")).expect("opensm-lfts.dump");
        let mut computed: HashMap<String, BTreeMap<u16, u8>> = HashMap::new();
        for sec in dump.split("Unicast lids").skip(1) {
            let name = sec.split('(').nth(1).and_then(|s| s.split('\'').nth(1)).expect("a switch name").to_string();
            computed.insert(name, parse_lft_lines(sec));
        }
        assert_eq!(computed.len(), switches.len(), "{tag}: switches in opensm-lfts.dump:\n{dump}");
        for sw in &switches {
            let (got, want) = (&read[&sw.name], &computed[&sw.name]);
            assert_eq!(got, want, "{tag}: {} (LID {}): ibroute vs opensm-lfts.dump", sw.name, lid_of(sw));
        }
    }

    // Those tables connect every ordered CA pair.
    let mut unconnected = Vec::new();
    for a in &cas {
        for b in cas.iter().filter(|b| b.name != a.name) {
            let ok = follow(a, lid_of(b), &read, &cables).is_some_and(|p| p.last().is_some_and(|h| h.1 == b.name));
            if !ok {
                unconnected.push(format!("{} -> {} (LID {})", a.name, b.name, lid_of(b)));
            }
        }
    }
    assert!(unconnected.is_empty(), "{tag}: CA pairs the tables read back do not connect: {unconnected:#?}");

    // ibtracert (from the SM's CA) from the first two CAs to every other
    // one: from the local port, and from a remote one (LID-routed).
    let mut traces = Vec::new();
    for a in &cas[..2] {
        for b in cas.iter().filter(|b| b.name != a.name) {
            let text = gw.text(sm_host, "ibtracert", &[&lid_of(a).to_string(), &lid_of(b).to_string()]);
            traces.push((*a, *b, tracert_hops(&text), text));
        }
    }

    let mut fab = gw.finish();
    // The fabric's own tables (what its switches forward by) are the ones
    // ibroute read: every routed LID leaves by that port.
    let node_of = |fab: &Fabric, name: &str| fab.topo.ident.iter().position(|i| i.name == name).unwrap();
    for sw in &switches {
        let Node::Switch(s) = fab.topo.nodes[node_of(&fab, &sw.name)] else { panic!("{} is a switch", sw.name) };
        let lft = &fab.topo.switches[s].ib.as_ref().expect("an IB switch").lft;
        for (&lid, &port) in &read[&sw.name] {
            assert_eq!(
                lft.get(usize::from(lid)).copied(),
                Some(port),
                "{tag}: {} LID {lid}: the fabric's LFT vs ibroute",
                sw.name
            );
        }
    }
    // The path the fabric forwards a->b on (IbSwitch::route, what its switches use).
    let fabric_path = |fab: &Fabric, from: &NetNode, to: &NetNode| -> Vec<(usize, usize)> {
        let mut n = node_of(fab, &from.name);
        let mut fp = 0;
        let mut ports = Vec::new();
        let dlid = fab.topo.lids[node_of(fab, &to.name)];
        loop {
            n = fab.topo.ports[n][fp].peer;
            let Node::Switch(s) = fab.topo.nodes[n] else { break };
            fp = fab.topo.switches[s].ib.as_ref().unwrap().route(dlid).unwrap_or_else(|| {
                panic!("{tag}: {} has no route to LID {dlid}", fab.topo.ident[n].name);
            });
            ports.push((n, fp));
            assert!(ports.len() <= 16, "{tag}: a forwarding loop to {}", to.name);
        }
        assert_eq!(fab.topo.ident[n].name, to.name, "{tag}: the fabric's path ends at the wrong CA");
        ports
    };
    let as_hops = |fab: &Fabric, from: &NetNode, path: &[(usize, usize)]| -> Vec<Hop> {
        let first = cables[&(from.name.clone(), from.links[0].0)].clone();
        let mut hops = vec![(from.links[0].0, first.0, first.1)];
        for &(n, fp) in path {
            let port = &fab.topo.ports[n][fp];
            let (m, mp) = (port.peer, port.peer_port);
            hops.push((fab.topo.ident[n].ib_port[fp], fab.topo.ident[m].name.clone(), fab.topo.ident[m].ib_port[mp]));
        }
        hops
    };
    for (x, y, hops, text) in &traces {
        let want = as_hops(&fab, x, &fabric_path(&fab, x, y));
        assert_eq!(hops, &want, "{tag}: ibtracert {} -> {} vs the fabric's path:\n{text}", x.name, y.name);
    }
    let (a, b) = (cas[0], cas[cas.len() - 1]);
    let forward = fabric_path(&fab, a, b);
    let back = fabric_path(&fab, b, a);
    for c in &cas {
        assert_eq!(lid_of(c), fab.topo.lids[node_of(&fab, &c.name)], "{tag}: the fabric's LID of {}", c.name);
    }

    // A flow a -> b leaves exactly by the switch ports of that path and of
    // the way back (its ACKs).
    let host = |fab: &Fabric, n: &NetNode| match fab.topo.nodes[node_of(fab, &n.name)] {
        Node::Host(h) => h,
        Node::Switch(_) => panic!("{} is a CA", n.name),
    };
    let sent = |fab: &Fabric| -> HashSet<(usize, usize)> {
        let mut s = HashSet::new();
        for (n, node) in fab.topo.nodes.iter().enumerate() {
            if let Node::Switch(i) = *node {
                s.extend(
                    fab.topo.switches[i].egress.iter().enumerate().filter(|e| e.1.data_sent > 0).map(|e| (n, e.0)),
                );
            }
        }
        s
    };
    assert!(sent(&fab).is_empty(), "{tag}: data before any flow");
    let (ha, hb) = (host(&fab, a), host(&fab, b));
    let start = fab.now;
    fab.add_flow(ha, hb, Some(16 << 10), start);
    fab.run(start + Duration::from_millis(2), true, &mut |_| {});
    assert!(fab.flows[0].finish.is_some(), "{tag}: {} -> {} did not complete: {:?}", a.name, b.name, fab.flows[0]);
    let want: HashSet<(usize, usize)> = forward.iter().chain(&back).copied().collect();
    assert_eq!(sent(&fab), want, "{tag}: the switch ports the flow {} -> {} left by", a.name, b.name);

    // Every ordered pair delivers.
    let start = fab.now;
    let first = fab.flows.len();
    for x in &cas {
        for y in cas.iter().filter(|y| y.name != x.name) {
            fab.add_flow(host(&fab, x), host(&fab, y), Some(8 << 10), start);
        }
    }
    fab.run(start + Duration::from_millis(20), true, &mut |_| {});
    let stuck: Vec<String> = fab.flows[first..]
        .iter()
        .filter(|f| f.finish.is_none())
        .map(|f| {
            format!(
                "{} -> {}",
                fab.topo.ident[fab.topo.host_nodes[f.src]].name, fab.topo.ident[fab.topo.host_nodes[f.dst]].name
            )
        })
        .collect();
    assert!(stuck.is_empty(), "{tag}: flows that did not complete after opensm's sweep: {stuck:#?}");
    eprintln!(
        "{tag}: {} switches, {} CAs: ibroute = {}fabric LFTs, {} CA pairs connected and delivering, \
         {} ibtracert paths = the fabric's",
        switches.len(),
        cas.len(),
        if dumps { "opensm-lfts.dump = " } else { "" },
        cas.len() * (cas.len() - 1),
        traces.len()
    );
}

#[test]
fn opensm_routes_every_ca_pair_on_fat_trees() {
    if !have_tools() {
        return;
    }
    check("ft2", &fat_tree(2, 3, 2), "H1", &[], true);
    check("ftu", &fat_tree_high_uplinks(), "H3", &[], true);
    check("ft3", &fat_tree(3, 4, 2), "H1", &[], true);
    check("ft4", &fat_tree(4, 4, 3), "H5", &[], true);
}

/// The issue's shape (two spines, three leaves, six CAs), opensm at its
/// default log level as a user runs it, twice on fresh fabrics: once in
/// some 700 such runs here opensm logged ERR 331D on every switch and left
/// one CA's LID unrouted (the race is not understood yet; see
/// docs/infiniband.md). Twice, not more: CI time, and a rare failure here
/// is that bug showing, not noise.
#[test]
fn opensm_at_its_default_log_level_routes_every_ca_pair_on_the_issue_fat_tree() {
    if !have_tools() {
        return;
    }
    for i in 0..2 {
        check(&format!("d{i}"), &fat_tree_high_uplinks(), "H1", &[], false);
    }
}

#[test]
fn opensm_routes_every_ca_pair_on_a_four_leaf_leaf_spine() {
    if !have_tools() {
        return;
    }
    check("ls4", &fat_tree(2, 4, 4), "H1", &[], true);
}

#[test]
fn opensm_updn_routes_every_ca_pair_on_a_ring() {
    if !have_tools() {
        return;
    }
    check("ring", &ring(5), "H1", &["-R", "updn"], true);
}
