//! One line per RDMA packet, as text or JSON, and the closing summary:
//! the output of `rdma-dump`.

use crate::decode::{Decoded, Kind};
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
        Ok(PacketLine {
            frame,
            kind,
            addressing,
            headers: TransportRepr::parse(t)?,
            payload_len: t.payload().len(),
            icrc: t.icrc(),
            icrc_ok,
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
        Value::Object(o)
    }
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
