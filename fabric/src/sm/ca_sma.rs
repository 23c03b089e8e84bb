//! The subnet management agent of one single-port channel adapter, as a
//! state machine with no I/O: it takes an SMP that reached the port (from
//! the wire, or from the SM on the same port) and gives the answer, if the
//! SMP is one a CA answers. The port agent on a network interface
//! ([`super::port_agent`]) runs one; its state is what the port publishes.
//!
//! It keeps the same management state as a port of the emulated fabric
//! ([`PortMgmt`]) and applies the same rules ([`crate::ib::sma`]'s
//! PortInfo, addressing and PortState step): directed route per IBA
//! 14.2.2 (a CA answers at the end of the path and forwards nothing),
//! PortInfo Set of LID, SM LID, LMC, OperationalVLs and one PortState step
//! at a time (Down retrains to Init). A lone HCA cannot see its peer's
//! state, so the fabric's "peer within one step" check is not made.

use crate::ib::sma::{self, emulated_port_info, port_state_step, set_addressing};
use crate::ib::PortMgmt;
use rdma_wire::mad::method;
use rdma_wire::smp::{
    attr, node_type, phys_state, status, NodeInfoRepr, PKeyBlock, PortInfo, PortInfoRepr, Sl2Vl, SmpRepr, VlArbBlock,
    VlArbEntry,
};

/// The one port's number.
pub const PORT: u8 = 1;

/// The state of the port (what PortInfo and the tables read back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaSma {
    pub node_guid: u64,
    pub port_guid: u64,
    /// NodeDescription (at most 64 bytes are sent).
    pub description: String,
    /// LID, SM LID, LMC, PortState, OperationalVLs, P_Keys.
    pub mgmt: PortMgmt,
    /// MTU code (1 = 256 ... 5 = 4096) the link carries.
    pub mtu_cap: u8,
    pub sl2vl: [u8; 16],
    /// VLArbitrationTable blocks 1..4 (low 0-31, low 32-63, high 0-31, high 32-63).
    pub vlarb: [[VlArbEntry; 32]; 4],
}

/// The largest IB MTU code whose packets (MTU + 126 bytes of headers and
/// CRCs, reference §2.5) fit an Ethernet payload of `eth_mtu` bytes.
pub fn mtu_code_for(eth_mtu: usize) -> u8 {
    (1..=5u8).rev().find(|&c| (128usize << c) + 126 <= eth_mtu).unwrap_or(1)
}

impl CaSma {
    /// A port just linked up: INIT, no LID, the default P_Key.
    pub fn new(guid: u64, description: String, mtu_cap: u8) -> CaSma {
        CaSma {
            node_guid: guid,
            port_guid: guid,
            description,
            mgmt: PortMgmt::fresh(),
            mtu_cap,
            sl2vl: [0; 16],
            vlarb: [[VlArbEntry::default(); 32]; 4],
        }
    }

    /// The answer to `req`, an SMP addressed to this port (a LID-routed one
    /// whose DLID the caller checked), or None when a CA does not answer it
    /// (a response, a TrapRepress, which only acknowledges a trap, a DR
    /// SMP not at the end of its path or on its way back).
    pub fn handle(&mut self, req: &SmpRepr) -> Option<SmpRepr> {
        if req.method & method::RESP != 0 || req.method == method::TRAP_REPRESS {
            return None;
        }
        let mut dr = req.dr;
        if let Some(d) = dr.as_mut() {
            if d.returning {
                return None;
            }
            if d.hop_cnt == 0 {
                // From the SM on this very port: no wire, hop pointer 0.
                d.returning = true;
            } else if d.hop_ptr == d.hop_cnt {
                d.return_path[usize::from(d.hop_ptr)] = PORT;
                d.returning = true;
                d.hop_ptr -= 1;
            } else {
                return None; // a CA forwards nothing
            }
        }
        let (mut r, set) = sma::response_to(req);
        r.dr = dr;
        let Some(set) = set else { return Some(r) };
        match self.attribute(req, set) {
            Ok(d) => r.data = d,
            Err(s) => r.status = s,
        }
        Some(r)
    }

