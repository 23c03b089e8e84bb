//! ACK Extended Transport Header (IBTA 9.3.5): the syndrome of an ACK or
//! NAK and the responder's message sequence number.

use crate::field::*;
use core::fmt;

header_view!(
    /// A view of an AETH.
    Aeth, 4, "AETH"
);

impl<T: AsRef<[u8]>> Aeth<T> {
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_byte(self.b()[0])
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        u24_at(self.b(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    pub fn set_syndrome(&mut self, s: Syndrome) {
        self.bm()[0] = s.to_byte();
    }
    pub fn set_msn(&mut self, msn: u32) {
        set_u24(self.bm(), 1, msn)
    }
}

/// An owned AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    pub syndrome: Syndrome,
    pub msn: u32,
}

impl AethRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &Aeth<T>) -> AethRepr {
        AethRepr { syndrome: h.syndrome(), msn: h.msn() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Aeth<T>) {
        h.set_syndrome(self.syndrome);
        h.set_msn(self.msn);
    }
}

/// The 5-bit credit code of an ACK (IBTA table 46).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CreditCode(u8);

/// Credits each code stands for; code 31 means "no credit information",
/// which rxe and ConnectX send as "unlimited".
const CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
    8192, 12288, 16384, 24576, 32768,
];

impl CreditCode {
    /// Code 31: the responder does not limit the requester (what rxe sends).
    pub const UNLIMITED: CreditCode = CreditCode(31);

    /// The code from its five bits.
    pub const fn new(code: u8) -> CreditCode {
        CreditCode(code & 0x1f)
    }
    pub const fn code(self) -> u8 {
        self.0
    }
    /// Receive credits this code advertises, or `None` for unlimited.
    pub fn credits(self) -> Option<u32> {
        CREDITS.get(self.0 as usize).copied()
    }
    /// The largest code whose credit count does not exceed `n` (an honest
    /// advertisement never promises more receive WQEs than are posted).
    pub fn for_credits(n: u32) -> CreditCode {
        let code = CREDITS.iter().rposition(|&c| c <= n).unwrap_or(0);
        CreditCode(code as u8)
    }
}

/// The 5-bit RNR NAK timer code (IBTA table 45): how long the requester
/// waits before it retries a request the responder had no receive WQE for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RnrTimer(u8);

/// Microseconds for each timer code. Code 0 is the longest (655.36 ms).
const RNR_MICROS: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240,
    15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760, 327_680, 491_520,
];

impl RnrTimer {
    pub const fn new(code: u8) -> RnrTimer {
        RnrTimer(code & 0x1f)
    }
    pub const fn code(self) -> u8 {
        self.0
    }
    /// The delay in microseconds.
    pub const fn micros(self) -> u32 {
        RNR_MICROS[self.0 as usize]
    }
    /// The delay as a duration.
    pub const fn duration(self) -> core::time::Duration {
        core::time::Duration::from_micros(self.micros() as u64)
    }
}

/// NAK codes (IBTA table 47).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// A request arrived with a PSN later than expected.
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
    /// Codes 5..31, reserved.
    Reserved(u8),
}

impl NakCode {
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
    pub const fn from_code(c: u8) -> NakCode {
        match c & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
}

/// The AETH syndrome byte, decoded (IBTA 9.7.5.2.x): bits 6..5 say what it
/// is, bits 4..0 carry the credit code, RNR timer or NAK code. Bit 7 is
/// reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    Ack(CreditCode),
    RnrNak(RnrTimer),
    Nak(NakCode),
    /// Type 0b10 is reserved; kept with its low bits so that a parse and an
    /// emit give back the same byte.
    Reserved(u8),
}

impl Syndrome {
    /// An ACK that advertises unlimited credits, as rxe sends (syndrome 0x1f).
    pub const ACK_UNLIMITED: Syndrome = Syndrome::Ack(CreditCode::UNLIMITED);

    pub const fn from_byte(b: u8) -> Syndrome {
        let low = b & 0x1f;
        match (b >> 5) & 0x3 {
            0b00 => Syndrome::Ack(CreditCode::new(low)),
            0b01 => Syndrome::RnrNak(RnrTimer::new(low)),
            0b11 => Syndrome::Nak(NakCode::from_code(low)),
            _ => Syndrome::Reserved(low),
        }
    }

    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack(c) => c.code(),
            Syndrome::RnrNak(t) => 0x20 | t.code(),
            Syndrome::Reserved(low) => 0x40 | (low & 0x1f),
            Syndrome::Nak(n) => 0x60 | n.code(),
        }
    }

    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack(_))
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Syndrome::Ack(c) => match c.credits() {
                Some(n) => write!(f, "ACK credits={n}"),
                None => write!(f, "ACK credits=unlimited"),
            },
            Syndrome::RnrNak(t) => write!(f, "RNR-NAK timer={}us", t.micros()),
            Syndrome::Nak(NakCode::PsnSequenceError) => f.write_str("NAK psn-seq-err"),
            Syndrome::Nak(NakCode::InvalidRequest) => f.write_str("NAK inv-req"),
            Syndrome::Nak(NakCode::RemoteAccessError) => f.write_str("NAK rem-access-err"),
            Syndrome::Nak(NakCode::RemoteOperationalError) => f.write_str("NAK rem-op-err"),
            Syndrome::Nak(NakCode::InvalidRdRequest) => f.write_str("NAK inv-rd-req"),
            Syndrome::Nak(NakCode::Reserved(c)) => write!(f, "NAK reserved({c})"),
            Syndrome::Reserved(low) => write!(f, "reserved-syndrome(0x{:02x})", 0x40 | low),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_syndrome_byte_round_trips() {
        for b in 0u8..0x80 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b, "syndrome {b:#x}");
        }
    }

    #[test]
    fn rxe_ack_is_unlimited_credits() {
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::ACK_UNLIMITED);
        assert_eq!(CreditCode::UNLIMITED.credits(), None);
    }

    #[test]
    fn credit_codes_follow_the_table() {
        assert_eq!(CreditCode::new(5).credits(), Some(6));
        assert_eq!(CreditCode::new(30).credits(), Some(32768));
        assert_eq!(CreditCode::for_credits(0).code(), 0);
        assert_eq!(CreditCode::for_credits(7).credits(), Some(6));
        assert_eq!(CreditCode::for_credits(1_000_000).code(), 30);
    }

    #[test]
    fn rnr_timer_table_ends() {
        assert_eq!(RnrTimer::new(0).micros(), 655_360);
        assert_eq!(RnrTimer::new(1).micros(), 10);
        assert_eq!(RnrTimer::new(12).micros(), 640);
        assert_eq!(RnrTimer::new(31).micros(), 491_520);
    }

    #[test]
    fn nak_codes_encode_in_the_low_bits() {
        assert_eq!(Syndrome::Nak(NakCode::PsnSequenceError).to_byte(), 0x60);
        assert_eq!(Syndrome::Nak(NakCode::RemoteAccessError).to_byte(), 0x62);
        assert_eq!(Syndrome::RnrNak(RnrTimer::new(12)).to_byte(), 0x2c);
    }
}
