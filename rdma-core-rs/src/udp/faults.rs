//! The UDP driver's fault injector: the shared dice of [`rdma_link::faults`],
//! with a reordered packet held per source port together with its
//! address, TOS and TTL.

use super::IpMarks;
use crate::io_stats::IoStats;
use rdma_link::faults::{Fate, FaultConfig, FaultDice};
use std::net::IpAddr;

/// Where a packet goes: its destination and the TOS and TTL it leaves with.
pub(crate) type To = (IpAddr, IpMarks);

type Held = (Vec<u8>, To, u16);

pub(crate) struct Faults {
    dice: FaultDice,
    held: Option<Held>,
}

impl Faults {
    pub(crate) fn new(cfg: FaultConfig) -> Faults {
        Faults { dice: FaultDice::new(cfg), held: None }
    }

    /// Decides the fate of one packet; returns what to send now, in order.
    pub(crate) fn apply(&mut self, body: &mut [u8], dest: To, port: u16, stats: &mut IoStats) -> Vec<(Vec<u8>, To)> {
        let mut out = Vec::new();
        let fate = self.dice.roll(body, self.held.is_none());
        stats.set_faults(self.dice.counts);
        match fate {
            Fate::Hold => {
                self.held = Some((body.to_vec(), dest, port));
                return out;
            }
            Fate::Lose => {}
            Fate::Send { duplicate } => {
                out.push((body.to_vec(), dest));
                if duplicate {
                    out.push((body.to_vec(), dest));
                }
            }
        }
        // Whether this one left or was lost, one held from its port follows.
        self.release_after(&mut out, port);
        out
    }

    /// A held packet goes out after the next one from the same port.
    fn release_after(&mut self, out: &mut Vec<(Vec<u8>, To)>, port: u16) {
        if self.held.as_ref().is_some_and(|h| h.2 == port) {
            let (b, d, _) = self.held.take().expect("checked");
            out.push((b, d));
        }
    }

    /// A packet still held at the end of a burst.
    pub(crate) fn take_held(&mut self) -> Option<Held> {
        self.held.take()
    }
}
