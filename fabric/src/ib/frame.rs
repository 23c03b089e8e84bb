//! A host's packet as an IB frame in the fabric: the engine frames native
//! IB itself (`LinkKind::Ib`: LRH, BTH.., ICRC, VCRC), and the fabric
//! reads the LRH to route. Ports rewrite the LRH's VL at every output
//! (SL-to-VL), and seal the frame again (the VCRC covers the VL), as a
//! real port recomputes the VCRC on every hop; a host's HCA puts its
//! control packets on their own SL, writing ICRC and VCRC for it.

use rdma_wire::lrh::{Lrh, LrhRepr};
use rdma_wire::Opcode;

pub const LRH_LEN: usize = 8;
pub const VCRC_LEN: usize = 2;
const ICRC_LEN: usize = 4;
/// LRH.LNH of a packet with a GRH (IBA global).
const LNH_GLOBAL: u8 = 0x3;
const GRH_LEN: usize = 40;

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
    reseal(frame);
}

/// Sets the SL and VL of a packet its host's HCA sends (the SL the model
/// gives its class). The ICRC covers the SL (only the VL is variant), so
/// the HCA writes it again, as it would have with that SL from the start.
pub fn set_sl_vl(frame: &mut [u8], sl: u8, vl: u8) {
    let n = frame.len();
    if n < LRH_LEN + ICRC_LEN + VCRC_LEN {
        return;
    }
    frame[0] = (vl << 4) | (frame[0] & 0x0f);
    frame[1] = (sl << 4) | (frame[1] & 0x0f);
    let at = n - VCRC_LEN - ICRC_LEN;
    if let Ok(icrc) = rdma_wire::icrc::ib(&frame[..at]) {
        frame[at..at + ICRC_LEN].copy_from_slice(&rdma_wire::Icrc::wire_bytes(icrc));
    }
    reseal(frame);
}

/// Writes the VCRC of a frame again (it covers LRH .. ICRC).
fn reseal(frame: &mut [u8]) {
    let n = frame.len();
    if n < LRH_LEN + VCRC_LEN {
        return;
    }
    let v = rdma_wire::vcrc::vcrc(&frame[..n - VCRC_LEN]);
    frame[n - VCRC_LEN..].copy_from_slice(&rdma_wire::vcrc::wire_bytes(v));
}

/// The BTH opcode of a data-VL frame.
fn opcode(frame: &[u8]) -> Option<Opcode> {
    let global = frame.get(1)? & 0x3 == LNH_GLOBAL;
    frame.get(LRH_LEN + if global { GRH_LEN } else { 0 }).copied().map(Opcode)
}

/// Whether a frame carries data (a request or a READ response), not a
/// control packet (an ACK, an atomic ACK, a CNP): the classes the fabric
/// puts on its data and control SLs, as the RoCE fabric tells them by
/// their ECN-capable transport.
pub fn is_data(frame: &[u8]) -> bool {
    !matches!(
        opcode(frame),
        None | Some(
            Opcode::RC_ACKNOWLEDGE
                | Opcode::RC_ATOMIC_ACKNOWLEDGE
                | Opcode::CNP
                | Opcode::XRC_ACKNOWLEDGE
                | Opcode::XRC_ATOMIC_ACKNOWLEDGE
        )
    )
}

/// What a frame costs on the wire: all of it (LRH .. VCRC).
pub fn wire_len(frame: &[u8]) -> usize {
    frame.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{connect_with, Host};
    use rdma_transport::{AddressVector, Instant, LinkKind, SendOp, SendWr, Sge};

    /// Two hosts on native IB (LIDs 3 and 9), connected; the first
    /// packet host 0 sends for a 1024-byte WRITE, and host 1.
    fn write_packet() -> (Vec<u8>, Vec<Host>) {
        let mut hosts: Vec<Host> = (0..2).map(|i| Host::new(i, [10, 0, 0, i as u8 + 1].into(), 7, None)).collect();
        hosts[0].ep.set_link(LinkKind::Ib, 3);
        hosts[1].ep.set_link(LinkKind::Ib, 9);
        let (s, _) = connect_with(&mut hosts, 0, 1, AddressVector::lid(9, 0), AddressVector::lid(3, 0));
        let (va, lkey, rva, rkey) = (hosts[0].va, hosts[0].lkey, hosts[1].va, hosts[1].rkey);
        let wr =
            SendWr::new(1, SendOp::RdmaWrite { remote_addr: rva, rkey }, vec![Sge { addr: va, length: 1024, lkey }]);
        hosts[0].ep.post_send(s, wr).unwrap();
        let mut buf = vec![0u8; 4200];
        let t = hosts[0].ep.poll_transmit(Instant::ZERO, &mut buf).expect("a WRITE packet");
        assert!(t.payload.is_none(), "IB packets are whole");
        (buf[..t.len].to_vec(), hosts)
    }

    #[test]
    fn rewrites_keep_the_vcrc_and_the_classes_follow_the_opcode() {
        let (mut f, mut hosts) = write_packet();
        // LRH 8 + BTH 12 + RETH 16 + 1024 + ICRC 4 + VCRC 2.
        assert_eq!(wire_len(&f), 1066);
        assert!(is_data(&f));
        set_vl(&mut f, 2);
        set_sl_vl(&mut f, 5, 1);
        let l = lrh(&f).unwrap();
        assert_eq!((l.vl, l.sl, l.slid, l.dlid), (1, 5, 3, 9));
        let p = rdma_wire::IbPacket::new_checked(&f[..]).unwrap();
        assert!(p.vcrc_ok() && p.icrc_ok(), "the VCRC is sealed again; the ICRC masks the VL");
        // The receiver takes the rewritten packet, and ACKs it.
        hosts[1].ep.handle_packet(Instant::ZERO, &f);
        assert!(hosts[1].ep.stats().drops.is_empty(), "{:?}", hosts[1].ep.stats().drops);
        let mut buf = vec![0u8; 4200];
        let t = hosts[1].ep.poll_transmit(Instant::from_nanos(100_000), &mut buf).expect("an ACK");
        let ack = &buf[..t.len];
        assert!(!is_data(ack), "an ACK is a control packet");
        assert_eq!(lrh(ack).map(|l| (l.slid, l.dlid)), Some((9, 3)));
        assert!(!is_data(&[0u8; 4]), "too short to tell: not data");
    }
}
