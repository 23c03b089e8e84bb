//! `rdma-sm` over the emulated fabric: every switch and HCA answers SMPs
//! as an SMA, directed-route SMPs travel hop by hop on VL15, and after the
//! sweep the fabric carries data with the LIDs and LFTs the SM chose.

use core::time::Duration;
use rdma_fabric::ib::routing::Routing;
use rdma_fabric::ib::IbConfig;
use rdma_fabric::sm::fabric_transport::from_netfile;
use rdma_fabric::sm::{Sm, SmConfig};
use rdma_fabric::topology::Node;
use rdma_transport::Instant;

/// Two switches joined by two parallel links, two HCAs on each (the shape
/// of ibsim's net.2sw2path4hca).
const TWO_SWITCHES: &str = "\
Switch\t8 \"Switch1\"\n[1]\t\"Hca1\"[1]\n[2]\t\"Hca3\"[1]\n[3]\t\"Switch2\"[3]\n[5]\t\"Switch2\"[5]\n\n\
Switch 8 \"Switch2\"\n[1]\t\"Hca2\"[1]\n[2]\t\"Hca4\"[1]\n[3]\t\"Switch1\"[3]\n[5]\t\"Switch1\"[5]\n\n\
Hca\t2 \"Hca1\"\n[1]\t\"Switch1\"[1]\n\nHca\t2 \"Hca2\"\n[1]\t\"Switch2\"[1]\n\n\
Hca\t2 \"Hca3\"\n[1]\t\"Switch1\"[2]\n\nHca 2 \"Hca4\"\n[1]\t\"Switch2\"[2]\n";

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

#[test]
fn the_sm_configures_the_emulated_fabric_and_data_flows() {
    let t = from_netfile(TWO_SWITCHES, Some("Hca1"), &IbConfig::default()).unwrap();
    let mut sm = Sm::new(t, SmConfig::default());
    let v = sm.run_once().expect("SUBNET UP");
    // opensm's LIDs on this shape (reference §3.4): SM 1, switches 2 and 3, HCAs 4-6 by port GUID.
    let lid = |name: &str| {
        let n = v.found.iter().position(|f| f.description == name).unwrap();
        *v.subnet.lids.iter().find(|((m, _), _)| *m == n).unwrap().1
    };
    assert_eq!(
        [lid("Hca1"), lid("Switch1"), lid("Switch2"), lid("Hca2"), lid("Hca3"), lid("Hca4")],
        [1, 2, 3, 4, 5, 6]
    );
    let fab = &mut sm.transport.fab;
    // What the switches hold is what the SM computed, and every port is Active.
    for (n, node) in fab.topo.nodes.iter().enumerate() {
        match *node {
            Node::Switch(s) => {
                let ib = fab.topo.switches[s].ib.as_ref().unwrap();
                let want = &v.lfts[v.by_guid(fab.topo.ident[n].guid).unwrap()];
                assert_eq!(&ib.lft[1..=6], &want[1..=6], "{}", fab.topo.ident[n].name);
            }
            Node::Host(_) => {
                let m = fab.topo.ports[n][0].ib.as_ref().unwrap().mgmt;
                assert_eq!((m.sm_lid, m.pkeys[0]), (1, 0xffff));
            }
        }
        for p in &fab.topo.ports[n] {
            assert_eq!(p.ib.as_ref().unwrap().mgmt.state, 4, "{} not Active", fab.topo.ident[n].name);
        }
    }
    // Both parallel links carry traffic: Switch1 sends LID 4 by port 3 and LID 6 by port 5.
    let s1 = v.by_guid(0x200000).unwrap();
    assert_eq!((v.lfts[s1][4], v.lfts[s1][6]), (3, 5));
    // Data between the hosts, over the LIDs from the SM.
    let hca = |name: &str| fab.topo.nodes[fab.topo.ident.iter().position(|i| i.name == name).unwrap()];
    let (Node::Host(a), Node::Host(b)) = (hca("Hca1"), hca("Hca4")) else { panic!("HCAs are hosts") };
    let start = fab.now;
    fab.add_flow(a, b, Some(512 << 10), start);
    fab.add_flow(b, a, Some(512 << 10), start);
    fab.run(start + Duration::from_millis(5), true, &mut |_| {});
    assert!(fab.flows.iter().all(|f| f.finish.is_some()), "{:?}", fab.flows);
}

#[test]
fn a_fabric_without_an_sm_carries_no_data() {
    let mut t = from_netfile(TWO_SWITCHES, None, &IbConfig::default()).unwrap();
    let fab = &mut t.fab;
    fab.add_flow(0, 3, Some(64 << 10), fab.now);
    fab.run(Instant::ZERO + Duration::from_millis(1), true, &mut |_| {});
    assert!(fab.flows[0].finish.is_none(), "ports in Init must not carry data");
}

