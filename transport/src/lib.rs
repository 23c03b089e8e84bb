//! The IBTA transport engine: per-QP requester, responder and completer as
//! sans-IO state machines driven by events and an explicit clock.
//!
//! This crate is a placeholder until the transport issue lands; it exists so
//! that the workspace layout is the final one from the start.
