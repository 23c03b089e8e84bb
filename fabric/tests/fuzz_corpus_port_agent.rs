//! The port agent's fuzz body (`rdma_fabric::fuzzing::port_agent`) over
//! its seed corpus, `fuzz/seeds/port_agent/`: SMP frames made with the
//! crate's own emitters (what `rdma-sm` sends on an interface), directed
//! route and LID-routed, Gets and Sets, at the port's LID and at another,
//! a whole configuration (LID, SM LID, P_Keys, Init -> Armed -> Active),
//! and damaged, short and foreign frames.
//!
//! The corpus is made by `write_the_seed_corpus` (ignored):
//! `SOFTROCE_WRITE_CORPUS=1 cargo test -p rdma-fabric --test fuzz_corpus_port_agent -- --ignored`.

use rdma_fabric::fuzzing::{agent_flags, port_agent, AGENT_MAC};
use rdma_fabric::ib::sma::smp_frame;
use rdma_fabric::sm::ca_sma::{mtu_code_for, CaSma};
use rdma_fabric::sm::port_agent::answer;
use rdma_fabric::sm::raw_transport::{eth_frame, smp_of_eth_frame};
use rdma_wire::mad::method;
use rdma_wire::smp::{
    attr, port_state, status, DirectedRoute, PKeyBlock, Sl2Vl, SmpRepr, VlArbBlock, VlArbEntry, PERMISSIVE_LID,
};
use std::path::PathBuf;

const SM_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const SM_LID: u16 = 1;
/// The LID the configuration seeds give the port.
const LID: u16 = 5;

#[test]
fn the_port_agent_body_runs_clean_over_its_seed_corpus() {
    let n = rdma_wire::fuzzing::replay_seeds("port_agent", port_agent);
    assert!(n >= 15, "the seed corpus has {n} files");
}

/// The checked-in seeds are what the generator below writes (so they are
/// not stale after a change to the SMP emitters).
#[test]
fn the_checked_in_seeds_are_the_generated_ones() {
    for (name, data) in seeds() {
        let path = seed_dir().join(&name);
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(on_disk == data, "seed {name} differs from what write_the_seed_corpus makes");
    }
}

/// The seeds reach the SMA and configure it: the configuration sequence,
/// run through the agent's own per-frame function, leaves the port Active
/// at its LID with the P_Keys set, every request answered; the same
/// requests at another LID, damaged or foreign, are not answered.
#[test]
fn the_configuration_seed_configures_the_port() {
    let mut sma = CaSma::new(0x0200_00ff_fe00_0042, "fuzz port".into(), mtu_code_for(1500));
    let frames = configuration();
    let mut answers = Vec::new();
    for f in &frames {
        answers.push(answer(&mut sma, AGENT_MAC, f).expect("every configuration SMP is answered"));
    }
    assert_eq!((sma.mgmt.lid, sma.mgmt.sm_lid, sma.mgmt.state), (LID, SM_LID, port_state::ACTIVE));
    assert_eq!(&sma.mgmt.pkeys[..3], &[0xffff, 0x8001, 0], "the P_Key table");
    for a in &answers {
        let (r, ..) = smp_of_eth_frame(a).expect("an answer parses");
        assert_eq!((r.method, r.status), (method::GET_RESP, 0), "{r:?}");
    }
    // The last answer is LID-routed, from the port's new LID to the SM's.
    let (_, src, slid, dlid) = smp_of_eth_frame(answers.last().unwrap()).unwrap();
    assert_eq!((src, slid, dlid), (AGENT_MAC, LID, SM_LID));
    let before = sma.clone();
    // A TrapRepress acknowledges a trap: nothing answers it.
    let repress = wire(&SmpRepr::request(method::TRAP_REPRESS, 0x400, attr::NODE_INFO, 0, dr()), PERMISSIVE_LID);
    let unanswered = [lid_get(attr::NODE_INFO, LID + 1), damaged(&lid_get(attr::NODE_INFO, LID)), foreign(), repress];
    for f in &unanswered {
        assert!(answer(&mut sma, AGENT_MAC, f).is_none());
    }
    assert_eq!(sma, before);
    // A jump straight to Active is refused and leaves the port as it was.
    let mut fresh = CaSma::new(1, "p".into(), 3);
    let jump = set_port_info(&fresh, 0, port_state::ACTIVE);
    let r = answer(&mut fresh, AGENT_MAC, &jump).unwrap();
    assert_eq!(smp_of_eth_frame(&r).unwrap().0.status, status::INVALID_VALUE);
    assert_eq!(fresh.mgmt.state, port_state::INIT);
    port_agent(&input(0, &frames));
}

