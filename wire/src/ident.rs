//! Recovering the IPv4 Identification of a RoCE v2 packet from its ICRC.
//!
//! The ICRC covers the IPv4 Identification field, and kernel Soft-RoCE
//! sends nonzero, varying values there. A receiver behind a UDP socket sees
//! every other covered byte (the addresses, ports and lengths come with the
//! datagram; the variant fields are masked) but not that one. The CRC is
//! linear, so the difference between the carried ICRC and the one computed
//! with Identification 0 depends only on the unknown 16 bits and on how
//! many bytes follow them: a 16-unknown, 32-equation linear system over
//! GF(2), which [`IdentRecovery`] solves by elimination.
//!
//! The price is honest to state: an error in the packet now goes unnoticed
//! when it happens to look like a change of Identification, 1 in 2^16
//! random corruptions instead of 1 in 2^32. A receiver that sees the real IP
//! header (a raw socket, the simulator) does not need any of this.

/// The reflected CRC-32 polynomial, without its x^32 term.
const POLY: u32 = 0xedb8_8320;

/// Where the Identification field sits in the bytes the ICRC hashes: after
/// the 8 bytes of ones that stand for the LRH, at offset 4 of the IPv4 header.
const IDENT_AT: usize = 8 + 4;

/// a(x) * b(x) mod P, both in the reflected representation (bit 31 is x^0).
fn mult_mod_p(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                return p;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
}

/// x^(8 * bytes) mod P: what running `bytes` zero bytes through the CRC
/// register multiplies its state by.
fn shift_for(bytes: usize) -> u32 {
    let mut square = 1u32 << 30; // x^1
    let mut result = 1u32 << 31; // x^0
    let mut n = (bytes as u64) * 8;
    while n != 0 {
        if n & 1 != 0 {
            result = mult_mod_p(square, result);
        }
        square = mult_mod_p(square, square);
        n >>= 1;
    }
    result
}

/// The CRC register after hashing `bytes` from a zero state, with no
/// final complement: the part of a CRC that is linear in the message.
fn raw_crc(bytes: &[u8]) -> u32 {
    let mut s = 0u32;
    for &b in bytes {
        s ^= u32::from(b);
        for _ in 0..8 {
            s = if s & 1 != 0 { (s >> 1) ^ POLY } else { s >> 1 };
        }
    }
    s
}

/// The 16 ICRC differences one Identification bit each makes in a packet
/// of one length, reduced to echelon form.
#[derive(Debug, Clone, Copy)]
struct Basis {
    /// Bytes hashed after the Identification field.
    tail: usize,
    /// (difference vector with a distinct leading bit, Identification bits it stands for).
    rows: [(u32, u16); 16],
}

impl Basis {
    fn new(tail: usize) -> Basis {
        let columns = ident_columns(tail);
        let mut rows = [(0u32, 0u16); 16];
        for bit in 0..16 {
            let (mut v, mut c) = (columns[bit], 1u16 << bit);
            for &(rv, rc) in &rows[..bit] {
                if v & lead(rv) != 0 {
                    v ^= rv;
                    c ^= rc;
                }
            }
            // A CRC-32 sees every burst of 32 bits or fewer, so no
            // combination of Identification bits cancels out.
            debug_assert!(v != 0, "the Identification bits are independent under CRC-32");
            rows[bit] = (v, c);
        }
        Basis { tail, rows }
    }

    fn solve(&self, mut diff: u32) -> Option<u16> {
        let mut ident = 0;
        for &(v, c) in &self.rows {
            if diff & lead(v) != 0 {
                diff ^= v;
                ident ^= c;
            }
        }
        (diff == 0).then_some(ident)
    }
}

/// The ICRC difference each Identification bit makes when `tail` bytes are
/// hashed after the field (bit k of the field at index k).
fn ident_columns(tail: usize) -> [u32; 16] {
    let shift = shift_for(tail);
    core::array::from_fn(|bit| mult_mod_p(shift, raw_crc(&(1u16 << bit).to_be_bytes())))
}

fn lead(v: u32) -> u32 {
    1u32 << (31 - v.leading_zeros())
}

/// Solves for the IPv4 Identification of received RoCE v2 packets, with a
/// small cache of per-length bases (bulk traffic has few packet lengths).
#[derive(Debug, Clone, Default)]
pub struct IdentRecovery {
    cache: Vec<Basis>,
    next: usize,
}

impl IdentRecovery {
    const CACHE: usize = 16;

    pub fn new() -> IdentRecovery {
        IdentRecovery::default()
    }

    /// The Identification that makes the packet's ICRC right, given
    /// `l3_len` (IP header through ICRC), the ICRC `computed` over the
    /// packet as it stands (Identification 0) and the one it `carried`.
    /// `None` when no Identification does: the packet is corrupt.
    pub fn recover(&mut self, l3_len: usize, computed: u32, carried: u32) -> Option<u16> {
        // Hashed: 8 bytes of ones, then the packet up to the ICRC.
        let hashed = 8 + l3_len.checked_sub(4)?;
        let tail = hashed.checked_sub(IDENT_AT + 2)?;
        let basis = match self.cache.iter().find(|b| b.tail == tail) {
            Some(b) => *b,
            None => {
                let b = Basis::new(tail);
                if self.cache.len() < Self::CACHE {
                    self.cache.push(b);
                } else {
                    self.cache[self.next] = b;
                    self.next = (self.next + 1) % Self::CACHE;
                }
                b
            }
        };
        basis.solve(computed ^ carried)
    }
}

