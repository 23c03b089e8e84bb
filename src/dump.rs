//! One line per RDMA packet, as text or JSON, and the closing summary:
//! the output of `rdma-dump`.

use crate::decode::{Decoded, Kind};
use rdma_wire::cm::mtu;
use rdma_wire::cma::{is_ip_cm_service_id, service_id_parts, CMA_HDR_LEN};
use rdma_wire::mad::{attr, method, GSI_QPN, MGMT_CLASS_CM};
use rdma_wire::{CmMadRepr, CmMessage, CmaHdr, CmaHdrRepr, Mad, MadHeaderRepr, Opcode, RdmaPs, RejReason};
use rdma_wire::{TransportPacket, TransportRepr};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Addressing and link-level facts of one packet, by kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Addressing {
    RoceV2 { src: String, dst: String, sport: u16, dport: u16, ecn: u8 },
    RoceV1 { sgid: String, dgid: String },
    Ib { slid: u16, dlid: u16, vl: u8, sl: u8, sgid: Option<String>, dgid: Option<String>, vcrc_ok: bool },
}

/// Everything `rdma-dump` says about one well-formed packet.
#[derive(Debug, Clone, PartialEq)]
pub struct PacketLine {
    pub frame: u64,
    pub kind: Kind,
    pub addressing: Addressing,
    pub headers: TransportRepr,
    pub payload_len: usize,
    pub icrc: u32,
    pub icrc_ok: bool,
    /// The MAD of a UD SEND to or from QP1 (`None` for other packets).
    pub mad: Option<MadLine>,
}

impl PacketLine {
    /// Describes a decoded frame; `None` for frames that are not RDMA or
    /// are malformed (see [`Decoded::Malformed`]).
    pub fn from_decoded(frame: u64, d: &Decoded<'_>) -> Option<Result<PacketLine, rdma_wire::Error>> {
        let (kind, addressing, t, icrc_ok) = match d {
            Decoded::NotRdma => return None,
            Decoded::Malformed { error, .. } => return Some(Err(*error)),
            Decoded::RoceV2(p) => {
                let (src, dst, ecn) = match (p.ipv4(), p.ipv6()) {
                    (Some(h), _) => (h.src().to_string(), h.dst().to_string(), h.ecn()),
                    (_, Some(h)) => (h.src().to_string(), h.dst().to_string(), h.traffic_class() & 3),
                    _ => unreachable!(),
                };
                let udp = p.udp();
                let a = Addressing::RoceV2 { src, dst, sport: udp.src_port(), dport: udp.dst_port(), ecn };
                (Kind::RoceV2, a, p.transport(), p.icrc_ok())
            }
            Decoded::RoceV1(p) => {
                let g = p.grh();
                let a = Addressing::RoceV1 { sgid: g.src().to_string(), dgid: g.dst().to_string() };
                (Kind::RoceV1, a, p.transport(), p.icrc_ok())
            }
            Decoded::Ib(p) => {
                let l = p.lrh();
                let g = p.grh();
                let a = Addressing::Ib {
                    slid: l.slid(),
                    dlid: l.dlid(),
                    vl: l.vl(),
                    sl: l.sl(),
                    sgid: g.map(|g| g.src().to_string()),
                    dgid: g.map(|g| g.dst().to_string()),
                    vcrc_ok: p.vcrc_ok(),
                };
                (Kind::Ib, a, p.transport(), p.icrc_ok())
            }
        };
        Some(Self::build(frame, kind, addressing, &t, icrc_ok))
    }

    fn build(
        frame: u64,
        kind: Kind,
        addressing: Addressing,
        t: &TransportPacket<&[u8]>,
        icrc_ok: bool,
    ) -> Result<PacketLine, rdma_wire::Error> {
        let headers = TransportRepr::parse(t)?;
        let mad = MadLine::of(&headers, t.payload());
        Ok(PacketLine {
            frame,
            kind,
            addressing,
            headers,
            payload_len: t.payload().len(),
            icrc: t.icrc(),
            icrc_ok,
            mad,
        })
    }

