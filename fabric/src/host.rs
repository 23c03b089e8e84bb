//! A host: a real `rdma_transport::Endpoint` behind one NIC port, and the
//! flows (RC QPs doing RDMA WRITEs) it sends or receives.

use rdma_transport::cc::ControllerFactory;
use rdma_transport::sim::{bring_up_av, PairConfig};
use rdma_transport::{
    Access, AddressVector, CqId, Endpoint, Instant, Mtu, QpInitAttr, QpType, RegionMemory, SendOp, SendWr, Sge,
};
use rustc_hash::FxHashMap;
use std::net::{IpAddr, Ipv4Addr};

/// The largest message a flow posts; every host registers this much memory.
pub const MAX_MESSAGE: u32 = 64 * 1024;

/// How the QPs of the fabric are set up: 1 KB MTU (as the reference's
/// fluid-model numbers), a short retransmit timeout so a tail drop costs
/// ~0.5 ms rather than the default 4 ms.
pub fn pair_config() -> PairConfig {
    PairConfig { mtu: Mtu::Mtu1024, timeout: 7, mem_len: MAX_MESSAGE as usize, ..PairConfig::default() }
}

/// The ACK timeout exponent (4.096 µs · 2^t) for QPs behind links of
/// `rate_bps` with `buffer_bytes` per port: at least [`pair_config`]'s,
/// and longer than a full queue takes to drain (with a quarter to spare),
/// so that a slow link times out on a loss, never on queueing alone. At
/// 40 Gb/s every scenario keeps 7; at 0.5 Gb/s a 2 MB queue needs 14.
pub fn ack_timeout_for(rate_bps: u64, buffer_bytes: u64) -> u8 {
    let drain_ns = (buffer_bytes as f64 * 8.0 * 1e9 / rate_bps.max(1) as f64) * 1.25;
    (pair_config().timeout..=31).find(|&t| 4096.0 * f64::from(1u32 << t) >= drain_ns).unwrap_or(31)
}

#[derive(Debug)]
pub struct Host {
    pub ep: Endpoint,
    pub addr: Ipv4Addr,
    pd: rdma_transport::Pd,
    pub cq: CqId,
    pub va: u64,
    pub lkey: u32,
    pub rkey: u32,
    /// The host's one region ([`MAX_MESSAGE`] bytes at `va`): the source
    /// of its WRITEs and their sink.
    pub memory: RegionMemory,
    /// Data (ECN-capable) bytes received, by source address: what the
    /// network delivered to this host, retransmissions included.
    pub rx_data_bytes: FxHashMap<Ipv4Addr, u64>,
    /// The ACK timeout its QPs connect with ([`ack_timeout_for`]).
    pub ack_timeout: u8,
}

impl Host {
    pub fn new(index: usize, addr: Ipv4Addr, seed: u64, cc: Option<std::sync::Arc<dyn ControllerFactory>>) -> Host {
        let mut ep = Endpoint::with_seed(IpAddr::V4(addr), seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        ep.set_controller(cc);
        // Payloads stay in the region until delivery (crate::packet).
        ep.set_payload_by_reference(true);
        let pd = ep.alloc_pd();
        let cq = ep.create_cq(65536);
        let va = 0x7f00_0000_0000 + (index as u64) * 0x1_0000_0000;
        let memory = RegionMemory::zeroed(MAX_MESSAGE as usize);
        let (lkey, rkey) = ep.reg_mr(pd, va, memory.clone(), Access::ALL);
        Host {
            ep,
            addr,
            pd,
            cq,
            va,
            lkey,
            rkey,
            memory,
            rx_data_bytes: FxHashMap::default(),
            ack_timeout: pair_config().timeout,
        }
    }

    pub fn create_qp(&mut self) -> u32 {
        let cfg = pair_config();
        self.ep
            .create_qp(QpInitAttr {
                qp_type: QpType::Rc,
                pd: self.pd,
                send_cq: self.cq,
                recv_cq: self.cq,
                srq: None,
                cap: cfg.cap,
                sq_sig_all: false,
            })
            .expect("the host's CQ exists")
    }
}

/// One sender-to-receiver RC connection moving `size` bytes (or forever)
/// as RDMA WRITEs of at most [`MAX_MESSAGE`] bytes, with a few in flight.
#[derive(Debug, Clone)]
pub struct Flow {
    pub src: usize,
    pub dst: usize,
    pub src_qpn: u32,
    pub dst_qpn: u32,
    /// `None`: a long flow that never ends.
    pub size: Option<u64>,
    pub start: Instant,
    pub posted: u64,
    pub completed: u64,
    pub outstanding: u32,
    pub finish: Option<Instant>,
    pub failed: bool,
    /// When each outstanding WRITE was posted (RC completes in order).
    pub posted_at: std::collections::VecDeque<Instant>,
}

/// Work requests a flow keeps posted, enough to keep a 40G link busy.
pub const WINDOW: u32 = 4;

/// Connects a flow's two QPs over RoCE (the peers by IP address).
pub fn connect(hosts: &mut [Host], src: usize, dst: usize) -> (u32, u32) {
    let (sa, da) = (IpAddr::V4(hosts[src].addr), IpAddr::V4(hosts[dst].addr));
    connect_with(hosts, src, dst, AddressVector::new(da), AddressVector::new(sa))
}

/// Connects a flow's two QPs with the steps `transport::sim::bring_up`
/// takes, `src` towards `to_dst` and `dst` towards `to_src` (GIDs on RoCE,
/// LIDs on native IB).
pub fn connect_with(
    hosts: &mut [Host],
    src: usize,
    dst: usize,
    to_dst: AddressVector,
    to_src: AddressVector,
) -> (u32, u32) {
    let cfg = PairConfig { timeout: hosts[src].ack_timeout.max(hosts[dst].ack_timeout), ..pair_config() };
    let s = hosts[src].create_qp();
    let d = hosts[dst].create_qp();
    bring_up_av(&mut hosts[src].ep, s, to_dst, d, cfg.b_psn, cfg.a_psn, &cfg);
    bring_up_av(&mut hosts[dst].ep, d, to_src, s, cfg.a_psn, cfg.b_psn, &cfg);
    (s, d)
}

impl Flow {
    /// Finished or failed: nothing more will happen to it.
    pub fn done(&self) -> bool {
        self.finish.is_some() || self.failed
    }

    /// Posts WRITEs until the window is full or the flow's bytes are all posted.
    pub fn top_up(&mut self, hosts: &mut [Host], now: Instant) {
        let remote = (hosts[self.dst].va, hosts[self.dst].rkey);
        self.top_up_on(&mut hosts[self.src], remote, now);
    }

    /// As [`Self::top_up`], given the sender's host and the receiver's
    /// (VA, rkey): what a partition of the parallel loop can reach.
    pub fn top_up_on(&mut self, src: &mut Host, (rva, rkey): (u64, u32), now: Instant) {
        while self.outstanding < WINDOW && self.size.is_none_or(|s| self.posted < s) {
            let len = self.size.map_or(MAX_MESSAGE as u64, |s| (s - self.posted).min(MAX_MESSAGE as u64)) as u32;
            let (va, lkey) = (src.va, src.lkey);
            let wr = SendWr::new(
                self.posted,
                SendOp::RdmaWrite { remote_addr: rva, rkey },
                vec![Sge { addr: va, length: len, lkey }],
            );
            if src.ep.post_send(self.src_qpn, wr).is_err() {
                self.failed = true;
                return;
            }
            self.posted += u64::from(len);
            self.outstanding += 1;
            self.posted_at.push_back(now);
        }
    }
}
