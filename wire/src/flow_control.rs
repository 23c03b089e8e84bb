//! The InfiniBand link-layer flow-control packet (IBTA 7.9.4): six bytes a
//! port sends per virtual lane to grant credits to its neighbour. The
//! credit-based link of the IB link emulation is built on it.
//!
//! ```text
//! byte 0      byte 1    byte 2      byte 3    bytes 4-5
//! Op(4)|FCTBS(12)       VL(4)|FCCL(12)        LPCRC(16)
//! ```
//! FCTBS is the total of 64-byte blocks sent on the VL since link init,
//! FCCL the credit limit the receiver grants (both modulo 4096). The LPCRC
//! is the CRC-16 of the VCRC (see [`crate::vcrc`]) over the first four bytes.

use crate::error::check_len;
use crate::field::*;
use crate::{vcrc, Error, Result};

header_view!(
    /// A view of a flow-control packet.
    FlowControl, 6, "flow control packet"
);

/// What a flow-control packet does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowControlOp {
    /// Op 0: a normal credit update.
    Normal,
    /// Op 1: sent during link initialisation.
    Init,
}

impl<T: AsRef<[u8]>> FlowControl<T> {
    pub fn op(&self) -> u8 {
        self.b()[0] >> 4
    }
    pub fn fctbs(&self) -> u16 {
        u16_at(self.b(), 0) & 0x0fff
    }
    pub fn vl(&self) -> u8 {
        self.b()[2] >> 4
    }
    pub fn fccl(&self) -> u16 {
        u16_at(self.b(), 2) & 0x0fff
    }
    pub fn lpcrc(&self) -> u16 {
        vcrc::from_wire([self.b()[4], self.b()[5]])
    }
    pub fn lpcrc_ok(&self) -> bool {
        vcrc::vcrc(&self.b()[..4]) == self.lpcrc()
    }
}

/// An owned flow-control packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowControlRepr {
    pub op: FlowControlOp,
    /// Flow Control Total Blocks Sent (12 bits).
    pub fctbs: u16,
    pub vl: u8,
    /// Flow Control Credit Limit (12 bits).
    pub fccl: u16,
}

impl FlowControlRepr {
    /// Reads a flow-control packet. A reserved op is an error; the LPCRC
    /// verdict is the view's [`FlowControl::lpcrc_ok`].
    pub fn parse<T: AsRef<[u8]>>(h: &FlowControl<T>) -> Result<FlowControlRepr> {
        let op = match h.op() {
            0 => FlowControlOp::Normal,
            1 => FlowControlOp::Init,
            op => return Err(Error::InvalidField { header: "flow control packet", field: "op", value: u64::from(op) }),
        };
        Ok(FlowControlRepr { op, fctbs: h.fctbs(), vl: h.vl(), fccl: h.fccl() })
    }

    /// Writes the six bytes, LPCRC included.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_len("flow control packet", buf, 6)?;
        let op: u16 = match self.op {
            FlowControlOp::Normal => 0,
            FlowControlOp::Init => 1,
        };
        set_u16(buf, 0, (op << 12) | (self.fctbs & 0x0fff));
        set_u16(buf, 2, (u16::from(self.vl & 0xf) << 12) | (self.fccl & 0x0fff));
        let crc = vcrc::vcrc(&buf[..4]);
        buf[4..6].copy_from_slice(&vcrc::wire_bytes(crc));
        Ok(())
    }
}
