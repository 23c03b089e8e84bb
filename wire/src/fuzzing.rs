//! Bodies of the fuzz targets for this crate's parsers (see
//! `docs/fuzzing.md`). Each takes arbitrary bytes and panics only when an
//! oracle is violated: `fuzz/fuzz_targets/<name>.rs` wraps it for
//! libFuzzer, and `tests/fuzz_corpus.rs` runs it over the seed corpus
//! `fuzz/seeds/<name>/`, so an ordinary `cargo test` builds and runs them.

use crate::{
    CmMadRepr, CmMessage, CmaHdr, CmaHdrRepr, FlowControl, FlowControlRepr, IbPacket, IbRepr, Mad, RoceV1Packet,
    RoceV1Repr, RoceV2Packet, RoceV2Repr, TransportPacket, TransportRepr,
};

/// The checked-in seeds of a target (`fuzz/seeds/<target>/` of this
/// workspace), sorted by name, as (name, bytes): what every crate's corpus
/// test replays. Panics, naming the directory, if there are none.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let seeds: Vec<_> = files
        .iter()
        .map(|f| {
            let name = f.file_name().expect("a file has a name").to_string_lossy().into_owned();
            (name, std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        })
        .collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// Runs `body` over every seed of `target`, naming the seed that fails;
/// returns how many seeds ran.
pub fn replay_seeds(target: &str, body: fn(&[u8])) -> usize {
    let seeds = seeds(target);
    for (name, data) in &seeds {
        if let Err(e) = std::panic::catch_unwind(|| body(data)) {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("{target}: seed {name} failed: {}", msg.unwrap_or_default());
        }
    }
    seeds.len()
}

/// RoCE v2 packets (IP header through ICRC): the checked view never
/// panics, and whatever it accepts re-emits to bytes that parse back to the
/// same headers and payload with a valid ICRC.
pub fn roce_v2(data: &[u8]) {
    let Ok(p) = RoceV2Packet::new_checked(data) else { return };
    let _ = p.icrc_ok();
    let t = p.transport();
    let payload = t.payload();
    let _ = (t.reth(), t.aeth().map(|a| a.syndrome()), t.atomic_eth(), t.deth(), t.imm_dt(), t.ieth());
    let Ok(repr) = RoceV2Repr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len(payload.len()).expect("a parsed packet has a length")];
    repr.emit(&mut out, payload).expect("a parsed packet re-emits");
    let again = RoceV2Packet::new_checked(&out[..]).expect("an emitted packet parses");
    assert!(again.icrc_ok(), "an emitted packet carries a correct ICRC");
    assert_eq!(RoceV2Repr::parse(&again).expect("re-parse"), repr);
    assert_eq!(again.transport().payload(), payload);
}

/// RoCE v1 packets (GRH through ICRC): as [`roce_v2`].
pub fn roce_v1(data: &[u8]) {
    let Ok(p) = RoceV1Packet::new_checked(data) else { return };
    let _ = p.icrc_ok();
    let t = p.transport();
    let Ok(repr) = RoceV1Repr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len(t.payload().len()).expect("a parsed packet has a length")];
    repr.emit(&mut out, t.payload()).expect("a parsed packet re-emits");
    let again = RoceV1Packet::new_checked(&out[..]).expect("an emitted packet parses");
    assert!(again.icrc_ok(), "an emitted packet carries a correct ICRC");
    assert_eq!(RoceV1Repr::parse(&again).expect("re-parse"), repr);
    assert_eq!(again.transport().payload(), t.payload());
}

/// Native InfiniBand packets (LRH through VCRC): as [`roce_v2`], with the
/// VCRC checked too.
pub fn ib_packet(data: &[u8]) {
    let Ok(p) = IbPacket::new_checked(data) else { return };
    let _ = (p.icrc_ok(), p.vcrc_ok(), p.grh().map(|g| g.dst()));
    let t = p.transport();
    let Ok(repr) = IbRepr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len(t.payload().len()).expect("a parsed packet has a length")];
    repr.emit(&mut out, t.payload()).expect("a parsed packet re-emits");
    let again = IbPacket::new_checked(&out[..]).expect("an emitted packet parses");
    assert!(again.icrc_ok() && again.vcrc_ok(), "an emitted packet carries correct CRCs");
    assert_eq!(IbRepr::parse(&again).expect("re-parse"), repr);
}

/// The transport packet alone (BTH through ICRC), as the engine sees it:
/// every accessor is safe on a checked view, and parsed headers re-emit to
/// the same length and the same headers.
pub fn transport_packet(data: &[u8]) {
    let Ok(t) = TransportPacket::new_checked(data) else { return };
    let _ = (t.payload(), t.icrc(), t.reth(), t.aeth(), t.atomic_eth(), t.atomic_ack_eth(), t.deth(), t.xrceth());
    let Ok(repr) = TransportRepr::parse(&t) else { return };
    let mut out = vec![0u8; repr.packet_len(t.payload().len()).expect("a parsed packet has a length")];
    let n = repr.emit_headers(&mut out, t.payload().len()).expect("parsed headers re-emit");
    assert_eq!(n, t.header_len(), "re-emitted headers keep their length");
    let again = TransportPacket::new_checked(&out[..]).expect("emitted headers parse");
    assert_eq!(TransportRepr::parse(&again).expect("re-parse"), repr);
}

