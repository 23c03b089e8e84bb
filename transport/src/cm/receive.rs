//! What the CM does with what arrives: every MAD the GSI queued (REQ, REP,
//! RTU, REJ, MRA, DREQ, DREP, SIDR), every send the GSI gave up on, and
//! the passive side's "communication established" by data.

use super::*;
use rdma_wire::mad::{method, MGMT_CLASS_CM};

/// The status Linux answers an unserved GET or SET with (ib_mad.h's
/// `IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB`).
const MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB: u16 = 0x000c;

impl Cm {
    /// Takes every MAD and every GSI timeout report from the host's GSI and acts on them.
    pub fn process(&mut self, now: Instant, host: &mut dyn CmHost) {
        self.now = self.now.max(now);
        while let Some(t) = host.gsi().poll_mad_timeout() {
            if self.sidr_timeout(t.dest, t.transaction_id) {
                continue;
            }
            self.on_mad_timeout(now, host, t.dest, t.transaction_id);
        }
        while let Some(r) = host.gsi().poll_mad() {
            let parsed = Mad::new_checked(&r.mad[..]).ok().and_then(|m| CmMadRepr::parse(&m).ok());
            let Some(cm) = parsed else {
                self.not_cm(host, r.from.to_canonical(), &r.mad);
                continue;
            };
            self.on_message(now, host, r.from.to_canonical(), cm);
        }
        self.communication_established(host);
    }

    /// A MAD that is no CM message. A GET or SET of another class (no
    /// other class is served on this QP1) gets a GET_RESP with status
    /// "unsupported method/attribute", as Linux's MAD layer answers an
    /// unmatched request (`generate_unmatched_resp`); anything else is
    /// dropped. One answer per request: no amplification.
    fn not_cm(&mut self, host: &mut dyn CmHost, from: IpAddr, mad: &[u8; MAD_LEN]) {
        self.stats.malformed += 1;
        let m = Mad::new_unchecked(&mad[..]);
        if m.mgmt_class() == MGMT_CLASS_CM || !matches!(m.method(), method::GET | method::SET) {
            return;
        }
        let mut resp = *mad;
        let mut r = Mad::new_unchecked(&mut resp[..]);
        r.set_method(method::GET_RESP);
        r.set_status(MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB);
        self.stats.unsupported_answered += 1;
        // A response: the GSI neither retries nor waits for an answer.
        let _ = host.gsi().gsi_send(from, resp, None, 0);
    }

