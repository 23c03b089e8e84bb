//! Datagram Extended Transport Header (IBTA 9.3.2): Q_Key and source QP of a UD packet.

use crate::field::*;

header_view!(
    /// A view of a DETH.
    Deth, 8, "DETH"
);

impl<T: AsRef<[u8]>> Deth<T> {
    pub fn qkey(&self) -> u32 {
        u32_at(self.b(), 0)
    }
    pub fn src_qp(&self) -> u32 {
        u24_at(self.b(), 5)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    pub fn set_qkey(&mut self, v: u32) {
        set_u32(self.bm(), 0, v)
    }
    pub fn set_src_qp(&mut self, v: u32) {
        self.bm()[4] = 0;
        set_u24(self.bm(), 5, v)
    }
}

/// An owned DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// The Q_Key. A key with the high bit set is privileged (IBTA 10.2.4).
    pub qkey: u32,
    pub src_qp: u32,
}

impl DethRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &Deth<T>) -> DethRepr {
        DethRepr { qkey: h.qkey(), src_qp: h.src_qp() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Deth<T>) {
        h.set_qkey(self.qkey);
        h.set_src_qp(self.src_qp);
    }
}
