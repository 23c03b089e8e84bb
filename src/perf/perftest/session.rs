//! A side set up against a perftest peer: the set-up exchange, the
//! resources, the hand shakes and the connection, by hand or (`-R`) over
//! the RDMA CM ([`crate::perf::rdma_cm::test_conns`]), and the hang-up.

use super::{checkable, dests, idle, layout, peer_of, Dest, Link, Script};
use crate::perf::oob::SideInfo;
use crate::perf::rdma_cm::test_conns::TestConns;
use crate::perf::side::Side;
use crate::perf::{Config, PerfError};

/// A side set up against a perftest peer and connected to it: the agreed
/// parameters, this side's resources and entries, the peer's QPs.
pub struct Session {
    /// The run's options with the agreed MTU (and `--verify` narrowed to
    /// what a perftest peer lets one check).
    pub cfg: Config,
    pub side: Side,
    pub mine: Vec<Dest>,
    pub peer: SideInfo,
    pub script: Script,
    /// The agreed cycle buffer and cache line.
    pub cycle: usize,
    pub cache: usize,
    /// With `-R`: the test QPs' connections over the RDMA CM.
    pub conns: Option<TestConns>,
}

impl Session {
    /// The set-up exchange, the resources, the hand shakes before the
    /// connection, and the connection.
    pub fn connect(cfg: &Config, link: &mut Link) -> Result<Session, PerfError> {
        let (cycle, cache, mtu) = link.set_up(cfg.mtu)?;
        let cfg = Config { mtu, verify: cfg.verify && checkable(cfg), ..cfg.clone() };
        let device = cfg.device();
        let layout = layout(&cfg, cycle, cache);
        // The peer's page size cuts this side's buffers: say so if it is too much.
        crate::perf::budget::check_side(&cfg, &layout).map_err(|mut e| {
            e.what = format!("the peer's page of {cycle} bytes (cache line {cache}): {}", e.what);
            e
        })?;
        let (side, conns) = if link.control().is_some() {
            // -R: the QPs are made on CM IDs and connected over the CM now
            let (side, conns) = crate::perf::rdma_cm::test_conns::connect_tests(&cfg, link, layout)?;
            (side, Some(conns))
        } else {
            (Side::open(cfg.bind, &cfg, device, layout)?, None)
        };
        // Over the CM the path MTU is the CM's (the REQ's), whatever was exchanged.
        let cfg = match (&conns, side.qps.first()) {
            (Some(_), Some(qp)) => Config { mtu: qp.query()?.1.mtu, ..cfg },
            _ => cfg,
        };
        let script = Script::of(cfg.test, cfg.qps);
        let mine = dests(&side)?;
        let mut s = Session { peer: peer_of(&[], &cfg, cycle, cache), cfg, side, mine, script, cycle, cache, conns };
        let theirs = s.shake(link, &s.script.before.clone())?;
        s.peer = peer_of(&theirs[theirs.len() - s.cfg.qps..], &s.cfg, cycle, cache);
        // the targets the peer's cycle buffer makes this side track
        s.peer.check(s.cfg.qps, s.cfg.mem_budget)?;
        if s.conns.is_none() {
            s.side.connect(&s.peer, &s.cfg)?;
        }
        Ok(s)
    }

    /// With `-R`: the test connections and the control connection closed
    /// as perftest closes them.
    pub fn hang_up(&self, link: &mut Link) {
        if let Some(c) = &self.conns {
            c.hang_up(link);
        }
    }

    /// The hand shakes of `order` (indices into this side's entries),
    /// keeping the engine going meanwhile; the peer's entries.
    pub fn shake(&self, link: &mut Link, order: &[usize]) -> Result<Vec<Dest>, PerfError> {
        let picked: Vec<Dest> = order.iter().map(|&k| self.mine[k]).collect();
        let mut idle = idle(&self.side);
        Ok(link.hand_shakes(&picked, crate::perf::oob::OOB_TIMEOUT, &mut idle)?)
    }
}
