//! Bodies of the fuzz targets that exercise code of this crate (the thin
//! `fuzz_target!` wrappers live in `fuzz/`). Each is also run over its
//! checked-in seed corpus by an ordinary test (`tests/fuzz_corpus_*.rs`).
//! Every oracle panics on a violation; nothing else may panic.

use crate::sm::ca_sma::{mtu_code_for, CaSma};
use crate::sm::port_agent::answer;
use crate::sm::raw_transport::smp_of_eth_frame;
use rdma_link::{Mac, ETH_HEADER};
use rdma_wire::ethernet::ETHERTYPE_IB;
use rdma_wire::mad::method;
use rdma_wire::smp::{attr, port_state, status, SmpRepr, PERMISSIVE_LID, SMP_LEN};
use rdma_wire::IbPacket;

/// Flag bits of [`port_agent`]'s first byte.
pub mod agent_flags {
    /// Rewrite the ICRC and VCRC of every frame whose IB packet parses,
    /// so that inputs reach past the CRC checks into the SMA.
    pub const FIX_CRCS: u8 = 1;
}

/// Frames a [`port_agent`] input holds at most.
pub const PORT_AGENT_MAX_FRAMES: usize = 64;

/// The port's MAC in the body.
pub const AGENT_MAC: Mac = [2, 0, 0, 0, 0, 0x42];

/// Every answer is one SMP packet in one frame: Ethernet header, LRH (8),
/// BTH (12), DETH (8), the 256-byte SMP, ICRC (4), VCRC (2).
pub const ANSWER_FRAME_LEN: usize = ETH_HEADER + 8 + 12 + 8 + SMP_LEN + 4 + 2;

/// The port agent's wire input (`rdma-sm --agent --netdev IFACE`, which
/// reads every VL15 frame on the interface as root): frames go one after
/// the other through [`answer`], the function the agent runs on each, to
/// one fresh port (INIT, no LID). Input: a flags byte ([`agent_flags`]),
/// then frames, each a little-endian u16 length and that many bytes (at
/// most [`PORT_AGENT_MAX_FRAMES`]).
///
/// Oracles, per frame (see [`check_exchange`]): no panic; a frame gets an
/// answer exactly when it is a good VL15 SMP request (not a response) for
/// this port (directed route at the end of its path, or LID-routed at its
/// LID or the permissive LID); the answer is one frame of
/// [`ANSWER_FRAME_LEN`] bytes from the port's MAC to the requester's that
/// parses back as an SMP, a GetResp with the request's TID, attribute and
/// modifier, on the way back (DR) or from the port's LID to the
/// requester's; methods other than Get and Set are refused as unsupported;
/// a Get, a refused Set and an unanswered frame change nothing; a Set
/// changes only its attribute's part of the state and answers what a Get
/// then reads; the port state stays Init, Armed or Active and moves only
/// as one SMA step allows.
pub fn port_agent(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else { return };
    let mut sma = CaSma::new(0x0200_00ff_fe00_0042, "fuzz port".into(), mtu_code_for(1500));
    let mut frames = 0;
    while rest.len() >= 2 && frames < PORT_AGENT_MAX_FRAMES {
        let n = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let mut f = rest[2..2 + n].to_vec();
        rest = &rest[2 + n..];
        frames += 1;
        if flags & agent_flags::FIX_CRCS != 0 && f.len() > ETH_HEADER {
            IbPacket::reseal(&mut f[ETH_HEADER..]);
        }
        let before = sma.clone();
        let reply = answer(&mut sma, AGENT_MAC, &f);
        check_exchange(&before, &sma, &f, reply.as_deref());
    }
}

/// Whether a request that reached the port with LRH DLID `dlid` is for it,
/// the port's LID being `own`: IBA 14.2.2 for directed routes (a CA is
/// the end of the path; hop count 0 is the SM on this port), else its LID
/// (once it has one) or the permissive LID.
fn addressed_here(req: &SmpRepr, dlid: u16, own: u16) -> bool {
    match req.dr {
        Some(d) => !d.returning && (d.hop_cnt == 0 || d.hop_ptr == d.hop_cnt),
        None => dlid == PERMISSIVE_LID || (own != 0 && dlid == own),
    }
}

