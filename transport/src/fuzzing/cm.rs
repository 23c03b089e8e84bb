//! The CM's receive path under a hostile peer: [`cm_receive`].

use crate::cm::{Cm, CmConfig, CmEvent, ConnId, ConnParams};
use crate::endpoint::{Endpoint, MAX_PACKET};
use crate::framing::Framer;
use crate::memory::Access;
use crate::qp::{AddressVector, QpInitAttr, QpState, QpType};
use crate::time::Instant;
use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use rdma_wire::cm::{
    CmMadRepr, CmMessage, DrepRepr, DreqRepr, MraRepr, PathRepr, RejReason, RejRepr, RepRepr, ReqRepr, RtuRepr,
    SidrRepRepr, SidrReqRepr, DREP_PRIVATE_DATA_LEN, DREQ_PRIVATE_DATA_LEN, MRA_PRIVATE_DATA_LEN, REJ_ARI_LEN,
    REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN, SIDR_REP_INFO_LEN,
    SIDR_REP_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};
use rdma_wire::mad::{gsi_send_transport, Mad, MAD_LEN};
use rdma_wire::{DethRepr, Psn};
use std::collections::{HashMap, HashSet};

const ME: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
/// The peers a script may speak as (the second is the one the consumer
/// connects to; any may forge).
const PEERS: [IpAddr; 3] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 4)),
];
const SERVICES: [u64; 3] = [0x0106_0000_4e20, 0x0111_0000_4e21, 0x0106_0000_0001];
const BACKLOG: u32 = 4;
const MAX_CONNECTIONS: usize = 12;
/// Our communication IDs start here (the script names them by a small offset).
const FIRST_ID: u32 = 0x100;

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// A UD SEND to our QP1 from `from`, carrying `payload`.
fn to_qp1(from: IpAddr, payload: &[u8]) -> Vec<u8> {
    let mut t = gsi_send_transport(Psn::new(1));
    t.deth = Some(DethRepr { qkey: rdma_wire::mad::GSI_QKEY, src_qp: 1 });
    let mut buf = vec![0u8; MAX_PACKET];
    match Framer::roce_v2(from).frame(&mut buf, &AddressVector::new(ME), 0xc000, &t, payload.len(), |p| {
        p.copy_from_slice(payload);
        Ok::<(), ()>(())
    }) {
        Ok(n) => buf.truncate(n),
        Err(_) => buf.clear(),
    }
    buf
}