fn seed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/port_agent")
}

fn input(flags: u8, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut v = vec![flags];
    for f in frames {
        v.extend_from_slice(&(f.len() as u16).to_le_bytes());
        v.extend_from_slice(f);
    }
    v
}

/// A directed route one hop out, at its end (as the SM sends it).
fn dr() -> Option<DirectedRoute> {
    let mut d = DirectedRoute::outbound(&[1]).unwrap();
    d.hop_ptr = 1;
    Some(d)
}

fn wire(req: &SmpRepr, dlid: u16) -> Vec<u8> {
    let slid = if req.dr.is_some() { PERMISSIVE_LID } else { SM_LID };
    eth_frame([0xff; 6], SM_MAC, &smp_frame(req, slid, dlid))
}

fn dr_get(attr_id: u16) -> Vec<u8> {
    wire(&SmpRepr::request(method::GET, 0x100 + u64::from(attr_id), attr_id, 0, dr()), PERMISSIVE_LID)
}

fn lid_get(attr_id: u16, dlid: u16) -> Vec<u8> {
    wire(&SmpRepr::request(method::GET, 0x200 + u64::from(attr_id), attr_id, 0, None), dlid)
}

fn dr_set(attr_id: u16, attr_mod: u32, data: &[u8]) -> Vec<u8> {
    let mut req = SmpRepr::request(method::SET, 0x300 + u64::from(attr_id), attr_id, attr_mod, dr());
    req.data[..data.len()].copy_from_slice(data);
    wire(&req, PERMISSIVE_LID)
}

/// A PortInfo Set of `lid` (0: keep the port's) and `state`, as an SM
/// writes it: the PortInfo it read, changed.
fn set_port_info(sma: &CaSma, lid: u16, state: u8) -> Vec<u8> {
    let mut pi = sma.port_info();
    if lid != 0 {
        pi.lid = lid;
        pi.master_sm_lid = SM_LID;
    }
    pi.port_state = state;
    let mut d = [0u8; 64];
    pi.emit(&mut d).unwrap();
    dr_set(attr::PORT_INFO, 0, &d)
}

/// What an SM does to a fresh port: reads it, gives it a LID and the SM's,
/// writes its P_Keys, brings it Armed then Active, reads it at its LID.
fn configuration() -> Vec<Vec<u8>> {
    let mut sma = CaSma::new(0x0200_00ff_fe00_0042, "fuzz port".into(), mtu_code_for(1500));
    let mut out = vec![dr_get(attr::NODE_INFO), dr_get(attr::PORT_INFO)];
    let mut steps = vec![set_port_info(&sma, LID, port_state::NO_CHANGE)];
    sma.mgmt.lid = LID;
    sma.mgmt.sm_lid = SM_LID;
    let mut pkeys = [0u16; 32];
    (pkeys[0], pkeys[1]) = (0xffff, 0x8001);
    let mut d = [0u8; 64];
    PKeyBlock(pkeys).emit(&mut d).unwrap();
    steps.push(dr_set(attr::P_KEY_TABLE, 0, &d));
    steps.push(set_port_info(&sma, 0, port_state::ARMED));
    sma.mgmt.state = port_state::ARMED;
    steps.push(set_port_info(&sma, 0, port_state::ACTIVE));
    out.extend(steps);
    out.push(lid_get(attr::PORT_INFO, LID));
    out
}

fn damaged(f: &[u8]) -> Vec<u8> {
    let mut f = f.to_vec();
    f[60] ^= 0x10; // inside the SMP: the ICRC no longer checks out
    f
}

