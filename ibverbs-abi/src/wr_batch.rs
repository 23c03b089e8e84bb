//! One `ibv_wr_start` .. `ibv_wr_complete` batch of the extended QP's
//! posting API (`qp_ex.rs`), kept in each QP (`qp.rs`): a type of its own
//! so that the QP holds it without depending on the posting functions.

use libc::c_int;
use rdma_core_rs::SendWr;

/// The requests of one `ibv_wr_start` .. `ibv_wr_complete`.
#[derive(Default)]
pub struct Batch {
    pub(crate) open: bool,
    pub(crate) wrs: Vec<SendWr>,
    /// The first mistake in the batch: `ibv_wr_complete` returns it.
    pub(crate) error: Option<c_int>,
}

impl Batch {
    pub(crate) fn fail(&mut self, errno: c_int, why: &str) {
        tracing::debug!(errno, why, "ibv_wr_* batch refused");
        self.error.get_or_insert(errno);
    }
}
