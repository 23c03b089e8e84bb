//! The two one-word extension headers: Immediate Data (ImmDt, IBTA 9.3.6)
//! and the Invalidate ETH (IETH, IBTA 9.3.7).
//!
//! Both are a single 32-bit value; immediate data is opaque to the
//! transport and is handed to the application as read (network order), as
//! libibverbs does with `imm_data`.

use crate::field::*;

header_view!(
    /// A view of an ImmDt.
    ImmDt, 4, "ImmDt"
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    pub fn imm(&self) -> u32 {
        u32_at(self.b(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    pub fn set_imm(&mut self, v: u32) {
        set_u32(self.bm(), 0, v)
    }
}

header_view!(
    /// A view of an IETH: the rkey the responder invalidates.
    Ieth, 4, "IETH"
);

impl<T: AsRef<[u8]>> Ieth<T> {
    pub fn rkey(&self) -> u32 {
        u32_at(self.b(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.bm(), 0, v)
    }
}