fn foreign() -> Vec<u8> {
    let mut f = dr_get(attr::NODE_INFO);
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    f
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let fresh = CaSma::new(0x0200_00ff_fe00_0042, "fuzz port".into(), mtu_code_for(1500));
    let one = |f: Vec<u8>| input(0, &[f]);
    let mut s = vec![
        ("dr-get-node-info".to_string(), one(dr_get(attr::NODE_INFO))),
        ("dr-get-port-info".into(), one(dr_get(attr::PORT_INFO))),
        ("dr-get-node-description".into(), one(dr_get(attr::NODE_DESCRIPTION))),
        ("dr-get-unsupported".into(), one(dr_get(attr::SWITCH_INFO))),
        ("lid-get-permissive".into(), one(lid_get(attr::NODE_INFO, PERMISSIVE_LID))),
        ("lid-get-no-lid-yet".into(), one(lid_get(attr::NODE_INFO, LID))),
        ("set-port-info-lid".into(), one(set_port_info(&fresh, LID, port_state::NO_CHANGE))),
        ("set-port-info-init-to-active".into(), one(set_port_info(&fresh, 0, port_state::ACTIVE))),
        ("set-port-info-down".into(), one(set_port_info(&fresh, 0, port_state::DOWN))),
        ("configuration".into(), input(0, &configuration())),
    ];
    let mut conf = configuration();
    conf.push(lid_get(attr::NODE_INFO, LID + 1)); // the wrong LID
    conf.push(set_port_info(&fresh, 0, port_state::DOWN));
    s.push(("configuration-then-wrong-lid-and-down".into(), input(agent_flags::FIX_CRCS, &conf)));
    let mut pk = [0u8; 64];
    PKeyBlock([0x7fff; 32]).emit(&mut pk).unwrap();
    s.push(("set-pkey-table".into(), one(dr_set(attr::P_KEY_TABLE, 0, &pk))));
    let mut sl = [0u8; 64];
    Sl2Vl([0; 16]).emit(&mut sl).unwrap();
    s.push(("set-sl2vl".into(), one(dr_set(attr::SL_TO_VL_TABLE, 0, &sl))));
    let mut va = [0u8; 64];
    VlArbBlock([VlArbEntry { vl: 0, weight: 1 }; 32]).emit(&mut va).unwrap();
    s.push(("set-vlarb-block-1".into(), one(dr_set(attr::VL_ARB_TABLE, 1 << 16, &va))));
    s.push(("set-vlarb-block-9".into(), one(dr_set(attr::VL_ARB_TABLE, 9 << 16, &va))));
    // Not for this port, or not requests.
    let mut mid = DirectedRoute::outbound(&[1, 2]).unwrap();
    mid.hop_ptr = 1;
    s.push((
        "dr-mid-path".into(),
        one(wire(&SmpRepr::request(method::GET, 7, attr::NODE_INFO, 0, Some(mid)), PERMISSIVE_LID)),
    ));
    let mut resp = SmpRepr::request(method::GET_RESP, 8, attr::NODE_INFO, 0, dr());
    resp.dr.as_mut().unwrap().returning = true;
    s.push(("dr-response".into(), one(wire(&resp, PERMISSIVE_LID))));
    s.push(("trap-repress".into(), one(wire(&SmpRepr::request(0x07, 9, attr::NODE_INFO, 0, dr()), PERMISSIVE_LID))));
    // Damaged, cut short, foreign, mixed; a damaged frame with its CRCs made good.
    s.push(("damaged".into(), one(damaged(&dr_get(attr::PORT_INFO)))));
    s.push(("damaged-crcs-fixed".into(), input(agent_flags::FIX_CRCS, &[damaged(&dr_get(attr::PORT_INFO))])));
    let g = dr_get(attr::NODE_INFO);
    s.push(("short".into(), one(g[..g.len() / 2].to_vec())));
    s.push(("runts".into(), input(0, &[vec![], vec![1, 2, 3], g[..15].to_vec()])));
    s.push(("mixed".into(), input(0, &[foreign(), g.clone(), vec![0u8; 10], damaged(&g)])));
    s
}

#[test]
#[ignore = "writes the seed corpus; run with SOFTROCE_WRITE_CORPUS=1"]
fn write_the_seed_corpus() {
    if std::env::var_os("SOFTROCE_WRITE_CORPUS").is_none() {
        return;
    }
    let dir = seed_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, data) in seeds() {
        std::fs::write(dir.join(name), data).unwrap();
    }
}
