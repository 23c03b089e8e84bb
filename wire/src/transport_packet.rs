//! The InfiniBand transport packet: BTH, extension headers, payload, pad
//! and ICRC. This part is the same in native IB, RoCE v1 and RoCE v2; only
//! what comes in front of it (and how the ICRC masks that) differs.

use crate::aeth::{Aeth, AethRepr};
use crate::atomic::{AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr};
use crate::bth::{pad_for, Bth, BthRepr};
use crate::deth::{Deth, DethRepr};
use crate::error::check_len;
use crate::feth::{Feth, FethRepr};
use crate::immdt::{Ieth, ImmDt};
use crate::opcode::{HeaderSet, OpcodeInfo};
use crate::reth::{Reth, RethRepr};
use crate::xrceth::XrcEth;
use crate::{Error, Icrc, Result};

/// Length of the ICRC field.
pub const ICRC_LEN: usize = 4;

/// A checked view of a transport packet, from the BTH through the ICRC.
#[derive(Debug, Clone, Copy)]
pub struct TransportPacket<T: AsRef<[u8]>> {
    buffer: T,
    info: &'static OpcodeInfo,
}

impl<T: AsRef<[u8]>> TransportPacket<T> {
    /// Checks that `buffer` is exactly one transport packet: a known opcode,
    /// every extension header its opcode requires, a pad count no larger
    /// than the payload, payload and pad a multiple of four bytes, no
    /// payload where the opcode carries none, and room for the ICRC.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        let bth = Bth::new_checked(b)?;
        let info = bth.opcode().checked_info()?;
        let hdr = Bth::<&[u8]>::LEN + info.ext_len();
        check_len(info.name, b, hdr + ICRC_LEN)?;
        let padded = b.len() - hdr - ICRC_LEN;
        let pad = bth.pad_count();
        if !info.has_payload && padded != 0 {
            return Err(Error::UnexpectedPayload { opcode: bth.opcode().0, len: padded });
        }
        if usize::from(pad) > padded {
            return Err(Error::BadPadCount { pad, payload: padded });
        }
        if padded % 4 != 0 {
            return Err(Error::InvalidField {
                header: "BTH",
                field: "payload+pad length (not a multiple of 4)",
                value: padded as u64,
            });
        }
        Ok(TransportPacket { buffer, info })
    }

    /// Wraps a buffer that [`Self::new_checked`] already accepted with this opcode.
    pub(crate) fn new_prechecked(buffer: T, info: &'static OpcodeInfo) -> Self {
        TransportPacket { buffer, info }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The whole packet, BTH through ICRC.
    pub fn as_bytes(&self) -> &[u8] {
        self.b()
    }

    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(&self.b()[..Bth::<&[u8]>::LEN])
    }

    /// The opcode's table entry.
    pub fn info(&self) -> &'static OpcodeInfo {
        self.info
    }

    /// BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        Bth::<&[u8]>::LEN + self.info.ext_len()
    }

    fn ext(&self, h: HeaderSet, len: usize) -> Option<&[u8]> {
        let off = Bth::<&[u8]>::LEN + self.info.headers.offset_of(h)?;
        Some(&self.b()[off..off + len])
    }

    pub fn reth(&self) -> Option<Reth<&[u8]>> {
        self.ext(HeaderSet::RETH, Reth::<&[u8]>::LEN).map(Reth::new_unchecked)
    }
    pub fn aeth(&self) -> Option<Aeth<&[u8]>> {
        self.ext(HeaderSet::AETH, Aeth::<&[u8]>::LEN).map(Aeth::new_unchecked)
    }
    pub fn atomic_eth(&self) -> Option<AtomicEth<&[u8]>> {
        self.ext(HeaderSet::ATOMIC_ETH, AtomicEth::<&[u8]>::LEN).map(AtomicEth::new_unchecked)
    }
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth<&[u8]>> {
        self.ext(HeaderSet::ATOMIC_ACK_ETH, AtomicAckEth::<&[u8]>::LEN).map(AtomicAckEth::new_unchecked)
    }
    pub fn deth(&self) -> Option<Deth<&[u8]>> {
        self.ext(HeaderSet::DETH, Deth::<&[u8]>::LEN).map(Deth::new_unchecked)
    }
    /// The FETH of a FLUSH request.
    pub fn feth(&self) -> Option<Feth<&[u8]>> {
        self.ext(HeaderSet::FETH, Feth::<&[u8]>::LEN).map(Feth::new_unchecked)
    }
    pub fn xrceth(&self) -> Option<XrcEth<&[u8]>> {
        self.ext(HeaderSet::XRCETH, XrcEth::<&[u8]>::LEN).map(XrcEth::new_unchecked)
    }
    /// Immediate data, if the opcode carries it.
    pub fn imm_dt(&self) -> Option<u32> {
        self.ext(HeaderSet::IMM_DT, ImmDt::<&[u8]>::LEN).map(|b| ImmDt::new_unchecked(b).imm())
    }
    /// The rkey to invalidate, if the opcode carries an IETH.
    pub fn ieth(&self) -> Option<u32> {
        self.ext(HeaderSet::IETH, Ieth::<&[u8]>::LEN).map(|b| Ieth::new_unchecked(b).rkey())
    }

    /// The payload without its pad bytes.
    pub fn payload(&self) -> &[u8] {
        let start = self.header_len();
        let end = self.b().len() - ICRC_LEN - usize::from(self.bth().pad_count());
        &self.b()[start..end]
    }

    /// The bytes the ICRC covers after the BTH: extension headers, payload and pad.
    pub fn after_bth(&self) -> &[u8] {
        &self.b()[Bth::<&[u8]>::LEN..self.b().len() - ICRC_LEN]
    }

    /// The ICRC as carried in the packet.
    pub fn icrc(&self) -> u32 {
        let b = self.b();
        let n = b.len();
        Icrc::from_wire([b[n - 4], b[n - 3], b[n - 2], b[n - 1]])
    }
}

