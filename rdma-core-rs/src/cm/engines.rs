//! The device's engines as its RDMA CM drives them ([`CmHost`]): MADs on
//! the first engine's QP1, where the CM runs, and each connection's QP on
//! the engine that holds it, so that the CM's QPs spread over the engines
//! as any other QP does (docs/multi-core-device.md).

use crate::context::{Inner, State};
use rdma_transport::cm::CmHost;
use rdma_transport::{Endpoint, QpAttr, QpState, VerbsError};

/// The first engine's state, held, and the way to the others.
pub(crate) struct CmEngines<'a> {
    inner: &'a Inner,
    first: &'a mut State,
}

impl<'a> CmEngines<'a> {
    /// The engines of the device of `inner`, whose first engine's state
    /// `first` is (held).
    pub(crate) fn new(inner: &'a Inner, first: &'a mut State) -> CmEngines<'a> {
        CmEngines { inner, first }
    }

    /// Runs `f` on the state of QP `qpn`'s engine. Another engine's lock is
    /// taken with the first's and the CM's held: the order every caller
    /// that holds several takes them in (`Inner::lock_all`; the CM's lock
    /// order, `device.rs`).
    fn look_at<T>(&mut self, qpn: u32, f: impl FnOnce(&mut State) -> T) -> T {
        if self.inner.on_first_engine(qpn) {
            return f(self.first);
        }
        f(&mut self.inner.lock_qp(qpn))
    }

    /// [`CmEngines::look_at`] for a change: on another engine, what it
    /// queued (the flushes of a QP moved to ERR, a packet) is announced and
    /// sent before that engine's lock goes, and its thread looks again. The
    /// first engine's is sent by whoever holds it when the CM is done.
    fn change<T>(&mut self, qpn: u32, f: impl FnOnce(&mut State) -> T) -> T {
        let inner = self.inner;
        self.look_at(qpn, |st| {
            let r = f(st);
            if st.engine() != 0 {
                if let Err(e) = inner.doorbell(st) {
                    tracing::debug!(error = %e, qpn, engine = st.engine(), "could not send after a CM transition");
                }
            }
            r
        })
    }
}

impl CmHost for CmEngines<'_> {
    fn gsi(&mut self) -> &mut Endpoint {
        &mut self.first.ep
    }

    fn qp_state(&mut self, qpn: u32) -> Result<QpState, VerbsError> {
        self.look_at(qpn, |st| Ok(st.ep.query_qp(qpn)?.0))
    }

    fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), VerbsError> {
        let inner = self.inner;
        self.change(qpn, |st| {
            if let Err(e) = inner.before_transition(st, attr) {
                tracing::debug!(error = %e, qpn, "could not drain the receive queue before RTR");
            }
            st.ep.modify_qp(qpn, attr)
        })
    }

    fn expected_psn(&mut self, qpn: u32) -> Option<u32> {
        self.look_at(qpn, |st| st.ep.expected_psn(qpn))
    }
}
