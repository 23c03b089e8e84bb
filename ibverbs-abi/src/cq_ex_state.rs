//! The polling state of an extended CQ (`ibv_create_cq_ex`): kept in its
//! [`Cq`](crate::cq::Cq), read by the `ibv_cq_ex` calls (`cq_ex.rs`).
//! Below both, so that neither needs the other for it.

use crate::abi::*;
use rdma_core_rs::WorkCompletion;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::Mutex;

/// How many completions one refill takes from the engine.
pub(crate) const REFILL: usize = 16;

/// A completion and when the library took it from the engine.
#[derive(Clone, Copy)]
pub(crate) struct Stamped<W> {
    pub(crate) wc: W,
    pub(crate) monotonic_ns: u64,
    pub(crate) wallclock_ns: u64,
}

/// The polling state of an extended CQ.
pub struct ExState {
    /// Taken from the engine, not yet handed out.
    pub(crate) pending: Mutex<VecDeque<Stamped<WorkCompletion>>>,
    /// The completion `read_*` read (between start_poll and end_poll).
    pub(crate) current: UnsafeCell<Stamped<ibv_wc>>,
    /// Completions taken per refill, reused.
    pub(crate) scratch: Mutex<Vec<WorkCompletion>>,
    /// The parent domain it was made in (`IBV_CQ_INIT_ATTR_MASK_PD`), whose
    /// use it holds until destroyed, as mlx5 counts it.
    pub(crate) parent_domain: Option<&'static crate::pd::Pd>,
}

// SAFETY: `current` is written and read only by the thread that holds the
// CQ between ibv_start_poll and ibv_end_poll (libibverbs' contract).
unsafe impl Sync for ExState {}

impl ExState {
    pub(crate) fn new(parent_domain: Option<&'static crate::pd::Pd>) -> ExState {
        // SAFETY: plain data, zero is valid.
        let zero: Stamped<ibv_wc> = unsafe { std::mem::zeroed() };
        ExState {
            pending: Mutex::new(VecDeque::new()),
            current: UnsafeCell::new(zero),
            scratch: Mutex::new(Vec::with_capacity(REFILL)),
            parent_domain,
        }
    }

    /// Moves up to `max` pending completions, oldest first, into `out`
    /// (for `ibv_poll_cq` on an extended CQ).
    pub(crate) fn take_pending(&self, out: &mut Vec<WorkCompletion>, max: usize) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        while out.len() < max {
            let Some(s) = p.pop_front() else { break };
            out.push(s.wc);
        }
    }
}
