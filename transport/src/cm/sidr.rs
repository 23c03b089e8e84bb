//! Service ID resolution (SIDR_REQ / SIDR_REP): how a UD QP learns the
//! QPN and Q_Key behind a service (udaddy, perftest UD over the RDMA CM).
//! No connection results, so no state beyond the request in flight: the
//! active side's until the reply, the passive side's until it answers
//! (and that answer, to repeat it for a retransmitted request).
//! That state is here ([`SidrTable`], which the CM holds); the exchange
//! that keeps it is in `exchange`.

use core::net::IpAddr;
use rdma_wire::mad::MAD_LEN;
use std::collections::VecDeque;

mod exchange;

/// Answered requests remembered to repeat their reply, at most.
const ANSWERED_MAX: usize = 64;

#[derive(Debug, Clone)]
struct Outgoing {
    request_id: u32,
    peer: IpAddr,
    tid: u64,
}

#[derive(Debug, Clone)]
struct Incoming {
    /// Our handle, reported as the request's `ConnId`.
    id: u32,
    peer: IpAddr,
    tid: u64,
    request_id: u32,
    service_id: u64,
    /// The reply, once sent.
    reply: Option<[u8; MAD_LEN]>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct SidrTable {
    out: Vec<Outgoing>,
    pending: Vec<Incoming>,
    answered: VecDeque<Incoming>,
}

impl SidrTable {
    /// Requests for `service_id` waiting for the consumer's answer.
    pub(super) fn waiting(&self, service_id: u64) -> usize {
        self.pending.iter().filter(|p| p.service_id == service_id).count()
    }
}