    /// IB's "communication established": a passive connection whose QP has
    /// taken a request from the peer is up even if the RTU was lost (the
    /// active side sends once it has the REP). Seen as the responder's
    /// expected PSN having moved past the one our REP advertised.
    fn communication_established(&mut self, host: &mut dyn CmHost) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            let (State::RepSent, Some(qpn)) = (c.state, c.qpn) else { continue };
            if host.expected_psn(qpn).is_some_and(|p| p != c.params.starting_psn & 0xff_ffff) {
                tracing::debug!(qpn, "data before the RTU: established");
                self.stats.established_by_data += 1;
                self.on_rtu(i);
            }
        }
    }

    fn on_mad_timeout(&mut self, now: Instant, host: &mut dyn CmHost, dest: IpAddr, tid: u64) {
        let Some(i) =
            self.conns.iter().position(|c| c.peer == dest && (c.tid == tid || (c.dreq_tid == tid && c.dreq_tid != 0)))
        else {
            return;
        };
        let c = &self.conns[i];
        let id = ConnId(c.local_id);
        match c.state {
            State::ReqSent | State::RepSent | State::RepRcvd => {
                host.to_err(c.moved_qpn());
                self.events.push_back(CmEvent::TimedOut { id });
                self.conns.remove(i);
            }
            State::DreqSent => {
                // The peer is gone: the disconnect completes locally.
                self.conns[i].state = State::TimeWait { until: now + self.config.timewait };
                self.events.push_back(CmEvent::Disconnected { id });
            }
            _ => {}
        }
    }

    fn by_ids(&self, from: IpAddr, local_id: u32, remote_id: u32) -> Option<usize> {
        // `local_id` is ours; `remote_id` the peer's (0 if it does not know it yet).
        self.conns
            .iter()
            .position(|c| c.peer == from && c.local_id == local_id && (c.remote_id == remote_id || c.remote_id == 0))
    }

    fn on_message(&mut self, now: Instant, host: &mut dyn CmHost, from: IpAddr, m: CmMadRepr) {
        let tid = m.transaction_id;
        tracing::debug!(peer = %from, tid, attr = m.message.attribute_id(), "CM message received");
        match m.message {
            CmMessage::Req(req) => self.on_req(host, from, tid, req),
            CmMessage::Rep(rep) => self.on_rep(host, from, tid, rep),
            CmMessage::Rtu(rtu) => match self.by_ids(from, rtu.remote_comm_id, rtu.local_comm_id) {
                Some(i) if self.conns[i].state == State::RepSent => self.on_rtu(i),
                _ => self.stats.unexpected += 1,
            },
            CmMessage::Rej(rej) => match self.by_ids(from, rej.remote_comm_id, rej.local_comm_id) {
                Some(i) if matches!(self.conns[i].state, State::ReqSent | State::RepSent | State::RepRcvd) => {
                    let c = self.conns.remove(i);
                    host.to_err(c.moved_qpn());
                    let private_data = Box::new(rej.private_data);
                    self.events.push_back(CmEvent::Rejected {
                        id: ConnId(c.local_id),
                        reason: rej.reason,
                        private_data,
                    });
                }
                _ => self.stats.unexpected += 1,
            },
            CmMessage::Dreq(dreq) => self.on_dreq(now, host, from, tid, dreq),
            CmMessage::Drep(drep) => match self.by_ids(from, drep.remote_comm_id, drep.local_comm_id) {
                Some(i) if self.conns[i].state == State::DreqSent => {
                    self.conns[i].state = State::TimeWait { until: now + self.config.timewait };
                    self.events.push_back(CmEvent::Disconnected { id: ConnId(self.conns[i].local_id) });
                }
                _ => self.stats.unexpected += 1,
            },
            CmMessage::Mra(mra) => self.on_mra(now, host, from, mra),
            CmMessage::SidrReq(req) => self.on_sidr_req(host, from, tid, req),
            CmMessage::SidrRep(rep) => self.on_sidr_rep(from, rep),
        }
    }

    /// The peer got our REQ or REP and needs time: stretch that send's
    /// timer by the service timeout it names (§3.7).
    fn on_mra(&mut self, now: Instant, host: &mut dyn CmHost, from: IpAddr, mra: MraRepr) {
        let Some(i) = self.by_ids(from, mra.remote_comm_id, mra.local_comm_id) else {
            self.stats.unexpected += 1;
            return;
        };
        let c = &self.conns[i];
        let waiting = matches!((c.state, mra.message_mraed), (State::ReqSent, msg::REQ) | (State::RepSent, msg::REP));
        if !waiting {
            self.stats.unexpected += 1;
            return;
        }
        let extra = cm_time(mra.service_timeout) + self.config.response_timeout;
        if host.gsi().gsi_delay(now, c.peer, c.tid, extra) {
            self.stats.mra_received += 1;
            tracing::debug!(peer = %c.peer, ?extra, "MRA: waiting longer for the peer");
        }
    }

    fn on_req(&mut self, host: &mut dyn CmHost, from: IpAddr, tid: u64, req: ReqRepr) {
        if let Some(c) = self.conns.iter().find(|c| c.peer == from && c.remote_id == req.local_comm_id) {
            // A repeated REQ: our REP was lost (or is slow). Send it again;
            // in any other state the copy in flight or the RTU settles it.
            match (c.state, c.reply, c.req) {
                (State::RepSent, Some(rep), Some(first)) => {
                    let _ = Self::send_rep(host, from, rep, &first);
                    self.stats.rep_resent += 1;
                }
                // The consumer refused it: the same REJ again, never a
                // second connect request for the consumer.
                (State::Rejected { .. }, Some(rej), first) => {
                    self.send(host, from, rej, false);
                    self.stats.rej_resent += 1;
                    let until = self.now + self.rejected_for(first.as_ref());
                    if let Some(c) = self.conns.iter_mut().find(|c| c.peer == from && c.remote_id == req.local_comm_id)
                    {
                        c.state = State::Rejected { until };
                    }
                }
                // The consumer is slow to decide: tell the peer to wait
                // (service timeout 24, about 68 s, as Linux sends).
                (State::ReqRcvd, ..) => {
                    let mra = emit(
                        tid,
                        CmMessage::Mra(MraRepr {
                            local_comm_id: c.local_id,
                            remote_comm_id: c.remote_id,
                            message_mraed: msg::REQ,
                            service_timeout: MRA_SERVICE_TIMEOUT,
                            private_data: [0; MRA_PRIVATE_DATA_LEN],
                        }),
                    );
                    self.send(host, from, mra, false);
                    self.stats.mra_sent += 1;
                }
                _ => self.stats.unexpected += 1,
            }
            return;
        }
        // Stale: the peer's QP is still ours under another communication
        // ID (it restarted, or reused the QPN before our time-wait ended).
        let stale = self.conns.iter().position(|c| {
            c.peer == from
                && c.remote_qpn == req.local_qpn
                && c.remote_ca_guid == req.local_ca_guid
                && matches!(c.state, State::Established | State::RepSent | State::TimeWait { .. })
        });
        if let Some(i) = stale {
            tracing::info!(peer = %from, qpn = req.local_qpn, "stale connection: REJ 10");
            self.stats.stale_rejected += 1;
            self.send(host, from, rej_mad(tid, 0, req.local_comm_id, msg::REQ, RejReason::STALE_CONN), false);
            if self.conns[i].state == State::Established {
                let id = ConnId(self.conns[i].local_id);
                let _ = self.disconnect(host, id);
            }
            return;
        }
        if self.conns.len() >= self.config.max_connections {
            tracing::debug!(peer = %from, "CM table full: REQ dropped unanswered");
            self.stats.table_full += 1;
            return;
        }
        let reason = if !self.listens.contains_key(&req.service_id) {
            Some(RejReason::INVALID_SERVICE_ID)
        } else if req.transport_service_type != transport_type::RC {
            Some(RejReason::INVALID_TRANSPORT_TYPE)
        } else if mtu_from_wire(req.path_mtu).is_none() {
            Some(RejReason::INVALID_MTU)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.send(host, from, rej_mad(tid, 0, req.local_comm_id, msg::REQ, reason), false);
            return;
        }
        if !self.backlog_room(req.service_id) {
            return;
        }
        let local_id = self.alloc_id();
        self.conns.push(Conn {
            local_id,
            remote_id: req.local_comm_id,
            peer: from,
            qpn: None,
            remote_qpn: req.local_qpn,
            state: State::ReqRcvd,
            tid,
            dreq_tid: 0,
            params: ConnParams::default(),
            req: Some(req),
            reply: None,
            drep: None,
            rep_private_data: None,
            plan: Some(QpPlan::from_req(&req, ConnParams::default().min_rnr_timer)),
            remote_vendor_id: req.vendor_id,
            remote_ca_guid: req.local_ca_guid,
            initiator_depth: 0,
        });
        self.events.push_back(CmEvent::ConnectRequest {
            id: ConnId(local_id),
            from,
            service_id: req.service_id,
            remote_qpn: req.local_qpn,
            private_data: req.private_data,
        });
    }

    fn on_rep(&mut self, host: &mut dyn CmHost, from: IpAddr, tid: u64, rep: RepRepr) {
        let Some(i) = self.by_ids(from, rep.remote_comm_id, rep.local_comm_id) else {
            self.stats.unexpected += 1;
            return;
        };
        let c = &self.conns[i];
        let rtu = emit(
            tid,
            CmMessage::Rtu(RtuRepr {
                local_comm_id: c.local_id,
                remote_comm_id: rep.local_comm_id,
                private_data: [0; RTU_PRIVATE_DATA_LEN],
            }),
        );
        match c.state {
            State::ReqSent => {}
            // Our RTU was lost: the peer repeats its REP.
            State::Established if c.remote_id == rep.local_comm_id => return self.send(host, from, rtu, false),
            // The consumer has not established yet: the RTU is on its way.
            State::RepRcvd if c.remote_id == rep.local_comm_id => return,
            _ => {
                self.stats.unexpected += 1;
                return;
            }
        }
        let Some(qpn) = c.qpn else { return };
        let id = ConnId(c.local_id);
        let plan = QpPlan::from_rep(&c.params, &rep);
        let consumer_moves_qp = c.params.consumer_moves_qp;
        if !consumer_moves_qp {
            let moved = [QpState::Rtr, QpState::Rts].into_iter().try_for_each(|state| {
                let attr = plan.attr(host.gsi(), from, rep.local_qpn, state).expect("RTR and RTS have attributes");
                host.modify_qp(qpn, &attr)
            });
            if moved.is_err() {
                // The REP's values do not fit the QP: refuse it, do not panic.
                host.to_err(Some(qpn));
                self.send(host, from, rej_mad(tid, id.0, rep.local_comm_id, msg::REP, RejReason::NO_QP), false);
                self.conns.remove(i);
                self.events.push_back(CmEvent::QpError { id });
                return;
            }
            self.send(host, from, rtu, false);
        }
        let c = &mut self.conns[i];
        c.remote_id = rep.local_comm_id;
        c.remote_qpn = rep.local_qpn;
        c.remote_ca_guid = rep.local_ca_guid;
        c.remote_vendor_id = rep.vendor_id;
        c.rep_private_data = Some(Box::new(rep.private_data));
        c.plan = Some(plan);
        c.initiator_depth = rep.responder_resources;
        if consumer_moves_qp {
            c.state = State::RepRcvd;
            self.events.push_back(CmEvent::ConnectResponse { id, remote_qpn: rep.local_qpn });
        } else {
            c.state = State::Established;
            self.events.push_back(CmEvent::Established { id, qpn, remote_qpn: rep.local_qpn });
        }
    }

    fn on_rtu(&mut self, i: usize) {
        // The QP went to RTS in `accept`: the RTU only completes the handshake.
        let c = &self.conns[i];
        let Some(qpn) = c.qpn else { return };
        let id = ConnId(c.local_id);
        let c = &mut self.conns[i];
        c.state = State::Established;
        let remote_qpn = c.remote_qpn;
        self.events.push_back(CmEvent::Established { id, qpn, remote_qpn });
    }

    fn on_dreq(&mut self, now: Instant, host: &mut dyn CmHost, from: IpAddr, tid: u64, dreq: DreqRepr) {
        let found = self.by_ids(from, dreq.remote_comm_id, dreq.local_comm_id);
        let drep = emit(
            tid,
            CmMessage::Drep(DrepRepr {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: [0; DREP_PRIVATE_DATA_LEN],
            }),
        );
        let Some(i) = found else {
            // No such connection (long gone): answer so the peer stops
            // retrying, as Linux does.
            self.stats.unexpected += 1;
            return self.send(host, from, drep, false);
        };
        let c = &self.conns[i];
        // Linux ignores a DREQ not naming its QP; so do we.
        if c.qpn != Some(dreq.remote_qpn & 0xff_ffff) {
            self.stats.unexpected += 1;
            return;
        }
        match c.state {
            // The QP stays as it is: as Linux's CM, a DREQ only reports
            // DISCONNECTED; the QP goes to ERR when the consumer answers
            // with its own disconnect. Moving it here could flush a request
            // whose ACK the peer sent before its DREQ but that arrives
            // after it (the ACK and the MAD come on different sockets), and
            // the peer had executed it (libfabric's fi_pingpong -e msg saw
            // its last SEND flushed).
            State::Established | State::DreqSent => {
                self.send(host, from, drep, false);
                let id = ConnId(c.local_id);
                let c = &mut self.conns[i];
                c.state = State::TimeWait { until: now + self.config.timewait };
                c.drep = Some(drep);
                self.events.push_back(CmEvent::Disconnected { id });
            }
            // A repeated DREQ: our DREP was lost.
            State::TimeWait { .. } => {
                let again = c.drep.unwrap_or(drep);
                self.send(host, from, again, false);
            }
            _ => self.stats.unexpected += 1,
        }
    }
}
