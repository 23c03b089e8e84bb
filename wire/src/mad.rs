//! The 256-byte management datagram (IBTA 13.4) and its 24-byte common
//! header, as the GSI (QP1) carries it in a UD SEND. CM messages
//! ([`crate::cm`]) live in the 232 bytes of class data behind the header.

use crate::field::*;
use crate::{Error, Result};

/// A MAD is always 256 bytes on the wire; shorter ones are dropped by Linux.
pub const MAD_LEN: usize = 256;
/// The common MAD header (`IB_MGMT_MAD_HDR`).
pub const MAD_HEADER_LEN: usize = 24;
/// The class data after the header (`IB_MGMT_MAD_DATA`).
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;

/// `IB_MGMT_BASE_VERSION`: the MAD layer drops any other base version.
pub const BASE_VERSION: u8 = 1;
/// Management class of the Communication Manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The only CM class version the Linux CM agent registers for.
pub const CM_CLASS_VERSION: u8 = 2;

/// The GSI QP number and its well-known Q_Key (`IB_QP1`, `IB_QP1_QKEY`).
pub const GSI_QPN: u32 = 1;
pub const GSI_QKEY: u32 = 0x8001_0000;
/// `IB_DEFAULT_PKEY_FULL`, the P_Key CM MADs carry on RoCE.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// MAD methods (the low 7 bits of byte 3).
pub mod method {
    pub const GET: u8 = 0x01;
    pub const SET: u8 = 0x02;
    /// Every CM message uses SEND.
    pub const SEND: u8 = 0x03;
    pub const TRAP: u8 = 0x05;
    pub const REPORT: u8 = 0x06;
    pub const TRAP_REPRESS: u8 = 0x07;
    pub const GET_RESP: u8 = 0x81;
    /// The response bit: the MAD layer routes such MADs by TID.
    pub const RESP: u8 = 0x80;
}

/// CM attribute IDs (`ib_cm.h`).
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001a;
}

/// The transport headers of a GSI MAD sent to QP1 (§1.2 of the CM notes):
/// UD SEND Only, P_Key 0xFFFF, DestQP 1, DETH Q_Key 0x80010000, SrcQP 1.
/// The 256-byte MAD is the payload.
pub fn gsi_send_transport(psn: crate::Psn) -> crate::TransportRepr {
    let mut t = crate::TransportRepr::new(crate::BthRepr {
        pkey: DEFAULT_PKEY,
        ..crate::BthRepr::new(crate::Opcode::UD_SEND_ONLY, GSI_QPN, psn)
    });
    t.deth = Some(crate::DethRepr { qkey: GSI_QKEY, src_qp: GSI_QPN });
    t
}

header_view!(
    /// A view of a whole 256-byte MAD.
    Mad, MAD_LEN, "MAD"
);

