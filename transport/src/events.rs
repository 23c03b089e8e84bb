//! Asynchronous events (`ibv_get_async_event`), as [`crate::Endpoint::poll_event`] returns them.

use crate::qp::{CqId, SrqId};

/// Asynchronous events (`ibv_get_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// An SRQ fell below its limit.
    SrqLimitReached(SrqId),
    /// A QP entered the error state.
    QpFatal(u32),
    /// A completion queue overflowed (`IBV_EVENT_CQ_ERR`): a completion was
    /// lost, the CQ takes no more, and the QPs that use it went to the
    /// error state.
    CqError(CqId),
}