/// The oracles on one frame: the port was `before`, took `frame`, is now
/// `after` and sent `reply`. Panics, saying what was wrong, on a
/// violation.
fn check_exchange(before: &CaSma, after: &CaSma, frame: &[u8], reply: Option<&[u8]>) {
    let (b, a) = (before.mgmt.state, after.mgmt.state);
    assert!(
        [port_state::INIT, port_state::ARMED, port_state::ACTIVE].contains(&a),
        "the port is in state {a}: a port with a link is Init, Armed or Active"
    );
    let one_step = a == b || a == port_state::INIT || (a >= port_state::ARMED && a.abs_diff(b) == 1);
    assert!(one_step, "the port state went from {b} to {a}: more than one step");
    let Some((req, src, slid, dlid)) = smp_of_eth_frame(frame) else {
        assert!(reply.is_none(), "a frame that is not a good VL15 SMP was answered");
        assert_eq!(after, before, "a frame that is not a good VL15 SMP changed the port");
        return;
    };
    // What the wire crate says of the frame, apart from the agent's parser.
    assert_eq!(u16::from_be_bytes([frame[12], frame[13]]), ETHERTYPE_IB, "an SMP frame of another EtherType");
    assert_eq!(frame[ETH_HEADER] >> 4, 15, "an SMP frame off VL15");
    // A TrapRepress answers a trap: nothing answers it (IBA 13.4.6.4).
    let request = req.method & method::RESP == 0 && req.method != method::TRAP_REPRESS;
    let here = addressed_here(&req, dlid, before.mgmt.lid);
    let Some(reply) = reply else {
        assert!(!(request && here), "a request for this port went unanswered (method {:#x})", req.method);
        assert_eq!(after, before, "an unanswered SMP changed the port");
        return;
    };
    assert!(request, "a response (method {:#x}) was answered", req.method);
    assert!(here, "an SMP for another port was answered (DLID {dlid:#x}, the port's LID {:#x})", before.mgmt.lid);
    assert_eq!(reply.len(), ANSWER_FRAME_LEN, "the answer frame's length");
    assert_eq!(reply[..6], src, "the answer goes to the requester's MAC");
    assert_eq!(reply[6..12], AGENT_MAC, "the answer comes from the port's MAC");
    let Some((resp, rsrc, rslid, rdlid)) = smp_of_eth_frame(reply) else {
        panic!("the answer frame does not parse back as a VL15 SMP with good CRCs")
    };
    assert_eq!(rsrc, AGENT_MAC);
    assert_eq!(resp.method, method::GET_RESP, "the answer's method");
    assert_eq!(resp.tid, req.tid, "the answer's TID");
    assert_eq!((resp.attr_id, resp.attr_mod), (req.attr_id, req.attr_mod), "the answer's attribute");
    match (req.dr, resp.dr) {
        (Some(q), Some(r)) => {
            assert!(r.returning, "a DR answer goes back");
            assert_eq!((rslid, rdlid), (PERMISSIVE_LID, PERMISSIVE_LID), "a DR answer's LIDs");
            let ptr = if q.hop_cnt == 0 { q.hop_ptr } else { q.hop_ptr - 1 };
            assert_eq!((r.hop_cnt, r.hop_ptr), (q.hop_cnt, ptr), "a DR answer's hop count and pointer");
            assert_eq!(r.initial_path, q.initial_path, "a DR answer keeps the path");
        }
        (None, None) => {
            assert_eq!((rslid, rdlid), (after.mgmt.lid, slid), "a LID-routed answer's LIDs");
        }
        _ => panic!("the answer is routed otherwise than the request"),
    }
    match req.method {
        method::GET => assert_eq!(after, before, "a Get changed the port"),
        method::SET => check_set(before, after, &req, &resp),
        m => {
            assert_eq!(resp.status, status::UNSUPPORTED_METHOD, "method {m:#x} is not refused as unsupported");
            assert_eq!(after, before, "method {m:#x} changed the port");
        }
    }
}

