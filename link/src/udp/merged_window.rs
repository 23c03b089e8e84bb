//! Whether a datagram read from a shared port's socket may have been
//! merged by UDP GRO without saying so (docs/shared-device.md): a window
//! that a change of GRO to off opens and a drain of the socket closes.

use super::sys::SOCKET_BUFFER;

/// The window in which a datagram may be merged without saying so: from
/// the moment a shared port's member turns UDP GRO off
/// ([`crate::share::Member::gro_offs`] counts it, odd while it happens)
/// until the socket is found drained after the change, or more bytes than
/// it could hold at the change were read (a receiver that never catches up
/// would otherwise look for runs in every packet: about 2-4 us for one of
/// 4 KiB).
#[derive(Debug, Default)]
pub(super) struct MergedWindow {
    /// The count (even) that the socket was last drained after.
    drained_at: u64,
    /// Bytes read since the count became `read_at` (reset when it moves:
    /// a second change opens the window again, for as much as before).
    read: usize,
    read_at: u64,
}

impl MergedWindow {
    /// Whether datagrams of `bytes` (counted only while the window is
    /// open: every receive asks), read when the count was `now`, may be
    /// merged without saying so.
    pub(super) fn maybe_merged(&mut self, now: u64, bytes: impl FnOnce() -> usize) -> bool {
        if now == self.drained_at {
            return false;
        }
        if now != self.read_at {
            (self.read, self.read_at) = (0, now);
        }
        // The kernel charges a socket up to twice its buffer's setting, and
        // at least a datagram's length for each: past that, nothing read is
        // from before the change (the batch that crosses it may be).
        if now % 2 == 0 && self.read > 2 * SOCKET_BUFFER {
            self.drained(now);
            return false;
        }
        self.read += bytes();
        true
    }

    /// A read that began when the count was `before` found the socket
    /// drained: it read every datagram merged before the changes that
    /// count had finished (while one is under way, odd, a datagram may
    /// still be merged and queued after it).
    pub(super) fn drained(&mut self, before: u64) {
        self.drained_at = before & !1;
    }
}

#[cfg(test)]
mod tests {
    use super::{MergedWindow, SOCKET_BUFFER};

    /// The window opens when the count moves, survives a drain that began
    /// while the change was under way, closes at a drain after it, and
    /// closes too once more than a full socket was read.
    #[test]
    fn the_merged_window_closes_only_after_a_drain_that_follows_the_change() {
        let mut w = MergedWindow::default();
        assert!(!w.maybe_merged(0, || 100), "GRO never went off");
        assert!(w.maybe_merged(1, || 100), "going off");
        w.drained(1);
        assert!(w.maybe_merged(2, || 100), "a drain begun while it went off may have missed a merged datagram");
        w.drained(2);
        assert!(!w.maybe_merged(2, || 100), "drained after the change");
        let full = 2 * SOCKET_BUFFER;
        assert!(w.maybe_merged(4, || full), "as much as the socket holds may still be from before");
        assert!(w.maybe_merged(6, || 100), "a second change: the window opens again for as much");
        assert!(w.maybe_merged(6, || full), "the batch that crosses a full socket may hold some from before");
        assert!(!w.maybe_merged(6, || 1), "past it, nothing is");
        assert!(!w.maybe_merged(6, || 100), "closed until the count moves again");
    }
}
