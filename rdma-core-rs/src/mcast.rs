//! `ibv_attach_mcast` / `ibv_detach_mcast` on a queue pair: the engine's
//! group membership (rules and limits in `rdma_transport::mcast`) and the
//! backend's: on UDP, the IP group of the MGID is joined while any QP of
//! the device is attached to it (`udp::multicast`); frame links send
//! multicast packets to the Ethernet broadcast address, so they join
//! nothing (docs/multicast.md).

use crate::device::Gid;
use crate::error::Result;
use crate::qp::QueuePair;

impl QueuePair {
    /// `ibv_attach_mcast`: this UD QP receives the packets sent to the
    /// multicast group `mgid` (destination QPN 0xFFFFFF) whose Q_Key is
    /// its own. `mlid` names the group on native IB (0xc000..0xfffe) and
    /// is ignored on RoCE. Attaching twice is a no-op, as in rxe.
    pub fn attach_mcast(&self, mgid: Gid, mlid: u16) -> Result<()> {
        let gid = mgid.to_ip();
        let mut st = self.ctx.inner.lock_qp(self.qp_num());
        if st.ep.mcast_groups_of(self.qp_num()).iter().any(|&(g, _)| g == gid) {
            return Ok(());
        }
        st.ep.attach_mcast(self.qp_num(), gid, mlid)?;
        if let Err(e) = st.io.join_group(gid) {
            // Not received, so not attached: the engine forgets it too.
            let _ = st.ep.detach_mcast(self.qp_num(), gid, mlid);
            return Err(e.into());
        }
        Ok(())
    }

    /// `ibv_detach_mcast`: undoes [`QueuePair::attach_mcast`]; a group the
    /// QP is not attached to is an error ([`rdma_transport::McastError::NotAttached`]).
    pub fn detach_mcast(&self, mgid: Gid, mlid: u16) -> Result<()> {
        let gid = mgid.to_ip();
        let mut st = self.ctx.inner.lock_qp(self.qp_num());
        st.ep.detach_mcast(self.qp_num(), gid, mlid)?;
        st.io.leave_group(gid);
        Ok(())
    }

    /// The multicast groups (MGID, MLID) this QP is attached to.
    pub fn mcast_groups(&self) -> Vec<(Gid, u16)> {
        let st = self.ctx.inner.lock_qp(self.qp_num());
        st.ep.mcast_groups_of(self.qp_num()).into_iter().map(|(g, l)| (Gid::from_ip(g), l)).collect()
    }
}
