//! Two soft devices on loopback addresses of their own, with one QP each,
//! connected through the verbs API: the fixture of the UDP tests.
#![allow(dead_code)]

use rdma_core_rs::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

pub const WAIT: Option<Duration> = Some(Duration::from_secs(10));

/// Two fresh loopback addresses (127.x.y.1 and .2), so tests running in
/// parallel never share UDP port 4791.
pub fn addresses() -> (IpAddr, IpAddr) {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let x = 10 + (std::process::id() % 200) as u8;
    (IpAddr::V4(Ipv4Addr::new(127, x, n, 1)), IpAddr::V4(Ipv4Addr::new(127, x, n, 2)))
}

pub struct Side {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub mr: MemoryRegion,
}

impl Side {
    pub fn new(
        name: &str,
        addr: IpAddr,
        qp_type: QpType,
        config: DeviceConfig,
        srq: Option<u32>,
    ) -> (Side, Option<SharedReceiveQueue>) {
        let dev = Device::with_config(name, addr, config).expect("device");
        let ctx = dev.open().expect("open");
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4096, None).unwrap();
        let srq = srq.map(|n| pd.create_srq(n, 0).unwrap());
        let mut attr = QpInitAttr::new(qp_type, &cq);
        attr.srq = srq.as_ref();
        attr.cap = QpCap { max_send_wr: 1024, max_recv_wr: 1024, ..QpCap::default() };
        let qp = pd.create_qp(&attr).unwrap();
        let mr = pd.reg_mr(1 << 20, Access::ALL).unwrap();
        (Side { ctx, pd, cq, qp, mr }, srq)
    }

    pub fn info(&self, psn: u32) -> PeerInfo {
        PeerInfo { qpn: self.qp.qp_num(), psn, gid: self.ctx.query_gid(0).unwrap() }
    }

    /// Waits for one completion.
    pub fn wait_one(&self) -> WorkCompletion {
        let mut out = Vec::new();
        let n = self.cq.wait(&mut out, 1, WAIT).unwrap();
        assert_eq!(n, 1, "no completion within {WAIT:?}; stats: {:?}", self.ctx.stats());
        out[0]
    }

    /// Waits for one completion while the peer makes progress too (both
    /// sides in one thread, manual progress).
    pub fn wait_one_with(&self, peer: &Side) -> WorkCompletion {
        let mut out = Vec::new();
        let start = std::time::Instant::now();
        while start.elapsed() < WAIT.unwrap() {
            peer.ctx.progress().unwrap();
            if self.cq.wait(&mut out, 1, Some(Duration::from_millis(1))).unwrap() == 1 {
                return out[0];
            }
        }
        panic!("no completion within {WAIT:?}; stats: {:?} / peer {:?}", self.ctx.stats(), peer.ctx.stats());
    }
}

/// Two connected QPs of `qp_type`, each side's device with `config`.
pub fn pair_with(qp_type: QpType, config: DeviceConfig, opts: ConnectOptions) -> (Side, Side) {
    let (a_ip, b_ip) = addresses();
    let (a, _) = Side::new(&format!("rxe-{a_ip}"), a_ip, qp_type, config.clone(), None);
    let (b, _) = Side::new(&format!("rxe-{b_ip}"), b_ip, qp_type, config, None);
    a.qp.connect(0x100, &b.info(0x200), &opts).unwrap();
    b.qp.connect(0x200, &a.info(0x100), &opts).unwrap();
    (a, b)
}

pub fn pair(qp_type: QpType) -> (Side, Side) {
    pair_with(
        qp_type,
        DeviceConfig { progress: Progress::Thread, ..DeviceConfig::default() },
        ConnectOptions::default(),
    )
}

/// An RDMA WRITE of `len` bytes at `off` of `a`'s region to `roff` of `b`'s.
pub fn write_wr(id: u64, a: &Side, off: usize, len: u32, b: &Side, roff: u64) -> SendWr {
    SendWr::new(
        id,
        SendOp::RdmaWrite { remote_addr: b.mr.addr() + roff, rkey: b.mr.rkey() },
        vec![a.mr.sge(off, len).unwrap()],
    )
}

/// A recognisable pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// A new RC QP on each side (on their CQs), connected to each other: `a`
/// sends from PSN `psn`, `b` from `psn + 1000`.
pub fn connected_qps(a: &Side, b: &Side, opts: &ConnectOptions, psn: u32) -> (QueuePair, QueuePair) {
    let mk = |s: &Side| s.pd.create_qp(&QpInitAttr::new(QpType::Rc, &s.cq)).unwrap();
    let (qa, qb) = (mk(a), mk(b));
    connect_pair((a, &qa), (b, &qb), opts, psn);
    (qa, qb)
}

/// Connects QP `qa` of device `a` and `qb` of `b` to each other: `qa`
/// sends from PSN `psn`, `qb` from `psn + 1000`.
pub fn connect_pair(a: (&Side, &QueuePair), b: (&Side, &QueuePair), opts: &ConnectOptions, psn: u32) {
    let ((a, qa), (b, qb)) = (a, b);
    let gid = |s: &Side| s.ctx.query_gid(0).unwrap();
    qa.connect(psn, &PeerInfo { qpn: qb.qp_num(), psn: psn + 1000, gid: gid(b) }, opts).unwrap();
    qb.connect(psn + 1000, &PeerInfo { qpn: qa.qp_num(), psn, gid: gid(a) }, opts).unwrap();
}

/// A device whose progress only its own calls drive (a test that watches
/// its events waits on them), opened, and a peer `Side` (RC) whose thread
/// drives its own: devices `{name}-a` and `{name}-b`.
pub fn manual_against_threaded(name: &str) -> (Context, Side) {
    let (a_ip, b_ip) = addresses();
    let dev = Device::with_config(&format!("{name}-a"), a_ip, DeviceConfig::default()).unwrap();
    let cfg = DeviceConfig { progress: Progress::Thread, ..DeviceConfig::default() };
    let (b, _) = Side::new(&format!("{name}-b"), b_ip, QpType::Rc, cfg, None);
    (dev.open().unwrap(), b)
}

/// Connects `qp` (of `ctx`, from PSN 5) and `b`'s QP (from PSN 6) to each other.
pub fn connect_to_side(qp: &QueuePair, ctx: &Context, b: &Side) {
    let opts = ConnectOptions::default();
    qp.connect(5, &b.info(6), &opts).unwrap();
    b.qp.connect(6, &PeerInfo { qpn: qp.qp_num(), psn: 5, gid: ctx.query_gid(0).unwrap() }, &opts).unwrap();
}
