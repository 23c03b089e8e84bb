//! An engine packet as an IB frame in the fabric: a real 8-byte LRH, then
//! the engine's RoCE v2 packet (see the [module notes](super)). Frames on
//! VL15 are whole IB packets (LRH .. VCRC) and carry nothing else.

use rdma_wire::lrh::{Lnh, Lrh, LrhRepr};

pub const LRH_LEN: usize = 8;
pub const VCRC_LEN: usize = 2;

/// Bytes of the IPv4 and UDP headers in front of the BTH of an engine packet.
fn ip_udp_len(inner: &[u8]) -> usize {
    match inner.first().map(|b| b >> 4) {
        Some(4) => usize::from(inner[0] & 0xf) * 4 + 8,
        Some(6) => 48,
        _ => 0,
    }
}

/// The native IB size of an engine packet: LRH + (BTH .. ICRC) + VCRC.
pub fn ib_len(inner: &[u8]) -> usize {
    LRH_LEN + inner.len().saturating_sub(ip_udp_len(inner)) + VCRC_LEN
}

/// Wraps `inner` behind an LRH for (`sl`, `vl`) from `slid` to `dlid`;
/// PktLen counts LRH .. ICRC of the IB packet.
pub fn wrap(inner: &[u8], sl: u8, vl: u8, slid: u16, dlid: u16) -> Vec<u8> {
    let mut f = vec![0u8; LRH_LEN + inner.len()];
    let lrh = LrhRepr { vl, sl, lnh: Lnh::IbaLocal, dlid, slid };
    let pkt = (ib_len(inner) - VCRC_LEN).next_multiple_of(4);
    lrh.emit(&mut f[..LRH_LEN], pkt).expect("an engine packet fits PktLen");
    f[LRH_LEN..].copy_from_slice(inner);
    f
}

/// The parsed LRH of a frame.
pub fn lrh(frame: &[u8]) -> Option<LrhRepr> {
    let v = Lrh::new_checked(frame.get(..LRH_LEN)?).ok()?;
    LrhRepr::parse(&v).ok().map(|(r, _)| r)
}

/// Rewrites the VL of a frame's LRH (a switch's SL2VL at its output).
pub fn set_vl(frame: &mut [u8], vl: u8) {
    if let Some(b) = frame.first_mut() {
        *b = (vl << 4) | (*b & 0x0f);
    }
}

/// What a frame costs on the wire.
pub fn wire_len(frame: &[u8]) -> usize {
    if frame.first().is_some_and(|b| b >> 4 == super::VL15) {
        frame.len()
    } else {
        ib_len(&frame[LRH_LEN.min(frame.len())..])
    }
}

/// The engine packet inside a data frame.
pub fn inner(frame: &[u8]) -> &[u8] {
    &frame[LRH_LEN.min(frame.len())..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_packet_costs_its_ib_size() {
        // IPv4 (20) + UDP (8) + BTH (12) + 1024 payload + ICRC (4).
        let mut inner = vec![0u8; 20 + 8 + 12 + 1024 + 4];
        inner[0] = 0x45;
        let f = wrap(&inner, 0, 1, 3, 9);
        // LRH 8 + BTH 12 + 1024 + ICRC 4 + VCRC 2: 1050 bytes, 17 blocks.
        assert_eq!(wire_len(&f), 1050);
        let l = lrh(&f).unwrap();
        assert_eq!((l.vl, l.sl, l.slid, l.dlid), (1, 0, 3, 9));
        let v = Lrh::new_checked(&f[..8]).unwrap();
        assert_eq!(usize::from(v.pkt_len()) * 4, 1048);
        assert_eq!(inner, super::inner(&f));
        let mut g = f.clone();
        set_vl(&mut g, 0);
        assert_eq!(lrh(&g).unwrap().vl, 0);
    }
}
