//! PFC (802.1Qbb): the pause frame as bytes, and the per-priority
//! thresholds a switch ingress uses (reference §3).
//!
//! The fabric carries real frame bytes between ports: a switch emits a
//! frame with [`PfcFrame::emit`] and the receiving port parses it with
//! [`PfcFrame::parse`], so the format is exercised on every pause.

use core::time::Duration;

/// 01-80-C2-00-00-01, the MAC Control multicast address (§3.1).
pub const PFC_DA: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x01];
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
pub const OPCODE_PFC: u16 = 0x0101;
/// Header (14) + minimum payload (46); the FCS is not modelled.
pub const FRAME_LEN: usize = 60;
/// What the frame costs on the wire: 64 bytes with the FCS.
pub const WIRE_LEN: usize = 64;

/// The priority RDMA data (ECN-capable packets) travels in: lossless, PFC-enabled.
pub const DATA_PRIORITY: usize = 3;
/// ACKs, NAKs and CNPs: their own lossy priority, never paused.
pub const CONTROL_PRIORITY: usize = 6;

/// One 802.1Qbb frame: for each priority i with bit i of `class_enable`
/// set, stop sending it for `times[i]` quanta (0: resume at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcFrame {
    pub src_mac: [u8; 6],
    pub class_enable: u8,
    pub times: [u16; 8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PfcParseError {
    #[error("a PFC frame is {FRAME_LEN} bytes, got {0}")]
    Short(usize),
    #[error("EtherType {0:#06x} is not MAC Control (0x8808)")]
    EtherType(u16),
    #[error("MAC Control opcode {0:#06x} is not PFC (0x0101)")]
    Opcode(u16),
}

impl PfcFrame {
    /// A frame that pauses (or, with `quanta` 0, resumes) one priority.
    pub fn single(src_mac: [u8; 6], priority: usize, quanta: u16) -> PfcFrame {
        let mut times = [0; 8];
        times[priority] = quanta;
        PfcFrame { src_mac, class_enable: 1 << priority, times }
    }

    pub fn emit(&self) -> [u8; FRAME_LEN] {
        let mut b = [0u8; FRAME_LEN];
        b[0..6].copy_from_slice(&PFC_DA);
        b[6..12].copy_from_slice(&self.src_mac);
        b[12..14].copy_from_slice(&ETHERTYPE_MAC_CONTROL.to_be_bytes());
        b[14..16].copy_from_slice(&OPCODE_PFC.to_be_bytes());
        // High byte of the class-enable vector is reserved (zero).
        b[17] = self.class_enable;
        for (i, t) in self.times.iter().enumerate() {
            b[18 + 2 * i..20 + 2 * i].copy_from_slice(&t.to_be_bytes());
        }
        b
    }

    /// Parses an untagged frame. The destination address and the padding
    /// are not checked: a receiver acts on the EtherType and opcode.
    pub fn parse(b: &[u8]) -> Result<PfcFrame, PfcParseError> {
        if b.len() < FRAME_LEN {
            return Err(PfcParseError::Short(b.len()));
        }
        let be = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        if be(12) != ETHERTYPE_MAC_CONTROL {
            return Err(PfcParseError::EtherType(be(12)));
        }
        if be(14) != OPCODE_PFC {
            return Err(PfcParseError::Opcode(be(14)));
        }
        let mut times = [0; 8];
        for (i, t) in times.iter_mut().enumerate() {
            *t = be(18 + 2 * i);
        }
        Ok(PfcFrame { src_mac: b[6..12].try_into().expect("6 bytes"), class_enable: b[17], times })
    }
}

/// How long `quanta` pause quanta last at `rate_bps`: 512 bit times each (§2.7).
pub fn quanta_to_duration(quanta: u16, rate_bps: u64) -> Duration {
    Duration::from_nanos((u64::from(quanta) * 512 * 1_000_000_000).div_ceil(rate_bps.max(1)))
}

/// What a received PFC frame asks of the data priority on a link of
/// `rate_bps` (its quanta are of the receiving link's speed, §3.2): a
/// pause (zero: resume), or `None` when it leaves that priority alone.
pub fn data_pause(frame: &[u8], rate_bps: u64) -> Result<Option<Duration>, PfcParseError> {
    let f = PfcFrame::parse(frame)?;
    Ok((f.class_enable & (1 << DATA_PRIORITY) != 0).then(|| quanta_to_duration(f.times[DATA_PRIORITY], rate_bps)))
}

/// The peer response-time budget in quanta by link speed (§3.2, SONiC's table).
pub fn response_quanta(rate_bps: u64) -> u64 {
    let g = rate_bps.div_ceil(1_000_000_000);
    match g {
        0..=10 => 67,
        11..=25 => 80,
        26..=40 => 118,
        41..=50 => 147,
        51..=100 => 394,
        101..=200 => 453,
        _ => 905,
    }
}

/// The Ethernet MTU the formula's MTU terms use (§3.3's worked examples).
pub const FORMULA_MTU: u64 = 1500;

/// The headroom formula of §3.3 with cells ignored: 2·MTU (the frame the
/// switch is sending when it decides to pause, and the one the peer is
/// sending when the pause lands) + the cable both ways (rate × 2 × delay)
/// + the peer's response time, rounded up to 1 KiB.
pub fn headroom_formula(rate_bps: u64, delay: Duration) -> u64 {
    let cable = (u128::from(rate_bps) * 2 * delay.as_nanos()).div_ceil(8 * 1_000_000_000) as u64;
    let response = response_quanta(rate_bps) * 512 / 8;
    (2 * FORMULA_MTU + cable + response).div_ceil(1024) * 1024
}

/// A switch's PFC settings, the same on every ingress port, for [`DATA_PRIORITY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcConfig {
    /// Ingress bytes of the priority at which the switch pauses the upstream.
    pub xoff_bytes: u64,
    /// At or below this it sends XON (time 0).
    pub xon_bytes: u64,
    /// Bytes admitted above XOFF; beyond XOFF + headroom a packet is dropped.
    pub headroom_bytes: u64,
    /// The time field of each pause; refreshed every half of it while above XON.
    pub pause_quanta: u16,
}

