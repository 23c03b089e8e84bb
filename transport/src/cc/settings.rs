//! What a device holds for the congestion control of its QPs, as opposed
//! to each QP's own state (`wired.rs`): the factory new QPs take their
//! controller from, the notification point's settings, and whether new
//! QPs send ECN-capable data.

use std::sync::Arc;

use super::{ControllerFactory, DcqcnParams};

/// The notification point's settings while congestion control is off:
/// NVIDIA's firmware defaults (a CNP at once, then none for 4 µs per QP;
/// DSCP 48). The line rate in it is unused.
pub const DEFAULT_NP: DcqcnParams = DcqcnParams::nvidia(100_000_000_000);

/// A device's congestion-control settings.
#[derive(Debug, Clone)]
pub(crate) struct CcSettings {
    /// What makes each RC/UC QP's controller (`Endpoint::set_controller`).
    pub factory: Option<Arc<dyn ControllerFactory>>,
    /// The notification point's settings (CNP interval and mode, CNP
    /// DSCP): those the factory brings (DCQCN's), else [`DEFAULT_NP`].
    pub np: DcqcnParams,
    /// New QPs send data packets ECN-capable (`Endpoint::set_ecn_capable`).
    pub ecn_capable: bool,
}

impl Default for CcSettings {
    fn default() -> CcSettings {
        CcSettings { factory: None, np: DEFAULT_NP, ecn_capable: true }
    }
}
