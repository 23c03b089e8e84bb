//! QP1 of the device, made by the first MAD sent or received: most
//! devices never see one, and the GSI's tables are not small.

use crate::gsi::Gsi;

#[derive(Debug)]
pub(super) struct GsiSlot {
    gsi: Option<Box<Gsi>>,
    /// Where the GSI's own transaction IDs start: drawn at random, as the
    /// kernel's MAD agents put an agent number in the high half, so that
    /// ours do not meet the IDs a peer chose (which our responses echo).
    first_tid: u64,
}

impl GsiSlot {
    pub(super) fn new(first_tid: u64) -> GsiSlot {
        GsiSlot { gsi: None, first_tid }
    }

    /// QP1, made now if it was not.
    pub(super) fn get(&mut self) -> &mut Gsi {
        let first = self.first_tid;
        self.gsi.get_or_insert_with(|| Box::new(Gsi::with_first_tid(first)))
    }

    /// QP1, if it was made.
    pub(super) fn made(&self) -> Option<&Gsi> {
        self.gsi.as_deref()
    }

    /// QP1, if it was made.
    pub(super) fn made_mut(&mut self) -> Option<&mut Gsi> {
        self.gsi.as_deref_mut()
    }
}