    /// Whether the VCRC is right (`None` for packets that have none).
    pub fn vcrc_ok(&self) -> Option<bool> {
        match self.addressing {
            Addressing::Ib { vcrc_ok, .. } => Some(vcrc_ok),
            _ => None,
        }
    }

    /// The human-readable line.
    pub fn to_text(&self) -> String {
        let h = &self.headers;
        let b = &h.bth;
        let mut s = format!("{:>6} ", self.frame);
        match &self.addressing {
            Addressing::RoceV2 { src, dst, sport, dport, ecn } => {
                let (src, dst) = if src.contains(':') {
                    (format!("[{src}]"), format!("[{dst}]"))
                } else {
                    (src.clone(), dst.clone())
                };
                let _ = write!(s, "{src}:{sport} > {dst}:{dport}");
                if *ecn != 0 {
                    let _ = write!(s, " ecn={ecn}");
                }
            }
            Addressing::RoceV1 { sgid, dgid } => {
                let _ = write!(s, "RoCEv1 {sgid} > {dgid}");
            }
            Addressing::Ib { slid, dlid, vl, sl, sgid, dgid, .. } => {
                let _ = write!(s, "lid {slid} > {dlid} vl={vl} sl={sl}");
                if let (Some(sg), Some(dg)) = (sgid, dgid) {
                    let _ = write!(s, " gid {sg} > {dg}");
                }
            }
        }
        let _ = write!(s, " {} qp=0x{:06x} psn={} pkey=0x{:04x}", b.opcode, b.dest_qp, b.psn, b.pkey);
        for (on, flag) in [(b.solicited, "SE"), (b.mig_req, "M"), (b.ack_req, "A"), (b.fecn, "FECN"), (b.becn, "BECN")]
        {
            if on {
                let _ = write!(s, " {flag}");
            }
        }
        if b.pad_count != 0 {
            let _ = write!(s, " pad={}", b.pad_count);
        }
        if let Some(d) = &h.deth {
            let _ = write!(s, " deth[qkey=0x{:08x} srcqp=0x{:06x}]", d.qkey, d.src_qp);
        }
        if let Some(x) = h.xrc_srq {
            let _ = write!(s, " xrcsrq=0x{x:06x}");
        }
        if let Some(f) = &h.feth {
            let _ =
                write!(s, " feth[placement={} sel={}]", placement_name(f.placement), selectivity_name(f.selectivity));
        }
        if let Some(r) = &h.reth {
            let _ = write!(s, " reth[va=0x{:x} rkey=0x{:08x} len={}]", r.va, r.rkey, r.dma_len);
        }
        if let Some(a) = &h.atomic_eth {
            let _ = write!(
                s,
                " atomic[va=0x{:x} rkey=0x{:08x} swap_add=0x{:x} cmp=0x{:x}]",
                a.va, a.rkey, a.swap_add, a.compare
            );
        }
        if let Some(a) = &h.aeth {
            let _ = write!(s, " aeth[{} msn={}]", a.syndrome, a.msn);
        }
        if let Some(a) = &h.atomic_ack_eth {
            let _ = write!(s, " orig=0x{:x}", a.orig);
        }
        if let Some(i) = h.imm_dt {
            let _ = write!(s, " imm=0x{i:08x}");
        }
        if let Some(i) = h.ieth {
            let _ = write!(s, " inv_rkey=0x{i:08x}");
        }
        let _ = write!(s, " len={} icrc={}", self.payload_len, if self.icrc_ok { "ok" } else { "BAD" });
        if let Some(v) = self.vcrc_ok() {
            let _ = write!(s, " vcrc={}", if v { "ok" } else { "BAD" });
        }
        if let Some(m) = &self.mad {
            m.write_text(&mut s);
        }
        s
    }