#[test]
fn updown_on_the_emulated_ring_avoids_the_credit_loop_turn() {
    let t = from_netfile(&ring(5), Some("H1"), &IbConfig::default()).unwrap();
    let cfg = SmConfig { routing: Routing::UpDown { roots: vec![0x200000] }, ..SmConfig::default() };
    let mut sm = Sm::new(t, cfg);
    let v = sm.run_once().unwrap();
    let h5 = *v.subnet.lids.get(&(v.by_guid(0x100008).unwrap(), 1)).unwrap();
    // S3 reaches H5 through S2 and the root, not down to S4 and up to S5.
    assert_eq!(v.lfts[v.by_guid(0x200002).unwrap()][usize::from(h5)], 3);
}

#[test]
fn lid_routed_smps_reach_a_switch_through_the_lfts_once_configured() {
    use rdma_fabric::sm::SmpTransport;
    use rdma_wire::smp::{attr, NodeInfo, NodeInfoRepr, SmpRepr};
    let t = from_netfile(TWO_SWITCHES, Some("Hca1"), &IbConfig::default()).unwrap();
    let mut sm = Sm::new(t, SmConfig::default());
    sm.run_once().unwrap();
    let t = &mut sm.transport;
    // Switch2 has LID 3; the SMP goes Hca1 -> Switch1 (LFT) -> Switch2 and back by LID.
    t.lid_routed_dlid = 3;
    let req = SmpRepr::request(0x01, 0xabc, attr::NODE_INFO, 0, None);
    let r = t.exchange(&req).expect("an answer");
    assert_eq!((r.status, r.tid, r.dr), (0, 0xabc, None));
    let ni = NodeInfoRepr::parse(&NodeInfo::new_checked(&r.data[..]).unwrap());
    assert_eq!(ni.node_guid, 0x200001);
    // To a LID nobody has: no answer.
    t.lid_routed_dlid = 60;
    assert!(t.exchange(&SmpRepr::request(0x01, 0xabd, attr::NODE_INFO, 0, None)).is_err());
}

/// Runs the SM with `pkeys` for (Hca1, Hca4) set afterwards through the
/// SMA, then a flow Hca1 -> Hca4: whether it finished, and the P_Key drops.
fn flow_with_pkeys(pkeys: (u16, u16)) -> (bool, u64) {
    use rdma_wire::smp::{attr, DirectedRoute, PKeyBlock, SmpRepr};
    let t = from_netfile(TWO_SWITCHES, Some("Hca1"), &IbConfig::default()).unwrap();
    let mut sm = Sm::new(t, SmConfig::default());
    let v = sm.run_once().unwrap();
    let fab = &mut sm.transport.fab;
    for (name, key) in [("Hca1", pkeys.0), ("Hca4", pkeys.1)] {
        let n = fab.topo.ident.iter().position(|i| i.name == name).unwrap();
        let mut b = [0u16; 32];
        b[0] = key;
        let mut req = SmpRepr::request(0x02, 1, attr::P_KEY_TABLE, 0, Some(DirectedRoute::outbound(&[]).unwrap()));
        PKeyBlock(b).emit(&mut req.data).unwrap();
        assert_eq!(fab.sma(n, 0, &req).status, 0);
    }
    let _ = v;
    flow_hca1_to_hca4(fab)
}

/// A 64 KiB flow Hca1 -> Hca4: whether it finished, and Hca4's port's P_Key drops.
fn flow_hca1_to_hca4(fab: &mut rdma_fabric::fabric::Fabric) -> (bool, u64) {
    let host = |fab: &rdma_fabric::fabric::Fabric, name: &str| {
        let n = fab.topo.ident.iter().position(|i| i.name == name).unwrap();
        let Node::Host(h) = fab.topo.nodes[n] else { panic!("an HCA") };
        (h, n)
    };
    let ((a, _), (b, bn)) = (host(fab, "Hca1"), host(fab, "Hca4"));
    let now = fab.now;
    fab.add_flow(a, b, Some(64 << 10), now);
    fab.run(now + Duration::from_millis(2), true, &mut |_| {});
    let drops = fab.topo.ports[bn][0].ib.as_ref().unwrap().counters.pkey_violations;
    (fab.flows[0].finish.is_some(), drops)
}

