//! Why a run could not be done ([`PerfError`]), and the memory budget's
//! refusal ([`OverBudget`]), one of the reasons.

/// Why a run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("{0}")]
    Verbs(#[from] rdma_core_rs::Error),
    #[error("out-of-band exchange: {0}")]
    Oob(#[from] std::io::Error),
    #[error("invalid option: {0}")]
    Config(String),
    #[error("the peer reported: {0}")]
    Peer(String),
    /// What this side or its peer asked for does not fit the memory budget.
    #[error("{0}")]
    OverBudget(#[from] OverBudget),
    #[error("{0}")]
    Failed(String),
}

/// A request that does not fit the memory budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} needs {asked} bytes, over the memory budget of {limit} bytes (--mem-budget raises it)")]
pub struct OverBudget {
    /// What was asked for, in the terms it was asked.
    pub what: String,
    /// The bytes it would take.
    pub asked: u128,
    pub limit: u64,
}
