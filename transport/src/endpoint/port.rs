//! The device's port: what its packets are framed with and addressed by
//! (link kind, GID, LID), and what a received packet is checked against
//! before any QP sees it (the P_Key table; on native IB the LIDs of the
//! GIDs it talks to; behind a UDP socket, the IPv4 Identification the
//! socket hides, solved from the ICRC). The receive path's demultiplexing
//! reads it; the QPs' transmit paths frame with it.

use crate::framing::Framer;
use crate::paths::PathTable;
use rdma_wire::IdentRecovery;

/// The default partition, with full membership.
pub const DEFAULT_PKEY: u16 = 0xffff;

#[derive(Debug)]
pub(super) struct Port {
    /// How packets are framed, and from which address (GID, LID).
    pub(super) framer: Framer,
    /// The P_Key table (`ibv_query_pkey`); a QP's `pkey_index` picks one.
    pub(super) pkeys: Vec<u16>,
    /// Native IB: the LIDs of GIDs (see [`crate::paths`]).
    pub(super) paths: PathTable,
    /// Behind a UDP socket: the IPv4 Identification solver.
    pub(super) ident_recovery: Option<IdentRecovery>,
}

impl Port {
    /// A RoCE v2 port of the GID of `local`, in the default partition.
    pub(super) fn roce_v2(local: core::net::IpAddr) -> Port {
        Port {
            framer: Framer::roce_v2(local),
            pkeys: vec![DEFAULT_PKEY],
            paths: PathTable::default(),
            ident_recovery: None,
        }
    }
}
