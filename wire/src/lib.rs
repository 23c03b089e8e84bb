//! RoCE v2 and InfiniBand packet formats, byte-exact.
//!
//! Every header has a zero-copy view over `T: AsRef<[u8]>` (setters where
//! `T: AsMut<[u8]>`) whose `new_checked` proves the length, after which no
//! accessor can panic, and an owned `…Repr` with `parse` and `emit`. Whole
//! packets ([`RoceV2Packet`], [`RoceV1Packet`], [`IbPacket`]) check the
//! headers in front of the [`TransportPacket`] and verify the ICRC (and
//! VCRC). Header offsets come from one const [`opcode::OPCODE_TABLE`].
//!
//! No I/O and no allocation; errors are [`Error`], which says what was wrong.
//!
//! ```
//! use core::net::Ipv4Addr;
//! use rdma_wire::*;
//!
//! // An RC ACK for PSN 42 of QP 0x11, as kernel Soft-RoCE would send it.
//! let mut ack = TransportRepr::new(BthRepr::new(Opcode::RC_ACKNOWLEDGE, 0x11, Psn::new(42)));
//! ack.aeth = Some(AethRepr { syndrome: Syndrome::ACK_UNLIMITED, msn: 3 });
//! let repr = RoceV2Repr {
//!     ip: IpRepr::V4(Ipv4Repr {
//!         dscp: 0, ecn: 0, ident: 0, dont_frag: true, ttl: 64, protocol: 17,
//!         src: Ipv4Addr::new(127, 0, 0, 1), dst: Ipv4Addr::new(127, 0, 0, 2),
//!     }),
//!     udp: UdpRepr { src_port: 0xc001, dst_port: ROCE_V2_PORT, checksum: 0 },
//!     transport: ack,
//! };
//! let mut buf = [0u8; 64];
//! let len = repr.emit(&mut buf, &[])?; // ICRC computed while emitting
//!
//! let packet = RoceV2Packet::new_checked(&buf[..len])?;
//! assert!(packet.icrc_ok());
//! let t = packet.transport();
//! assert_eq!(t.bth().opcode(), Opcode::RC_ACKNOWLEDGE);
//! assert_eq!(t.aeth().unwrap().syndrome(), Syndrome::ACK_UNLIMITED);
//! assert_eq!(RoceV2Repr::parse(&packet)?, repr);
//! # Ok::<(), rdma_wire::Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

#[macro_use]
mod macros;
mod error;
mod field;

pub mod aeth;
pub mod atomic;
pub mod bth;
pub mod cm;
pub mod cma;
pub mod cnp;
pub mod datagram;
pub mod deth;
pub mod ethernet;
pub mod feth;
pub mod flow_control;
#[doc(hidden)]
pub mod fuzzing;
pub mod icrc;
pub mod ident;
pub mod immdt;
pub mod ipv4;
pub mod ipv6;
pub mod lrh;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod reth;
pub mod smp;
pub mod transport_packet;
pub mod udp;
pub mod vcrc;
pub mod xrceth;

pub use aeth::{Aeth, AethRepr, CreditCode, NakCode, RnrTimer, Syndrome};
pub use atomic::{AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr};
pub use bth::{pad_for, Bth, BthRepr};
pub use cm::{
    CmMadRepr, CmMessage, DrepRepr, DreqRepr, MraRepr, PathRepr, RejReason, RejRepr, RepRepr, ReqRepr, RtuRepr,
    SidrRepRepr, SidrReqRepr,
};
pub use cma::{CmaHdr, CmaHdrRepr, RdmaPs};
pub use cnp::CnpRepr;
pub use datagram::DatagramHeaders;
pub use deth::{Deth, DethRepr};
pub use error::{Error, Result};
pub use ethernet::EthernetRepr;
pub use feth::{Feth, FethRepr};
pub use flow_control::{FlowControl, FlowControlOp, FlowControlRepr};
pub use icrc::Icrc;
pub use ident::{IdentRecovery, IdentShift};
pub use immdt::{Ieth, ImmDt};
pub use ipv4::{Ipv4, Ipv4Repr};
pub use ipv6::{Grh, GrhRepr, Ipv6, Ipv6Repr};
pub use lrh::{Lnh, Lrh, LrhRepr};
pub use mad::{Mad, MadHeaderRepr};
pub use opcode::{HeaderSet, Opcode, OpcodeInfo, Operation, Position, Transport};
pub use packet::{IbPacket, IbRepr, IpRepr, RoceV1Packet, RoceV1Repr, RoceV2Packet, RoceV2Repr};
pub use psn::Psn;
pub use reth::{Reth, RethRepr};
pub use transport_packet::{TransportPacket, TransportRepr};
pub use udp::{Udp, UdpRepr, ROCE_V2_PORT};
pub use xrceth::XrcEth;
