//! The notification point: one QP's CNP generation on CE-marked data (§1.2),
//! and the CNP's transport headers (§1.6).

use rdma_wire::{CnpRepr, Error};

use super::params::{DcqcnParams, NpMode};
use crate::time::{later, period_ns};
use crate::Instant;

/// BTH (12) plus the 16 reserved bytes; the ICRC follows on the wire.
pub const CNP_TRANSPORT_LEN: usize = 28;

/// The CNP answering marked data from `sender_qpn`: the QP that must slow
/// down, i.e. the remote QPN in the receiving QP's context, not the QPN in
/// the marked packet's BTH (§5 pitfall 5).
pub fn cnp_repr(sender_qpn: u32, pkey: u16) -> CnpRepr {
    CnpRepr { pkey, dest_qp: sender_qpn }
}

/// The CNP's BTH and reserved bytes: opcode 0x81, BECN set, PSN 0.
/// Fails only if `sender_qpn` does not fit in 24 bits.
pub fn cnp_transport_bytes(sender_qpn: u32, pkey: u16) -> Result<[u8; CNP_TRANSPORT_LEN], Error> {
    if sender_qpn >= 1 << 24 {
        return Err(Error::InvalidField { header: "BTH", field: "dest_qp", value: u64::from(sender_qpn) });
    }
    let mut out = [0u8; CNP_TRANSPORT_LEN];
    cnp_repr(sender_qpn, pkey).to_transport().emit_headers(&mut out, 0)?;
    Ok(out)
}

/// CNP pacing for one QP: the first CE mark is answered at once, then at
/// most one CNP per interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationPoint {
    mode: NpMode,
    interval_ns: u64,
    last_cnp: Option<Instant>,
    /// Deferred mode: a mark arrived inside the interval and awaits its end.
    pending: bool,
    ecn_ce_received: u64,
    cnps_sent: u64,
}

impl NotificationPoint {
    pub fn new(params: &DcqcnParams) -> NotificationPoint {
        NotificationPoint {
            mode: params.np_mode,
            // Zero means "answer every mark": no interval at all.
            interval_ns: if params.cnp_interval.is_zero() { 0 } else { period_ns(params.cnp_interval) },
            last_cnp: None,
            pending: false,
            ecn_ce_received: 0,
            cnps_sent: 0,
        }
    }

    /// A CE-marked data packet of this QP arrived; `true` means send a CNP now.
    pub fn on_ce_marked(&mut self, now: Instant) -> bool {
        self.ecn_ce_received = self.ecn_ce_received.saturating_add(1);
        if self.interval_open(now) {
            self.pending |= self.mode == NpMode::Deferred;
            return false;
        }
        self.send(now)
    }

    /// Deferred mode: when the CNP for marks inside the interval is due.
    pub fn next_timer(&self) -> Option<Instant> {
        if !self.pending {
            return None;
        }
        self.last_cnp.and_then(|t| later(t, self.interval_ns))
    }

    /// `true` means send a CNP now (a deferred one has come due).
    pub fn on_timer(&mut self, now: Instant) -> bool {
        self.pending && !self.interval_open(now) && self.send(now)
    }

    pub fn ecn_ce_received(&self) -> u64 {
        self.ecn_ce_received
    }

    pub fn cnps_sent(&self) -> u64 {
        self.cnps_sent
    }

    fn interval_open(&self, now: Instant) -> bool {
        // Past the end of time the interval never closes; no CNP is better than a loop.
        self.last_cnp.is_some_and(|t| later(t, self.interval_ns).is_none_or(|end| now < end))
    }

    fn send(&mut self, now: Instant) -> bool {
        self.pending = false;
        self.last_cnp = Some(now);
        self.cnps_sent = self.cnps_sent.saturating_add(1);
        true
    }
}
