//! VL arbitration (reference §2.4): a high- and a low-priority table of
//! (VL, weight in 64-byte units) entries, served round-robin; a packet
//! may overshoot its entry's remaining weight. VLHighLimit bounds the
//! high-priority bytes (in 4 KiB units; 255: unbounded) sent while a
//! low-priority packet waits.

/// One table entry; weight 0 skips it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlWeight {
    pub vl: u8,
    pub weight: u8,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Table {
    entries: Vec<VlWeight>,
    at: usize,
    /// Blocks the current entry may still send; 0: not started.
    left: u32,
}

impl Table {
    /// The VL of the first entry from the current one with a ready VL and
    /// a non-zero weight; moves there.
    fn pick(&mut self, ready: &dyn Fn(u8) -> bool) -> Option<u8> {
        let n = self.entries.len();
        for k in 0..n {
            let i = (self.at + k) % n;
            let e = self.entries[i];
            if e.weight > 0 && ready(e.vl) {
                if i != self.at || self.left == 0 {
                    self.at = i;
                    self.left = u32::from(e.weight);
                }
                return Some(e.vl);
            }
        }
        None
    }

    fn charge(&mut self, blocks: u32) {
        self.left = self.left.saturating_sub(blocks);
        if self.left == 0 && !self.entries.is_empty() {
            self.at = (self.at + 1) % self.entries.len();
        }
    }
}

/// The arbiter of one output port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VlArbiter {
    high: Table,
    low: Table,
    /// In 4 KiB units; 255 unbounded.
    pub high_limit: u8,
    /// High-priority bytes sent since a low-priority packet last went (or
    /// found nothing to send).
    high_bytes: u64,
    last_was_high: bool,
}

impl VlArbiter {
    pub fn new(high: Vec<VlWeight>, low: Vec<VlWeight>, high_limit: u8) -> VlArbiter {
        VlArbiter {
            high: Table { entries: high, ..Table::default() },
            low: Table { entries: low, ..Table::default() },
            high_limit,
            ..VlArbiter::default()
        }
    }

    /// opensm's defaults for `vls` data VLs: everything in the low table
    /// with weight 4 (§2.3), nothing high.
    pub fn uniform(vls: u8) -> VlArbiter {
        VlArbiter::new(Vec::new(), (0..vls).map(|vl| VlWeight { vl, weight: 4 }).collect(), 0)
    }

    pub fn tables(&self) -> (&[VlWeight], &[VlWeight]) {
        (&self.high.entries, &self.low.entries)
    }

    /// Replaces entries `first..` of the high or low table (an SMA Set).
    pub fn set_entries(&mut self, high: bool, first: usize, entries: &[VlWeight]) {
        let t = if high { &mut self.high } else { &mut self.low };
        if t.entries.len() < first + entries.len() {
            t.entries.resize(first + entries.len(), VlWeight { vl: 0, weight: 0 });
        }
        t.entries[first..first + entries.len()].copy_from_slice(entries);
        t.at = 0;
        t.left = 0;
    }

    fn high_allowed(&self, low_waiting: bool) -> bool {
        if !low_waiting || self.high_limit == 255 {
            return true;
        }
        // Limit 0: one high packet, then a low one gets its chance.
        let limit = u64::from(self.high_limit) * 4096;
        if limit == 0 {
            !self.last_was_high
        } else {
            self.high_bytes < limit
        }
    }

    /// The VL to send next among those `ready` (a head packet with credit).
    pub fn pick(&mut self, ready: &dyn Fn(u8) -> bool) -> Option<(u8, bool)> {
        let low_waiting = self.low.entries.iter().any(|e| e.weight > 0 && ready(e.vl));
        if self.high_allowed(low_waiting) {
            if let Some(vl) = self.high.pick(ready) {
                return Some((vl, true));
            }
        }
        self.low.pick(ready).map(|vl| (vl, false))
    }

    /// Accounts a packet of `bytes` sent on the VL [`Self::pick`] returned.
    pub fn sent(&mut self, high: bool, bytes: usize) {
        let blocks = bytes.div_ceil(64) as u32;
        if high {
            self.high.charge(blocks);
            self.high_bytes += bytes as u64;
        } else {
            self.low.charge(blocks);
            self.high_bytes = 0;
        }
        self.last_was_high = high;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Saturated VLs sending `size`-byte packets: bytes per VL after `n` packets.
    fn shares(arb: &mut VlArbiter, vls: &[u8], size: usize, n: usize) -> Vec<u64> {
        let mut bytes = vec![0u64; 16];
        for _ in 0..n {
            let (vl, high) = arb.pick(&|v| vls.contains(&v)).expect("a ready VL");
            arb.sent(high, size);
            bytes[usize::from(vl)] += size as u64;
        }
        bytes
    }

    #[test]
    fn low_table_shares_follow_the_weights_within_one_packet() {
        // Weights 16 and 48 blocks = 1 KiB and 3 KiB per round; 1 KiB packets.
        let low = vec![VlWeight { vl: 0, weight: 16 }, VlWeight { vl: 1, weight: 48 }];
        let arb = VlArbiter::new(Vec::new(), low, 0);
        for n in 1..400 {
            let mut a = arb.clone();
            let b = shares(&mut a, &[0, 1], 1024, n);
            let total = (b[0] + b[1]) as f64;
            // After any prefix, VL1 has 3/4 of the bytes to within one packet.
            assert!((b[1] as f64 - 0.75 * total).abs() <= 1024.0, "n {n}: {b:?}");
        }
        // Packets that overshoot: 1500-byte packets against 16-block (1 KiB) weights.
        let low = vec![VlWeight { vl: 0, weight: 16 }, VlWeight { vl: 1, weight: 16 }];
        let b = shares(&mut VlArbiter::new(Vec::new(), low, 0), &[0, 1], 1500, 1000);
        assert_eq!(b[0], b[1]);
    }

    #[test]
    fn an_idle_vl_gives_its_share_away_and_weight_zero_skips() {
        let low = vec![VlWeight { vl: 0, weight: 0 }, VlWeight { vl: 1, weight: 8 }, VlWeight { vl: 2, weight: 8 }];
        let b = shares(&mut VlArbiter::new(Vec::new(), low, 0), &[0, 1], 512, 100);
        assert_eq!((b[0], b[1], b[2]), (0, 51_200, 0));
    }

    #[test]
    fn high_limit_bounds_high_priority_bytes_between_low_packets() {
        let high = vec![VlWeight { vl: 1, weight: 255 }];
        let low = vec![VlWeight { vl: 0, weight: 255 }];
        // Limit 1 = 4 KiB: four 1 KiB high packets, then one low.
        let mut arb = VlArbiter::new(high.clone(), low.clone(), 1);
        let seq: Vec<u8> = (0..10)
            .map(|_| {
                let (vl, h) = arb.pick(&|_| true).unwrap();
                arb.sent(h, 1024);
                vl
            })
            .collect();
        assert_eq!(seq, [1, 1, 1, 1, 0, 1, 1, 1, 1, 0]);
        // Limit 0: alternate. Limit 255: low starves while high is ready.
        let mut arb = VlArbiter::new(high.clone(), low.clone(), 0);
        let b = shares(&mut arb, &[0, 1], 1024, 10);
        assert_eq!((b[0], b[1]), (5 * 1024, 5 * 1024));
        let b = shares(&mut VlArbiter::new(high, low, 255), &[0, 1], 1024, 10);
        assert_eq!(b[0], 0);
    }
}
