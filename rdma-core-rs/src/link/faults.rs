//! Fault injection over any frame link, on the send side: loss,
//! duplication, reordering (a frame held back until the next one has
//! left) and corruption (one bit flipped after the Ethernet header, which
//! the receiver's ICRC or VCRC catches). Seeded with the same
//! [`FaultConfig`] as the UDP backend's injector, so a run repeats.

use super::{FrameMeta, Link, LinkCaps, Mac, ETH_HEADER};
use crate::faults::FaultConfig;
use rdma_transport::sim::Rng;
use std::io;
use std::os::fd::RawFd;

/// What the injector did, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub losses: u64,
    pub duplicates: u64,
    pub reorders: u64,
    pub corruptions: u64,
}

/// A link that damages what it is given to send, as configured.
#[derive(Debug)]
pub struct FaultLink<L> {
    inner: L,
    cfg: FaultConfig,
    rng: Rng,
    held: Option<Vec<u8>>,
    pub counts: FaultCounts,
}

impl<L: Link> FaultLink<L> {
    pub fn new(inner: L, cfg: FaultConfig) -> FaultLink<L> {
        FaultLink { inner, cfg, rng: Rng::new(cfg.seed), held: None, counts: FaultCounts::default() }
    }
}

impl<L: Link> Link for FaultLink<L> {
    fn caps(&self) -> LinkCaps {
        self.inner.caps()
    }
    fn mac(&self) -> Mac {
        self.inner.mac()
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.rng.chance(self.cfg.loss) {
            self.counts.losses += 1;
            return Ok(());
        }
        let mut f = frame.to_vec();
        if self.rng.chance(self.cfg.corrupt) && f.len() > ETH_HEADER {
            let bit = self.rng.below((f.len() - ETH_HEADER) as u64 * 8) as usize;
            f[ETH_HEADER + bit / 8] ^= 1 << (bit % 8);
            self.counts.corruptions += 1;
        }
        if self.held.is_none() && self.rng.chance(self.cfg.reorder) {
            self.counts.reorders += 1;
            self.held = Some(f);
            return Ok(());
        }
        self.inner.send(&f)?;
        if self.rng.chance(self.cfg.duplicate) {
            self.counts.duplicates += 1;
            self.inner.send(&f)?;
        }
        if let Some(h) = self.held.take() {
            self.inner.send(&h)?;
        }
        Ok(())
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<FrameMeta>> {
        self.inner.recv(buf)
    }
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }
    /// The end of a burst also ends a reordering: a frame still held goes
    /// now, after the burst's others (as the UDP injector does), instead of
    /// waiting for a next frame that may never come (which would make it a
    /// loss).
    fn flush(&mut self) -> io::Result<()> {
        if let Some(h) = self.held.take() {
            self.inner.send(&h)?;
        }
        self.inner.flush()
    }
}
