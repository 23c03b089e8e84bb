//! One side's resources: the device, a CQ, the QPs, and one memory region
//! cut into slots (per QP, one slot per message in flight), plus the data
//! patterns `--verify` checks.
//!
//! How the region is cut is [`super::layout`]'s.

pub use super::layout::{layout, slots_for, Layout};
use super::oob::SideInfo;
use super::{Config, PerfError};
use rdma_core_rs::*;
use std::net::IpAddr;
use std::result::Result;
use std::sync::Arc;

/// Makes QP `q` of a side with its PD and attributes (on the RDMA CM: on
/// the QP's CM ID).
pub type MakeQp<'a> = dyn FnMut(&ProtectionDomain, &QpInitAttr<'_>, usize) -> Result<Arc<QueuePair>, PerfError> + 'a;

pub struct Side {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub cq: CompletionQueue,
    /// Shared: a QP connected over the RDMA CM (`-R`) is its CM ID's too.
    pub qps: Vec<Arc<QueuePair>>,
    pub mr: MemoryRegion,
    pub slots: usize,
    pub slot_len: usize,
    /// Distinct buffers per QP: slot `s` is buffer `s % buffers`.
    pub buffers: usize,
    pub psns: Vec<u32>,
    pub latency: bool,
    /// The capacities every QP of this side is made with.
    pub qp_cap: QpCap,
}

/// RDMA READs and atomics a side takes in flight per QP (and asks for):
/// kernel Soft-RoCE's `max_qp_rd_atom`, which perftest uses when `-o` is
/// not given (it takes the device's maximum). A peer that announces fewer
/// (a ConnectX announces 16) gets as many as it announces.
pub const OUT_READS: u32 = 128;

fn initial_psn(seed: u64) -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut x = t ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x >> 40) as u32 & 0xff_ffff
}

impl Side {
    /// Opens a device on `addr` and makes the resources of `cfg`, cut as
    /// `layout` says.
    pub fn open(addr: IpAddr, cfg: &Config, config: DeviceConfig, layout: Layout) -> Result<Side, PerfError> {
        // Before anything is made: the layout may come from a peer's numbers.
        super::budget::check_side(cfg, &layout)?;
        let ctx = open_context(addr, cfg, config)?;
        Side::on(ctx, cfg, layout, &mut |pd, attr, _| Ok(Arc::new(pd.create_qp(attr)?)))
    }