/// A CM message of kind `k` with the script's field choices: peer IDs
/// are small numbers, ours `FIRST_ID + small` (so that they match), QPNs
/// and services from small sets.
fn message(k: u8, r: &mut Reader) -> Option<CmMessage> {
    let peer_id = 0x10 + u32::from(r.byte()? % 8);
    let ours = FIRST_ID + u32::from(r.byte()? % 16);
    let qpn = u32::from(r.byte()?) + 1;
    let service = SERVICES[usize::from(r.byte()? % 3)];
    let x = r.byte()?;
    Some(match k % 9 {
        0 => CmMessage::Req(ReqRepr {
            local_comm_id: peer_id,
            vendor_id: 0,
            service_id: service,
            local_ca_guid: u64::from(x),
            local_qkey: 0,
            local_qpn: qpn,
            responder_resources: x % 4,
            local_eecn: 0,
            initiator_depth: x % 3,
            remote_eecn: 0,
            remote_cm_response_timeout: x % 32,
            transport_service_type: x % 4,
            end_to_end_flow_control: false,
            starting_psn: u32::from(x) << 8,
            local_cm_response_timeout: (x >> 3) % 32,
            retry_count: x % 8,
            pkey: 0xffff,
            path_mtu: x % 7,
            rdc_exists: false,
            rnr_retry_count: x % 8,
            max_cm_retries: x % 16,
            srq: false,
            extended_transport_type: 0,
            primary_path: PathRepr { hop_limit: 64, ..PathRepr::ZERO },
            alternate_path: PathRepr::ZERO,
            sap_supported: false,
            private_data: [x; REQ_PRIVATE_DATA_LEN],
        }),
        1 => CmMessage::Rep(RepRepr {
            local_comm_id: peer_id,
            remote_comm_id: ours,
            local_qkey: 0,
            local_qpn: qpn,
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: u32::from(x),
            responder_resources: x % 4,
            initiator_depth: x % 4,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: x % 8,
            srq: false,
            local_ca_guid: 7,
            private_data: [x; REP_PRIVATE_DATA_LEN],
        }),
        2 => CmMessage::Rtu(RtuRepr {
            local_comm_id: peer_id,
            remote_comm_id: ours,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        }),
        3 => CmMessage::Rej(RejRepr {
            local_comm_id: peer_id,
            remote_comm_id: ours,
            message_rejected: x % 3,
            ari_length: 0,
            reason: RejReason(u16::from(x)),
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        }),
        4 => CmMessage::Dreq(DreqRepr {
            local_comm_id: peer_id,
            remote_comm_id: ours,
            remote_qpn: qpn,
            private_data: [0; DREQ_PRIVATE_DATA_LEN],
        }),
        5 => CmMessage::Drep(DrepRepr {
            local_comm_id: peer_id,
            remote_comm_id: ours,
            private_data: [0; DREP_PRIVATE_DATA_LEN],
        }),
        6 => CmMessage::Mra(MraRepr {
            local_comm_id: peer_id,
            remote_comm_id: ours,
            message_mraed: x % 3,
            service_timeout: x % 32,
            private_data: [0; MRA_PRIVATE_DATA_LEN],
        }),
        7 => CmMessage::SidrReq(SidrReqRepr {
            request_id: peer_id,
            pkey: 0xffff,
            service_id: service,
            private_data: [0; SIDR_REQ_PRIVATE_DATA_LEN],
        }),
        _ => CmMessage::SidrRep(SidrRepRepr {
            request_id: ours,
            status: x % 4,
            additional_info_length: 0,
            vendor_id: 0,
            qpn,
            service_id: service,
            qkey: 0,
            additional_info: [0; SIDR_REP_INFO_LEN],
            private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
        }),
    })
}

/// A CM driven by a script of hostile MADs and consumer calls. Each step
/// of the input is one of: a well-formed CM message of any kind whose
/// communication IDs, QPNs and services come from small sets (so that they
/// hit real connections), raw bytes as a MAD, time passing, or the
/// consumer accepting, rejecting, connecting or disconnecting.
///
/// Oracles, after every step:
/// - no panic;
/// - the peers' requests make at most `MAX_CONNECTIONS` connections (the
///   consumer's own connects may come on top), and at most `BACKLOG`
///   requests per service wait for the consumer;
/// - no connection is established that the consumer did not accept or
///   make: a passive one only after the consumer accepted it and an RTU
///   naming it came from its peer; an active one only after the consumer
///   connected it and a REP naming it came from the peer it called;
/// - a QP is moved only if the consumer handed it to the CM;
/// - output stays proportional to input: at most 17 packets (a MAD and
///   the GSI's retries) per step.
pub fn cm_receive(data: &[u8]) {
    cm_receive_report(data);
}

/// What a [`cm_receive`] run reached, for the seed corpus' test.
#[derive(Debug, Default, Clone, Copy)]
pub struct CmReport {
    pub steps: usize,
    pub requests: usize,
    pub established: usize,
    pub packets_sent: usize,
}

