//! The BTH opcode table (IBTA vol. 1, table 38 and the RoCE v2 annex).
//!
//! One `const` table says, for each opcode, which extension headers follow
//! the BTH, whether payload follows them and where the packet sits in its
//! message. Header offsets everywhere else are derived from it, never written
//! out per opcode.

use core::fmt;

/// The transport service an opcode belongs to: the top three opcode bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected (prefix 000).
    Rc,
    /// Unreliable Connected (prefix 001).
    Uc,
    /// Unreliable Datagram (prefix 011).
    Ud,
    /// Congestion notification (prefix 100, RoCE v2 CNP).
    Cnp,
    /// Extended Reliable Connected (prefix 101).
    Xrc,
}

impl Transport {
    /// The short upper-case name used in opcode names ("RC", "UD", ...).
    pub const fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
        }
    }

    /// The service's top three opcode bits, in place: RC 0x00, UC 0x20,
    /// UD 0x60, CNP 0x80, XRC 0xA0.
    pub const fn prefix(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x80,
            Transport::Xrc => 0xa0,
        }
    }
}

/// What a packet does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Send,
    RdmaWrite,
    RdmaReadRequest,
    RdmaReadResponse,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    /// FLUSH (IBTA 1.5, annex A19): make a range visible or persistent.
    Flush,
    /// ATOMIC WRITE (IBTA 1.5, annex A19): 8 bytes written as one.
    AtomicWrite,
    /// RoCE v2 congestion notification packet.
    Cnp,
}

/// Where a packet sits in a multi-packet message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    /// Whether this packet starts a message.
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Whether this packet ends a message.
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// A set of extension headers, as bits. The bit order is the order in which
/// the headers follow the BTH on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    pub const EMPTY: HeaderSet = HeaderSet(0);
    /// Reliable Datagram ETH (4 bytes). Only in RD, which nobody ships; kept
    /// so the order table is complete.
    pub const RDETH: HeaderSet = HeaderSet(1 << 0);
    /// Datagram ETH (8 bytes): Q_Key and source QP.
    pub const DETH: HeaderSet = HeaderSet(1 << 1);
    /// XRC ETH (4 bytes): the XRC SRQ number.
    pub const XRCETH: HeaderSet = HeaderSet(1 << 2);
    /// RDMA ETH (16 bytes): virtual address, rkey, DMA length.
    pub const RETH: HeaderSet = HeaderSet(1 << 3);
    /// Atomic ETH (28 bytes): address, rkey, swap/add and compare data.
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 4);
    /// ACK ETH (4 bytes): syndrome and MSN.
    pub const AETH: HeaderSet = HeaderSet(1 << 5);
    /// Atomic ACK ETH (8 bytes): the original remote value.
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 6);
    /// Immediate data (4 bytes).
    pub const IMM_DT: HeaderSet = HeaderSet(1 << 7);
    /// Invalidate ETH (4 bytes): the rkey to invalidate.
    pub const IETH: HeaderSet = HeaderSet(1 << 8);
    /// The 16 reserved bytes of a RoCE v2 CNP.
    pub const CNP_RESERVED: HeaderSet = HeaderSet(1 << 9);
    /// FLUSH ETH (4 bytes): placement type and selectivity level. It comes
    /// before the RETH (rxe_opcode.c: FETH at the end of the BTH, RETH after it).
    pub const FETH: HeaderSet = HeaderSet(1 << 10);

    /// Every extension header in wire order with its length and name.
    pub const ORDER: [(HeaderSet, usize, &'static str); 11] = [
        (HeaderSet::RDETH, 4, "RDETH"),
        (HeaderSet::DETH, 8, "DETH"),
        (HeaderSet::XRCETH, 4, "XRCETH"),
        (HeaderSet::FETH, 4, "FETH"),
        (HeaderSet::RETH, 16, "RETH"),
        (HeaderSet::ATOMIC_ETH, 28, "AtomicETH"),
        (HeaderSet::AETH, 4, "AETH"),
        (HeaderSet::ATOMIC_ACK_ETH, 8, "AtomicAckETH"),
        (HeaderSet::IMM_DT, 4, "ImmDt"),
        (HeaderSet::IETH, 4, "IETH"),
        (HeaderSet::CNP_RESERVED, 16, "CNP reserved"),
    ];

    pub const fn union(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }
    /// The headers of `self` that are not in `other`.
    pub const fn difference(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 & !other.0)
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Total length of these headers.
    pub const fn len(self) -> usize {
        let mut total = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if self.contains(Self::ORDER[i].0) {
                total += Self::ORDER[i].1;
            }
            i += 1;
        }
        total
    }

    /// Offset of `header` from the end of the BTH, if this set holds it.
    pub const fn offset_of(self, header: HeaderSet) -> Option<usize> {
        if !self.contains(header) || header.is_empty() {
            return None;
        }
        let mut off = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if Self::ORDER[i].0 .0 == header.0 {
                return Some(off);
            }
            if self.contains(Self::ORDER[i].0) {
                off += Self::ORDER[i].1;
            }
            i += 1;
        }
        None
    }
}

