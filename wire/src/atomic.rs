//! The atomic headers (IBTA 9.3.3.2 and 9.3.5): the AtomicETH of a
//! CMP_SWP / FETCH_ADD request and the AtomicAckETH of its response.
//! All values are big-endian on the wire, as every other field.

use crate::field::*;

header_view!(
    /// A view of an AtomicETH: address, rkey, swap (or add) and compare data.
    AtomicEth, 28, "AtomicETH"
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    pub fn va(&self) -> u64 {
        u64_at(self.b(), 0)
    }
    pub fn rkey(&self) -> u32 {
        u32_at(self.b(), 8)
    }
    /// Swap value (CMP_SWP) or addend (FETCH_ADD).
    pub fn swap_add(&self) -> u64 {
        u64_at(self.b(), 12)
    }
    /// Compare value (CMP_SWP only).
    pub fn compare(&self) -> u64 {
        u64_at(self.b(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.bm(), 0, v)
    }
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.bm(), 8, v)
    }
    pub fn set_swap_add(&mut self, v: u64) {
        set_u64(self.bm(), 12, v)
    }
    pub fn set_compare(&mut self, v: u64) {
        set_u64(self.bm(), 20, v)
    }
}

/// An owned AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Remote address; must be 8-byte aligned (checked by the responder).
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

impl AtomicEthRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> AtomicEthRepr {
        AtomicEthRepr { va: h.va(), rkey: h.rkey(), swap_add: h.swap_add(), compare: h.compare() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }
}

header_view!(
    /// A view of an AtomicAckETH: the value the target held before the atomic.
    AtomicAckEth, 8, "AtomicAckETH"
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    pub fn orig(&self) -> u64 {
        u64_at(self.b(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    pub fn set_orig(&mut self, v: u64) {
        set_u64(self.bm(), 0, v)
    }
}

/// An owned AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    pub orig: u64,
}

impl AtomicAckEthRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicAckEth<T>) -> AtomicAckEthRepr {
        AtomicAckEthRepr { orig: h.orig() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEth<T>) {
        h.set_orig(self.orig);
    }
}