    /// The JSON object (one line of `--json` output).
    pub fn to_json(&self) -> Value {
        let h = &self.headers;
        let b = &h.bth;
        let mut o = Map::new();
        o.insert("frame".into(), json!(self.frame));
        o.insert("kind".into(), json!(self.kind.name()));
        match &self.addressing {
            Addressing::RoceV2 { src, dst, sport, dport, ecn } => {
                o.insert("src".into(), json!(src));
                o.insert("dst".into(), json!(dst));
                o.insert("sport".into(), json!(sport));
                o.insert("dport".into(), json!(dport));
                o.insert("ecn".into(), json!(ecn));
            }
            Addressing::RoceV1 { sgid, dgid } => {
                o.insert("sgid".into(), json!(sgid));
                o.insert("dgid".into(), json!(dgid));
            }
            Addressing::Ib { slid, dlid, vl, sl, sgid, dgid, .. } => {
                o.insert("slid".into(), json!(slid));
                o.insert("dlid".into(), json!(dlid));
                o.insert("vl".into(), json!(vl));
                o.insert("sl".into(), json!(sl));
                if let (Some(sg), Some(dg)) = (sgid, dgid) {
                    o.insert("sgid".into(), json!(sg));
                    o.insert("dgid".into(), json!(dg));
                }
            }
        }
        o.insert("opcode".into(), json!(b.opcode.0));
        o.insert("opcode_name".into(), json!(b.opcode.name()));
        o.insert("dqpn".into(), json!(b.dest_qp));
        o.insert("psn".into(), json!(b.psn.value()));
        o.insert("pkey".into(), json!(b.pkey));
        o.insert("se".into(), json!(b.solicited));
        o.insert("mig_req".into(), json!(b.mig_req));
        o.insert("ack_req".into(), json!(b.ack_req));
        o.insert("fecn".into(), json!(b.fecn));
        o.insert("becn".into(), json!(b.becn));
        o.insert("pad".into(), json!(b.pad_count));
        if let Some(d) = &h.deth {
            o.insert("deth".into(), json!({"qkey": d.qkey, "src_qp": d.src_qp}));
        }
        if let Some(x) = h.xrc_srq {
            o.insert("xrc_srq".into(), json!(x));
        }
        if let Some(f) = &h.feth {
            o.insert(
                "feth".into(),
                json!({
                    "placement": f.placement,
                    "placement_name": placement_name(f.placement),
                    "selectivity": f.selectivity,
                    "selectivity_name": selectivity_name(f.selectivity),
                }),
            );
        }
        if let Some(r) = &h.reth {
            o.insert("reth".into(), json!({"va": r.va, "rkey": r.rkey, "dma_len": r.dma_len}));
        }
        if let Some(a) = &h.atomic_eth {
            o.insert(
                "atomic_eth".into(),
                json!({"va": a.va, "rkey": a.rkey, "swap_add": a.swap_add, "compare": a.compare}),
            );
        }
        if let Some(a) = &h.aeth {
            o.insert(
                "aeth".into(),
                json!({"syndrome": a.syndrome.to_byte(), "meaning": a.syndrome.to_string(), "msn": a.msn}),
            );
        }
        if let Some(a) = &h.atomic_ack_eth {
            o.insert("atomic_ack_eth".into(), json!({"orig": a.orig}));
        }
        if let Some(i) = h.imm_dt {
            o.insert("imm_dt".into(), json!(i));
        }
        if let Some(i) = h.ieth {
            o.insert("ieth".into(), json!(i));
        }
        o.insert("payload_len".into(), json!(self.payload_len));
        o.insert("icrc".into(), json!(format!("0x{:08x}", self.icrc)));
        o.insert("icrc_ok".into(), json!(self.icrc_ok));
        if let Some(v) = self.vcrc_ok() {
            o.insert("vcrc_ok".into(), json!(v));
        }
        if let Some(m) = &self.mad {
            m.insert_json(&mut o);
        }
        Value::Object(o)
    }
}

/// What `rdma-dump` says about the MAD a UD SEND to or from QP1 carries:
/// its common header and, for the CM class, the message.
#[derive(Debug, Clone, PartialEq)]
pub struct MadLine {
    /// The common header, when the payload holds a whole MAD of base version 1.
    pub header: Option<MadHeaderRepr>,
    /// The CM message of a CM-class MAD that parses.
    pub cm: Option<CmMessage>,
    /// Why the MAD (or its CM message) does not parse.
    pub error: Option<String>,
}

