//! From the IB CM's events to the RDMA CM's: which ID a connection
//! belongs to, which listener a request goes to (service ID, then the
//! `cma_hdr`'s address), the new ID of a CONNECT_REQUEST, the events'
//! parameters; and the connections of IDs the application dropped.

use super::engines::CmEngines;
use super::objects::{CmDevice, Core};
use super::objects::{CmEvent, EventParam, EventType};
use super::objects::{CmId, IdShared, Phase, PortSpace};
use super::REQ_USER_DATA_LEN;
use rdma_transport::cm::{CmEvent as IbEvent, ConnId};
use rdma_wire::cm::{sidr_status, RejReason};
use rdma_wire::cma::{service_id_parts, CmaHdr, CmaHdrRepr, CMA_HDR_LEN};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

impl CmDevice {
    fn lay_to_rest(&self, engines: &mut CmEngines<'_>, core: &mut Core) {
        let dead = std::mem::take(&mut *self.graveyard.lock().unwrap_or_else(|e| e.into_inner()));
        for b in dead {
            core.conns.remove(&b.conn.0);
            let r = match (b.connected, b.requested, b.ud) {
                (true, ..) => core.cm.disconnect(engines, b.conn),
                (_, true, false) => core.cm.reject(engines, b.conn, RejReason::CONSUMER_DEFINED, &[]),
                (_, true, true) => core.cm.sidr_reply(engines, b.conn, sidr_status::REJECT, 0, 0, &[]),
                _ => {
                    core.cm.forget(b.conn);
                    Ok(())
                }
            };
            tracing::debug!(conn = b.conn.0, result = ?r, "the ID was dropped: its connection is closed");
        }
    }

    /// Turns the IB CM's events into RDMA CM events on the IDs' channels.
    pub(super) fn dispatch(&self, engines: &mut CmEngines<'_>, core: &mut Core) {
        self.lay_to_rest(engines, core);
        self.release_held(engines, core);
        while let Some(e) = core.cm.poll_event() {
            match e {
                IbEvent::ConnectRequest { id, from, service_id, remote_qpn, private_data } => {
                    self.on_request(engines, core, id, from, service_id, Some(remote_qpn), &private_data)
                }
                IbEvent::SidrRequest { id, from, service_id, private_data } => {
                    self.on_request(engines, core, id, from, service_id, None, &private_data[..])
                }
                IbEvent::SidrReply { id, status, qpn, qkey, private_data } => {
                    if status == sidr_status::SUCCESS {
                        let param = EventParam {
                            private_data: private_data.to_vec(),
                            qp_num: qpn,
                            qkey,
                            ..EventParam::default()
                        };
                        self.emit(core, id, Phase::Connected, EventType::Established, 0, param, true);
                    } else {
                        // librdmacm reports a refused resolution as
                        // UNREACHABLE with the SIDR status.
                        let param = EventParam { private_data: private_data.to_vec(), ..EventParam::default() };
                        self.emit(core, id, Phase::Idle, EventType::Unreachable, i32::from(status), param, true);
                    }
                }
                IbEvent::Established { id, remote_qpn, .. } => {
                    let mut param = EventParam { qp_num: remote_qpn, ..EventParam::default() };
                    if let Some(pd) = core.cm.rep_private_data(id) {
                        param.private_data = pd.to_vec();
                    }
                    if let Some((init, resp)) = core.cm.negotiated_depths(id) {
                        (param.initiator_depth, param.responder_resources) = (init, resp);
                    }
                    self.emit(core, id, Phase::Connected, EventType::Established, 0, param, false);
                }
                IbEvent::ConnectResponse { id, remote_qpn } => {
                    // The application moves its own QP, then rdma_establish.
                    let mut param = EventParam { qp_num: remote_qpn, ..EventParam::default() };
                    if let Some(pd) = core.cm.rep_private_data(id) {
                        param.private_data = pd.to_vec();
                    }
                    if let Some((init, resp)) = core.cm.negotiated_depths(id) {
                        (param.initiator_depth, param.responder_resources) = (init, resp);
                    }
                    self.emit(core, id, Phase::Connecting, EventType::ConnectResponse, 0, param, false);
                }
                IbEvent::Rejected { id, reason, private_data } => {
                    let param = EventParam { private_data: private_data.to_vec(), ..EventParam::default() };
                    self.emit(core, id, Phase::Idle, EventType::Rejected, i32::from(reason.0), param, true);
                }
                IbEvent::TimedOut { id } => {
                    let p = EventParam::default();
                    self.emit(core, id, Phase::Idle, EventType::Unreachable, -libc::ETIMEDOUT, p, true);
                }
                IbEvent::QpError { id } => {
                    let p = EventParam::default();
                    self.emit(core, id, Phase::Idle, EventType::ConnectError, -libc::EINVAL, p, true);
                }
                IbEvent::Disconnected { id } => {
                    let p = EventParam::default();
                    self.emit(core, id, Phase::Disconnected, EventType::Disconnected, 0, p, false);
                }
                IbEvent::TimewaitExit { id } => {
                    let p = EventParam::default();
                    self.emit(core, id, Phase::Disconnected, EventType::TimewaitExit, 0, p, true);
                }
            }
        }
    }