/// [`cm_receive`], saying what it reached.
pub fn cm_receive_report(data: &[u8]) -> CmReport {
    let mut report = CmReport::default();
    let mut r = Reader(data);
    let mut ep = Endpoint::with_seed(ME, 9);
    let mut cm = Cm::new(CmConfig {
        first_comm_id: FIRST_ID,
        max_connections: MAX_CONNECTIONS,
        response_timeout: Duration::from_millis(5),
        ..CmConfig::default()
    });
    for s in SERVICES {
        cm.listen_with_backlog(s, BACKLOG);
    }
    let pd = ep.alloc_pd();
    let cq = ep.create_cq(64);
    let mut free: Vec<u32> = (0..6).map(|_| ep.create_qp(QpInitAttr::new(QpType::Rc, pd, cq)).expect("a QP")).collect();
    // A QP the consumer never gives the CM: nothing may move it.
    let bystander = ep.create_qp(QpInitAttr::new(QpType::Rc, pd, cq)).expect("a QP");
    // QPs handed to the CM for the consumer to move (rdma_cm's external
    // QPs): the CM must never move them either.
    let mut external: HashSet<u32> = HashSet::new();
    let mut now = Instant::ZERO;
    let mut waiting: Vec<(ConnId, u64)> = Vec::new();
    let mut accepted: HashSet<u32> = HashSet::new();
    // Who asked for each passive connection.
    let mut requested: HashMap<u32, IpAddr> = HashMap::new();
    let mut connected: HashMap<u32, IpAddr> = HashMap::new();
    let mut established: HashSet<u32> = HashSet::new();
    // What came in: RTUs and REPs, as (from, the comm ID they name as ours).
    let mut rtus: HashSet<(IpAddr, u32)> = HashSet::new();
    let mut reps: HashSet<(IpAddr, u32)> = HashSet::new();
    let mut buf = vec![0u8; MAX_PACKET];
    let mut steps = 0usize;
    let mut sent = 0usize;
    while let Some(op) = r.byte() {
        steps += 1;
        match op % 8 {
            0..=3 => {
                let (Some(who), Some(kind)) = (r.byte(), r.byte()) else { break };
                let from = PEERS[usize::from(who % 3)];
                let Some(m) = message(kind, &mut r) else { break };
                match &m {
                    CmMessage::Rtu(x) => _ = rtus.insert((from, x.remote_comm_id)),
                    CmMessage::Rep(x) => _ = reps.insert((from, x.remote_comm_id)),
                    _ => {}
                }
                let tid = u64::from(r.byte().unwrap_or(0) % 4);
                let mut mad = [0u8; MAD_LEN];
                let repr = CmMadRepr { transaction_id: tid, attribute_modifier: 0, message: m };
                if let Ok(mut view) = Mad::new_checked(&mut mad[..]) {
                    let _ = repr.emit(&mut view);
                }
                ep.handle_packet(now, &to_qp1(from, &mad));
            }
            4 => {
                let len = usize::from(r.byte().unwrap_or(0)) + usize::from(op >> 7) * 256;
                let mut raw = r.take(len).to_vec();
                if raw.len() > 24 {
                    raw[0] = 1; // base version, so that most reach the CM
                }
                ep.handle_packet(now, &to_qp1(PEERS[usize::from(op >> 3) % 3], &raw));
            }
            5 => now += Duration::from_millis(u64::from(r.byte().unwrap_or(1)) * 4),
            6 => match (op >> 3) % 4 {
                0 | 1 if !waiting.is_empty() => {
                    let (id, _) = waiting.remove(0);
                    if op & 0x40 != 0 {
                        if let Some(qpn) = free.pop() {
                            let params = ConnParams { consumer_moves_qp: op & 0x80 != 0, ..ConnParams::default() };
                            if params.consumer_moves_qp {
                                external.insert(qpn);
                            }
                            if cm.accept(&mut ep, id, qpn, b"", params).is_ok() {
                                accepted.insert(id.0);
                                // What the consumer would move its QP with.
                                for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
                                    assert!(cm.init_qp_attr(&ep, id, state).is_ok(), "no {state:?} attributes");
                                }
                            }
                        }
                    } else {
                        let _ = cm.reject(&mut ep, id, RejReason::CONSUMER_DEFINED, b"");
                    }
                }
                2 => {
                    if let Some(qpn) = free.pop() {
                        let peer = PEERS[1];
                        let params = ConnParams {
                            access: Access::ALL,
                            consumer_moves_qp: op & 0x80 != 0,
                            ..ConnParams::default()
                        };
                        if params.consumer_moves_qp {
                            external.insert(qpn);
                        }
                        if let Ok(id) = cm.connect(&mut ep, qpn, peer, SERVICES[0], b"", params) {
                            connected.insert(id.0, peer);
                        }
                    }
                }
                _ => {
                    if let Some(&id) = established.iter().next() {
                        let _ = cm.disconnect(&mut ep, ConnId(id));
                    }
                }
            },
            _ => {
                if let Some(id) = waiting.first().map(|w| w.0) {
                    // The consumer looks at the request (and forgets an old one).
                    let _ = cm.request(id);
                    if op & 0x80 != 0 {
                        cm.forget(id);
                        waiting.remove(0);
                    }
                }
            }
        }
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
        }
        cm.process(now, &mut ep);
        cm.handle_timeout(now);
        let mut step_sent = 0;
        while ep.poll_transmit(now, &mut buf).is_some() {
            step_sent += 1;
            assert!(step_sent <= 17 * 8, "a step made {step_sent} packets");
        }
        sent += step_sent;
        while let Some(e) = cm.poll_event() {
            match e {
                CmEvent::ConnectRequest { id, from, service_id, .. } => {
                    assert!(SERVICES.contains(&service_id), "a request for a service not listened");
                    waiting.push((id, service_id));
                    requested.insert(id.0, from);
                    report.requests += 1;
                    let per = waiting.iter().filter(|w| w.1 == service_id).count();
                    assert!(per <= BACKLOG as usize, "{per} requests wait for service {service_id:#x}");
                }
                CmEvent::Established { id, .. } => {
                    let active = connected.get(&id.0).is_some_and(|&p| reps.contains(&(p, id.0)));
                    let passive = accepted.contains(&id.0)
                        && requested.get(&id.0).is_some_and(|&from| rtus.contains(&(from, id.0)));
                    assert!(active || passive, "connection {id:?} established without its exchange");
                    established.insert(id.0);
                    report.established += 1;
                }
                CmEvent::Disconnected { id } | CmEvent::TimedOut { id } | CmEvent::QpError { id } => {
                    established.remove(&id.0);
                }
                CmEvent::Rejected { id, .. } | CmEvent::TimewaitExit { id } => {
                    established.remove(&id.0);
                    waiting.retain(|w| w.0 != id);
                }
                CmEvent::ConnectResponse { id, .. } => {
                    let answered = connected.get(&id.0).is_some_and(|&p| reps.contains(&(p, id.0)));
                    assert!(answered, "connection {id:?} got a connect response without a REP");
                    for state in [QpState::Rtr, QpState::Rts] {
                        assert!(cm.init_qp_attr(&ep, id, state).is_ok(), "no {state:?} attributes after the REP");
                    }
                    assert_eq!(cm.establish(&mut ep, id), Ok(()), "establish after the connect response");
                    established.insert(id.0);
                    report.established += 1;
                }
                CmEvent::SidrRequest { id, service_id, .. } => waiting.push((id, service_id)),
                CmEvent::SidrReply { .. } => {}
            }
        }
        // The peers' REQs fill at most MAX_CONNECTIONS; the consumer's own
        // connects (one per QP it has) may come on top.
        let bound = MAX_CONNECTIONS + connected.len();
        assert!(cm.connections() <= bound, "{} connections (bound {bound})", cm.connections());
        let bystander_state = ep.query_qp(bystander).map(|q| q.0);
        assert_eq!(bystander_state, Ok(QpState::Reset), "a QP the CM was never given moved");
        for &q in &external {
            assert_eq!(ep.query_qp(q).map(|s| s.0), Ok(QpState::Reset), "the CM moved the consumer's QP {q}");
        }
    }
    assert!(sent <= 17 * 8 * (steps + 1), "{sent} packets for {steps} steps");
    CmReport { steps, packets_sent: sent, ..report }
}
