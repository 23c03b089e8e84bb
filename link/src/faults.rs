//! Fault injection on the send path, for runs that exercise the
//! transport's recovery on real sockets and links: loss, duplication,
//! reordering (a packet held back until the next one has left) and
//! corruption (one flipped bit, which the receiver's ICRC or VCRC check
//! catches). Seeded, so a run's decisions repeat.
//!
//! One injector for every link: the configuration ([`FaultConfig`]), the
//! dice (`FaultDice`) and the counts ([`FaultCounts`]) are shared, so a
//! seed gives the same decisions for the same packets on any backend.
//! Each kind of link holds a reordered packet its own way: [`FaultLink`]
//! over any link (one frame held back until the next has left; a
//! corruption flips a bit after the Ethernet header, or after the UDP
//! header of a RoCE v2 link's packet), and
//! [`DatagramFaults`] for the UDP driver, whose datagrams leave by source
//! port (one held back, with where it goes, until the next from its port;
//! a corruption flips a bit after the UDP header).

pub use crate::FaultCounts;
use crate::{FrameMeta, Link, LinkCaps, Mac};
use rdma_transport::sim::Rng;
use std::io;
use std::os::fd::RawFd;

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

/// The fate of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Dropped.
    Lose,
    /// Held back, to leave after the next packet.
    Hold,
    /// Sent now, and again if `duplicate`.
    Send { duplicate: bool },
}

/// The decisions, drawn in one fixed order (loss, corruption, reordering,
/// duplication), so that a seed gives the same decisions for the same
/// packets on either backend.
#[derive(Debug)]
pub(crate) struct FaultDice {
    cfg: FaultConfig,
    rng: Rng,
    pub(crate) counts: FaultCounts,
}

impl FaultDice {
    pub(crate) fn new(cfg: FaultConfig) -> FaultDice {
        FaultDice { cfg, rng: Rng::new(cfg.seed), counts: FaultCounts::default() }
    }

    /// Decides the fate of `body` (the bytes a corruption may flip: what
    /// follows the UDP or Ethernet header). `may_hold`: nothing is held
    /// now (one packet at most waits).
    pub(crate) fn roll(&mut self, body: &mut [u8], may_hold: bool) -> Fate {
        if self.rng.chance(self.cfg.loss) {
            self.counts.losses += 1;
            return Fate::Lose;
        }
        if self.rng.chance(self.cfg.corrupt) && !body.is_empty() {
            let bit = self.rng.below(body.len() as u64 * 8) as usize;
            body[bit / 8] ^= 1 << (bit % 8);
            self.counts.corruptions += 1;
        }
        if may_hold && self.rng.chance(self.cfg.reorder) {
            self.counts.reorders += 1;
            return Fate::Hold;
        }
        let duplicate = self.rng.chance(self.cfg.duplicate);
        if duplicate {
            self.counts.duplicates += 1;
        }
        Fate::Send { duplicate }
    }
}

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
        let body = f.get_mut(crate::addressing_len(self.inner.caps().kind, frame)..).unwrap_or_default();
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
    fn join_group(&mut self, mgid: std::net::IpAddr) -> io::Result<()> {
        self.inner.join_group(mgid)
    }
    fn leave_group(&mut self, mgid: std::net::IpAddr) {
        self.inner.leave_group(mgid)
    }
}

/// The injector of the UDP driver, which sends datagrams, not frames:
/// the same dice, with a reordered datagram held together with where it
/// goes (`D`: its destination and the TOS and TTL it leaves with) and its
/// UDP source port, and released after the next datagram from that port
/// (or at the end of the burst, [`DatagramFaults::take_held`]).
#[derive(Debug)]
pub struct DatagramFaults<D> {
    dice: FaultDice,
    held: Option<(Vec<u8>, D, u16)>,
}

impl<D: Copy> DatagramFaults<D> {
    pub fn new(cfg: FaultConfig) -> DatagramFaults<D> {
        DatagramFaults { dice: FaultDice::new(cfg), held: None }
    }

