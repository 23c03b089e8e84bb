//! What the CM drives: the GSI it sends and receives its MADs on, and the
//! QPs of its connections. One [`Endpoint`] is both. A device of several
//! engines runs its CM beside the first engine's GSI, while a connection's
//! QP may live in any engine: it routes each QP call to the engine that
//! holds the QP.

use crate::endpoint::Endpoint;
use crate::error::VerbsError;
use crate::qp::{QpAttr, QpState};

/// The CM's device (see the module's documentation).
pub trait CmHost {
    /// The endpoint of the CM's QP1: MADs, and the device's address,
    /// LID and paths.
    fn gsi(&mut self) -> &mut Endpoint;

    /// QP `qpn`'s state.
    fn qp_state(&mut self, qpn: u32) -> Result<QpState, VerbsError>;

    /// `ibv_modify_qp` on QP `qpn`.
    fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), VerbsError>;

    /// The PSN QP `qpn`'s responder expects next (`None`: no such QP).
    fn expected_psn(&mut self, qpn: u32) -> Option<u32>;

    /// QP `qpn` to ERR (its queues flush), unless `None` (no QP, or the
    /// consumer's to move); a QP already gone is no error.
    fn to_err(&mut self, qpn: Option<u32>) {
        if let Some(q) = qpn {
            let _ = self.modify_qp(q, &QpAttr { qp_state: Some(QpState::Err), ..QpAttr::default() });
        }
    }
}

impl CmHost for Endpoint {
    fn gsi(&mut self) -> &mut Endpoint {
        self
    }

    fn qp_state(&mut self, qpn: u32) -> Result<QpState, VerbsError> {
        Ok(self.query_qp(qpn)?.0)
    }

    fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), VerbsError> {
        Endpoint::modify_qp(self, qpn, attr)
    }

    fn expected_psn(&mut self, qpn: u32) -> Option<u32> {
        Endpoint::expected_psn(self, qpn)
    }
}