impl MadLine {
    /// The MAD of a packet, if it is a UD SEND (with or without immediate)
    /// whose destination or source QP is the GSI's, QP1.
    pub fn of(h: &TransportRepr, payload: &[u8]) -> Option<MadLine> {
        let op = h.bth.opcode;
        if op != Opcode::UD_SEND_ONLY && op != Opcode::UD_SEND_ONLY_WITH_IMMEDIATE {
            return None;
        }
        if h.bth.dest_qp != GSI_QPN && h.deth.map(|d| d.src_qp) != Some(GSI_QPN) {
            return None;
        }
        let mut line = MadLine { header: None, cm: None, error: None };
        let mad = match Mad::new_checked(payload) {
            Ok(m) => m,
            Err(e) => {
                line.error = Some(e.to_string());
                return Some(line);
            }
        };
        match MadHeaderRepr::parse(&mad) {
            Ok(hdr) => line.header = Some(hdr),
            Err(e) => {
                line.error = Some(e.to_string());
                return Some(line);
            }
        }
        if mad.mgmt_class() == MGMT_CLASS_CM {
            match CmMadRepr::parse(&mad) {
                Ok(c) => line.cm = Some(c.message),
                Err(e) => line.error = Some(e.to_string()),
            }
        }
        Some(line)
    }

    fn write_text(&self, s: &mut String) {
        if let Some(h) = &self.header {
            let _ = write!(
                s,
                " mad[{} {} {} tid=0x{:016x}",
                class_name(h.mgmt_class),
                method_name(h.method),
                attribute_name(h.mgmt_class, h.attribute_id),
                h.transaction_id
            );
            if h.status != 0 {
                let _ = write!(s, " status=0x{:04x}", h.status);
            }
            s.push(']');
        }
        if let Some(c) = &self.cm {
            let _ = write!(s, " cm[{}]", cm_text(c));
        }
        if let Some(e) = &self.error {
            let _ = write!(s, " mad_error: {e}");
        }
    }

    fn insert_json(&self, o: &mut Map<String, Value>) {
        if let Some(h) = &self.header {
            o.insert(
                "mad".into(),
                json!({
                    "class": h.mgmt_class,
                    "class_name": class_name(h.mgmt_class),
                    "class_version": h.class_version,
                    "method": h.method,
                    "method_name": method_name(h.method),
                    "attribute": h.attribute_id,
                    "attribute_name": attribute_name(h.mgmt_class, h.attribute_id),
                    "attribute_modifier": h.attribute_modifier,
                    "status": h.status,
                    "transaction_id": h.transaction_id,
                }),
            );
        }
        if let Some(c) = &self.cm {
            o.insert("cm".into(), cm_json(c));
        }
        if let Some(e) = &self.error {
            o.insert("mad_error".into(), json!(e));
        }
    }
}

/// Management class names (IBTA 13.4.4), hex for the rest.
fn class_name(class: u8) -> String {
    match class {
        0x01 => "SM_LID".into(),
        0x81 => "SM_DR".into(),
        0x03 => "SA".into(),
        0x04 => "PERF".into(),
        0x05 => "BM".into(),
        0x06 => "DEV_MGT".into(),
        MGMT_CLASS_CM => "CM".into(),
        0x08 => "SNMP".into(),
        c => format!("0x{c:02x}"),
    }
}

/// Method names (byte 3, response bit included), hex for the rest.
fn method_name(m: u8) -> String {
    match m {
        method::GET => "GET".into(),
        method::SET => "SET".into(),
        method::SEND => "SEND".into(),
        method::TRAP => "TRAP".into(),
        method::REPORT => "REPORT".into(),
        method::TRAP_REPRESS => "TRAP_REPRESS".into(),
        method::GET_RESP => "GET_RESP".into(),
        0x86 => "REPORT_RESP".into(),
        0x12 => "GET_TABLE".into(),
        0x92 => "GET_TABLE_RESP".into(),
        m => format!("0x{m:02x}"),
    }
}

