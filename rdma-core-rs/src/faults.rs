//! Fault injection on the send path of the UDP backend, for loopback runs
//! that exercise the transport's recovery on real sockets: loss,
//! duplication, reordering (a packet swapped with the one after it) and
//! corruption (one flipped bit, which the receiver's ICRC check catches).
//! Seeded, so a run's decisions repeat.

use crate::udp::IoStats;
use rdma_transport::sim::Rng;
use std::net::IpAddr;

/// Probabilities, each per packet, and the seed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultConfig {
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub corrupt: f64,
    pub seed: u64,
}

impl FaultConfig {
    pub fn is_active(&self) -> bool {
        self.loss > 0.0 || self.duplicate > 0.0 || self.reorder > 0.0 || self.corrupt > 0.0
    }

    /// Checks that every probability is in 0..=1.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in
            [("loss", self.loss), ("duplicate", self.duplicate), ("reorder", self.reorder), ("corrupt", self.corrupt)]
        {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("--{name} must be a probability between 0 and 1, not {p}"));
            }
        }
        Ok(())
    }
}

/// Where a packet goes: its destination and the TOS and TTL it leaves with.
pub(crate) type To = (IpAddr, crate::udp::IpMarks);

type Held = (Vec<u8>, To, u16);

pub(crate) struct Faults {
    cfg: FaultConfig,
    rng: Rng,
    held: Option<Held>,
}

impl Faults {
    pub(crate) fn new(cfg: FaultConfig) -> Faults {
        Faults { cfg, rng: Rng::new(cfg.seed), held: None }
    }

    /// Decides the fate of one packet; returns what to send now, in order.
    pub(crate) fn apply(&mut self, body: &mut [u8], dest: To, port: u16, stats: &mut IoStats) -> Vec<(Vec<u8>, To)> {
        let mut out = Vec::new();
        if self.rng.chance(self.cfg.loss) {
            stats.injected_losses += 1;
            return self.release_after(out, port);
        }
        if self.rng.chance(self.cfg.corrupt) && !body.is_empty() {
            let bit = self.rng.below(body.len() as u64 * 8) as usize;
            body[bit / 8] ^= 1 << (bit % 8);
            stats.injected_corruptions += 1;
        }
        if self.held.is_none() && self.rng.chance(self.cfg.reorder) {
            stats.injected_reorders += 1;
            self.held = Some((body.to_vec(), dest, port));
            return out;
        }
        out.push((body.to_vec(), dest));
        if self.rng.chance(self.cfg.duplicate) {
            stats.injected_duplicates += 1;
            out.push((body.to_vec(), dest));
        }
        self.release_after(out, port)
    }

    /// A held packet goes out after the next one from the same port.
    fn release_after(&mut self, mut out: Vec<(Vec<u8>, To)>, port: u16) -> Vec<(Vec<u8>, To)> {
        if self.held.as_ref().is_some_and(|h| h.2 == port) {
            let (b, d, _) = self.held.take().expect("checked");
            out.push((b, d));
        }
        out
    }

    /// A packet still held at the end of a burst.
    pub(crate) fn take_held(&mut self) -> Option<Held> {
        self.held.take()
    }
}
