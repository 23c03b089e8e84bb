//! Recycling of work-request buffers: the scatter/gather lists and
//! inline data of finished requests are kept for the engine's copies of
//! new ones ([`crate::Endpoint::post_send_copy`] and its kin), so that
//! posting allocates nothing in steady state. (The SRQ table keeps a pool
//! of its own for the receives posted to SRQs, which any engine may take:
//! [`crate::srq::SrqTable::post_copy`].)

use crate::wr::Sge;

/// Spare scatter/gather lists of finished work requests, for the copies
/// of new ones: posting then allocates nothing in steady state.
#[derive(Debug, Default)]
pub(crate) struct SgePool {
    spare: Vec<Vec<Sge>>,
}

impl SgePool {
    /// A copy of `sges` in a spare list if there is one.
    pub(crate) fn copy(&mut self, sges: &[Sge]) -> Vec<Sge> {
        let mut v = self.spare.pop().unwrap_or_default();
        v.extend_from_slice(sges);
        v
    }

    /// Keeps the list of a finished work request for reuse.
    pub(crate) fn recycle(&mut self, mut sges: Vec<Sge>) {
        if self.spare.len() < SPARE_SGES && sges.capacity() <= SPARE_SGE_CAPACITY {
            sges.clear();
            self.spare.push(sges);
        }
    }
}

/// Spare buffers of finished work requests, an engine's.
#[derive(Debug, Default)]
pub(crate) struct WrPool {
    /// Scatter/gather lists of its QPs' own finished work requests.
    sges: SgePool,
    /// The same for the inline data of finished requests.
    spare_inline: Vec<Vec<u8>>,
    /// Scatter lists of receives taken from an SRQ and finished, which
    /// belong to the SRQ table's spare lists: handed over at this engine's
    /// next take from an SRQ ([`crate::srq::SrqTable::take`]), under the
    /// table's lock, which that take holds anyway.
    pub(crate) srq_finished: Vec<Vec<Sge>>,
}

/// Spare scatter/gather lists kept, and the longest list kept.
const SPARE_SGES: usize = 4096;
const SPARE_SGE_CAPACITY: usize = 16;
/// Spare inline buffers kept, and the largest kept.
const SPARE_INLINE: usize = 1024;
const SPARE_INLINE_CAPACITY: usize = 1024;

impl WrPool {
    /// A copy of `sges` in a spare list if there is one.
    pub(crate) fn copy_sges(&mut self, sges: &[Sge]) -> Vec<Sge> {
        self.sges.copy(sges)
    }

    /// A copy of inline data in a spare buffer if there is one.
    pub(crate) fn copy_inline(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = self.spare_inline.pop().unwrap_or_default();
        v.extend_from_slice(data);
        v
    }

    /// Keeps the list of a finished work request for reuse.
    pub(crate) fn recycle(&mut self, sges: Vec<Sge>) {
        self.sges.recycle(sges);
    }

    /// Keeps the inline data buffer of a finished work request for reuse.
    pub(crate) fn recycle_inline(&mut self, mut data: Vec<u8>) {
        if self.spare_inline.len() < SPARE_INLINE && data.capacity() <= SPARE_INLINE_CAPACITY {
            data.clear();
            self.spare_inline.push(data);
        }
    }
}