/// CM attribute names; other classes' attributes in hex.
fn attribute_name(class: u8, a: u16) -> String {
    let name = match (class, a) {
        (MGMT_CLASS_CM, attr::CLASS_PORT_INFO) => "ClassPortInfo",
        (MGMT_CLASS_CM, attr::REQ) => "REQ",
        (MGMT_CLASS_CM, attr::MRA) => "MRA",
        (MGMT_CLASS_CM, attr::REJ) => "REJ",
        (MGMT_CLASS_CM, attr::REP) => "REP",
        (MGMT_CLASS_CM, attr::RTU) => "RTU",
        (MGMT_CLASS_CM, attr::DREQ) => "DREQ",
        (MGMT_CLASS_CM, attr::DREP) => "DREP",
        (MGMT_CLASS_CM, attr::SIDR_REQ) => "SIDR_REQ",
        (MGMT_CLASS_CM, attr::SIDR_REP) => "SIDR_REP",
        (MGMT_CLASS_CM, attr::LAP) => "LAP",
        (MGMT_CLASS_CM, attr::APR) => "APR",
        _ => return format!("0x{a:04x}"),
    };
    name.into()
}

/// `enum ib_cm_rej_reason` names, the number for the rest.
/// A FLUSH's placement type as its bits' names (IBTA 1.5 A19.4.1.1:
/// "global", "persistent", joined by '|'; other bits as hex).
pub fn placement_name(p: u8) -> String {
    let mut names = Vec::new();
    if p & rdma_wire::feth::PLACEMENT_GLOBAL != 0 {
        names.push("global".to_string());
    }
    if p & rdma_wire::feth::PLACEMENT_PERSISTENT != 0 {
        names.push("persistent".to_string());
    }
    let rest = p & !(rdma_wire::feth::PLACEMENT_GLOBAL | rdma_wire::feth::PLACEMENT_PERSISTENT);
    if rest != 0 || names.is_empty() {
        names.push(format!("0x{rest:x}"));
    }
    names.join("|")
}

/// A FLUSH's selectivity level (IBTA 1.5 A19.4.1.2): "range", "mr", or
/// "reserved(n)".
pub fn selectivity_name(sel: u8) -> String {
    match sel {
        rdma_wire::feth::SELECTIVITY_RANGE => "range".into(),
        rdma_wire::feth::SELECTIVITY_MR => "mr".into(),
        n => format!("reserved({n})"),
    }
}

pub fn rej_reason_name(r: RejReason) -> String {
    const NAMES: [&str; 36] = [
        "",
        "NO_QP",
        "NO_EEC",
        "NO_RESOURCES",
        "TIMEOUT",
        "UNSUPPORTED",
        "INVALID_COMM_ID",
        "INVALID_COMM_INSTANCE",
        "INVALID_SERVICE_ID",
        "INVALID_TRANSPORT_TYPE",
        "STALE_CONN",
        "RDC_NOT_EXIST",
        "INVALID_GID",
        "INVALID_LID",
        "INVALID_SL",
        "INVALID_TRAFFIC_CLASS",
        "INVALID_HOP_LIMIT",
        "INVALID_PACKET_RATE",
        "INVALID_ALT_GID",
        "INVALID_ALT_LID",
        "INVALID_ALT_SL",
        "INVALID_ALT_TRAFFIC_CLASS",
        "INVALID_ALT_HOP_LIMIT",
        "INVALID_ALT_PACKET_RATE",
        "PORT_CM_REDIRECT",
        "PORT_REDIRECT",
        "INVALID_MTU",
        "INSUFFICIENT_RESP_RESOURCES",
        "CONSUMER_DEFINED",
        "INVALID_RNR_RETRY",
        "DUPLICATE_LOCAL_COMM_ID",
        "INVALID_CLASS_VERSION",
        "INVALID_FLOW_LABEL",
        "INVALID_ALT_FLOW_LABEL",
        "",
        "VENDOR_OPTION_NOT_SUPPORTED",
    ];
    match NAMES.get(usize::from(r.0)) {
        Some(n) if !n.is_empty() => (*n).into(),
        _ => format!("reason_{}", r.0),
    }
}

