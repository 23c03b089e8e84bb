//! The one error type of the wire crate: every way a header or packet can be
//! malformed, named precisely enough that a user can see what was wrong.

/// What was wrong with a buffer handed to a parser or an emitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer ends before the header does.
    #[error("{header} truncated: need {needed} bytes, have {available}")]
    Truncated { header: &'static str, needed: usize, available: usize },
    /// A version field holds a value this crate does not speak.
    #[error("{header}: unsupported version {version}")]
    BadVersion { header: &'static str, version: u8 },
    /// The BTH opcode is reserved or of a transport this crate does not implement.
    #[error("unknown opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// A length field disagrees with the bytes that are there.
    #[error("{header}: length field says {claimed} bytes, buffer holds {actual}")]
    LengthMismatch { header: &'static str, claimed: usize, actual: usize },
    /// The BTH pad count is larger than the payload it pads.
    #[error("pad count {pad} exceeds payload length {payload}")]
    BadPadCount { pad: u8, payload: usize },
    /// An opcode that carries no payload arrived with payload bytes.
    #[error("opcode 0x{opcode:02x} carries no payload but {len} bytes follow the headers")]
    UnexpectedPayload { opcode: u8, len: usize },
    /// The next-header / protocol / port field does not lead to the InfiniBand transport.
    #[error("{header}: next header {value:#x} is not the IB transport")]
    NotTransport { header: &'static str, value: u32 },
    /// A header field holds a value the specification forbids.
    #[error("{header}: invalid {field} {value:#x}")]
    InvalidField { header: &'static str, field: &'static str, value: u64 },
    /// An owned representation does not carry the extension headers its opcode requires.
    #[error("opcode 0x{opcode:02x} requires {header} in the transport headers")]
    MissingHeader { opcode: u8, header: &'static str },
    /// An owned representation carries an extension header its opcode does not have.
    #[error("opcode 0x{opcode:02x} does not carry {header}")]
    ExtraHeader { opcode: u8, header: &'static str },
    /// The buffer handed to an emitter is too small for the packet.
    #[error("output buffer too small: need {needed} bytes, have {available}")]
    BufferTooSmall { needed: usize, available: usize },
    /// A payload too large for the length fields of the headers that carry it.
    #[error("payload of {0} bytes does not fit the packet length fields")]
    PayloadTooLarge(usize),
    /// A MAD attribute this crate does not parse for its management class.
    #[error("MAD class 0x{class:02x}: unknown attribute ID 0x{attribute:04x}")]
    UnknownAttribute { class: u8, attribute: u16 },
}

/// The result type of the wire crate.
pub type Result<T> = core::result::Result<T, Error>;

/// Fails with [`Error::Truncated`] unless `buf` holds at least `needed` bytes.
#[inline]
pub(crate) fn check_len(header: &'static str, buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(Error::Truncated { header, needed, available: buf.len() })
    } else {
        Ok(())
    }
}
