//! What the transmit side hands a driver: the packet [`Transmit`] that
//! [`Endpoint::poll_transmit`] wrote, the buffer size every packet fits
//! ([`MAX_PACKET`]), and how many packets a QP sends in a row
//! ([`TX_BURST`]). The scheduler that fills them is `sched`.
//!
//! [`Endpoint::poll_transmit`]: super::Endpoint::poll_transmit

use crate::framing::PayloadRef;
use core::net::IpAddr;

/// A packet [`Endpoint::poll_transmit`] wrote.
///
/// [`Endpoint::poll_transmit`]: super::Endpoint::poll_transmit
#[derive(Debug, Clone)]
pub struct Transmit {
    /// Bytes written, IP header through ICRC; without the payload when
    /// `payload` is set.
    pub len: usize,
    pub dest: IpAddr,
    pub src_port: u16,
    /// A held ACK released by the packets sent before it in this round
    /// (see [`Endpoint::set_ack_delay`]). [`Endpoint::poll_transmit_fresh`]
    /// stops short of these, so that a driver can send the packets before
    /// them first.
    ///
    /// [`Endpoint::set_ack_delay`]: super::Endpoint::set_ack_delay
    /// [`Endpoint::poll_transmit_fresh`]: super::Endpoint::poll_transmit_fresh
    pub released_ack: bool,
    /// The payload, when the packet carries it by reference (see
    /// [`Endpoint::set_payload_by_reference`]): the buffer then holds the
    /// headers and room for pad and ICRC, and the driver sends the
    /// payload from the region and seals the packet.
    ///
    /// [`Endpoint::set_payload_by_reference`]: super::Endpoint::set_payload_by_reference
    pub payload: Option<PayloadRef>,
}

impl Transmit {
    /// Bytes the packet takes on the wire from the IP header on.
    pub fn wire_len(&self) -> usize {
        self.len + self.payload.as_ref().map_or(0, |p| p.len)
    }
}

/// Packets a QP sends in a row before the next QP's turn: runs long enough
/// for a driver to hand the kernel as one segmented send (UDP GSO), short
/// enough that no QP waits long. It bounds what a QP with a packet to send
/// waits for: one turn of each QP with packets (docs/design.md, "Transmit
/// arbitration between QPs"; `transport/tests/fair_tx.rs`).
pub const TX_BURST: u32 = 16;

/// A buffer this large holds any packet the engine writes (4 KiB MTU):
/// the largest header stack, BTH and extension headers, payload, ICRC and
/// native IB's VCRC.
pub const MAX_PACKET: usize = crate::framing::MAX_FRAMING + 12 + 28 + 4096 + 4 + crate::framing::MAX_TRAILER;
