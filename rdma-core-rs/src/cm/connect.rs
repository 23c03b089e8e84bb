//! Connections on a CM ID: `rdma_connect` (REQ, or SIDR_REQ for UD),
//! `rdma_accept`, `rdma_reject`, `rdma_disconnect`.

use super::id::{depth, ACK_TIMEOUT, PATH_MTU};
use super::objects::CmDevice;
use super::objects::{CmId, ConnParam, Phase, PortSpace};
use super::{CmError, Result, RDMA_UDP_QKEY, REQ_USER_DATA_LEN, SIDR_USER_DATA_LEN};
use rdma_transport::cm::{CmHost, ConnId, ConnParams};
use rdma_transport::Mtu;
use rdma_wire::cm::{
    sidr_status, RejReason, REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN, SIDR_REP_PRIVATE_DATA_LEN,
    SIDR_REQ_PRIVATE_DATA_LEN,
};
use rdma_wire::cma::{service_id, CmaHdr, CmaHdrRepr, RdmaPs, CMA_HDR_LEN};
use std::net::SocketAddr;
use std::sync::Arc;

impl CmId {
    /// `rdma_connect`: sends the REQ (`cma_hdr` + up to 56 bytes of
    /// private data). ESTABLISHED, REJECTED, UNREACHABLE or CONNECT_ERROR
    /// follows; CONNECT_RESPONSE instead of ESTABLISHED for the
    /// application's own QP ([`ConnParam::qp_num`]).
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        if param.private_data.len() > REQ_USER_DATA_LEN {
            return Err(CmError::PrivateDataTooLong {
                len: param.private_data.len(),
                max: REQ_USER_DATA_LEN,
                what: "connect request",
            });
        }
        let (dev, local, remote, qp, own, ps, tos, ack_timeout, seq_num, ece) = {
            let g = self.shared.lock();
            let own = g.qpn().is_none() && param.qp_num.is_some();
            match (g.phase, &g.dev, g.local, g.remote, g.qpn().or(param.qp_num)) {
                (Phase::RouteResolved, Some(d), Some(l), Some(r), Some(q)) => {
                    let timeout = g.ack_timeout.unwrap_or(ACK_TIMEOUT);
                    (d.clone(), l, r, q, own, g.ps, g.tos, timeout, g.seq_num, g.local_ece.0)
                }
                (Phase::RouteResolved, ..) => {
                    drop(g);
                    return Err(self.wrong("connect", "with a QP (create_qp, or its own in qp_num)"));
                }
                _ => {
                    drop(g);
                    return Err(self.wrong("connect", "with a resolved route"));
                }
            }
        };
        if ps == PortSpace::Udp {
            return self.resolve_ud(&dev, local, remote, &param.private_data);
        }
        let mut pd = [0u8; CMA_HDR_LEN + REQ_USER_DATA_LEN];
        let hdr = CmaHdrRepr { src_port: local.port(), src: local.ip(), dst: remote.ip() };
        hdr.emit(&mut CmaHdr::new_unchecked(&mut pd[..CMA_HDR_LEN]))
            .map_err(|_| CmError::FamilyMismatch { src: local.ip(), dst: remote.ip() })?;
        pd[CMA_HDR_LEN..CMA_HDR_LEN + param.private_data.len()].copy_from_slice(&param.private_data);
        let params = ConnParams {
            starting_psn: seq_num,
            responder_resources: depth(param.responder_resources),
            initiator_depth: depth(param.initiator_depth),
            path_mtu: PATH_MTU,
            consumer_moves_qp: own,
            vendor_id: ece,
            local_ack_timeout: ack_timeout,
            retry_count: param.retry_count.min(7),
            rnr_retry_count: param.rnr_retry_count.min(7),
            traffic_class: tos,
            ..ConnParams::default()
        };
        let sid = service_id(ps.ps(), remote.port());
        let qpn = qp;
        let me = Arc::downgrade(&self.shared);
        let conn = dev.with_cm(|engines, core| {
            let c = core.cm.connect(engines, qpn, remote.ip(), sid, &pd, params);
            if let Ok(c) = c {
                core.conns.insert(c.0, me);
                if own {
                    self.shared.lock().own_qpn = Some(qpn);
                }
                self.sent(c, Phase::Connecting);
            }
            c
        })?;
        conn.map_err(|e| CmError::Cm { call: "connect", detail: format!("{e:?}") })?;
        tracing::debug!(%local, %remote, qpn, "REQ sent");
        Ok(())
    }

    /// `rdma_connect` on RDMA_PS_UDP: a SIDR_REQ (`cma_hdr` + up to 180
    /// bytes). ESTABLISHED follows with the peer's QPN and Q_Key
    /// ([`EventParam::qp_num`], [`EventParam::qkey`]; the address is
    /// [`CmId::peer_addr`]), or UNREACHABLE.
    fn resolve_ud(&self, dev: &Arc<CmDevice>, local: SocketAddr, remote: SocketAddr, data: &[u8]) -> Result<()> {
        if data.len() > SIDR_USER_DATA_LEN {
            return Err(CmError::PrivateDataTooLong {
                len: data.len(),
                max: SIDR_USER_DATA_LEN,
                what: "UD connect (SIDR) request",
            });
        }
        let mut pd = [0u8; SIDR_REQ_PRIVATE_DATA_LEN];
        let hdr = CmaHdrRepr { src_port: local.port(), src: local.ip(), dst: remote.ip() };
        hdr.emit(&mut CmaHdr::new_unchecked(&mut pd[..CMA_HDR_LEN]))
            .map_err(|_| CmError::FamilyMismatch { src: local.ip(), dst: remote.ip() })?;
        pd[CMA_HDR_LEN..CMA_HDR_LEN + data.len()].copy_from_slice(data);
        let sid = service_id(RdmaPs::UDP, remote.port());
        let me = Arc::downgrade(&self.shared);
        let r = dev.with_cm(|engines, core| {
            let r = core.cm.sidr_request(engines, remote.ip(), sid, &pd);
            if let Ok(c) = r {
                core.conns.insert(c.0, me);
                self.sent(c, Phase::Connecting);
            }
            r
        })?;
        r.map_err(|e| CmError::Cm { call: "connect (SIDR)", detail: format!("{e:?}") })?;
        tracing::debug!(%local, %remote, "SIDR_REQ sent");
        Ok(())
    }

    /// `rdma_accept` on the ID of a CONNECT_REQUEST: moves its QP to RTR
    /// and RTS and sends the REP (up to 196 bytes of private data).
    /// ESTABLISHED follows when the RTU arrives. The application's own QP
    /// ([`ConnParam::qp_num`]) is named in the REP and not moved.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        if param.private_data.len() > REP_PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong {
                len: param.private_data.len(),
                max: REP_PRIVATE_DATA_LEN,
                what: "connect reply",
            });
        }
        let (dev, conn, qp, own, tos, ps, ack_timeout, seq_num, ece) = {
            let g = self.shared.lock();
            let own = g.qpn().is_none() && param.qp_num.is_some() && g.ps != PortSpace::Udp;
            match (g.phase, &g.dev, g.conn, g.qpn().or(param.qp_num)) {
                (Phase::ConnectRequest, Some(d), Some(c), Some(q)) => {
                    let timeout = g.ack_timeout.unwrap_or(ACK_TIMEOUT);
                    (d.clone(), c, q, own, g.tos, g.ps, timeout, g.seq_num, g.local_ece.0)
                }
                (Phase::ConnectRequest, ..) => {
                    drop(g);
                    return Err(self.wrong("accept", "with a QP (create_qp, or its own in qp_num)"));
                }
                _ => {
                    drop(g);
                    return Err(self.wrong("accept", "from a CONNECT_REQUEST"));
                }
            }
        };
        let qpn = qp;
        if ps == PortSpace::Udp {
            if param.private_data.len() > SIDR_REP_PRIVATE_DATA_LEN {
                return Err(CmError::PrivateDataTooLong {
                    len: param.private_data.len(),
                    max: SIDR_REP_PRIVATE_DATA_LEN,
                    what: "UD accept (SIDR reply)",
                });
            }
            let r = dev.with_cm(|engines, core| {
                core.conns.remove(&conn.0);
                let r =
                    core.cm.sidr_reply(engines, conn, sidr_status::SUCCESS, qpn, RDMA_UDP_QKEY, &param.private_data);
                if r.is_ok() {
                    // Nothing follows for UD: the peer has what it needs.
                    let mut g = self.shared.lock();
                    g.phase = Phase::Connected;
                    g.conn = None;
                }
                r
            })?;
            r.map_err(|e| CmError::Cm { call: "accept (SIDR)", detail: format!("{e:?}") })?;
            return Ok(());
        }
        let params = ConnParams {
            starting_psn: seq_num,
            responder_resources: depth(param.responder_resources),
            initiator_depth: depth(param.initiator_depth),
            consumer_moves_qp: own,
            vendor_id: ece,
            // The passive side takes the REQ's path MTU (the CM takes the
            // smaller of the two): the REP carries none, and the active side
            // sends at the MTU it asked for (a kernel peer on a 9000-byte
            // netdev asks for 4096). Capping it at PATH_MTU made this side
            // NAK every full-size packet of a kernel ib_write_bw -R client.
            path_mtu: Mtu::Mtu4096,
            local_ack_timeout: ack_timeout,
            rnr_retry_count: param.rnr_retry_count.min(7),
            traffic_class: tos,
            ..ConnParams::default()
        };
        let r = dev.with_cm(|engines, core| {
            let r = core.cm.accept(engines, conn, qpn, &param.private_data, params);
            if r.is_ok() {
                if own {
                    self.shared.lock().own_qpn = Some(qpn);
                }
                self.sent(conn, Phase::Connecting);
            }
            r
        })?;
        r.map_err(|e| CmError::Cm { call: "accept", detail: format!("{e:?}") })?;
        after_rep_sent(self);
        Ok(())
    }

    /// Records the connection a REQ, REP or SIDR_REQ just queued belongs
    /// to, and the phase it puts the ID in. Called inside `with_cm`, before
    /// the message leaves: once the device lock is released, any thread may
    /// handle the answer and move the ID on (ESTABLISHED: connected), and a
    /// write after that would take it back. (It did: accept's "connecting"
    /// over the RTU's "connected" made rdma_disconnect abandon an
    /// established connection without a DREQ, and ucmatose's two sides
    /// waited for DISCONNECTED forever.)
    fn sent(&self, conn: ConnId, phase: Phase) {
        let mut g = self.shared.lock();
        g.conn = Some(conn);
        g.phase = phase;
    }

    /// `rdma_reject`: refuses a CONNECT_REQUEST with REJ reason 28
    /// (consumer defined) and up to 148 bytes of private data.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        if private_data.len() > REJ_PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: REJ_PRIVATE_DATA_LEN,
                what: "reject",
            });
        }
        let (dev, conn, ps) = {
            let g = self.shared.lock();
            match (g.phase, &g.dev, g.conn) {
                (Phase::ConnectRequest, Some(d), Some(c)) => (d.clone(), c, g.ps),
                _ => {
                    drop(g);
                    return Err(self.wrong("reject", "from a CONNECT_REQUEST"));
                }
            }
        };
        let r = dev.with_cm(|engines, core| {
            core.conns.remove(&conn.0);
            if ps == PortSpace::Udp {
                let data = &private_data[..private_data.len().min(SIDR_REP_PRIVATE_DATA_LEN)];
                core.cm.sidr_reply(engines, conn, sidr_status::REJECT, 0, 0, data)
            } else {
                core.cm.reject(engines, conn, RejReason::CONSUMER_DEFINED, private_data)
            }
        })?;
        r.map_err(|e| CmError::Cm { call: "reject", detail: format!("{e:?}") })?;
        let mut g = self.shared.lock();
        g.phase = Phase::Idle;
        g.conn = None;
        Ok(())
    }

    /// `rdma_disconnect`: moves the QP to ERR and sends a DREQ;
    /// DISCONNECTED follows when the DREP comes (or the DREQ times out).
    /// After the peer disconnected first (DISCONNECTED already seen, its
    /// DREQ answered) it only moves the QP to ERR, as librdmacm's does:
    /// the peer's DREQ leaves the QP as it was.
    pub fn disconnect(&self) -> Result<()> {
        let (dev, conn, phase, qpn) = {
            let g = self.shared.lock();
            (g.dev.clone(), g.conn, g.phase, g.qpn())
        };
        if let (Phase::Disconnected, Some(dev)) = (phase, &dev) {
            dev.with_cm(|engines, _| engines.to_err(qpn))?;
            return Ok(());
        }
        let (Some(dev), Some(conn)) = (dev, conn) else {
            return match phase {
                // A UD "connection" (SIDR) has nothing to tear down.
                Phase::Disconnected | Phase::Idle | Phase::Connected => Ok(()),
                _ => Err(self.wrong("disconnect", "connected")),
            };
        };
        match phase {
            Phase::Connected => {
                let r = dev.with_cm(|engines, core| core.cm.disconnect(engines, conn))?;
                if let Err(e) = r {
                    // Already torn down by the peer's DREQ in the meantime.
                    tracing::debug!(error = ?e, "disconnect: the connection is already closing");
                }
                Ok(())
            }
            Phase::Connecting | Phase::ConnectRequest => {
                // Not established: abandon it (the QP goes to ERR; the
                // peer's retries end in its own timeout).
                dev.with_cm(|engines, core| {
                    core.cm.forget(conn);
                    core.conns.remove(&conn.0);
                    engines.to_err(qpn);
                })?;
                let mut g = self.shared.lock();
                g.conn = None;
                g.phase = Phase::Disconnected;
                Ok(())
            }
            _ => Err(self.wrong("disconnect", "connected")),
        }
    }
}

/// Test seam: runs in `accept` once its REP has left and the device lock
/// is released, where another thread (the CM's service thread, the
/// drop-in library's progress thread) may already handle the peer's RTU.
#[cfg(test)]
pub(super) static AFTER_REP_SENT: std::sync::Mutex<Option<fn(&CmId)>> = std::sync::Mutex::new(None);

#[cfg(test)]
fn after_rep_sent(id: &CmId) {
    let hook = *AFTER_REP_SENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = hook {
        f(id);
    }
}

#[cfg(not(test))]
fn after_rep_sent(_: &CmId) {}
