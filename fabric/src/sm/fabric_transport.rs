//! The emulated fabric as an SMP transport (filled in below).

use super::SmError;

/// Builds the emulated fabric `spec` names (placeholder until the SMA lands).
pub fn emulated(spec: &str) -> Result<NotYet, SmError> {
    Err(SmError::Transport(format!("--emulated {spec}: not yet")))
}

#[derive(Debug)]
pub struct NotYet;

impl super::SmpTransport for NotYet {
    fn exchange(&mut self, _: &rdma_wire::smp::SmpRepr) -> Result<rdma_wire::smp::SmpRepr, SmError> {
        Err(SmError::Transport("not yet".into()))
    }
}