fn port_space_name(ps: RdmaPs) -> String {
    match ps {
        RdmaPs::TCP => "TCP".into(),
        RdmaPs::UDP => "UDP".into(),
        RdmaPs::IB => "IB".into(),
        RdmaPs::IPOIB => "IPOIB".into(),
        RdmaPs(p) => format!("0x{p:04x}"),
    }
}

/// The path MTU of a REQ in bytes, if the code is a valid one.
fn mtu_bytes(code: u8) -> Option<u32> {
    (mtu::MTU_256..=mtu::MTU_4096).contains(&code).then(|| 128 << code)
}

/// The RDMA CM port space and port of an IP CM service ID.
fn ip_cm_service(sid: u64) -> Option<(RdmaPs, u16)> {
    is_ip_cm_service_id(sid).then(|| service_id_parts(sid))
}

/// The `cma_hdr` that opens the private data of a REQ or SIDR_REQ to an IP CM service ID.
fn cma_hdr(sid: u64, private_data: &[u8]) -> Option<Result<CmaHdrRepr, rdma_wire::Error>> {
    ip_cm_service(sid)?;
    Some(CmaHdr::new_checked(&private_data[..CMA_HDR_LEN]).and_then(|h| CmaHdrRepr::parse(&h)))
}

fn sock(ip: std::net::IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(ip, port).to_string()
}

fn service_text(sid: u64) -> String {
    match ip_cm_service(sid) {
        Some((ps, port)) => format!("sid=0x{sid:016x}({}:{port})", port_space_name(ps)),
        None => format!("sid=0x{sid:016x}"),
    }
}

fn cm_text(c: &CmMessage) -> String {
    match c {
        CmMessage::Req(r) => {
            let mut s = format!("REQ lcid=0x{:08x} {}", r.local_comm_id, service_text(r.service_id));
            let _ = write!(s, " qpn=0x{:06x} spsn={}", r.local_qpn, r.starting_psn);
            match mtu_bytes(r.path_mtu) {
                Some(b) => {
                    let _ = write!(s, " mtu={b}");
                }
                None => {
                    let _ = write!(s, " mtu=code{}", r.path_mtu);
                }
            }
            let _ = write!(s, " rr={} id={}", r.responder_resources, r.initiator_depth);
            match cma_hdr(r.service_id, &r.private_data) {
                Some(Ok(h)) => {
                    let port = service_id_parts(r.service_id).1;
                    let _ = write!(s, " cma {} > {}", sock(h.src, h.src_port), sock(h.dst, port));
                }
                Some(Err(e)) => {
                    let _ = write!(s, " cma_error: {e}");
                }
                None => {}
            }
            s
        }
        CmMessage::Rep(r) => format!(
            "REP lcid=0x{:08x} rcid=0x{:08x} qpn=0x{:06x} spsn={}",
            r.local_comm_id, r.remote_comm_id, r.local_qpn, r.starting_psn
        ),
        CmMessage::Rej(r) => format!(
            "REJ lcid=0x{:08x} rcid=0x{:08x} reason={}({})",
            r.local_comm_id,
            r.remote_comm_id,
            rej_reason_name(r.reason),
            r.reason.0
        ),
        CmMessage::Mra(r) => format!("MRA lcid=0x{:08x} rcid=0x{:08x}", r.local_comm_id, r.remote_comm_id),
        CmMessage::Rtu(r) => format!("RTU lcid=0x{:08x} rcid=0x{:08x}", r.local_comm_id, r.remote_comm_id),
        CmMessage::Dreq(r) => {
            format!("DREQ lcid=0x{:08x} rcid=0x{:08x} rqpn=0x{:06x}", r.local_comm_id, r.remote_comm_id, r.remote_qpn)
        }
        CmMessage::Drep(r) => format!("DREP lcid=0x{:08x} rcid=0x{:08x}", r.local_comm_id, r.remote_comm_id),
        CmMessage::SidrReq(r) => format!("SIDR_REQ reqid=0x{:08x} {}", r.request_id, service_text(r.service_id)),
        CmMessage::SidrRep(r) => format!(
            "SIDR_REP reqid=0x{:08x} status={} {} qpn=0x{:06x} qkey=0x{:08x}",
            r.request_id,
            r.status,
            service_text(r.service_id),
            r.qpn,
            r.qkey
        ),
    }
}

