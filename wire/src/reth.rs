//! RDMA Extended Transport Header (IBTA 9.3.3): target of a WRITE or READ.

use crate::field::*;

header_view!(
    /// A view of a RETH: virtual address, rkey and DMA length.
    Reth, 16, "RETH"
);

impl<T: AsRef<[u8]>> Reth<T> {
    pub fn va(&self) -> u64 {
        u64_at(self.b(), 0)
    }
    pub fn rkey(&self) -> u32 {
        u32_at(self.b(), 8)
    }
    pub fn dma_len(&self) -> u32 {
        u32_at(self.b(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.bm(), 0, v)
    }
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.bm(), 8, v)
    }
    pub fn set_dma_len(&mut self, v: u32) {
        set_u32(self.bm(), 12, v)
    }
}

/// An owned RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// Remote virtual address of the first byte.
    pub va: u64,
    pub rkey: u32,
    /// Length of the whole operation in bytes (not of this packet).
    pub dma_len: u32,
}

impl RethRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &Reth<T>) -> RethRepr {
        RethRepr { va: h.va(), rkey: h.rkey(), dma_len: h.dma_len() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
    }
}