/// What the IPv4 Identification does to the ICRC of packets of one length.
///
/// A sender that hands the kernel one run of segments (UDP GSO) gets
/// Identification 0, 1, 2, … on the segments the kernel cuts, where it
/// built each packet assuming 0: by linearity, fixing the ICRC of segment
/// `k` is one XOR with [`IdentShift::difference`]`(k)`, not a new CRC over
/// the packet.
#[derive(Debug, Clone, Copy)]
pub struct IdentShift {
    l3_len: usize,
    /// The ICRC difference each Identification bit makes.
    columns: [u32; 16],
}

impl IdentShift {
    /// For packets of `l3_len` bytes, IP header through ICRC; `None` when
    /// that is too short to hold an IPv4 header and an ICRC.
    pub fn new(l3_len: usize) -> Option<IdentShift> {
        let hashed = 8 + l3_len.checked_sub(4)?;
        Some(IdentShift { l3_len, columns: ident_columns(hashed.checked_sub(IDENT_AT + 2)?) })
    }

    pub fn l3_len(&self) -> usize {
        self.l3_len
    }

    /// ICRC(packet with `ident`) XOR ICRC(the same packet with 0).
    pub fn difference(&self, ident: u16) -> u32 {
        let mut d = 0;
        let mut rest = ident;
        while rest != 0 {
            d ^= self.columns[rest.trailing_zeros() as usize];
            rest &= rest - 1;
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icrc;

    fn packet(len: usize, ident: u16) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i * 131 + 17) as u8).collect();
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[4..6].copy_from_slice(&ident.to_be_bytes());
        p
    }

    #[test]
    fn shift_matches_hashing_zero_bytes() {
        for n in [0usize, 1, 2, 7, 100, 4096] {
            let mut with_zeros = vec![0xa5u8, 0x3c];
            with_zeros.extend(std::iter::repeat_n(0, n));
            assert_eq!(mult_mod_p(shift_for(n), raw_crc(&[0xa5, 0x3c])), raw_crc(&with_zeros), "n={n}");
        }
    }

    #[test]
    fn recovers_every_identification_at_several_lengths() {
        let mut r = IdentRecovery::new();
        for len in [60usize, 61, 64, 1100, 4156] {
            for ident in [1u16, 2, 0x8000, 0x1234, 0xffff, 0xbeef] {
                let sent = packet(len, ident);
                let carried = icrc::roce_v2(&sent[..len - 4]).unwrap();
                let seen = packet(len, 0);
                let computed = icrc::roce_v2(&seen[..len - 4]).unwrap();
                assert_eq!(r.recover(len, computed, carried), Some(ident), "len={len} ident={ident:#x}");
            }
        }
    }

    #[test]
    fn zero_difference_is_identification_zero() {
        assert_eq!(IdentRecovery::new().recover(100, 0xdead_beef, 0xdead_beef), Some(0));
    }

    #[test]
    fn most_corruptions_have_no_solution() {
        let mut r = IdentRecovery::new();
        let len = 300;
        let seen = packet(len, 0);
        let computed = icrc::roce_v2(&seen[..len - 4]).unwrap();
        let mut solved = 0;
        for flip in 0..(len - 4) * 8 {
            let mut bad = packet(len, 0x4242);
            let byte = flip / 8;
            if matches!(byte, 1 | 4 | 5 | 8 | 10 | 11 | 26 | 27 | 32) {
                continue; // masked fields (TOS, TTL, IP and UDP checksums, BTH byte 4) and the Identification
            }
            bad[byte] ^= 1 << (flip % 8);
            let carried = icrc::roce_v2(&bad[..len - 4]).unwrap();
            if r.recover(len, computed, carried).is_some() {
                solved += 1;
            }
        }
        // A single flipped bit outside the Identification is never mistaken for it.
        assert_eq!(solved, 0);
    }

    #[test]
    fn shift_turns_the_icrc_of_identification_zero_into_any_other() {
        for len in [60usize, 61, 100, 1100, 4156] {
            let shift = IdentShift::new(len).unwrap();
            let zero = icrc::roce_v2(&packet(len, 0)[..len - 4]).unwrap();
            for ident in [0u16, 1, 2, 3, 15, 63, 0x8000, 0xbeef, 0xffff] {
                let want = icrc::roce_v2(&packet(len, ident)[..len - 4]).unwrap();
                assert_eq!(zero ^ shift.difference(ident), want, "len={len} ident={ident:#x}");
            }
        }
        assert!(IdentShift::new(3).is_none());
    }

    proptest::proptest! {
        #[test]
        fn shift_and_recovery_agree(len in 40usize..5000, ident: u16) {
            let shift = IdentShift::new(len).unwrap();
            let computed = 0x1234_5678u32;
            let carried = computed ^ shift.difference(ident);
            proptest::prop_assert_eq!(IdentRecovery::new().recover(len, computed, carried), Some(ident));
        }
    }
}