fn service_json(o: &mut Map<String, Value>, sid: u64) {
    o.insert("service_id".into(), json!(sid));
    if let Some((ps, port)) = ip_cm_service(sid) {
        o.insert("port_space".into(), json!(port_space_name(ps)));
        o.insert("port".into(), json!(port));
    }
}

fn cm_json(c: &CmMessage) -> Value {
    let mut o = Map::new();
    let name = match c {
        CmMessage::Req(_) => "REQ",
        CmMessage::Mra(_) => "MRA",
        CmMessage::Rej(_) => "REJ",
        CmMessage::Rep(_) => "REP",
        CmMessage::Rtu(_) => "RTU",
        CmMessage::Dreq(_) => "DREQ",
        CmMessage::Drep(_) => "DREP",
        CmMessage::SidrReq(_) => "SIDR_REQ",
        CmMessage::SidrRep(_) => "SIDR_REP",
    };
    o.insert("message".into(), json!(name));
    let ids = |o: &mut Map<String, Value>, l: u32, r: u32| {
        o.insert("local_comm_id".into(), json!(l));
        o.insert("remote_comm_id".into(), json!(r));
    };
    match c {
        CmMessage::Req(r) => {
            o.insert("local_comm_id".into(), json!(r.local_comm_id));
            service_json(&mut o, r.service_id);
            o.insert("local_qpn".into(), json!(r.local_qpn));
            o.insert("starting_psn".into(), json!(r.starting_psn));
            o.insert("path_mtu".into(), json!(mtu_bytes(r.path_mtu)));
            o.insert("path_mtu_code".into(), json!(r.path_mtu));
            o.insert("responder_resources".into(), json!(r.responder_resources));
            o.insert("initiator_depth".into(), json!(r.initiator_depth));
            match cma_hdr(r.service_id, &r.private_data) {
                Some(Ok(h)) => {
                    let port = service_id_parts(r.service_id).1;
                    o.insert(
                        "cma".into(),
                        json!({"src": h.src.to_string(), "src_port": h.src_port, "dst": h.dst.to_string(), "dst_port": port}),
                    );
                }
                Some(Err(e)) => {
                    o.insert("cma_error".into(), json!(e.to_string()));
                }
                None => {}
            }
        }
        CmMessage::Rep(r) => {
            ids(&mut o, r.local_comm_id, r.remote_comm_id);
            o.insert("local_qpn".into(), json!(r.local_qpn));
            o.insert("starting_psn".into(), json!(r.starting_psn));
        }
        CmMessage::Rej(r) => {
            ids(&mut o, r.local_comm_id, r.remote_comm_id);
            o.insert("reason".into(), json!(r.reason.0));
            o.insert("reason_name".into(), json!(rej_reason_name(r.reason)));
        }
        CmMessage::Mra(r) => ids(&mut o, r.local_comm_id, r.remote_comm_id),
        CmMessage::Rtu(r) => ids(&mut o, r.local_comm_id, r.remote_comm_id),
        CmMessage::Dreq(r) => {
            ids(&mut o, r.local_comm_id, r.remote_comm_id);
            o.insert("remote_qpn".into(), json!(r.remote_qpn));
        }
        CmMessage::Drep(r) => ids(&mut o, r.local_comm_id, r.remote_comm_id),
        CmMessage::SidrReq(r) => {
            o.insert("request_id".into(), json!(r.request_id));
            service_json(&mut o, r.service_id);
        }
        CmMessage::SidrRep(r) => {
            o.insert("request_id".into(), json!(r.request_id));
            o.insert("status".into(), json!(r.status));
            service_json(&mut o, r.service_id);
            o.insert("qpn".into(), json!(r.qpn));
            o.insert("qkey".into(), json!(r.qkey));
        }
    }
    Value::Object(o)
}

/// The line for a frame that is RDMA traffic by its framing but does not parse.
pub fn malformed_text(frame: u64, kind: Kind, error: &rdma_wire::Error) -> String {
    format!("{frame:>6} {} malformed: {error}", kind.name())
}

