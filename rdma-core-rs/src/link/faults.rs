//! Fault injection over any frame link, on the send side: the shared dice
//! of [`crate::faults`] (the same [`FaultConfig`] and seed as the UDP
//! backend's injector, so a run repeats), with one frame held back until
//! the next has left. Corruption flips a bit after the Ethernet header,
//! which the receiver's ICRC or VCRC catches.

use super::{FrameMeta, Link, LinkCaps, Mac, ETH_HEADER};
pub use crate::faults::FaultCounts;
use crate::faults::{Fate, FaultConfig, FaultDice};
use std::io;
use std::os::fd::RawFd;

/// A link that damages what it is given to send, as configured.
#[derive(Debug)]
pub struct FaultLink<L> {
    inner: L,
    dice: FaultDice,
    held: Option<Vec<u8>>,
}

impl<L: Link> FaultLink<L> {
    pub fn new(inner: L, cfg: FaultConfig) -> FaultLink<L> {
        FaultLink { inner, dice: FaultDice::new(cfg), held: None }
    }

    /// What it did so far.
    pub fn counts(&self) -> FaultCounts {
        self.dice.counts
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
        let mut f = frame.to_vec();
        let body = f.get_mut(ETH_HEADER..).unwrap_or_default();
        match self.dice.roll(body, self.held.is_none()) {
            // Lost; a frame held back still leaves after it, as the UDP
            // injector's does.
            Fate::Lose => {}
            Fate::Hold => {
                self.held = Some(f);
                return Ok(());
            }
            Fate::Send { duplicate } => {
                self.inner.send(&f)?;
                if duplicate {
                    self.inner.send(&f)?;
                }
            }
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
    fn fault_counts(&self) -> FaultCounts {
        self.dice.counts
    }
}