    fn attribute(&mut self, req: &SmpRepr, set: bool) -> Result<[u8; 64], u16> {
        let m = req.attr_mod;
        let mut d = [0u8; 64];
        match req.attr_id {
            attr::NODE_DESCRIPTION if !set => {
                let b = self.description.as_bytes();
                let n = b.len().min(64);
                d[..n].copy_from_slice(&b[..n]);
            }
            attr::NODE_INFO if !set => NodeInfoRepr {
                node_type: node_type::CA,
                num_ports: 1,
                system_image_guid: self.node_guid,
                node_guid: self.node_guid,
                port_guid: self.port_guid,
                partition_cap: 32,
                device_id: 0,
                revision: 0,
                local_port_num: PORT,
                vendor_id: 0,
            }
            .emit(&mut d)
            .map_err(|_| status::INVALID_VALUE)?,
            attr::PORT_INFO => {
                // Modifier 0 on a CA: the port the SMP arrived on.
                if m != 0 && m != u32::from(PORT) {
                    return Err(status::INVALID_VALUE);
                }
                if set {
                    let pi = PortInfo::new_checked(&req.data[..]).map_err(|_| status::INVALID_VALUE)?;
                    self.set_port_info(&PortInfoRepr::parse(&pi))?;
                }
                self.port_info().emit(&mut d).map_err(|_| status::INVALID_VALUE)?;
            }
            attr::P_KEY_TABLE => {
                if m != 0 {
                    return Err(status::INVALID_VALUE);
                }
                if set {
                    self.mgmt.pkeys = PKeyBlock::parse(&req.data).map_err(|_| status::INVALID_VALUE)?.0;
                }
                PKeyBlock(self.mgmt.pkeys).emit(&mut d).map_err(|_| status::INVALID_VALUE)?;
            }
            attr::SL_TO_VL_TABLE => {
                if m != 0 {
                    return Err(status::INVALID_VALUE);
                }
                if set {
                    self.sl2vl = Sl2Vl::parse(&req.data).map_err(|_| status::INVALID_VALUE)?.0;
                }
                Sl2Vl(self.sl2vl).emit(&mut d).map_err(|_| status::INVALID_VALUE)?;
            }
            attr::VL_ARB_TABLE => {
                let block = (m >> 16) as usize;
                if !(1..=4).contains(&block) || m & 0xffff != 0 {
                    return Err(status::INVALID_VALUE);
                }
                if set {
                    self.vlarb[block - 1] = VlArbBlock::parse(&req.data).map_err(|_| status::INVALID_VALUE)?.0;
                }
                VlArbBlock(self.vlarb[block - 1]).emit(&mut d).map_err(|_| status::INVALID_VALUE)?;
            }
            _ => return Err(status::UNSUPPORTED_ATTRIBUTE),
        }
        Ok(d)
    }

    /// PortInfo as a Get reads it: one data VL (the raw backend maps
    /// every SL to VL0), the MTU the interface carries.
    pub fn port_info(&self) -> PortInfoRepr {
        let m = &self.mgmt;
        emulated_port_info(m, (m.lid, m.sm_lid), (m.state, phys_state::LINK_UP), PORT, 1, self.mtu_cap)
    }

    fn set_port_info(&mut self, pi: &PortInfoRepr) -> Result<(), u16> {
        if pi.operational_vls > 1 || pi.neighbor_mtu > self.mtu_cap {
            return Err(status::INVALID_VALUE);
        }
        let state = port_state_step(self.mgmt.state, pi.port_state, None)?;
        set_addressing(&mut self.mgmt, pi);
        if pi.operational_vls != 0 {
            self.mgmt.op_vls = pi.operational_vls;
        }
        self.mgmt.state = state;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_wire::smp::{port_state, DirectedRoute};

    fn set_state(sma: &mut CaSma, state: u8) -> u16 {
        let mut pi = sma.port_info();
        pi.port_state = state;
        let mut req = SmpRepr::request(method::SET, 7, attr::PORT_INFO, 0, Some(DirectedRoute::outbound(&[]).unwrap()));
        pi.emit(&mut req.data).unwrap();
        sma.handle(&req).unwrap().status
    }

    #[test]
    fn answers_at_the_end_of_its_path_and_steps_one_state_at_a_time() {
        let mut sma = CaSma::new(0x0200_00ff_fe00_0001, "port".into(), mtu_code_for(1500));
        assert_eq!(sma.mtu_cap, 3, "1024 + 126 fits 1500, 2048 + 126 does not");
        // One hop out: the answer goes back with the return path filled.
        let mut dr = DirectedRoute::outbound(&[1]).unwrap();
        dr.hop_ptr = 1;
        let req = SmpRepr::request(method::GET, 1, attr::NODE_INFO, 0, Some(dr));
        let r = sma.handle(&req).unwrap();
        let d = r.dr.unwrap();
        assert!(d.returning && d.hop_ptr == 0 && d.return_path[1] == PORT, "{d:?}");
        assert_eq!(r.method, method::GET_RESP);
        // Not the end of the path (a CA forwards nothing), and responses: no answer.
        let mut dr = DirectedRoute::outbound(&[1, 2]).unwrap();
        dr.hop_ptr = 1;
        assert!(sma.handle(&SmpRepr::request(method::GET, 2, attr::NODE_INFO, 0, Some(dr))).is_none());
        assert!(sma.handle(&r).is_none());
        // INIT -> ACTIVE directly is refused; ARMED then ACTIVE is not.
        assert_eq!(set_state(&mut sma, port_state::ACTIVE), status::INVALID_VALUE);
        assert_eq!(sma.mgmt.state, port_state::INIT);
        assert_eq!(set_state(&mut sma, port_state::ARMED), 0);
        assert_eq!(set_state(&mut sma, port_state::ACTIVE), 0);
        assert_eq!(sma.mgmt.state, port_state::ACTIVE);
        assert_eq!(set_state(&mut sma, port_state::DOWN), 0);
        assert_eq!(sma.mgmt.state, port_state::INIT, "Down retrains the link");
        let unknown = SmpRepr::request(method::GET, 3, attr::SWITCH_INFO, 0, None);
        assert_eq!(sma.handle(&unknown).unwrap().status, status::UNSUPPORTED_ATTRIBUTE);
    }
}
