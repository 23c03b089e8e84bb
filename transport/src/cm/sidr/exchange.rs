//! The SIDR exchange on the CM: the consumer's request and reply
//! ([`Cm::sidr_request`], [`Cm::sidr_reply`]), and the peer's SIDR_REQ,
//! SIDR_REP and a request's timeout as the CM receives them. What it
//! remembers meanwhile is the parent module's [`super::SidrTable`].

use super::{Incoming, Outgoing, ANSWERED_MAX};
use crate::cm::CmHost;
use crate::cm::{emit, pad, Cm, CmError, CmEvent, ConnId};
use core::net::IpAddr;
use rdma_wire::cm::{
    sidr_status, CmMessage, SidrRepRepr, SidrReqRepr, SIDR_REP_INFO_LEN, SIDR_REP_PRIVATE_DATA_LEN,
    SIDR_REQ_PRIVATE_DATA_LEN,
};
use rdma_wire::mad::MAD_LEN;

impl Cm {
    /// Active side: asks `dest` for the UD QP behind `service_id`, with up
    /// to 216 bytes of private data. [`CmEvent::SidrReply`] (or
    /// [`CmEvent::TimedOut`] after the retries) follows, with the returned
    /// request ID as its `id`.
    pub fn sidr_request(
        &mut self,
        host: &mut dyn CmHost,
        dest: IpAddr,
        service_id: u64,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        let private_data = pad::<SIDR_REQ_PRIVATE_DATA_LEN>(private_data).ok_or(CmError::PrivateDataTooLong)?;
        // Request IDs share the communication ID space: unique per node,
        // random-started (duplicates are keyed on it by the peer).
        let request_id = self.alloc_id();
        let req = SidrReqRepr { request_id, pkey: 0xffff, service_id, private_data };
        let tid = host.gsi().gsi_send(
            dest,
            emit(0, CmMessage::SidrReq(req)),
            Some(self.config.response_timeout),
            self.config.max_retries,
        )?;
        self.sidr.out.push(Outgoing { request_id, peer: dest.to_canonical(), tid });
        Ok(ConnId(request_id))
    }

    /// Passive side: answers a [`CmEvent::SidrRequest`]: `status` 0 with
    /// the QPN and Q_Key of the UD QP, or a refusal (`sidr_status::REJECT`).
    pub fn sidr_reply(
        &mut self,
        host: &mut dyn CmHost,
        id: ConnId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let private_data = pad::<SIDR_REP_PRIVATE_DATA_LEN>(private_data).ok_or(CmError::PrivateDataTooLong)?;
        let i = self.sidr.pending.iter().position(|p| p.id == id.0).ok_or(CmError::NoSuchConn(id))?;
        let mut p = self.sidr.pending.remove(i);
        let rep = sidr_rep(p.tid, p.request_id, status, qpn, p.service_id, qkey, private_data);
        self.send(host, p.peer, rep, false);
        p.reply = Some(rep);
        if self.sidr.answered.len() == ANSWERED_MAX {
            self.sidr.answered.pop_front();
        }
        self.sidr.answered.push_back(p);
        Ok(())
    }

    pub(in crate::cm) fn on_sidr_req(&mut self, host: &mut dyn CmHost, from: IpAddr, tid: u64, req: SidrReqRepr) {
        let same = |p: &Incoming| p.peer == from && p.request_id == req.request_id;
        if self.sidr.pending.iter().any(same) {
            // Repeated while the consumer decides: its answer will do.
            self.stats.unexpected += 1;
            return;
        }
        if let Some(rep) = self.sidr.answered.iter().find(|p| same(p)).and_then(|p| p.reply) {
            return self.send(host, from, rep, false);
        }
        if !self.listens.contains_key(&req.service_id) {
            let rep = sidr_rep(
                tid,
                req.request_id,
                sidr_status::UNSUPPORTED_SERVICE_ID,
                0,
                req.service_id,
                0,
                [0; SIDR_REP_PRIVATE_DATA_LEN],
            );
            return self.send(host, from, rep, false);
        }
        if !self.backlog_room(req.service_id) {
            return;
        }
        let id = self.alloc_id();
        self.sidr.pending.push(Incoming {
            id,
            peer: from,
            tid,
            request_id: req.request_id,
            service_id: req.service_id,
            reply: None,
        });
        self.events.push_back(CmEvent::SidrRequest {
            id: ConnId(id),
            from,
            service_id: req.service_id,
            private_data: Box::new(req.private_data),
        });
    }

    pub(in crate::cm) fn on_sidr_rep(&mut self, from: IpAddr, rep: SidrRepRepr) {
        let Some(i) = self.sidr.out.iter().position(|o| o.peer == from && o.request_id == rep.request_id) else {
            // A repeated reply to a request already answered.
            self.stats.unexpected += 1;
            return;
        };
        self.sidr.out.remove(i);
        self.events.push_back(CmEvent::SidrReply {
            id: ConnId(rep.request_id),
            status: rep.status,
            qpn: rep.qpn,
            qkey: rep.qkey,
            private_data: Box::new(rep.private_data),
        });
    }

    /// A GSI send that timed out: ours if it was a SIDR_REQ.
    pub(in crate::cm) fn sidr_timeout(&mut self, dest: IpAddr, tid: u64) -> bool {
        let Some(i) = self.sidr.out.iter().position(|o| o.peer == dest && o.tid == tid) else { return false };
        let o = self.sidr.out.remove(i);
        self.events.push_back(CmEvent::TimedOut { id: ConnId(o.request_id) });
        true
    }

    /// Passive: drops a SIDR request without answering (the consumer went away).
    pub fn sidr_forget(&mut self, id: ConnId) {
        self.sidr.pending.retain(|p| p.id != id.0);
    }
}

fn sidr_rep(
    tid: u64,
    request_id: u32,
    status: u8,
    qpn: u32,
    service_id: u64,
    qkey: u32,
    private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
) -> [u8; MAD_LEN] {
    emit(
        tid,
        CmMessage::SidrRep(SidrRepRepr {
            request_id,
            status,
            additional_info_length: 0,
            vendor_id: 0,
            qpn,
            service_id,
            qkey,
            additional_info: [0; SIDR_REP_INFO_LEN],
            private_data,
        }),
    )
}
