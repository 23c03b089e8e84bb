//! How a side cuts its memory region into slots and buffers ([`Layout`]).
//!
//! Without `--verify` the slots of a bandwidth test share perftest's
//! buffers, as ib_write_bw and its siblings lay them out: a message over
//! half a page uses one buffer per QP for every message, smaller ones
//! cycle through one page. The figures then compare with perftest's and
//! with the raw UDP baselines, which also send from one buffer. With
//! `--verify` every message in flight has its own slot, to be checked.
//!
//! perftest's buffer cycling ([`cycle_slots`], [`stride`]) is here because
//! both layouts follow it; the layout facing a perftest peer is
//! [`super::perftest::layout`].

use super::Config;

/// Memory a side registers at most for its slots (per QP it is less).
const SLOT_MEMORY: usize = 64 << 20;

/// What this side announces as its cycle buffer (the page size) and cache line.
pub const CYCLE_BUFFER: u32 = 4096;
pub const CACHE_LINE: u32 = 64;

/// How a side cuts its region: `slots` slots of `slot_len` bytes per QP,
/// in `buffers` distinct buffers (slot `s` is buffer `s % buffers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub slots: usize,
    pub slot_len: usize,
    pub buffers: usize,
}

/// The layout of `cfg`'s own protocol: a slot per message in flight, and
/// a buffer each with `--verify` or in a latency test; perftest's buffers
/// otherwise (see the module's comment).
pub fn layout(cfg: &Config) -> Layout {
    let slots = slots_for(cfg);
    let slot_len = cfg.size.max(8);
    let buffers = if cfg.verify || cfg.test.is_latency() {
        slots
    } else {
        cycle_slots(slot_len, CYCLE_BUFFER as usize, 1).min(slots)
    };
    Layout { slots, slot_len, buffers }
}

/// Slots per QP: a message in flight each, within the memory budget.
pub fn slots_for(cfg: &Config) -> usize {
    if cfg.test.is_latency() {
        return 2; // slot 0 is what this side sends from, slot 1 what the peer fills
    }
    let slot_len = cfg.size.max(8);
    let budget = (SLOT_MEMORY / cfg.qps / slot_len).max(1);
    cfg.tx_depth.min(budget).max(1)
}

/// perftest's `INC`: `size` rounded up to a whole number of cache lines.
pub fn stride(size: usize, cache_line: usize) -> usize {
    size.div_ceil(cache_line.max(1)) * cache_line.max(1)
}

/// How many targets a perftest client cycles through in the peer's buffer
/// (`increase_rem_addr`): the messages that fit the cycle buffer, one if a
/// message is more than half of it.
pub fn cycle_slots(size: usize, cycle_buffer: usize, cache_line: usize) -> usize {
    if size <= cycle_buffer / 2 {
        (cycle_buffer / stride(size, cache_line)).max(1)
    } else {
        1
    }
}