/// The SM with `partitions(guid of Hca1, guid of Hca4)` as its
/// `port_pkeys` (`rdma-sm --partition`), then a flow Hca1 -> Hca4.
fn flow_with_partitions(
    partitions: impl Fn(u64, u64) -> Vec<(u64, Vec<u16>)>,
) -> Result<(bool, u64), rdma_fabric::sm::SmError> {
    let guid = |name: &str| {
        let t = from_netfile(TWO_SWITCHES, Some("Hca1"), &IbConfig::default()).unwrap();
        let v = Sm::new(t, SmConfig::default()).run_once().unwrap();
        v.found.iter().find(|f| f.description.contains(name)).map(|f| f.info.port_guid).unwrap()
    };
    let t = from_netfile(TWO_SWITCHES, Some("Hca1"), &IbConfig::default()).unwrap();
    let cfg = SmConfig { port_pkeys: partitions(guid("Hca1"), guid("Hca4")), ..SmConfig::default() };
    let mut sm = Sm::new(t, cfg);
    sm.run_once()?;
    Ok(flow_hca1_to_hca4(&mut sm.transport.fab))
}

#[test]
fn partitions_given_to_the_sm_keep_ports_of_different_ones_apart() {
    let (done, drops) = flow_with_partitions(|a, b| vec![(a, vec![0x8001]), (b, vec![0x8002])]).unwrap();
    assert!(!done && drops > 0, "different partitions: {drops} drops");
    let one = flow_with_partitions(|a, b| vec![(a, vec![0x8001]), (b, vec![0x0001, 0x8005])]).unwrap();
    assert_eq!(one, (true, 0), "a full and a limited member of 0x0001 talk");
    let (done, drops) = flow_with_partitions(|a, b| vec![(a, vec![0x0003]), (b, vec![0x0003])]).unwrap();
    assert!(!done && drops > 0, "two limited members: {drops} drops");
    let e = flow_with_partitions(|_, _| vec![(0xdead, vec![0x8001])]).unwrap_err();
    assert!(matches!(e, rdma_fabric::sm::SmError::NoSuchPort(0xdead, _)), "{e}");
    assert!(e.to_string().contains("0x000000000000dead"), "{e}");
}

/// A resident SM's sweeps: the first configures, the next find nothing
/// to do; a port knocked back to Init (its HCA reset) is configured again
/// at the LID it had, and the other ports' LIDs do not move.
#[test]
fn a_resident_sm_sweeps_quietly_and_brings_a_reset_port_back_at_its_lid() {
    use rdma_wire::smp::{attr, port_state, DirectedRoute, PortInfo, PortInfoRepr, SmpRepr};
    let t = from_netfile(TWO_SWITCHES, Some("Hca1"), &IbConfig::default()).unwrap();
    let mut sm = Sm::new(t, SmConfig::default());
    let first = sm.sweep().unwrap().expect("the first sweep configures");
    let smps = sm.smps;
    assert!(sm.sweep().unwrap().is_none(), "nothing changed: nothing to do");
    assert!(sm.smps - smps < smps, "a quiet sweep reads, it does not configure: {} SMPs", sm.smps - smps);
    // Hca4's port, set Down through its own SMA: it retrains to Init, LID kept by the HCA or not.
    let fab = &mut sm.transport.fab;
    let n = fab.topo.ident.iter().position(|i| i.name == "Hca4").unwrap();
    let dr = || Some(DirectedRoute::outbound(&[]).unwrap());
    let got = fab.sma(n, 0, &SmpRepr::request(0x01, 7, attr::PORT_INFO, 1, dr()));
    let mut pi = PortInfoRepr::parse(&PortInfo::new_checked(&got.data[..]).unwrap());
    pi.port_state = port_state::DOWN;
    pi.lid = 0;
    let mut req = SmpRepr::request(0x02, 8, attr::PORT_INFO, 1, dr());
    pi.emit(&mut req.data).unwrap();
    assert_eq!(fab.sma(n, 0, &req).status, 0);
    let got = fab.sma(n, 0, &SmpRepr::request(0x01, 9, attr::PORT_INFO, 1, dr()));
    let now = PortInfoRepr::parse(&PortInfo::new_checked(&got.data[..]).unwrap());
    assert_ne!(now.port_state, port_state::ACTIVE, "{now:?}");
    let again = sm.sweep().unwrap().expect("a port not ACTIVE: configured again");
    assert_eq!(again.subnet.lids, first.subnet.lids, "every port at the LID it had");
    assert!(sm.sweep().unwrap().is_none());
}

#[test]
fn two_limited_members_cannot_talk() {
    assert_eq!(flow_with_pkeys((0xffff, 0xffff)), (true, 0));
    assert_eq!(flow_with_pkeys((0xffff, 0x7fff)), (true, 0), "full and limited members talk");
    let (done, drops) = flow_with_pkeys((0x7fff, 0x7fff));
    assert!(!done && drops > 0, "two limited members: {drops} drops");
    let (done, drops) = flow_with_pkeys((0x8001, 0x8002));
    assert!(!done && drops > 0, "different partitions: {drops} drops");
}
