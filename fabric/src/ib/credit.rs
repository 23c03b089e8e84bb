//! Credit-based link flow control per data VL (reference §2.1): the
//! transmitter's FCTBS and the credit limit it last heard, the receiver's
//! ABR and buffer, and the flow-control packet that carries both ways.
//!
//! Every counter is 12 bits, modulo 4096; a window is at most 2048 blocks,
//! which is what makes the half-range transmit test unambiguous.

use rdma_wire::flow_control::{FlowControl, FlowControlOp, FlowControlRepr};

/// The credit unit.
pub const BLOCK: usize = 64;
/// Counters wrap here.
pub const MODULO: u16 = 4096;
/// The most a receiver may grant beyond ABR.
pub const MAX_WINDOW: u16 = 2048;
/// A flow-control packet on the wire.
pub const FC_LEN: usize = 6;

/// Blocks a packet of `bytes` consumes.
pub fn blocks(bytes: usize) -> u16 {
    bytes.div_ceil(BLOCK).min(usize::from(MAX_WINDOW)) as u16
}

fn wrap(x: u32) -> u16 {
    (x % u32::from(MODULO)) as u16
}

/// The sending side of one data VL of a link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CreditTx {
    /// Flow Control Total Blocks Sent, mod 4096.
    pub fctbs: u16,
    /// The credit limit of the last good flow-control packet, mod 4096.
    pub fccl: u16,
    /// Blocks sent in all (not wrapped): for the conservation checks.
    pub sent_total: u64,
}

impl CreditTx {
    /// Whether `n` blocks may go now: (FCCL - (FCTBS + n)) mod 4096 <= 2048.
    pub fn may_send(&self, n: u16) -> bool {
        let after = wrap(u32::from(self.fctbs) + u32::from(n));
        wrap(u32::from(self.fccl) + u32::from(MODULO) - u32::from(after)) <= MAX_WINDOW
    }

    /// Counts `n` blocks as sent (the caller checked [`Self::may_send`]).
    pub fn sent(&mut self, n: u16) {
        self.fctbs = wrap(u32::from(self.fctbs) + u32::from(n));
        self.sent_total += u64::from(n);
    }

    /// Blocks the current limit still allows.
    pub fn available(&self) -> u16 {
        let a = wrap(u32::from(self.fccl) + u32::from(MODULO) - u32::from(self.fctbs));
        if a > MAX_WINDOW {
            0
        } else {
            a
        }
    }
}

/// The receiving side of one data VL: its buffer and ABR.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CreditRx {
    /// Adjusted Blocks Received, mod 4096.
    pub abr: u16,
    /// Buffer size, in blocks (at most 2048).
    pub capacity: u16,
    /// Blocks held now.
    pub used: u16,
    /// The most ever held.
    pub peak: u16,
    /// Packets that arrived without room: a credit violation by the sender.
    /// A correct link never counts one.
    pub overruns: u64,
    /// Blocks freed in all (not wrapped).
    pub freed_total: u64,
}

impl CreditRx {
    pub fn new(capacity: u16) -> CreditRx {
        CreditRx { capacity: capacity.min(MAX_WINDOW), ..CreditRx::default() }
    }

    /// A data packet of `n` blocks arrived. False (and an overrun counted)
    /// when it does not fit; the caller drops it.
    pub fn arrive(&mut self, n: u16) -> bool {
        self.abr = wrap(u32::from(self.abr) + u32::from(n));
        if self.used + n > self.capacity {
            self.overruns += 1;
            return false;
        }
        self.used += n;
        self.peak = self.peak.max(self.used);
        true
    }

    /// `n` blocks left the buffer.
    pub fn free(&mut self, n: u16) {
        let n = n.min(self.used);
        self.used -= n;
        self.freed_total += u64::from(n);
    }

    /// FCCL = ABR + free blocks, mod 4096 (free is at most 2048).
    pub fn fccl(&self) -> u16 {
        wrap(u32::from(self.abr) + u32::from(self.capacity - self.used))
    }