    /// Reports `e` on the ID of connection `conn` (if it still exists) and
    /// moves it to `phase`; `last` forgets the connection.
    #[allow(clippy::too_many_arguments)]
    fn emit(&self, core: &mut Core, conn: ConnId, phase: Phase, e: EventType, status: i32, p: EventParam, last: bool) {
        let id = if last { core.conns.remove(&conn.0) } else { core.conns.get(&conn.0).cloned() };
        let Some(id) = id.and_then(|w| w.upgrade()) else {
            tracing::debug!(conn = conn.0, event = %e, "CM event for an ID that is gone");
            return;
        };
        let channel = {
            let mut g = id.lock();
            g.phase = phase;
            if last {
                g.conn = None;
            }
            g.channel.clone()
        };
        channel.push(CmEvent { event: e, id: CmId::from_shared(id), listen_id: None, status, param: p });
    }

    /// Held requests whose port nobody holds any more (the ID that bound
    /// it was dropped, or moved on without listening): refused as if
    /// nobody had ever bound it.
    fn release_held(&self, engines: &mut CmEngines<'_>, core: &mut Core) {
        if core.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut core.held);
        for h in held {
            let bound = core.listeners.get(&h.service_id).is_some_and(|l| {
                l.iter().any(|l| l.id.upgrade().is_some_and(|id| l.listening || id.lock().phase == Phase::Bound))
            });
            if bound {
                core.held.push(h);
            } else {
                // Listening now (or nobody at all): on_request decides.
                self.on_request(engines, core, h.conn, h.from, h.service_id, h.remote_qpn, &h.private_data);
            }
        }
    }

    /// A REQ for a service somebody listens on: find the listener by the
    /// `cma_hdr`'s destination address, make the new ID, report it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_request(
        &self,
        engines: &mut CmEngines<'_>,
        core: &mut Core,
        conn: ConnId,
        from: IpAddr,
        service_id: u64,
        // `None`: a SIDR_REQ (UD), which has no QP yet.
        remote_qpn: Option<u32>,
        private_data: &[u8],
    ) {
        let refuse = |core: &mut Core, engines: &mut CmEngines<'_>, reason: RejReason| {
            if remote_qpn.is_some() {
                let _ = core.cm.reject(engines, conn, reason, &[]);
            } else {
                let status = if reason == RejReason::INVALID_SERVICE_ID {
                    sidr_status::UNSUPPORTED_SERVICE_ID
                } else {
                    sidr_status::REJECT
                };
                let _ = core.cm.sidr_reply(engines, conn, status, 0, 0, &[]);
            }
        };
        // Listening IDs, and IDs bound to the port that may still listen.
        let mut live: Vec<(Arc<IdShared>, IpAddr)> = Vec::new();
        let mut bound: Vec<(Arc<IdShared>, IpAddr)> = Vec::new();
        for l in core.listeners.get(&service_id).into_iter().flatten() {
            let Some(id) = l.id.upgrade() else { continue };
            if l.listening {
                live.push((id, l.addr));
            } else if id.lock().phase == Phase::Bound {
                bound.push((id, l.addr));
            }
        }
        if live.is_empty() && bound.is_empty() {
            // Nobody listens any more: as if nobody ever had.
            core.cm.unlisten(service_id);
            refuse(core, engines, RejReason::INVALID_SERVICE_ID);
            return;
        }
        let hdr = CmaHdr::new_checked(&private_data[..CMA_HDR_LEN.min(private_data.len())])
            .and_then(|h| CmaHdrRepr::parse(&h));
        let matches = |a: &IpAddr, h: &CmaHdrRepr| {
            *a == h.dst || (a.is_unspecified() && (a.is_ipv6() || h.dst.is_ipv4()) && h.dst == self.addr)
        };
        let listener = hdr.as_ref().ok().and_then(|h| live.iter().find(|(_, a)| matches(a, h)));
        if listener.is_none() && hdr.as_ref().is_ok_and(|h| bound.iter().any(|(_, a)| matches(a, h))) {
            // Bound, not yet listening: kept until the ID listens (see
            // `CmDevice::bind`). The peer's repeats meanwhile get MRAs.
            tracing::debug!(peer = %from, service_id, "request for a port bound but not yet listened on: held");
            core.held.push(super::objects::HeldRequest {
                conn,
                from,
                service_id,
                remote_qpn,
                private_data: private_data.to_vec(),
            });
            return;
        }
        let (Ok(hdr), Some((listener, _))) = (&hdr, listener) else {
            // What Linux does for a bad cma_hdr or an address nobody
            // listens on: REJ 28, indistinguishable from a consumer reject.
            tracing::info!(peer = %from, ?hdr, "request matches no listener's address: refused");
            refuse(core, engines, RejReason::CONSUMER_DEFINED);
            return;
        };
        let (ps, port) = service_id_parts(service_id);
        let ps = PortSpace::from_ps(ps);
        if (ps == PortSpace::Udp) != remote_qpn.is_none() {
            // A REQ for a UD service or a SIDR_REQ for a connected one.
            tracing::info!(peer = %from, ?ps, "request of the wrong kind for the port space: refused");
            refuse(core, engines, RejReason::CONSUMER_DEFINED);
            return;
        }
        let channel = listener.lock().channel.clone();
        let new = IdShared::new(channel.clone(), ps);
        {
            let mut g = new.lock();
            g.dev = listener.lock().dev.clone();
            g.local = Some(SocketAddr::new(hdr.dst, port));
            g.remote = Some(SocketAddr::new(hdr.src, hdr.src_port));
            g.phase = Phase::ConnectRequest;
            g.conn = Some(conn);
        }
        core.conns.insert(conn.0, Arc::downgrade(&new));
        let user = &private_data[CMA_HDR_LEN.min(private_data.len())..];
        let param = match (remote_qpn, core.cm.request(conn)) {
            (Some(qpn), Some(req)) => EventParam {
                private_data: user[..REQ_USER_DATA_LEN.min(user.len())].to_vec(),
                // Swapped: what the peer issues is what we must take.
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                srq: req.srq,
                qp_num: qpn,
                ..EventParam::default()
            },
            // SIDR: 216 - 36 = 180 bytes of user data.
            _ => EventParam { private_data: user.to_vec(), ..EventParam::default() },
        };
        tracing::debug!(peer = %from, port, ?remote_qpn, "connect request");
        channel.push(CmEvent {
            event: EventType::ConnectRequest,
            id: CmId::from_shared(new),
            listen_id: Some(CmId::from_shared(listener.clone())),
            status: 0,
            param,
        });
    }
}
