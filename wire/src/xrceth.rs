//! XRC Extended Transport Header (IBTA annex A14): the target XRC SRQ.

use crate::field::*;

header_view!(
    /// A view of an XRCETH.
    XrcEth, 4, "XRCETH"
);

impl<T: AsRef<[u8]>> XrcEth<T> {
    pub fn xrc_srq(&self) -> u32 {
        u24_at(self.b(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> XrcEth<T> {
    pub fn set_xrc_srq(&mut self, v: u32) {
        self.bm()[0] = 0;
        set_u24(self.bm(), 1, v)
    }
}