impl fmt::Debug for HeaderSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut set = f.debug_set();
        for (h, _, name) in HeaderSet::ORDER {
            if self.contains(h) {
                set.entry(&format_args!("{name}"));
            }
        }
        set.finish()
    }
}

/// Everything the table knows about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Name in the IBTA/rxe style, e.g. `RC_RDMA_WRITE_FIRST`.
    pub name: &'static str,
    pub transport: Transport,
    pub operation: Operation,
    pub position: Position,
    /// Extension headers between the BTH and the payload.
    pub headers: HeaderSet,
    /// Whether payload may follow the extension headers.
    pub has_payload: bool,
    /// Whether this is a request of a reliable service, which may set AckReq
    /// and is answered by an ACK, a NAK or a response.
    pub is_request: bool,
    /// Bytes of extension headers after the BTH (`headers.len()`, kept
    /// precomputed because every parse needs it).
    pub ext_len: u8,
}

impl OpcodeInfo {
    /// Bytes of extension headers after the BTH.
    #[inline]
    pub const fn ext_len(&self) -> usize {
        self.ext_len as usize
    }
    /// Whether the packet carries immediate data.
    pub const fn has_immediate(&self) -> bool {
        self.headers.contains(HeaderSet::IMM_DT)
    }
    /// Whether the packet asks the responder to invalidate an rkey.
    pub const fn has_invalidate(&self) -> bool {
        self.headers.contains(HeaderSet::IETH)
    }
}

/// A BTH opcode byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($($name:ident = $code:expr;)*) => {
        impl Opcode { $(pub const $name: Opcode = Opcode($code);)* }
    };
}

// The operation codes of the RC service; UC and XRC reuse the low five bits.
opcodes! {
    RC_SEND_FIRST = 0x00;
    RC_SEND_MIDDLE = 0x01;
    RC_SEND_LAST = 0x02;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03;
    RC_SEND_ONLY = 0x04;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05;
    RC_RDMA_WRITE_FIRST = 0x06;
    RC_RDMA_WRITE_MIDDLE = 0x07;
    RC_RDMA_WRITE_LAST = 0x08;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09;
    RC_RDMA_WRITE_ONLY = 0x0a;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b;
    RC_RDMA_READ_REQUEST = 0x0c;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e;
    RC_RDMA_READ_RESPONSE_LAST = 0x0f;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10;
    RC_ACKNOWLEDGE = 0x11;
    RC_ATOMIC_ACKNOWLEDGE = 0x12;
    RC_COMPARE_SWAP = 0x13;
    RC_FETCH_ADD = 0x14;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17;
    RC_FLUSH = 0x1c;
    RC_ATOMIC_WRITE = 0x1d;
    UC_SEND_FIRST = 0x20;
    UC_SEND_MIDDLE = 0x21;
    UC_SEND_LAST = 0x22;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23;
    UC_SEND_ONLY = 0x24;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25;
    UC_RDMA_WRITE_FIRST = 0x26;
    UC_RDMA_WRITE_MIDDLE = 0x27;
    UC_RDMA_WRITE_LAST = 0x28;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29;
    UC_RDMA_WRITE_ONLY = 0x2a;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b;
    UD_SEND_ONLY = 0x64;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65;
    CNP = 0x81;
    XRC_SEND_FIRST = 0xa0;
    XRC_SEND_ONLY = 0xa4;
    XRC_RDMA_WRITE_ONLY = 0xaa;
    XRC_RDMA_READ_REQUEST = 0xac;
    XRC_ACKNOWLEDGE = 0xb1;
    XRC_ATOMIC_ACKNOWLEDGE = 0xb2;
}