/// The JSON object for a malformed frame.
pub fn malformed_json(frame: u64, kind: Kind, error: &rdma_wire::Error) -> Value {
    json!({"frame": frame, "kind": kind.name(), "error": error.to_string()})
}

/// Counts over a whole capture.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    pub frames: u64,
    pub packets: u64,
    pub malformed: u64,
    pub icrc_failures: u64,
    pub vcrc_failures: u64,
    pub by_opcode: BTreeMap<u8, (String, u64)>,
}

impl Summary {
    pub fn add(&mut self, p: &PacketLine) {
        self.packets += 1;
        self.icrc_failures += u64::from(!p.icrc_ok);
        self.vcrc_failures += u64::from(p.vcrc_ok() == Some(false));
        let op = p.headers.bth.opcode;
        self.by_opcode.entry(op.0).or_insert_with(|| (op.name().to_string(), 0)).1 += 1;
    }

    /// Whether every RDMA packet parsed and passed its CRCs.
    pub fn all_good(&self) -> bool {
        self.malformed == 0 && self.icrc_failures == 0 && self.vcrc_failures == 0
    }

    /// The closing line.
    pub fn to_text(&self) -> String {
        let ops: Vec<String> = self.by_opcode.values().map(|(name, n)| format!("{name}={n}")).collect();
        format!(
            "summary: {} RDMA packets in {} frames, {} malformed, {} ICRC failures, {} VCRC failures; {}",
            self.packets,
            self.frames,
            self.malformed,
            self.icrc_failures,
            self.vcrc_failures,
            if ops.is_empty() { "no opcodes".to_string() } else { ops.join(" ") }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use rdma_wire::*;

    fn frame(tr: TransportRepr, payload: &[u8]) -> Vec<u8> {
        let ip = IpRepr::V4(Ipv4Repr {
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        });
        let repr =
            RoceV2Repr { ip, udp: UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT, checksum: 0 }, transport: tr };
        let mut buf = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut buf, payload).unwrap();
        buf
    }

    fn line(bytes: &[u8]) -> PacketLine {
        let d = crate::decode::decode(crate::capture::linktype::RAW, bytes);
        PacketLine::from_decoded(1, &d).expect("RDMA").expect("well formed")
    }

    #[test]
    fn flush_and_atomic_write_are_decoded() {
        let mut flush = TransportRepr::new(BthRepr::new(Opcode::RC_FLUSH, 0x12, Psn::new(7)));
        flush.feth = Some(FethRepr { placement: 3, selectivity: 1 });
        flush.reth = Some(RethRepr { va: 0x1000, rkey: 0xabcd, dma_len: 64 });
        let l = line(&frame(flush, &[]));
        let text = l.to_text();
        assert!(text.contains("RC_FLUSH qp=0x000012 psn=7"), "{text}");
        assert!(
            text.contains("feth[placement=global|persistent sel=mr] reth[va=0x1000 rkey=0x0000abcd len=64]"),
            "{text}"
        );
        let j = l.to_json();
        assert_eq!((j["opcode"].as_u64(), j["opcode_name"].as_str()), (Some(0x1c), Some("RC_FLUSH")));
        assert_eq!(j["feth"]["placement"], 3);
        assert_eq!(j["feth"]["selectivity_name"], "mr");

        let mut aw = TransportRepr::new(BthRepr::new(Opcode::RC_ATOMIC_WRITE, 0x12, Psn::new(8)));
        aw.reth = Some(RethRepr { va: 0x1008, rkey: 0xabcd, dma_len: 8 });
        let l = line(&frame(aw, &[1, 2, 3, 4, 5, 6, 7, 8]));
        let text = l.to_text();
        assert!(text.contains("RC_ATOMIC_WRITE") && text.contains("len=8 icrc=ok"), "{text}");
        assert!(!text.contains("feth"), "{text}");
        assert_eq!(l.to_json()["reth"]["dma_len"], 8);
        assert_eq!(
            (placement_name(0), placement_name(5), selectivity_name(2)),
            ("0x0".into(), "global|0x4".into(), "reserved(2)".into())
        );
    }
}
