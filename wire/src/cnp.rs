//! The RoCE v2 Congestion Notification Packet (annex A17.9.2): a BTH with
//! opcode 0x81 and BECN set, then 16 reserved bytes, then the ICRC. A
//! notification point sends it back to the source QP of a flow whose
//! packets arrived marked ECN-CE.

use crate::bth::BthRepr;
use crate::transport_packet::TransportRepr;
use crate::{Opcode, Psn};

/// An owned CNP: who it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CnpRepr {
    /// The P_Key of the flow (0xFFFF by default).
    pub pkey: u16,
    /// The QP whose sending rate should drop: the source QP of the marked flow.
    pub dest_qp: u32,
}

impl CnpRepr {
    /// The transport headers of this CNP: opcode 0x81, BECN set, PSN 0, no
    /// AckReq, reserved bytes zero.
    pub fn to_transport(&self) -> TransportRepr {
        TransportRepr::new(BthRepr {
            pkey: self.pkey,
            becn: true,
            ..BthRepr::new(Opcode::CNP, self.dest_qp, Psn::new(0))
        })
    }

    /// The CNP these transport headers make up, if they are one.
    pub fn from_transport(t: &TransportRepr) -> Option<CnpRepr> {
        (t.bth.opcode == Opcode::CNP).then_some(CnpRepr { pkey: t.bth.pkey, dest_qp: t.bth.dest_qp })
    }
}