/// A Set changes only its attribute's part of the state, and only when
/// it succeeds; what it answers is what a Get then reads.
fn check_set(before: &CaSma, after: &CaSma, req: &SmpRepr, resp: &SmpRepr) {
    if resp.status != 0 {
        assert_eq!(after, before, "a refused Set (status {:#x}) changed the port", resp.status);
        return;
    }
    let mut allowed = before.clone();
    match req.attr_id {
        attr::PORT_INFO => {
            let (m, n) = (&mut allowed.mgmt, &after.mgmt);
            (m.lid, m.sm_lid, m.lmc, m.op_vls, m.state) = (n.lid, n.sm_lid, n.lmc, n.op_vls, n.state);
        }
        attr::P_KEY_TABLE => allowed.mgmt.pkeys = after.mgmt.pkeys,
        attr::SL_TO_VL_TABLE => allowed.sl2vl = after.sl2vl,
        attr::VL_ARB_TABLE => {
            let block = (req.attr_mod >> 16) as usize;
            assert!((1..=4).contains(&block), "a Set of VLArbitration block {block} succeeded");
            allowed.vlarb[block - 1] = after.vlarb[block - 1];
        }
        a => panic!("a Set of attribute {a:#x}, which a CA does not set, succeeded"),
    }
    assert_eq!(after, &allowed, "a Set of attribute {:#x} changed another part of the port", req.attr_id);
    let mut probe = after.clone();
    let get = SmpRepr { method: method::GET, data: [0; 64], ..*req };
    let read = probe.handle(&get).expect("a Get at the port is answered");
    assert_eq!(read.status, 0, "a Get of what a Set just wrote is refused");
    assert!(read.data == resp.data, "a Set answered other data than a Get then reads");
    assert_eq!(&probe, after, "a Get changed the port");
}

#[cfg(test)]
mod tests {
    //! The oracles can fail: each crafted bad exchange below trips one.
    use super::*;
    use crate::ib::sma::smp_frame;
    use crate::sm::raw_transport::eth_frame;
    use rdma_wire::smp::DirectedRoute;

    const SM_MAC: Mac = [2, 0, 0, 0, 0, 1];

    fn frame(req: &SmpRepr, dlid: u16) -> Vec<u8> {
        eth_frame(AGENT_MAC, SM_MAC, &smp_frame(req, 1, dlid))
    }

    fn dr_get(attr_id: u16) -> SmpRepr {
        let mut dr = DirectedRoute::outbound(&[1]).unwrap();
        dr.hop_ptr = 1;
        SmpRepr::request(method::GET, 9, attr_id, 0, Some(dr))
    }

    fn fresh() -> CaSma {
        CaSma::new(0x42, "t".into(), 3)
    }

    #[test]
    fn a_real_exchange_passes() {
        let (mut sma, f) = (fresh(), frame(&dr_get(attr::NODE_INFO), PERMISSIVE_LID));
        let before = sma.clone();
        let reply = answer(&mut sma, AGENT_MAC, &f).expect("answered");
        check_exchange(&before, &sma, &f, Some(&reply));
    }

    #[test]
    #[should_panic(expected = "the answer's TID")]
    fn an_answer_with_another_tid_trips() {
        let (mut sma, f) = (fresh(), frame(&dr_get(attr::NODE_INFO), PERMISSIVE_LID));
        let before = sma.clone();
        let mut resp = sma.handle(&dr_get(attr::NODE_INFO)).unwrap();
        resp.tid += 1;
        let bad = eth_frame(SM_MAC, AGENT_MAC, &smp_frame(&resp, PERMISSIVE_LID, PERMISSIVE_LID));
        check_exchange(&before, &sma, &f, Some(&bad));
    }

    #[test]
    #[should_panic(expected = "a Get changed the port")]
    fn a_get_that_writes_trips() {
        let (mut sma, f) = (fresh(), frame(&dr_get(attr::PORT_INFO), PERMISSIVE_LID));
        let before = sma.clone();
        let reply = answer(&mut sma, AGENT_MAC, &f).unwrap();
        sma.mgmt.lid = 7;
        check_exchange(&before, &sma, &f, Some(&reply));
    }

    #[test]
    #[should_panic(expected = "more than one step")]
    fn init_straight_to_active_trips() {
        let sma = fresh();
        let mut after = sma.clone();
        after.mgmt.state = port_state::ACTIVE;
        check_exchange(&sma, &after, &[0u8; 20], None);
    }

    #[test]
    #[should_panic(expected = "an SMP for another port was answered")]
    fn an_answer_at_a_foreign_lid_trips() {
        let mut sma = fresh();
        let req = SmpRepr::request(method::GET, 3, attr::NODE_INFO, 0, None);
        let f = frame(&req, 5); // the port has no LID yet
        let resp = sma.handle(&req).unwrap();
        let bad = eth_frame(SM_MAC, AGENT_MAC, &smp_frame(&resp, 0, 1));
        check_exchange(&sma.clone(), &sma, &f, Some(&bad));
    }

    #[test]
    #[should_panic(expected = "a request for this port went unanswered")]
    fn a_dropped_request_trips() {
        let sma = fresh();
        check_exchange(&sma, &sma, &frame(&dr_get(attr::NODE_INFO), PERMISSIVE_LID), None);
    }
}