/// The operation half of the table: the low five bits as the RC service
/// defines them. `None` marks reserved codes.
const fn rc_operation(low: u8) -> Option<(&'static str, Operation, Position, HeaderSet, bool, bool)> {
    use Operation::*;
    use Position::*;
    const E: HeaderSet = HeaderSet::EMPTY;
    const IMM: HeaderSet = HeaderSet::IMM_DT;
    const RETH: HeaderSet = HeaderSet::RETH;
    // (suffix, operation, position, headers, has_payload, is_request)
    Some(match low {
        0x00 => ("SEND_FIRST", Send, First, E, true, true),
        0x01 => ("SEND_MIDDLE", Send, Middle, E, true, true),
        0x02 => ("SEND_LAST", Send, Last, E, true, true),
        0x03 => ("SEND_LAST_WITH_IMMEDIATE", Send, Last, IMM, true, true),
        0x04 => ("SEND_ONLY", Send, Only, E, true, true),
        0x05 => ("SEND_ONLY_WITH_IMMEDIATE", Send, Only, IMM, true, true),
        0x06 => ("RDMA_WRITE_FIRST", RdmaWrite, First, RETH, true, true),
        0x07 => ("RDMA_WRITE_MIDDLE", RdmaWrite, Middle, E, true, true),
        0x08 => ("RDMA_WRITE_LAST", RdmaWrite, Last, E, true, true),
        0x09 => ("RDMA_WRITE_LAST_WITH_IMMEDIATE", RdmaWrite, Last, IMM, true, true),
        0x0a => ("RDMA_WRITE_ONLY", RdmaWrite, Only, RETH, true, true),
        0x0b => ("RDMA_WRITE_ONLY_WITH_IMMEDIATE", RdmaWrite, Only, RETH.union(IMM), true, true),
        0x0c => ("RDMA_READ_REQUEST", RdmaReadRequest, Only, RETH, false, true),
        0x0d => ("RDMA_READ_RESPONSE_FIRST", RdmaReadResponse, First, HeaderSet::AETH, true, false),
        0x0e => ("RDMA_READ_RESPONSE_MIDDLE", RdmaReadResponse, Middle, E, true, false),
        0x0f => ("RDMA_READ_RESPONSE_LAST", RdmaReadResponse, Last, HeaderSet::AETH, true, false),
        0x10 => ("RDMA_READ_RESPONSE_ONLY", RdmaReadResponse, Only, HeaderSet::AETH, true, false),
        0x11 => ("ACKNOWLEDGE", Acknowledge, Only, HeaderSet::AETH, false, false),
        0x12 => (
            "ATOMIC_ACKNOWLEDGE",
            AtomicAcknowledge,
            Only,
            HeaderSet::AETH.union(HeaderSet::ATOMIC_ACK_ETH),
            false,
            false,
        ),
        0x13 => ("COMPARE_SWAP", CompareSwap, Only, HeaderSet::ATOMIC_ETH, false, true),
        0x14 => ("FETCH_ADD", FetchAdd, Only, HeaderSet::ATOMIC_ETH, false, true),
        0x16 => ("SEND_LAST_WITH_INVALIDATE", Send, Last, HeaderSet::IETH, true, true),
        0x17 => ("SEND_ONLY_WITH_INVALIDATE", Send, Only, HeaderSet::IETH, true, true),
        // IBTA 1.5 annex A19 (include/rdma/ib_pack.h, rxe_opcode.c): FLUSH
        // carries FETH and RETH and no payload; ATOMIC WRITE a RETH and 8
        // bytes of payload. Both are answered by an RDMA READ RESPONSE ONLY
        // without payload.
        0x1c => ("FLUSH", Flush, Only, HeaderSet::FETH.union(RETH), false, true),
        0x1d => ("ATOMIC_WRITE", AtomicWrite, Only, RETH, true, true),
        _ => return None,
    })
}

