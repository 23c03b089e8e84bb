//! The test QPs connected over the RDMA CM (steps 3 and 4 of the parent
//! module's list): perftest's `create_rdma_cm_connection` between two hand
//! shakes on the control connection, and the hang-up at the end.

use super::{answer, cm_err, local, rejected, resolve, test_param, Refused, CONNECT_ATTEMPTS, CONNECT_RETRY_DELAY};
use crate::perf::oob::OOB_TIMEOUT;
use crate::perf::perftest::{Dest, Link};
use crate::perf::side::{Layout, Side};
use crate::perf::{Config, PerfError};
use rdma_core_rs::cm::{CmId, EventType};
use std::net::SocketAddr;
use std::time::Duration;

/// The test QPs' CM IDs, one per QP of the side.
pub struct TestConns {
    ids: Vec<CmId>,
}

/// perftest's `create_rdma_cm_connection`: a hand shake, the test QPs made
/// on CM IDs and connected (the server listening again on the port), and
/// another hand shake. The side's resources come with them.
pub fn connect_tests(cfg: &Config, link: &mut Link, layout: Layout) -> Result<(Side, TestConns), PerfError> {
    let zero = Dest::zero();
    let mut quiet = || {
        std::thread::sleep(Duration::from_micros(200));
        Ok(())
    };
    let c = link.control().expect("a link over the RDMA CM");
    let ctx = c.ctx.clone();
    let param = test_param(cfg);
    let (side, ids) = if c.is_client() {
        let server = c.addrs().1.ok_or_else(|| PerfError::Failed("the control connection has no peer".into()))?;
        link.hand_shakes(&[zero], OOB_TIMEOUT, &mut quiet)?;
        let c = link.control().expect("a link over the RDMA CM");
        // IDs resolved first: a QP is made on its ID's device
        let mut ids = Vec::with_capacity(cfg.qps);
        for _ in 0..cfg.qps {
            ids.push(resolve(&mut c.events, local(&c.ctx, cfg), server, cfg.tos)?);
        }
        let mut side =
            Side::on(ctx, cfg, layout, &mut |pd, attr, q| ids[q].create_qp(pd, attr).map_err(cm_err("create_qp")))?;
        // every REQ leaves before any answer is awaited, as perftest's do
        // (a server may wait for all of them before it accepts)
        for id in &ids {
            id.connect(&param).map_err(cm_err("connect"))?;
        }
        for (q, slot) in ids.iter_mut().enumerate() {
            let mut attempt = 1;
            loop {
                match answer(&mut c.events, slot, server) {
                    Ok(()) => break,
                    Err(Refused::Rej(8)) if attempt < CONNECT_ATTEMPTS => {
                        tracing::debug!(attempt, q, "a test QP's connection: REJ 8, trying again");
                        std::thread::sleep(CONNECT_RETRY_DELAY);
                        attempt += 1;
                        let id = resolve(&mut c.events, local(&c.ctx, cfg), server, cfg.tos)?;
                        side.remake_qp(q, &mut |pd, attr, _| id.create_qp(pd, attr).map_err(cm_err("create_qp")))?;
                        id.connect(&param).map_err(cm_err("connect"))?;
                        *slot = id;
                    }
                    Err(Refused::Rej(s)) => {
                        return Err(PerfError::Failed(format!(
                            "a test QP's connection to {server} refused after {attempt} attempt(s): {}",
                            rejected(s)
                        )))
                    }
                    Err(Refused::Other(e)) => return Err(e),
                }
            }
        }
        (side, ids)
    } else {
        // Listening before this side's part of the hand shake: the client's
        // REQs that follow it find the port open.
        let listener = c.events.create_id();
        let at = SocketAddr::new(local(&c.ctx, cfg), cfg.port);
        listener.bind_addr(at).map_err(cm_err("bind_addr"))?;
        listener.listen(cfg.qps as u32).map_err(cm_err("listen"))?;
        link.hand_shakes(&[zero], OOB_TIMEOUT, &mut quiet)?;
        let c = link.control().expect("a link over the RDMA CM");
        let mut reqs = Vec::with_capacity(cfg.qps);
        for _ in 0..cfg.qps {
            reqs.push(
                c.events
                    .next(OOB_TIMEOUT, "CONNECT_REQUEST for a test QP", |e| e.event == EventType::ConnectRequest)?,
            );
        }
        drop(listener);
        let ids: Vec<CmId> = reqs.iter().map(|r| r.id.clone()).collect();
        let side =
            Side::on(ctx, cfg, layout, &mut |pd, attr, q| ids[q].create_qp(pd, attr).map_err(cm_err("create_qp")))?;
        for id in &ids {
            id.accept(&param).map_err(cm_err("accept"))?;
        }
        for id in &ids {
            let e = c.events.of(id, OOB_TIMEOUT, "ESTABLISHED (test QP)")?;
            if e.event != EventType::Established {
                return Err(PerfError::Failed(format!(
                    "RDMA CM: a test QP's connection: {} (status {})",
                    e.event, e.status
                )));
            }
        }
        (side, ids)
    };
    link.hand_shakes(&[zero], OOB_TIMEOUT, &mut quiet)?;
    tracing::info!(qps = ids.len(), "test QPs connected over the RDMA CM");
    Ok((side, TestConns { ids }))
}

impl TestConns {
    /// The end, as perftest's: the client disconnects every connection and
    /// waits for DISCONNECTED; the server waits for the client's DREQs (and
    /// sends its own after a while). Then the control connection likewise.
    pub fn hang_up(&self, link: &mut Link) {
        let Some(c) = link.control() else { return };
        let client = c.is_client();
        let wait = Duration::from_secs(3);
        if client {
            for id in &self.ids {
                let _ = id.disconnect();
            }
        }
        let refs: Vec<&CmId> = self.ids.iter().collect();
        let left = c.events.disconnected(&refs, wait);
        if left > 0 {
            tracing::debug!(left, "test connections still up: disconnecting them");
            for id in &self.ids {
                let _ = id.disconnect();
            }
            c.events.disconnected(&refs, Duration::from_secs(1));
        }
        let control = c.id.clone();
        if client {
            let _ = control.disconnect();
        }
        if c.events.disconnected(&[&control], Duration::from_secs(if client { 2 } else { 1 })) > 0 {
            let _ = control.disconnect();
            c.events.disconnected(&[&control], Duration::from_millis(500));
        }
    }
}