impl<T: AsRef<[u8]>> Mad<T> {
    pub fn base_version(&self) -> u8 {
        self.b()[0]
    }
    pub fn mgmt_class(&self) -> u8 {
        self.b()[1]
    }
    pub fn class_version(&self) -> u8 {
        self.b()[2]
    }
    /// Byte 3 whole: the response bit (0x80) and the method.
    pub fn method(&self) -> u8 {
        self.b()[3]
    }
    pub fn status(&self) -> u16 {
        u16_at(self.b(), 4)
    }
    pub fn class_specific(&self) -> u16 {
        u16_at(self.b(), 6)
    }
    pub fn transaction_id(&self) -> u64 {
        u64_at(self.b(), 8)
    }
    pub fn attribute_id(&self) -> u16 {
        u16_at(self.b(), 16)
    }
    pub fn attribute_modifier(&self) -> u32 {
        u32_at(self.b(), 20)
    }
    /// The 232 bytes of class data.
    pub fn data(&self) -> &[u8] {
        &self.b()[MAD_HEADER_LEN..MAD_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    pub fn set_base_version(&mut self, v: u8) {
        self.bm()[0] = v
    }
    pub fn set_mgmt_class(&mut self, v: u8) {
        self.bm()[1] = v
    }
    pub fn set_class_version(&mut self, v: u8) {
        self.bm()[2] = v
    }
    pub fn set_method(&mut self, v: u8) {
        self.bm()[3] = v
    }
    pub fn set_status(&mut self, v: u16) {
        set_u16(self.bm(), 4, v)
    }
    pub fn set_class_specific(&mut self, v: u16) {
        set_u16(self.bm(), 6, v)
    }
    pub fn set_transaction_id(&mut self, v: u64) {
        set_u64(self.bm(), 8, v)
    }
    /// Also zeroes the reserved bytes 18..20.
    pub fn set_attribute_id(&mut self, v: u16) {
        set_u16(self.bm(), 16, v);
        set_u16(self.bm(), 18, 0);
    }
    pub fn set_attribute_modifier(&mut self, v: u32) {
        set_u32(self.bm(), 20, v)
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[MAD_HEADER_LEN..MAD_LEN]
    }
}

/// An owned common MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeaderRepr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// Response bit and method, as byte 3.
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub transaction_id: u64,
    pub attribute_id: u16,
    pub attribute_modifier: u32,
}

impl MadHeaderRepr {
    /// A CM SEND header with everything else zero, as `cm_format_mad_hdr` builds it.
    pub const fn cm(attribute_id: u16, transaction_id: u64) -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    /// Any header parses; the base version alone is checked because no
    /// class can be read under another one.
    pub fn parse<T: AsRef<[u8]>>(m: &Mad<T>) -> Result<MadHeaderRepr> {
        if m.base_version() != BASE_VERSION {
            return Err(Error::BadVersion { header: "MAD", version: m.base_version() });
        }
        Ok(MadHeaderRepr {
            base_version: m.base_version(),
            mgmt_class: m.mgmt_class(),
            class_version: m.class_version(),
            method: m.method(),
            status: m.status(),
            class_specific: m.class_specific(),
            transaction_id: m.transaction_id(),
            attribute_id: m.attribute_id(),
            attribute_modifier: m.attribute_modifier(),
        })
    }

    /// Writes the 24 header bytes; the class data is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut Mad<T>) {
        m.set_base_version(self.base_version);
        m.set_mgmt_class(self.mgmt_class);
        m.set_class_version(self.class_version);
        m.set_method(self.method);
        m.set_status(self.status);
        m.set_class_specific(self.class_specific);
        m.set_transaction_id(self.transaction_id);
        m.set_attribute_id(self.attribute_id);
        m.set_attribute_modifier(self.attribute_modifier);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_header_bytes() {
        let mut buf = [0xaau8; MAD_LEN];
        let mut m = Mad::new_checked(&mut buf[..]).unwrap();
        let mut h = MadHeaderRepr::cm(attr::REQ, 0x1122_3344_5566_7788);
        h.attribute_modifier = 0xdead_beef;
        h.emit(&mut m);
        assert_eq!(
            buf[..24],
            [
                1, 0x07, 2, 0x03, 0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x00, 0x10, 0, 0, 0xde,
                0xad, 0xbe, 0xef
            ]
        );
        assert_eq!(buf[24], 0xaa, "class data untouched");
        let m = Mad::new_checked(&buf[..]).unwrap();
        assert_eq!(MadHeaderRepr::parse(&m), Ok(h));
        assert_eq!(m.data().len(), MAD_DATA_LEN);
    }

    /// BTH and DETH of a MAD to QP1 at the bytes IBTA gives them.
    #[test]
    fn gsi_framing() {
        let t = gsi_send_transport(crate::Psn::new(0x12_3456));
        let mut buf = [0u8; 12 + 8 + MAD_LEN + 4];
        let n = t.emit_headers(&mut buf, MAD_LEN).unwrap();
        assert_eq!(n, 20);
        assert_eq!(buf[..20], [0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0x12, 0x34, 0x56, 0x80, 0x01, 0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn short_and_bad_version() {
        assert_eq!(
            Mad::new_checked(&[0u8; 255][..]).unwrap_err(),
            Error::Truncated { header: "MAD", needed: 256, available: 255 }
        );
        let buf = [0u8; MAD_LEN];
        let m = Mad::new_checked(&buf[..]).unwrap();
        assert_eq!(MadHeaderRepr::parse(&m), Err(Error::BadVersion { header: "MAD", version: 0 }));
    }
}