/// Builds the table entry for one opcode byte.
const fn build(code: u8) -> Option<OpcodeInfo> {
    let low = code & 0x1f;
    let (transport, extra) = match code >> 5 {
        0b000 => (Transport::Rc, HeaderSet::EMPTY),
        0b001 => (Transport::Uc, HeaderSet::EMPTY),
        0b011 => (Transport::Ud, HeaderSet::DETH),
        0b100 => (Transport::Cnp, HeaderSet::EMPTY),
        0b101 => (Transport::Xrc, HeaderSet::XRCETH),
        _ => return None,
    };
    if let Transport::Cnp = transport {
        if low != 0x01 {
            return None;
        }
        return Some(OpcodeInfo {
            name: "CNP",
            transport,
            operation: Operation::Cnp,
            position: Position::Only,
            headers: HeaderSet::CNP_RESERVED,
            has_payload: false,
            is_request: false,
            ext_len: HeaderSet::CNP_RESERVED.len() as u8,
        });
    }
    let (_suffix, operation, position, headers, has_payload, is_request) = match rc_operation(low) {
        Some(op) => op,
        None => return None,
    };
    // Which RC operations the other services have (IBTA table 38).
    let allowed = match transport {
        Transport::Uc => {
            matches!(operation, Operation::Send | Operation::RdmaWrite) && !headers.contains(HeaderSet::IETH)
        }
        Transport::Ud => low == 0x04 || low == 0x05,
        // Linux defines FLUSH and ATOMIC WRITE for RC only (ib_pack.h).
        Transport::Xrc => !matches!(operation, Operation::Flush | Operation::AtomicWrite),
        _ => true,
    };
    if !allowed {
        return None;
    }
    // XRC requests carry the XRCETH; its responses and ACKs do not.
    let extra = if matches!(transport, Transport::Xrc) && !is_request { HeaderSet::EMPTY } else { extra };
    let headers = headers.union(extra);
    Some(OpcodeInfo {
        name: NAMES[code as usize],
        transport,
        operation,
        position,
        headers,
        has_payload,
        is_request: is_request && matches!(transport, Transport::Rc | Transport::Xrc),
        ext_len: headers.len() as u8,
    })
}

/// Full names, indexed by opcode (empty for reserved codes).
static NAMES: [&str; 256] = {
    let mut names = [""; 256];
    macro_rules! name { ($($code:expr => $n:expr),* $(,)?) => { $(names[$code] = $n;)* }; }
    name! {
        0x00 => "RC_SEND_FIRST", 0x01 => "RC_SEND_MIDDLE", 0x02 => "RC_SEND_LAST",
        0x03 => "RC_SEND_LAST_WITH_IMMEDIATE", 0x04 => "RC_SEND_ONLY", 0x05 => "RC_SEND_ONLY_WITH_IMMEDIATE",
        0x06 => "RC_RDMA_WRITE_FIRST", 0x07 => "RC_RDMA_WRITE_MIDDLE", 0x08 => "RC_RDMA_WRITE_LAST",
        0x09 => "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 0x0a => "RC_RDMA_WRITE_ONLY",
        0x0b => "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 0x0c => "RC_RDMA_READ_REQUEST",
        0x0d => "RC_RDMA_READ_RESPONSE_FIRST", 0x0e => "RC_RDMA_READ_RESPONSE_MIDDLE",
        0x0f => "RC_RDMA_READ_RESPONSE_LAST", 0x10 => "RC_RDMA_READ_RESPONSE_ONLY",
        0x11 => "RC_ACKNOWLEDGE", 0x12 => "RC_ATOMIC_ACKNOWLEDGE", 0x13 => "RC_COMPARE_SWAP",
        0x14 => "RC_FETCH_ADD", 0x16 => "RC_SEND_LAST_WITH_INVALIDATE", 0x17 => "RC_SEND_ONLY_WITH_INVALIDATE",
        0x1c => "RC_FLUSH", 0x1d => "RC_ATOMIC_WRITE",
        0x20 => "UC_SEND_FIRST", 0x21 => "UC_SEND_MIDDLE", 0x22 => "UC_SEND_LAST",
        0x23 => "UC_SEND_LAST_WITH_IMMEDIATE", 0x24 => "UC_SEND_ONLY", 0x25 => "UC_SEND_ONLY_WITH_IMMEDIATE",
        0x26 => "UC_RDMA_WRITE_FIRST", 0x27 => "UC_RDMA_WRITE_MIDDLE", 0x28 => "UC_RDMA_WRITE_LAST",
        0x29 => "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 0x2a => "UC_RDMA_WRITE_ONLY",
        0x2b => "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        0x64 => "UD_SEND_ONLY", 0x65 => "UD_SEND_ONLY_WITH_IMMEDIATE",
        0x81 => "CNP",
        0xa0 => "XRC_SEND_FIRST", 0xa1 => "XRC_SEND_MIDDLE", 0xa2 => "XRC_SEND_LAST",
        0xa3 => "XRC_SEND_LAST_WITH_IMMEDIATE", 0xa4 => "XRC_SEND_ONLY", 0xa5 => "XRC_SEND_ONLY_WITH_IMMEDIATE",
        0xa6 => "XRC_RDMA_WRITE_FIRST", 0xa7 => "XRC_RDMA_WRITE_MIDDLE", 0xa8 => "XRC_RDMA_WRITE_LAST",
        0xa9 => "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 0xaa => "XRC_RDMA_WRITE_ONLY",
        0xab => "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 0xac => "XRC_RDMA_READ_REQUEST",
        0xad => "XRC_RDMA_READ_RESPONSE_FIRST", 0xae => "XRC_RDMA_READ_RESPONSE_MIDDLE",
        0xaf => "XRC_RDMA_READ_RESPONSE_LAST", 0xb0 => "XRC_RDMA_READ_RESPONSE_ONLY",
        0xb1 => "XRC_ACKNOWLEDGE", 0xb2 => "XRC_ATOMIC_ACKNOWLEDGE", 0xb3 => "XRC_COMPARE_SWAP",
        0xb4 => "XRC_FETCH_ADD", 0xb6 => "XRC_SEND_LAST_WITH_INVALIDATE", 0xb7 => "XRC_SEND_ONLY_WITH_INVALIDATE",
    }
    names
};

