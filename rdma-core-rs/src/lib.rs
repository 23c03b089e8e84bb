//! The verbs API (devices, PDs, MRs, CQs, QPs) in the shape of libibverbs.
//!
//! This crate is a placeholder until the verbs issue lands; it exists so that
//! the workspace layout is the final one from the start.
