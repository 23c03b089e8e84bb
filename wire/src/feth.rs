//! The FLUSH Extended Transport Header (FETH, IBTA 1.5 annex A19, in Linux
//! rxe since 6.2): one big-endian 32-bit word after the BTH of an RC FLUSH
//! request, before its RETH.
//!
//! ```text
//! bits 31..6   reserved (sent as zero)
//! bits  5..4   selectivity level: 0 = the RETH's range, 1 = the whole region
//! bits  3..0   placement type: bit 0 global visibility, bit 1 persistence
//! ```
//!
//! Layout and values as `include/uapi/rdma/ib_user_verbs.h`
//! (`ib_placement_type`, `ib_selectivity_level`) and
//! `drivers/infiniband/sw/rxe/rxe_hdr.h` (`FETH_PLT_MASK`, `FETH_SEL_MASK`)
//! define them.

use crate::field::*;

/// Placement type bit: make the data globally visible (`IB_FLUSH_GLOBAL`).
pub const PLACEMENT_GLOBAL: u8 = 1 << 0;
/// Placement type bit: make the data persistent (`IB_FLUSH_PERSISTENT`).
pub const PLACEMENT_PERSISTENT: u8 = 1 << 1;
/// Selectivity level: the range the RETH names (`IB_FLUSH_RANGE`).
pub const SELECTIVITY_RANGE: u8 = 0;
/// Selectivity level: the whole memory region of the RETH's rkey (`IB_FLUSH_MR`).
pub const SELECTIVITY_MR: u8 = 1;

const PLT_MASK: u32 = 0x0f;
const SEL_MASK: u32 = 0x30;
const SEL_SHIFT: u32 = 4;

header_view!(
    /// A view of a FETH: placement type and selectivity level.
    Feth, 4, "FETH"
);

impl<T: AsRef<[u8]>> Feth<T> {
    /// The whole word, reserved bits included.
    pub fn bits(&self) -> u32 {
        u32_at(self.b(), 0)
    }
    /// The placement type (4 bits): [`PLACEMENT_GLOBAL`], [`PLACEMENT_PERSISTENT`].
    pub fn placement(&self) -> u8 {
        (self.bits() & PLT_MASK) as u8
    }
    /// The selectivity level (2 bits): [`SELECTIVITY_RANGE`], [`SELECTIVITY_MR`].
    pub fn selectivity(&self) -> u8 {
        ((self.bits() & SEL_MASK) >> SEL_SHIFT) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Writes both fields; the reserved bits become zero.
    pub fn set(&mut self, placement: u8, selectivity: u8) {
        let v = (u32::from(placement) & PLT_MASK) | ((u32::from(selectivity) << SEL_SHIFT) & SEL_MASK);
        set_u32(self.bm(), 0, v)
    }
}

/// An owned FETH. Only the low 4 bits of `placement` and the low 2 bits
/// of `selectivity` go on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FethRepr {
    pub placement: u8,
    pub selectivity: u8,
}

impl FethRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &Feth<T>) -> FethRepr {
        FethRepr { placement: h.placement(), selectivity: h.selectivity() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Feth<T>) {
        h.set(self.placement, self.selectivity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_where_rxe_puts_them() {
        let mut b = [0xffu8; 4];
        Feth::new_unchecked(&mut b[..]).set(PLACEMENT_GLOBAL | PLACEMENT_PERSISTENT, SELECTIVITY_MR);
        assert_eq!(b, [0, 0, 0, 0x13]);
        let h = Feth::new_checked(&[0xff, 0xff, 0xff, 0xe6][..]).unwrap();
        assert_eq!((h.placement(), h.selectivity()), (6, 2));
        assert!(Feth::new_checked(&[0u8; 3][..]).is_err());
    }
}