    /// The peer's FCTBS: blocks it sent that never arrived (a corrupted
    /// packet dropped) stop counting against the window.
    pub fn resync(&mut self, fctbs: u16) {
        self.abr = fctbs & (MODULO - 1);
    }
}

/// Both directions of one data VL as seen from one port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VlCredits {
    pub tx: CreditTx,
    pub rx: CreditRx,
}

/// Why a received flow-control packet was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FcError {
    #[error("flow-control packet with a bad LPCRC")]
    BadLpcrc,
    #[error("flow-control packet malformed: {0}")]
    Malformed(rdma_wire::Error),
    #[error("flow-control packet for VL {0}, which this link does not run")]
    NoSuchVl(u8),
}

/// The flow-control packet a port sends for `vl`: its transmit count and
/// its receive limit.
pub fn fc_packet(vl: u8, c: &VlCredits, init: bool) -> [u8; FC_LEN] {
    let op = if init { FlowControlOp::Init } else { FlowControlOp::Normal };
    let mut b = [0u8; FC_LEN];
    FlowControlRepr { op, fctbs: c.tx.fctbs, vl, fccl: c.rx.fccl() }
        .emit(&mut b)
        .expect("six bytes fit a flow-control packet");
    b
}

/// Applies a received flow-control packet to `vls` (indexed by VL): the
/// receive side resyncs ABR to the peer's FCTBS, the transmit side takes
/// the peer's FCCL. Bad packets change nothing.
pub fn receive_fc(bytes: &[u8], vls: &mut [VlCredits]) -> Result<u8, FcError> {
    let v = FlowControl::new_checked(bytes).map_err(FcError::Malformed)?;
    if !v.lpcrc_ok() {
        return Err(FcError::BadLpcrc);
    }
    let r = FlowControlRepr::parse(&v).map_err(FcError::Malformed)?;
    let c = vls.get_mut(usize::from(r.vl)).ok_or(FcError::NoSuchVl(r.vl))?;
    c.rx.resync(r.fctbs);
    c.tx.fccl = r.fccl;
    Ok(r.vl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn blocks_round_up_to_64_bytes() {
        assert_eq!(blocks(1), 1);
        assert_eq!(blocks(64), 1);
        assert_eq!(blocks(65), 2);
        // §2.5: an SMP is 290 bytes; a 4096-MTU packet 4222.
        assert_eq!(blocks(290), 5);
        assert_eq!(blocks(4222), 66);
    }

    #[test]
    fn the_transmit_gate_is_the_half_range_test() {
        let mut t = CreditTx { fctbs: 4090, fccl: 4, sent_total: 0 };
        // 10 blocks of credit across the wrap.
        assert_eq!(t.available(), 10);
        assert!(t.may_send(10));
        assert!(!t.may_send(11));
        t.sent(10);
        assert_eq!(t.fctbs, 4);
        assert!(!t.may_send(1));
        assert_eq!(t.available(), 0);
    }

    #[test]
    fn a_bad_lpcrc_or_unknown_vl_changes_nothing() {
        let mut vls = [VlCredits::default(); 2];
        let peer = VlCredits { rx: CreditRx::new(100), ..VlCredits::default() };
        let mut p = fc_packet(1, &peer, false);
        p[5] ^= 1;
        assert_eq!(receive_fc(&p, &mut vls), Err(FcError::BadLpcrc));
        assert_eq!(vls[1], VlCredits::default());
        let p = fc_packet(7, &peer, false);
        assert_eq!(receive_fc(&p, &mut vls), Err(FcError::NoSuchVl(7)));
        let p = fc_packet(1, &peer, false);
        assert_eq!(receive_fc(&p, &mut vls), Ok(1));
        assert_eq!(vls[1].tx.fccl, 100);
    }

    /// A link direction with packets in flight and FC packets that may be
    /// lost, driven by a random schedule: the receiver never overruns, and
    /// blocks sent minus blocks freed never exceeds the buffer.
    fn run_link(ops: &[(u8, u16)], capacity: u16, lose_every: u8) -> (CreditTx, CreditRx, u64) {
        let mut tx = [VlCredits::default()];
        let mut rx = [VlCredits { rx: CreditRx::new(capacity), ..VlCredits::default() }];
        // Link init: the receiver's first FC packet.
        receive_fc(&fc_packet(0, &rx[0], true), &mut tx).unwrap();
        let mut in_flight: std::collections::VecDeque<u16> = Default::default();
        let mut held: std::collections::VecDeque<u16> = Default::default();
        let mut fc_count = 0u64;
        for &(op, n) in ops {
            match op % 4 {
                0 => {
                    let n = n % 40 + 1;
                    if tx[0].tx.may_send(n) {
                        tx[0].tx.sent(n);
                        in_flight.push_back(n);
                    }
                }
                1 => {
                    if let Some(n) = in_flight.pop_front() {
                        assert!(rx[0].rx.arrive(n), "overrun");
                        held.push_back(n);
                    }
                }
                2 => {
                    if let Some(n) = held.pop_front() {
                        rx[0].rx.free(n);
                    }
                }
                _ => {
                    // The receiver's FC packet; every `lose_every`th is lost.
                    fc_count += 1;
                    if lose_every == 0 || fc_count % u64::from(lose_every) != 0 {
                        receive_fc(&fc_packet(0, &rx[0], false), &mut tx).unwrap();
                    }
                }
            }
            let outstanding = tx[0].tx.sent_total - rx[0].rx.freed_total;
            assert!(outstanding <= u64::from(capacity), "{outstanding} blocks outstanding > {capacity}");
            assert!(rx[0].rx.used <= capacity);
        }
        (tx[0].tx, rx[0].rx, fc_count)
    }

    proptest! {
        #[test]
        fn no_overrun_and_credit_is_conserved(
            ops in proptest::collection::vec((any::<u8>(), any::<u16>()), 0..3000),
            capacity in 1u16..=2048,
            lose_every in 0u8..4,
        ) {
            let (_, rx, _) = run_link(&ops, capacity, lose_every);
            prop_assert_eq!(rx.overruns, 0);
        }

        #[test]
        fn fc_packets_round_trip(vl in 0u8..15, fctbs in 0u16..4096, used in 0u16..100) {
            let mut c = VlCredits { rx: CreditRx::new(100), ..VlCredits::default() };
            c.tx.fctbs = fctbs;
            c.rx.used = used;
            let mut vls = [VlCredits::default(); 15];
            prop_assert_eq!(receive_fc(&fc_packet(vl, &c, false), &mut vls), Ok(vl));
            prop_assert_eq!(vls[usize::from(vl)].rx.abr, fctbs);
            prop_assert_eq!(vls[usize::from(vl)].tx.fccl, c.rx.fccl());
        }
    }

    #[test]
    fn counters_wrap_many_times_and_lost_fc_packets_recover() {
        // A steady pattern: send, arrive, free, FC; a third of FC packets lost.
        let ops: Vec<(u8, u16)> = (0..40_000u32).map(|i| ((i % 4) as u8, 17)).collect();
        let (tx, rx, _) = run_link(&ops, 64, 3);
        assert!(tx.sent_total > 8 * u64::from(MODULO), "only {} blocks: no wrap", tx.sent_total);
        assert_eq!(rx.overruns, 0);
        assert_eq!(tx.sent_total, rx.freed_total, "everything sent was freed");
    }

    #[test]
    fn a_corrupted_data_packet_is_forgiven_at_the_next_fc_packet() {
        let mut tx = [VlCredits::default()];
        let mut rx = [VlCredits { rx: CreditRx::new(20), ..VlCredits::default() }];
        receive_fc(&fc_packet(0, &rx[0], true), &mut tx).unwrap();
        tx[0].tx.sent(20); // lost on the wire: never arrives
        assert!(!tx[0].tx.may_send(1));
        // The sender's FC packet carries FCTBS = 20: ABR resyncs.
        receive_fc(&fc_packet(0, &tx[0], false), &mut rx).unwrap();
        receive_fc(&fc_packet(0, &rx[0], false), &mut tx).unwrap();
        assert_eq!(tx[0].tx.available(), 20);
    }
}