/// The opcode table, one entry per opcode byte.
pub static OPCODE_TABLE: [Option<OpcodeInfo>; 256] = {
    let mut table = [None; 256];
    let mut code = 0;
    while code < 256 {
        table[code] = build(code as u8);
        code += 1;
    }
    table
};

impl Opcode {
    /// This RC opcode on another service: UC and XRC reuse RC's operation
    /// codes (the low five bits) under their own prefix.
    #[inline]
    pub const fn on(self, service: Transport) -> Opcode {
        Opcode(service.prefix() | self.0)
    }

    /// The table entry, or `None` for a reserved or unimplemented opcode.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        OPCODE_TABLE[self.0 as usize].as_ref()
    }

    /// The table entry, or [`crate::Error::UnknownOpcode`].
    #[inline]
    pub fn checked_info(self) -> crate::Result<&'static OpcodeInfo> {
        self.info().ok_or(crate::Error::UnknownOpcode(self.0))
    }

    /// The name, or `"UNKNOWN"`.
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |i| i.name)
    }

    /// Every opcode this crate knows, in numeric order.
    pub fn all() -> impl Iterator<Item = (Opcode, &'static OpcodeInfo)> {
        OPCODE_TABLE.iter().enumerate().filter_map(|(c, i)| i.as_ref().map(|i| (Opcode(c as u8), i)))
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(0x{:02x})", self.name(), self.0)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_table_entries() {
        for (op, info) in Opcode::all() {
            assert!(!info.name.is_empty(), "opcode {op:?} has no name");
            assert!(info.name.starts_with(info.transport.name()), "{}", info.name);
        }
        // Every named opcode is in the table and vice versa.
        let named = NAMES.iter().filter(|n| !n.is_empty()).count();
        assert_eq!(named, Opcode::all().count());
    }

    #[test]
    fn full_names_end_in_the_operation_name() {
        for (op, info) in Opcode::all() {
            if let Some((suffix, ..)) = rc_operation(op.0 & 0x1f) {
                if info.transport != Transport::Cnp {
                    assert_eq!(info.name, format!("{}_{}", info.transport.name(), suffix));
                }
            }
        }
    }

    #[test]
    fn header_sets_follow_ibta_table_38() {
        let h = |c: u8| Opcode(c).info().unwrap().headers;
        assert_eq!(h(0x0b), HeaderSet::RETH.union(HeaderSet::IMM_DT));
        assert_eq!(h(0x12), HeaderSet::AETH.union(HeaderSet::ATOMIC_ACK_ETH));
        assert_eq!(h(0x65), HeaderSet::DETH.union(HeaderSet::IMM_DT));
        assert_eq!(h(0xaa), HeaderSet::XRCETH.union(HeaderSet::RETH));
        assert_eq!(h(0xb1), HeaderSet::AETH);
        assert_eq!(h(0x81).len(), 16);
        assert_eq!(Opcode(0x13).info().unwrap().ext_len(), 28);
        assert!(!Opcode(0x0c).info().unwrap().has_payload);
        // IBTA 1.5: FLUSH is BTH + FETH + RETH, ATOMIC WRITE is BTH + RETH + 8 bytes.
        let flush = Opcode::RC_FLUSH.info().unwrap();
        assert_eq!(flush.headers, HeaderSet::FETH.union(HeaderSet::RETH));
        assert_eq!(flush.headers.offset_of(HeaderSet::FETH), Some(0));
        assert_eq!(flush.headers.offset_of(HeaderSet::RETH), Some(4));
        assert_eq!((flush.ext_len(), flush.has_payload, flush.is_request), (20, false, true));
        let aw = Opcode::RC_ATOMIC_WRITE.info().unwrap();
        assert_eq!((aw.headers, aw.ext_len(), aw.has_payload, aw.is_request), (HeaderSet::RETH, 16, true, true));
        assert_eq!((flush.name, aw.name), ("RC_FLUSH", "RC_ATOMIC_WRITE"));
    }

    #[test]
    fn services_reuse_rc_codes_under_their_prefix() {
        assert_eq!(Opcode::RC_SEND_FIRST.on(Transport::Uc), Opcode::UC_SEND_FIRST);
        assert_eq!(Opcode::RC_RDMA_WRITE_ONLY.on(Transport::Xrc), Opcode::XRC_RDMA_WRITE_ONLY);
        assert_eq!(Opcode::RC_ACKNOWLEDGE.on(Transport::Xrc), Opcode::XRC_ACKNOWLEDGE);
        for (op, info) in Opcode::all() {
            assert_eq!(op.0 & 0xe0, info.transport.prefix(), "{}", info.name);
        }
    }

    #[test]
    fn offsets_follow_wire_order() {
        let set = HeaderSet::DETH.union(HeaderSet::IMM_DT);
        assert_eq!(set.offset_of(HeaderSet::DETH), Some(0));
        assert_eq!(set.offset_of(HeaderSet::IMM_DT), Some(8));
        let set = HeaderSet::RETH.union(HeaderSet::IMM_DT).union(HeaderSet::XRCETH);
        assert_eq!(set.offset_of(HeaderSet::XRCETH), Some(0));
        assert_eq!(set.offset_of(HeaderSet::RETH), Some(4));
        assert_eq!(set.offset_of(HeaderSet::IMM_DT), Some(20));
        assert_eq!(set.offset_of(HeaderSet::AETH), None);
    }

    #[test]
    fn services_have_only_their_operations() {
        assert!(Opcode(0x2c).info().is_none(), "UC has no RDMA READ");
        assert!(Opcode(0x36).info().is_none(), "UC has no SEND with invalidate");
        assert!(Opcode(0x60).info().is_none(), "UD has only SEND_ONLY");
        assert!(Opcode(0x15).info().is_none(), "0x15 is reserved");
        assert!(Opcode(0x3c).info().is_none() && Opcode(0x3d).info().is_none(), "UC has no FLUSH/ATOMIC WRITE");
        assert!(Opcode(0xbc).info().is_none() && Opcode(0xbd).info().is_none(), "nor XRC, in Linux");
        assert!(Opcode(0x40).info().is_none(), "RD is not implemented");
        assert!(Opcode(0x80).info().is_none(), "only 0x81 of the CNP range");
        assert!(!Opcode(0x24).info().unwrap().is_request, "UC is never ACKed");
        assert!(Opcode(0x04).info().unwrap().is_request);
        assert!(!Opcode(0x11).info().unwrap().is_request);
    }
}
