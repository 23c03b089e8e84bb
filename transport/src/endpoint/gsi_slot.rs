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
    /// The GSI, when made, only relays MADs to another engine's
    /// ([`super::Endpoint::relay_mads`]).
    relay: bool,
}

impl GsiSlot {
    pub(super) fn new(first_tid: u64) -> GsiSlot {
        GsiSlot { gsi: None, first_tid, relay: false }
    }

    /// QP1, made now if it was not.
    pub(super) fn get(&mut self) -> &mut Gsi {
        let (first, relay) = (self.first_tid, self.relay);
        self.gsi.get_or_insert_with(|| Box::new(if relay { Gsi::relay() } else { Gsi::with_first_tid(first) }))
    }

    /// The GSI only relays, from now on.
    pub(super) fn set_relay(&mut self) {
        self.relay = true;
        if let Some(g) = &mut self.gsi {
            g.set_relay();
        }
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
