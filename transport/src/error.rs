//! Errors of the verbs-level calls on the engine (create, modify, post).
//! Transport-level failures are not errors here: they become work
//! completions with a status, as in libibverbs.

use crate::qp::attr::QpState;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    #[error("no QP with number {0:#x}")]
    NoSuchQp(u32),
    /// Every QPN of the device's range is taken (a shared device gives
    /// each process a range: `Endpoint::set_qpn_range`).
    #[error("no free QP number in {start:#x}..{end:#x}")]
    QpnsExhausted { start: u32, end: u32 },
    #[error("no completion queue {0}")]
    NoSuchCq(usize),
    #[error("completion queue {cq}: {waiting} completions wait, more than the {asked} asked for")]
    CqTooSmall { cq: usize, waiting: usize, asked: usize },
    #[error("no shared receive queue {0}")]
    NoSuchSrq(usize),
    #[error("QP {qpn:#x}: cannot move from {from:?} to {to:?}")]
    InvalidTransition { qpn: u32, from: QpState, to: QpState },
    #[error("QP {qpn:#x}: the {from:?} to {to:?} transition requires {attr}")]
    MissingAttribute { qpn: u32, from: QpState, to: QpState, attr: &'static str },
    #[error("QP {qpn:#x}: invalid {attr} {value}")]
    InvalidAttribute { qpn: u32, attr: &'static str, value: u64 },
    #[error("QP {qpn:#x}: cannot post {what} in state {state:?}")]
    WrongState { qpn: u32, what: &'static str, state: QpState },
    #[error("QP {qpn:#x}: {queue} queue is full ({depth} entries)")]
    QueueFull { qpn: u32, queue: &'static str, depth: u32 },
    #[error("QP {qpn:#x}: {n} scatter/gather entries exceed the limit of {max}")]
    TooManySge { qpn: u32, n: usize, max: u32 },
    #[error("QP {qpn:#x}: {len} bytes of inline data exceed max_inline_data {max}")]
    InlineTooLarge { qpn: u32, len: usize, max: u32 },
    #[error("QP {qpn:#x}: operation {op} is not supported on {qp_type:?} QPs")]
    UnsupportedOp { qpn: u32, op: &'static str, qp_type: crate::qp::attr::QpType },
    #[error("QP {qpn:#x}: message of {len} bytes exceeds {max}")]
    MessageTooLong { qpn: u32, len: u64, max: u64 },
    #[error("UD send on QP {0:#x} has no destination (SendWr::ud)")]
    MissingUdDest(u32),
    #[error("QP {0:#x} uses a shared receive queue: post receives to the SRQ")]
    QpHasSrq(u32),
    #[error("no XRC domain {0}")]
    NoSuchXrcd(u32),
    #[error("XRC domain {0} is in use by an XRC SRQ or XRC_RECV QP")]
    XrcdInUse(u32),
    #[error("an XRC_RECV QP needs an XRC domain")]
    MissingXrcd,
}

/// Why `ibv_dereg_mr` refused ([`crate::Endpoint::try_dereg_mr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeregError {
    #[error("no memory region with key {0:#x}")]
    NoSuchRegion(u32),
    /// Memory windows are bound to it (IBA 10.6.7.2.6; rxe answers EINVAL).
    #[error("memory region {key:#x} has {bound} memory window(s) bound")]
    WindowsBound { key: u32, bound: usize },
}