    /// Decides the fate of one datagram (`body`: what follows its UDP
    /// header), to leave for `dest` from source port `port`; returns what
    /// to send now, in order.
    pub fn apply(&mut self, body: &mut [u8], dest: D, port: u16) -> Vec<(Vec<u8>, D)> {
        let mut out = Vec::new();
        match self.dice.roll(body, self.held.is_none()) {
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
        if self.held.as_ref().is_some_and(|h| h.2 == port) {
            let (b, d, _) = self.held.take().expect("checked");
            out.push((b, d));
        }
        out
    }

    /// A datagram still held at the end of a burst: its bytes, where it
    /// goes and its source port.
    pub fn take_held(&mut self) -> Option<(Vec<u8>, D, u16)> {
        self.held.take()
    }

    /// What it did so far.
    pub fn counts(&self) -> FaultCounts {
        self.dice.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ETH_HEADER;

    #[test]
    fn the_counts_match_the_fates_and_a_seed_repeats() {
        let cfg = FaultConfig { loss: 0.1, duplicate: 0.1, reorder: 0.1, corrupt: 0.1, seed: 7 };
        let run = || {
            let mut d = FaultDice::new(cfg);
            let mut held = false;
            let mut fates = Vec::new();
            let (mut lost, mut dup, mut hold, mut flipped) = (0, 0, 0, 0);
            for i in 0..10_000u32 {
                let mut body = i.to_be_bytes();
                let f = d.roll(&mut body, !held);
                flipped += u64::from(body != i.to_be_bytes());
                match f {
                    Fate::Lose => lost += 1,
                    Fate::Hold => {
                        hold += 1;
                        held = true;
                    }
                    Fate::Send { duplicate } => {
                        dup += u64::from(duplicate);
                        held = false;
                    }
                }
                fates.push(f);
            }
            assert_eq!(d.counts, FaultCounts { losses: lost, duplicates: dup, reorders: hold, corruptions: flipped });
            // Roughly as configured (each about 1,000 of 10,000).
            for n in [lost, dup, hold, flipped] {
                assert!((700..1300).contains(&n), "{:?}", d.counts);
            }
            fates
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn nothing_is_held_while_a_packet_waits() {
        let mut d = FaultDice::new(FaultConfig { reorder: 1.0, ..FaultConfig::default() });
        assert_eq!(d.roll(&mut [0u8; 4], false), Fate::Send { duplicate: false });
        assert_eq!(d.roll(&mut [0u8; 4], true), Fate::Hold);
    }

    #[test]
    fn a_held_datagram_follows_the_next_from_its_port() {
        let mut f = DatagramFaults::new(FaultConfig { reorder: 1.0, ..FaultConfig::default() });
        assert!(f.apply(&mut [1], 'a', 7).is_empty(), "held");
        // Another port's datagram leaves alone (nothing more may be held).
        assert_eq!(f.apply(&mut [2], 'b', 8), vec![(vec![2], 'b')]);
        assert_eq!(f.apply(&mut [3], 'c', 7), vec![(vec![3], 'c'), (vec![1], 'a')]);
        assert!(f.apply(&mut [4], 'd', 7).is_empty(), "held again");
        assert_eq!(f.take_held(), Some((vec![4], 'd', 7)));
        assert_eq!(f.counts().reorders, 2);
    }

    /// A 60-byte RoCE v1 frame from `src` to `dst` whose body is `tag`.
    fn frame(dst: Mac, src: Mac, tag: u8) -> Vec<u8> {
        crate::test_frame(dst, src, 0x8915, tag, 60)
    }

    /// The tags of the frames waiting at `link`, in order.
    fn tags(link: &mut impl Link) -> Vec<u8> {
        let mut buf = [0u8; 128];
        std::iter::from_fn(|| link.recv(&mut buf).unwrap().map(|m| buf[m.len - 1])).collect()
    }

    #[test]
    fn a_fault_link_holds_a_reordered_frame_until_the_next_or_the_end_of_the_burst() {
        use crate::inproc::InProcessLink;
        use rdma_transport::LinkKind;
        let (ma, mb) = ([2, 0, 0, 0, 7, 1], [2, 0, 0, 0, 7, 2]);
        let a = InProcessLink::join("faults-reorder-test", ma, LinkKind::RoceV1).unwrap();
        let mut b = InProcessLink::join("faults-reorder-test", mb, LinkKind::RoceV1).unwrap();
        let mut a = FaultLink::new(a, FaultConfig { reorder: 1.0, ..FaultConfig::default() });
        assert_eq!(a.caps().kind, LinkKind::RoceV1, "the wrapper declares what it wraps");
        a.send(&frame(mb, ma, 1)).unwrap();
        assert!(tags(&mut b).is_empty(), "held");
        a.send(&frame(mb, ma, 2)).unwrap();
        assert_eq!(tags(&mut b), [2, 1], "the held frame follows the next");
        a.send(&frame(mb, ma, 3)).unwrap();
        assert!(tags(&mut b).is_empty());
        a.flush().unwrap();
        assert_eq!(tags(&mut b), [3], "the end of a burst releases it");
        assert_eq!(a.fault_counts(), FaultCounts { reorders: 2, ..FaultCounts::default() });
        assert_eq!(a.fault_counts(), a.counts());
    }

    #[test]
    fn a_fault_link_loses_duplicates_and_corrupts_as_configured() {
        use crate::inproc::InProcessLink;
        use rdma_transport::LinkKind;
        let (ma, mb) = ([2, 0, 0, 0, 8, 1], [2, 0, 0, 0, 8, 2]);
        let join = |mac| InProcessLink::join("faults-dice-test", mac, LinkKind::RoceV1).unwrap();
        let mut b = join(mb);
        let mut lossy = FaultLink::new(join(ma), FaultConfig { loss: 1.0, ..FaultConfig::default() });
        lossy.send(&frame(mb, ma, 1)).unwrap();
        assert_eq!((tags(&mut b), lossy.fault_counts().losses), (vec![], 1));
        drop(lossy);
        let mut twice = FaultLink::new(join(ma), FaultConfig { duplicate: 1.0, ..FaultConfig::default() });
        twice.send(&frame(mb, ma, 2)).unwrap();
        assert_eq!((tags(&mut b), twice.fault_counts().duplicates), (vec![2, 2], 1));
        drop(twice);
        let mut flips = FaultLink::new(join(ma), FaultConfig { corrupt: 1.0, seed: 3, ..FaultConfig::default() });
        let sent = frame(mb, ma, 4);
        flips.send(&sent).unwrap();
        let mut buf = [0u8; 128];
        let m = b.recv(&mut buf).unwrap().expect("a corrupted frame still leaves");
        let got = &buf[..m.len];
        assert_eq!(got[..ETH_HEADER], sent[..ETH_HEADER], "the Ethernet header is left alone");
        let bits: u32 = got.iter().zip(&sent).map(|(x, y)| (x ^ y).count_ones()).sum();
        assert_eq!((bits, flips.fault_counts().corruptions), (1, 1), "one bit flipped");
    }
}
