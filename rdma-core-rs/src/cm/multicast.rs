//! `rdma_join_multicast` on RoCE v2, as the kernel's RDMA CM does it
//! (cma.c, `cma_iboe_join_multicast`): nothing goes on the wire (no SA
//! on Ethernet), the ID's channel gets MULTICAST_JOIN at once with the
//! group's UD address: the MGID `::ffff:a.b.c.d` of the IPv4 group, QPN
//! 0xFFFFFF, RDMA_UDP_QKEY on RDMA_PS_UDP, hop limit 64. Attaching the QP
//! is the caller's (librdmacm attaches `id->qp` when the event is read),
//! and so is leaving: the UDP backend joins the IP group with the attach.

use super::objects::{CmEvent, EventParam, EventType};
use super::objects::{CmId, Phase, PortSpace};
use super::{CmError, Result, RDMA_UDP_QKEY};
use crate::device::Gid;
use std::net::IpAddr;

/// The MGID of a multicast IP address on RoCE v2 (IPv4-mapped for IPv4).
pub fn mgid_of(group: IpAddr) -> Gid {
    Gid::from_ip(group.to_canonical())
}

impl CmId {
    /// `rdma_join_multicast`: the ID must be bound or address-resolved
    /// (it then has a device). MULTICAST_JOIN follows on the channel, its
    /// [`EventParam`] the group's `mgid`, `qp_num` 0xFFFFFF and `qkey`.
    /// Returns the MGID. IPv6 groups are refused as the kernel refuses
    /// them on RoCE v2 (ENOTSUPP).
    pub fn join_multicast(&self, group: IpAddr) -> Result<Gid> {
        let group = group.to_canonical();
        let ch = {
            let g = self.shared.lock();
            if g.dev.is_none() || !matches!(g.phase, Phase::Bound | Phase::AddrResolved) {
                drop(g);
                return Err(self.wrong("join_multicast", "bound or address-resolved"));
            }
            if group.is_ipv6() {
                return Err(CmError::Ipv6Multicast(group));
            }
            if !group.is_multicast() {
                return Err(CmError::NotMulticast(group));
            }
            let qkey = if g.ps == PortSpace::Udp { RDMA_UDP_QKEY } else { 0 };
            let param = EventParam {
                qp_num: rdma_transport::MULTICAST_QPN,
                qkey,
                mgid: Some(mgid_of(group)),
                ..EventParam::default()
            };
            (g.channel.clone(), param)
        };
        tracing::debug!(%group, "multicast group joined");
        let (channel, param) = ch;
        channel.push(CmEvent { event: EventType::MulticastJoin, id: self.clone(), listen_id: None, status: 0, param });
        Ok(mgid_of(group))
    }
}