/// An owned transport header set: the BTH and each extension header the
/// opcode carries. The payload is kept apart (it is the application's data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransportRepr {
    pub bth: BthRepr,
    pub deth: Option<DethRepr>,
    /// The XRC SRQ number of an XRC request.
    pub xrc_srq: Option<u32>,
    /// The FETH of a FLUSH request.
    pub feth: Option<FethRepr>,
    pub reth: Option<RethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub aeth: Option<AethRepr>,
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    pub imm_dt: Option<u32>,
    pub ieth: Option<u32>,
}

impl TransportRepr {
    /// A header set with only a BTH; fill in what the opcode needs.
    pub fn new(bth: BthRepr) -> TransportRepr {
        TransportRepr {
            bth,
            deth: None,
            xrc_srq: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            imm_dt: None,
            ieth: None,
        }
    }

    /// Reads the headers of a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &TransportPacket<T>) -> Result<TransportRepr> {
        Ok(TransportRepr {
            bth: BthRepr::parse(&p.bth())?,
            deth: p.deth().map(|h| DethRepr::parse(&h)),
            xrc_srq: p.xrceth().map(|h| h.xrc_srq()),
            feth: p.feth().map(|h| FethRepr::parse(&h)),
            reth: p.reth().map(|h| RethRepr::parse(&h)),
            atomic_eth: p.atomic_eth().map(|h| AtomicEthRepr::parse(&h)),
            aeth: p.aeth().map(|h| AethRepr::parse(&h)),
            atomic_ack_eth: p.atomic_ack_eth().map(|h| AtomicAckEthRepr::parse(&h)),
            imm_dt: p.imm_dt(),
            ieth: p.ieth(),
        })
    }

    /// Which extension headers this value carries.
    fn present(&self) -> HeaderSet {
        let mut s = HeaderSet::EMPTY;
        let mut add = |cond: bool, h: HeaderSet| {
            if cond {
                s = s.union(h);
            }
        };
        add(self.deth.is_some(), HeaderSet::DETH);
        add(self.xrc_srq.is_some(), HeaderSet::XRCETH);
        add(self.feth.is_some(), HeaderSet::FETH);
        add(self.reth.is_some(), HeaderSet::RETH);
        add(self.atomic_eth.is_some(), HeaderSet::ATOMIC_ETH);
        add(self.aeth.is_some(), HeaderSet::AETH);
        add(self.atomic_ack_eth.is_some(), HeaderSet::ATOMIC_ACK_ETH);
        add(self.imm_dt.is_some(), HeaderSet::IMM_DT);
        add(self.ieth.is_some(), HeaderSet::IETH);
        s
    }

    /// Checks that the extension headers are exactly those the opcode
    /// requires (the CNP's reserved bytes need no value) and returns the
    /// opcode's table entry.
    pub fn check(&self) -> Result<&'static OpcodeInfo> {
        let opcode = self.bth.opcode;
        let info = opcode.checked_info()?;
        let want = info.headers.difference(HeaderSet::CNP_RESERVED);
        let have = self.present();
        if want == have {
            return Ok(info);
        }
        for (h, _, name) in HeaderSet::ORDER {
            match (want.contains(h), have.contains(h)) {
                (true, false) => return Err(Error::MissingHeader { opcode: opcode.0, header: name }),
                (false, true) => return Err(Error::ExtraHeader { opcode: opcode.0, header: name }),
                _ => {}
            }
        }
        Ok(info)
    }

    /// BTH plus extension headers, in bytes.
    pub fn header_len(&self) -> Result<usize> {
        Ok(Bth::<&[u8]>::LEN + self.check()?.ext_len())
    }

    /// Writes the BTH and the extension headers into the front of `buf`,
    /// with the pad count for `payload_len`; returns the bytes written.
    pub fn emit_headers(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        self.emit_headers_for(self.check()?, buf, payload_len)
    }

    /// [`Self::emit_headers`] for headers already checked against `info`.
    pub(crate) fn emit_headers_for(&self, info: &OpcodeInfo, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        if !info.has_payload && payload_len != 0 {
            return Err(Error::UnexpectedPayload { opcode: self.bth.opcode.0, len: payload_len });
        }
        let len = Bth::<&[u8]>::LEN + info.ext_len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall { needed: len, available: buf.len() });
        }
        let mut bth = self.bth;
        bth.pad_count = pad_for(payload_len) as u8;
        bth.emit(&mut Bth::new_unchecked(&mut buf[..]));
        let ext = &mut buf[Bth::<&[u8]>::LEN..len];
        let at = |h: HeaderSet| info.headers.offset_of(h).unwrap_or(0);
        if let Some(d) = &self.deth {
            d.emit(&mut Deth::new_unchecked(&mut ext[at(HeaderSet::DETH)..]));
        }
        if let Some(x) = self.xrc_srq {
            XrcEth::new_unchecked(&mut ext[at(HeaderSet::XRCETH)..]).set_xrc_srq(x);
        }
        if let Some(f) = &self.feth {
            f.emit(&mut Feth::new_unchecked(&mut ext[at(HeaderSet::FETH)..]));
        }
        if let Some(r) = &self.reth {
            r.emit(&mut Reth::new_unchecked(&mut ext[at(HeaderSet::RETH)..]));
        }
        if let Some(a) = &self.atomic_eth {
            a.emit(&mut AtomicEth::new_unchecked(&mut ext[at(HeaderSet::ATOMIC_ETH)..]));
        }
        if let Some(a) = &self.aeth {
            a.emit(&mut Aeth::new_unchecked(&mut ext[at(HeaderSet::AETH)..]));
        }
        if let Some(a) = &self.atomic_ack_eth {
            a.emit(&mut AtomicAckEth::new_unchecked(&mut ext[at(HeaderSet::ATOMIC_ACK_ETH)..]));
        }
        if let Some(i) = self.imm_dt {
            ImmDt::new_unchecked(&mut ext[at(HeaderSet::IMM_DT)..]).set_imm(i);
        }
        if let Some(i) = self.ieth {
            Ieth::new_unchecked(&mut ext[at(HeaderSet::IETH)..]).set_rkey(i);
        }
        if let Some(off) = info.headers.offset_of(HeaderSet::CNP_RESERVED) {
            ext[off..off + 16].fill(0);
        }
        Ok(len)
    }

    /// Length of the transport packet (BTH through ICRC) for `payload_len`.
    pub fn packet_len(&self, payload_len: usize) -> Result<usize> {
        Ok(self.header_len()? + payload_len + pad_for(payload_len) + ICRC_LEN)
    }
}

/// Zeroes the pad after a payload that ends at `end` and writes `icrc`
/// after it; returns the end of the packet.
pub(crate) fn finish_with_icrc(
    buf: &mut [u8],
    end: usize,
    payload_len: usize,
    icrc: impl FnOnce(&[u8]) -> u32,
) -> usize {
    let pad = pad_for(payload_len);
    buf[end..end + pad].fill(0);
    let covered = end + pad;
    let value = icrc(&buf[..covered]);
    buf[covered..covered + ICRC_LEN].copy_from_slice(&Icrc::wire_bytes(value));
    covered + ICRC_LEN
}
