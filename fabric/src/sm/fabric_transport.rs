//! The emulated fabric as an SMP transport: the SM sits on one HCA; its
//! SMPs go out as VL15 packets and the event loop runs until the answer
//! with the same TID comes back (or a virtual-time timeout).

use super::{SmError, SmpTransport};
use crate::fabric::Fabric;
use crate::ib::netfile;
use crate::ib::IbConfig;
use crate::link::Link;
use crate::switch::Red;
use crate::topology::{Node, Settings, Topology};
use core::time::Duration;
use rdma_transport::Instant;
use rdma_wire::smp::{SmpRepr, PERMISSIVE_LID};

/// How long (virtual time) the SM waits for an answer.
pub const TIMEOUT: Duration = Duration::from_millis(1);

#[derive(Debug)]
pub struct FabricTransport {
    pub fab: Fabric,
    /// The node (an HCA) the SM runs on.
    pub sm_node: usize,
    /// Where a LID-routed SMP goes (its LRH DLID).
    pub lid_routed_dlid: u16,
}

impl FabricTransport {
    pub fn new(fab: Fabric, sm_node: usize) -> FabricTransport {
        FabricTransport { fab, sm_node, lid_routed_dlid: PERMISSIVE_LID }
    }
}

impl SmpTransport for FabricTransport {
    fn exchange(&mut self, req: &SmpRepr) -> Result<SmpRepr, SmError> {
        let Some(mut dr) = req.dr else {
            return self.exchange_lid_routed(req);
        };
        if dr.hop_cnt == 0 {
            // The SM's own HCA: no wire.
            let mut r = self.fab.sma(self.sm_node, 0, req);
            if let Some(d) = r.dr.as_mut() {
                d.returning = true;
            }
            return Ok(r);
        }
        let out = dr.initial_path[1];
        let Some(fp) = self.fab.topo.ident[self.sm_node].fabric_port(out) else {
            return Err(SmError::Transport(format!("the SM's node has no port {out}")));
        };
        dr.hop_ptr = 1;
        let mut s = *req;
        s.dr = Some(dr);
        self.fab.send_smp(self.sm_node, fp, &s, PERMISSIVE_LID, PERMISSIVE_LID);
        self.await_answer(req)
    }
}

impl FabricTransport {
    /// A LID-routed SMP: its destination is the LRH's, which the caller
    /// puts in [`Self::lid_routed_dlid`].
    fn exchange_lid_routed(&mut self, req: &SmpRepr) -> Result<SmpRepr, SmError> {
        let dlid = self.lid_routed_dlid;
        let own = self.fab.topo.lids[self.sm_node];
        if dlid == own {
            return Ok(self.fab.sma(self.sm_node, 0, req));
        }
        self.fab.send_smp(self.sm_node, 0, req, own, dlid);
        self.await_answer(req)
    }

    /// Runs the fabric until the answer to `req` reaches the SM's node.
    fn await_answer(&mut self, req: &SmpRepr) -> Result<SmpRepr, SmError> {
        let deadline = self.fab.now + TIMEOUT;
        while self.fab.now < deadline {
            let step = self.fab.now + Duration::from_micros(2);
            self.fab.run(step, false, &mut |_| {});
            let inbox = &mut self.fab.sm_inbox;
            if let Some(i) = inbox.iter().position(|(n, r)| *n == self.sm_node && r.tid == req.tid) {
                return Ok(inbox.remove(i).1);
            }
        }
        let path = req.dr.map_or(Vec::new(), |dr| dr.initial_path[1..=usize::from(dr.hop_cnt)].to_vec());
        Err(SmError::Timeout { attr: super::attr_name(req.attr_id), path })
    }
}

/// 40G links of 1 µs, as the scenarios use.
pub fn default_settings() -> Settings {
    Settings {
        link: Link::new(40_000_000_000, Duration::from_micros(1)),
        red: Red::PAPER,
        buffer_bytes: 300_000,
        shared_buffer_bytes: None,
        cc: None,
        seed: 1,
        pfc: None,
    }
}

/// An unconfigured emulated fabric from an ibsim net file, with the SM on
/// the HCA named `host` (None: the first HCA in the file).
pub fn from_netfile(text: &str, host: Option<&str>, cfg: &IbConfig) -> Result<FabricTransport, SmError> {
    let nodes = netfile::parse(text).map_err(|e| SmError::Transport(e.to_string()))?;
    let mut t = Topology::from_netfile(&nodes, &default_settings()).map_err(|e| SmError::Transport(e.to_string()))?;
    t.make_ib_unconfigured(cfg);
    let sm_node = match host {
        Some(h) => t.ident.iter().position(|i| i.name == h),
        None => t.nodes.iter().position(|n| matches!(n, Node::Host(_))),
    }
    .filter(|&n| matches!(t.nodes[n], Node::Host(_)))
    .ok_or_else(|| SmError::Transport(format!("no HCA named {host:?} in the net file")))?;
    let mut fab = Fabric::new(t, 1);
    // Let the links initialise (the first flow-control round).
    fab.run(Instant::ZERO + Duration::from_micros(10), false, &mut |_| {});
    Ok(FabricTransport::new(fab, sm_node))
}

/// `rdma-sm --emulated SPEC`: SPEC is an ibsim net file; the SM attaches
/// at `SIM_HOST` if set, as with ibsim.
pub fn emulated(spec: &str) -> Result<FabricTransport, SmError> {
    let text = std::fs::read_to_string(spec).map_err(|e| SmError::Transport(format!("{spec}: {e}")))?;
    let host = std::env::var("SIM_HOST").ok();
    from_netfile(&text, host.as_deref(), &IbConfig::default())
}