    /// The resources of `cfg` on an open device; `make_qp` makes QP `q`
    /// (on the RDMA CM: on its CM ID) with the side's PD and attributes.
    pub fn on(ctx: Context, cfg: &Config, layout: Layout, make_qp: &mut MakeQp<'_>) -> Result<Side, PerfError> {
        super::budget::check_side(cfg, &layout)?;
        let addr = ctx.device().addr();
        let pd = ctx.alloc_pd()?;
        let Layout { slots, slot_len, buffers } = layout;
        let depth = cfg.qps.saturating_mul(slots.saturating_add(cfg.tx_depth)).saturating_mul(2).max(64);
        let cq = ctx.create_cq(depth, None)?;
        let wrs = u32::try_from(cfg.tx_depth.max(slots).saturating_add(8)).unwrap_or(u32::MAX);
        let qp_cap = QpCap { max_send_wr: wrs, max_recv_wr: wrs, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let mut qps = Vec::with_capacity(cfg.qps);
        let mut psns = Vec::with_capacity(cfg.qps);
        for q in 0..cfg.qps {
            let mut attr = QpInitAttr::new(QpType::Rc, &cq);
            attr.cap = qp_cap;
            qps.push(make_qp(&pd, &attr, q)?);
            psns.push(initial_psn(q as u64 + u64::from(addr.is_ipv4())));
        }
        let mr = pd.reg_mr(cfg.qps * buffers * slot_len, Access::ALL)?;
        Ok(Side { ctx, pd, cq, qps, mr, slots, slot_len, buffers, psns, latency: cfg.test.is_latency(), qp_cap })
    }

    /// Replaces QP `q` with one `make_qp` makes (a new CM ID's, when a
    /// connection attempt over the RDMA CM is made again).
    pub fn remake_qp(&mut self, q: usize, make_qp: &mut MakeQp<'_>) -> Result<(), PerfError> {
        let mut attr = QpInitAttr::new(QpType::Rc, &self.cq);
        attr.cap = self.qp_cap;
        self.qps[q] = make_qp(&self.pd, &attr, q)?;
        Ok(())
    }

    pub fn info(&self) -> Result<SideInfo, PerfError> {
        let n = self.qps.len();
        Ok(SideInfo {
            qpns: self.qps.iter().map(|q| q.qp_num()).collect(),
            psns: self.psns.clone(),
            gid: self.ctx.query_gid(0)?.to_wire_hex(),
            lid: self.ctx.lid(),
            addrs: (0..n).map(|q| self.mr.addr() + self.target(q, 0) as u64).collect(),
            rkeys: vec![self.mr.rkey(); n],
            slots: if self.latency { 1 } else { self.buffers },
            slot_len: self.slot_len,
            out_reads: OUT_READS,
        })
    }

    /// Offset of target `s` of QP `q`: where the peer's message `s` lands
    /// (latency tests: slot 1, slot 0 being what this side sends from).
    pub fn target(&self, q: usize, s: usize) -> usize {
        if self.latency {
            self.offset(0, 1)
        } else {
            self.offset(q, s)
        }
    }

    /// Brings every QP up towards the peer's matching QP.
    pub fn connect(&self, peer: &SideInfo, cfg: &Config) -> Result<(), PerfError> {
        if peer.qpns.len() != self.qps.len() || peer.psns.len() != self.qps.len() {
            return Err(PerfError::Peer(format!("the peer has {} QPs, this side {}", peer.qpns.len(), self.qps.len())));
        }
        let gid = Gid::from_wire_hex(&peer.gid)
            .ok_or_else(|| PerfError::Peer(format!("bad GID {:?} from the peer", peer.gid)))?;
        let max_rd_atomic = peer.out_reads.clamp(1, OUT_READS) as u8;
        let opts = ConnectOptions {
            mtu: cfg.mtu,
            max_rd_atomic,
            traffic_class: cfg.tos,
            pkey_index: cfg.pkey_index,
            dlid: peer.lid,
            ..ConnectOptions::default()
        };
        for (q, qp) in self.qps.iter().enumerate() {
            qp.connect(self.psns[q], &PeerInfo { qpn: peer.qpns[q], psn: peer.psns[q], gid }, &opts)?;
        }
        Ok(())
    }

    /// Offset of slot `s` of QP `q` in the region.
    pub fn offset(&self, q: usize, s: usize) -> usize {
        (q * self.buffers + s % self.buffers) * self.slot_len
    }

    /// A scatter/gather element over `len` bytes of slot `s` of QP `q`.
    pub fn sge(&self, q: usize, s: usize, len: usize) -> Sge {
        Sge { addr: self.mr.addr() + self.offset(q, s) as u64, length: len as u32, lkey: self.mr.lkey() }
    }
}

/// Opens the device of this side on `addr` (the backend of `cfg`).
pub fn open_context(addr: IpAddr, cfg: &Config, config: DeviceConfig) -> Result<Context, PerfError> {
    // In --loopback the server is the second device on the in-process link.
    let primary = !matches!(cfg.role, super::Role::Loopback { .. }) || addr == cfg.bind;
    let fabric = format!("rdma-perf-{}-{}", std::process::id(), cfg.port);
    let dev = cfg.link.device(&format!("rxe-perf-{addr}"), addr, &fabric, primary, config)?;
    Ok(dev.open()?)
}

/// Where message `i` of QP `q` goes in the peer's memory.
pub fn remote_addr(peer: &SideInfo, q: usize, i: u64) -> u64 {
    // The peer's numbers: wrapping, as the responder checks what arrives.
    let slot = (i % peer.slots.max(1) as u64).wrapping_mul(peer.slot_len as u64);
    peer.addrs[q].wrapping_add(slot)
}

/// The bytes message `iter` of QP `q` carries: a stream no other message
/// repeats, cheap to make and to check.
pub fn pattern(buf: &mut [u8], q: usize, iter: u64) {
    let mut x = (iter ^ ((q as u64) << 48)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// The marker in the last byte of a latency-test WRITE, which the other
/// side polls for: perftest's, the iteration count from 1, modulo 256
/// (always different from the previous one).
pub fn marker(iter: u64) -> u8 {
    (iter + 1) as u8
}

/// A write-lat message: the pattern with the marker in its last byte.
pub fn lat_message(buf: &mut [u8], iter: u64) {
    pattern(buf, 0, iter);
    if let Some(last) = buf.last_mut() {
        *last = marker(iter);
    }
}

/// Whether `got` is write-lat message `iter` as `writer` should have written it.
pub fn check_lat(got: &[u8], iter: u64, writer: &str) -> Result<(), String> {
    let mut want = vec![0u8; got.len()];
    lat_message(&mut want, iter);
    if got == want {
        Ok(())
    } else {
        Err(format!("write-lat: message {iter} differs from what {writer} wrote"))
    }
}

/// The first mismatch between `got` and message `iter` of QP `q`.
pub fn check(got: &[u8], q: usize, iter: u64, what: &str) -> Result<(), String> {
    let mut want = vec![0u8; got.len()];
    pattern(&mut want, q, iter);
    match got.iter().zip(&want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => {
            Err(format!("{what}: QP {q} message {iter}: byte {i} is {:#04x}, expected {:#04x}", got[i], want[i]))
        }
    }
}

/// Records the first verification failure and keeps going.
pub fn note(slot: &mut Option<String>, r: Result<(), String>) {
    if let (None, Err(e)) = (&*slot, r) {
        *slot = Some(e);
    }
}
