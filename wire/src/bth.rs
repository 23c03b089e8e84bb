//! Base Transport Header (IBTA 9.2): 12 bytes in front of every transport packet.

use crate::field::*;
use crate::{Error, Opcode, Psn, Result};

header_view!(
    /// A view of a BTH.
    Bth, 12, "BTH"
);

/// Byte offsets of the BTH fields.
mod f {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1; // SE | M | PadCnt(2) | TVer(4)
    pub const PKEY: usize = 2;
    pub const ECN: usize = 4; // FECN | BECN | reserved(6): masked in the ICRC
    pub const DQPN: usize = 5;
    pub const ACKREQ: usize = 8; // AckReq | reserved(7)
    pub const PSN: usize = 9;
}

/// The byte of the BTH that the ICRC treats as variant (set to all ones).
pub const BTH_VARIANT_BYTE: usize = f::ECN;

/// Bytes of padding that bring `payload_len` to a multiple of four: the
/// value of the BTH's PadCnt field.
#[inline]
pub const fn pad_for(payload_len: usize) -> usize {
    (4 - payload_len % 4) % 4
}

impl<T: AsRef<[u8]>> Bth<T> {
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[f::OPCODE])
    }
    pub fn solicited(&self) -> bool {
        self.b()[f::FLAGS] & 0x80 != 0
    }
    pub fn mig_req(&self) -> bool {
        self.b()[f::FLAGS] & 0x40 != 0
    }
    pub fn pad_count(&self) -> u8 {
        (self.b()[f::FLAGS] >> 4) & 0x3
    }
    pub fn tver(&self) -> u8 {
        self.b()[f::FLAGS] & 0x0f
    }
    pub fn pkey(&self) -> u16 {
        u16_at(self.b(), f::PKEY)
    }
    pub fn fecn(&self) -> bool {
        self.b()[f::ECN] & 0x80 != 0
    }
    pub fn becn(&self) -> bool {
        self.b()[f::ECN] & 0x40 != 0
    }
    pub fn dest_qp(&self) -> u32 {
        u24_at(self.b(), f::DQPN)
    }
    pub fn ack_req(&self) -> bool {
        self.b()[f::ACKREQ] & 0x80 != 0
    }
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.b(), f::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    pub fn set_opcode(&mut self, op: Opcode) {
        self.bm()[f::OPCODE] = op.0;
    }
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.bm()[f::FLAGS] =
            (u8::from(solicited) << 7) | (u8::from(mig_req) << 6) | ((pad_count & 3) << 4) | (tver & 0xf);
    }
    pub fn set_pkey(&mut self, pkey: u16) {
        set_u16(self.bm(), f::PKEY, pkey);
    }
    pub fn set_ecn(&mut self, fecn: bool, becn: bool) {
        self.bm()[f::ECN] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }
    pub fn set_dest_qp(&mut self, qpn: u32) {
        set_u24(self.bm(), f::DQPN, qpn);
    }
    pub fn set_ack_req(&mut self, ack_req: bool) {
        self.bm()[f::ACKREQ] = u8::from(ack_req) << 7;
    }
    pub fn set_psn(&mut self, psn: Psn) {
        set_u24(self.bm(), f::PSN, psn.value());
    }
}

/// An owned BTH. Reserved bits are dropped on parse and written as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration state (APM).
    pub mig_req: bool,
    /// Bytes of padding that bring the payload to a multiple of four.
    pub pad_count: u8,
    pub pkey: u16,
    /// Forward explicit congestion notification.
    pub fecn: bool,
    /// Backward explicit congestion notification (set in CNPs).
    pub becn: bool,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// Asks the responder for an acknowledgement.
    pub ack_req: bool,
    pub psn: Psn,
}

impl BthRepr {
    /// A BTH with the default P_Key (0xFFFF) and every flag clear.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Reads a BTH. The transport header version must be 0 (IBTA 9.2.4).
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<BthRepr> {
        if bth.tver() != 0 {
            return Err(Error::BadVersion { header: "BTH", version: bth.tver() });
        }
        Ok(BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pad_count: bth.pad_count(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    /// Writes the BTH into the first 12 bytes of `bth`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        bth.set_opcode(self.opcode);
        bth.set_flags(self.solicited, self.mig_req, self.pad_count, 0);
        bth.set_pkey(self.pkey);
        bth.set_ecn(self.fecn, self.becn);
        bth.set_dest_qp(self.dest_qp);
        bth.set_ack_req(self.ack_req);
        bth.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An RC SEND FIRST from the rc_pingpong capture (frame 11): dest QP 0x17,
    // PSN 0x35de35, P_Key 0xffff, no flags.
    const SEND_FIRST: [u8; 12] = [0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x17, 0x00, 0x35, 0xde, 0x35];

    #[test]
    fn parses_a_captured_bth() {
        let bth = Bth::new_checked(&SEND_FIRST[..]).unwrap();
        let r = BthRepr::parse(&bth).unwrap();
        assert_eq!(r.opcode, Opcode::RC_SEND_FIRST);
        assert_eq!(r.pkey, 0xffff);
        assert_eq!(r.dest_qp, 0x17);
        assert_eq!(r.psn, Psn::new(0x35de35));
        assert!(!r.ack_req && !r.solicited && !r.becn);
        let mut out = [0u8; 12];
        r.emit(&mut Bth::new_unchecked(&mut out[..]));
        assert_eq!(out, SEND_FIRST);
    }

    #[test]
    fn flag_bits_land_where_the_spec_puts_them() {
        let r = BthRepr {
            opcode: Opcode::RC_RDMA_WRITE_ONLY,
            solicited: true,
            mig_req: true,
            pad_count: 2,
            pkey: 0x8001,
            fecn: true,
            becn: false,
            dest_qp: 0xabcdef,
            ack_req: true,
            psn: Psn::new(0x123456),
        };
        let mut out = [0u8; 12];
        r.emit(&mut Bth::new_unchecked(&mut out[..]));
        assert_eq!(out, [0x0a, 0xe0, 0x80, 0x01, 0x80, 0xab, 0xcd, 0xef, 0x80, 0x12, 0x34, 0x56]);
    }

    #[test]
    fn rejects_short_buffers_and_nonzero_tver() {
        assert_eq!(
            Bth::new_checked(&SEND_FIRST[..11]).unwrap_err(),
            Error::Truncated { header: "BTH", needed: 12, available: 11 }
        );
        let mut b = SEND_FIRST;
        b[1] = 0x01;
        assert_eq!(
            BthRepr::parse(&Bth::new_checked(&b[..]).unwrap()).unwrap_err(),
            Error::BadVersion { header: "BTH", version: 1 }
        );
    }
}