impl PfcConfig {
    /// XOFF 25 KB per ingress (far above Kmin = 5 KB, so ECN acts first),
    /// XON 3 KB lower (HPCC's resume offset), headroom by the formula, and
    /// a pause of about 5 µs refreshed every 2.5 µs (as ns3-rdma does).
    pub fn for_link(rate_bps: u64, delay: Duration, headroom: Option<u64>) -> PfcConfig {
        let quanta = (5_000u64 * rate_bps).div_ceil(512 * 1_000_000_000).clamp(1, 0xffff) as u16;
        PfcConfig {
            xoff_bytes: 25_000,
            xon_bytes: 22_000,
            headroom_bytes: headroom.unwrap_or_else(|| headroom_formula(rate_bps, delay)),
            pause_quanta: quanta,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_pauses_the_data_priority_only_when_it_names_it() {
        let mac = [2, 0, 0, 0, 0, 1];
        // 100 quanta of 512 bit times at 100 Gb/s: 512 ns.
        let pause = PfcFrame::single(mac, DATA_PRIORITY, 100).emit();
        assert_eq!(data_pause(&pause, 100_000_000_000).unwrap(), Some(Duration::from_nanos(512)));
        let resume = PfcFrame::single(mac, DATA_PRIORITY, 0).emit();
        assert_eq!(data_pause(&resume, 100_000_000_000).unwrap(), Some(Duration::ZERO));
        let other = PfcFrame::single(mac, CONTROL_PRIORITY, 100).emit();
        assert_eq!(data_pause(&other, 100_000_000_000).unwrap(), None);
        assert!(data_pause(&pause[..10], 100_000_000_000).is_err(), "a short frame");
    }

    #[test]
    fn frame_bytes_match_the_reference_layout() {
        // §3.1: DA, SA, 0x8808, opcode 0x0101, class-enable (high byte
        // reserved, bit i = priority i), c0..c7, zero padding.
        let mut times = [0u16; 8];
        times[0] = 0x0102;
        times[3] = 0xffff;
        times[7] = 0x0007;
        let f = PfcFrame { src_mac: [2, 0, 0, 0, 0, 9], class_enable: 0b1000_1001, times };
        let b = f.emit();
        #[rustfmt::skip]
        let want: [u8; 32] = [
            0x01, 0x80, 0xc2, 0x00, 0x00, 0x01, // DA
            0x02, 0x00, 0x00, 0x00, 0x00, 0x09, // SA
            0x88, 0x08,                         // EtherType: MAC Control
            0x01, 0x01,                         // opcode: PFC
            0x00, 0x89,                         // class-enable: c0, c3, c7
            0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, // c0..c3
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // c4..c6
        ];
        assert_eq!(&b[..32], &want);
        assert_eq!(&b[32..34], &[0x00, 0x07]); // c7
        assert!(b[34..].iter().all(|&x| x == 0), "padding");
        assert_eq!(b.len() + 4, 64, "a minimum frame with its FCS");
        assert_eq!(PfcFrame::parse(&b), Ok(f));
    }

    #[test]
    fn parse_rejects_what_is_not_pfc() {
        let b = PfcFrame::single([0; 6], DATA_PRIORITY, 10).emit();
        assert_eq!(PfcFrame::parse(&b[..20]), Err(PfcParseError::Short(20)));
        let mut x = b;
        x[14] = 0x00; // 0x0001: classic 802.3x PAUSE
        assert_eq!(PfcFrame::parse(&x), Err(PfcParseError::Opcode(0x0001)));
        let mut y = b;
        y[13] = 0x00;
        assert_eq!(PfcFrame::parse(&y), Err(PfcParseError::EtherType(0x8800)));
    }

    #[test]
    fn quanta_and_headroom_match_the_reference_numbers() {
        // §2.7: one quantum is 12.8 ns at 40G, 5.12 ns at 100G; 65535 at 40G is 838.8 µs.
        assert_eq!(quanta_to_duration(1, 40_000_000_000), Duration::from_nanos(13));
        assert_eq!(quanta_to_duration(1000, 100_000_000_000), Duration::from_nanos(5120));
        assert_eq!(quanta_to_duration(0xffff, 40_000_000_000).as_micros(), 838);
        // §3.3 worked examples, 100 m of cable = 0.5 µs at 2e8 m/s: 11.2 KB at
        // 25G and 40.7 KB at 100G before rounding (to 1 KiB here).
        let half_us = Duration::from_nanos(500);
        assert_eq!(headroom_formula(25_000_000_000, half_us), 11 * 1024);
        assert_eq!(2 * 1500 + 3_125 + 80 * 64, 11_245);
        assert_eq!(headroom_formula(100_000_000_000, half_us), 40 * 1024);
        assert_eq!(2 * 1500 + 12_500 + 394 * 64, 40_716);
        // The fabric's default links: 40G, 1 µs: 3000 + 10000 + 7552 = 20552 B.
        assert_eq!(headroom_formula(40_000_000_000, Duration::from_micros(1)), 21 * 1024);
    }
}
