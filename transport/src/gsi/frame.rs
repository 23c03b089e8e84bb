//! The packet a MAD leaves in (§1.2 of the CM notes): a RoCE v2 UD SEND
//! Only to QP1 with P_Key 0xFFFF and a DETH of Q_Key 0x80010000 and source
//! QP 1, the 256-byte MAD as its payload.

use crate::framing::Framer;
use crate::qp::AddressVector;
use rdma_wire::mad::{gsi_send_transport, GSI_QPN, MAD_LEN};
use rdma_wire::Psn;

/// The UDP source port of QP1: the same hash of the QPN every other QP's
/// default port comes from (rxe's scheme), so a capture looks alike.
pub const GSI_SRC_PORT: u16 = 0xc000 | ((GSI_QPN.wrapping_mul(0x9e37_79b1) >> 18) as u16 & 0x3fff);

/// Writes the packet carrying `mad` to `av` into `buf`; returns its
/// length. Traffic class 0: MADs are control traffic, not ECN-capable
/// data (`av` is a route as [`crate::paths::PathTable::route`] makes it).
pub fn frame_mad(
    framer: &Framer,
    buf: &mut [u8],
    av: &AddressVector,
    src_port: u16,
    psn: u32,
    mad: &[u8; MAD_LEN],
) -> usize {
    let t = gsi_send_transport(Psn::new(psn & 0xff_ffff));
    framer
        .frame(buf, av, src_port, &t, MAD_LEN, |p| {
            p.copy_from_slice(mad);
            Ok::<(), core::convert::Infallible>(())
        })
        .unwrap_or_else(|e| match e {})
}