/// IB link flow-control packets: a parsed packet re-emits to the same six
/// bytes when its LPCRC was correct.
pub fn flow_control(data: &[u8]) {
    let Ok(f) = FlowControl::new_checked(data) else { return };
    let ok = f.lpcrc_ok();
    let Ok(repr) = FlowControlRepr::parse(&f) else { return };
    let mut out = [0u8; 6];
    repr.emit(&mut out).expect("six bytes fit");
    if ok {
        assert_eq!(&out[..], &data[..6], "a packet with a good LPCRC re-emits byte for byte");
    }
}

/// CM MADs (256 bytes): whatever parses re-emits to a MAD that parses to
/// the same message; a `cma_hdr` in REQ or SIDR_REQ private data likewise.
pub fn cm_mad(data: &[u8]) {
    let Ok(m) = Mad::new_checked(data) else { return };
    let _ = (m.status(), m.class_specific(), m.data());
    let Ok(repr) = CmMadRepr::parse(&m) else { return };
    let mut out = [0u8; crate::mad::MAD_LEN];
    repr.emit(&mut Mad::new_checked(&mut out[..]).expect("256 bytes")).expect("a parsed CM MAD re-emits");
    let again = CmMadRepr::parse(&Mad::new_checked(&out[..]).expect("256 bytes")).expect("an emitted CM MAD parses");
    assert_eq!(again, repr);
    let pd: &[u8] = match &repr.message {
        CmMessage::Req(r) => &r.private_data,
        CmMessage::SidrReq(r) => &r.private_data,
        _ => return,
    };
    let Ok(hdr) = CmaHdrRepr::parse(&CmaHdr::new_checked(pd).expect("36 bytes fit")) else { return };
    let mut out = [0u8; crate::cma::CMA_HDR_LEN];
    hdr.emit(&mut CmaHdr::new_checked(&mut out[..]).expect("36 bytes")).expect("a parsed cma_hdr re-emits");
    assert_eq!(CmaHdrRepr::parse(&CmaHdr::new_checked(&out[..]).expect("36 bytes")), Ok(hdr));
}

/// SMPs (256 bytes): whatever parses re-emits to bytes that parse to the
/// same SMP; its attribute (by ID) likewise re-emits to the same value.
pub fn smp(data: &[u8]) {
    use crate::smp::*;
    let Ok(v) = Smp::new_checked(data) else { return };
    let _ = (v.status(), v.direction(), v.hop_ptr(), v.initial_path(), v.return_path());
    let Ok(repr) = SmpRepr::parse(&v) else { return };
    let out = repr.to_bytes();
    assert_eq!(SmpRepr::parse(&Smp::new_checked(&out[..]).expect("256 bytes")), Ok(repr));
    let d = &repr.data[..];
    let mut b = [0u8; SMP_DATA_LEN];
    match repr.attr_id {
        attr::NODE_INFO => {
            let x = NodeInfoRepr::parse(&NodeInfo::new_checked(d).expect("64 bytes"));
            x.emit(&mut b).expect("64 bytes");
            assert_eq!(NodeInfoRepr::parse(&NodeInfo::new_checked(&b[..]).expect("64 bytes")), x);
        }
        attr::PORT_INFO => {
            let x = PortInfoRepr::parse(&PortInfo::new_checked(d).expect("64 bytes"));
            x.emit(&mut b).expect("64 bytes");
            assert_eq!(PortInfoRepr::parse(&PortInfo::new_checked(&b[..]).expect("64 bytes")), x);
        }
        attr::SWITCH_INFO => {
            let x = SwitchInfoRepr::parse(&SwitchInfo::new_checked(d).expect("64 bytes"));
            x.emit(&mut b).expect("64 bytes");
            assert_eq!(SwitchInfoRepr::parse(&SwitchInfo::new_checked(&b[..]).expect("64 bytes")), x);
        }
        attr::LINEAR_FORWARDING_TABLE => {
            let x = LftBlock::parse(d).expect("64 bytes");
            x.emit(&mut b).expect("64 bytes");
            assert_eq!(LftBlock::parse(&b), Ok(x));
        }
        attr::P_KEY_TABLE => {
            let x = PKeyBlock::parse(d).expect("64 bytes");
            x.emit(&mut b).expect("64 bytes");
            assert_eq!(PKeyBlock::parse(&b), Ok(x));
        }
        attr::SL_TO_VL_TABLE => {
            let x = Sl2Vl::parse(d).expect("64 bytes");
            x.emit(&mut b).expect("64 bytes");
            assert_eq!(Sl2Vl::parse(&b), Ok(x));
        }
        attr::VL_ARB_TABLE => {
            let x = VlArbBlock::parse(d).expect("64 bytes");
            x.emit(&mut b).expect("64 bytes");
            assert_eq!(VlArbBlock::parse(&b), Ok(x));
        }
        attr::NODE_DESCRIPTION => {
            let _ = node_description(d);
        }
        _ => {}
    }
}
