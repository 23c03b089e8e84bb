//! The endpoint: one soft RDMA device's worth of state (memory regions,
//! completion queues, shared receive queues, queue pairs) behind a
//! sans-IO interface, in the style of quinn-proto:
//!
//! - [`Endpoint::handle_packet`]: a received packet of the device's link
//!   kind (RoCE v2 IP packet, RoCE v1 GRH packet, native IB LRH packet;
//!   [`Endpoint::set_link`]);
//! - [`Endpoint::poll_transmit`]: the next packet to send, written into
//!   the caller's buffer;
//! - [`Endpoint::poll_timeout`] / [`Endpoint::handle_timeout`]: the next
//!   deadline, and what to do when it passes;
//! - [`Endpoint::poll_cq`]: work completions.
//!
//! The endpoint never reads a clock or touches a socket; drivers (UDP,
//! raw packets, the simulator in [`crate::sim`]) are loops around it.
//!
//! This file is the façade: the device struct, its construction, the
//! verbs (PDs, MRs, CQs, SRQs, QPs, posting) and the timers. The receive
//! path (checks and dispatch) is in `endpoint/rx.rs`, the transmit
//! scheduler in `endpoint/sched.rs` (child modules, so that the
//! device's fields stay private to it). Its state is grouped by owner:
//! the port (framing, addresses, P_Keys, LID paths: `endpoint/port.rs`),
//! the tables (`memory.rs`, `cq.rs`, `srq.rs`, `mcast.rs`, the QPs and
//! their numbers, `qpn_alloc.rs`), the transmit scheduler
//! (`endpoint/scheduler.rs`), congestion control's settings
//! (`cc/settings.rs`), QP1 (`endpoint/gsi_slot.rs`), and the counters and
//! events (`stats.rs`, `events.rs`).

use crate::cc::settings::CcSettings;
use crate::cc::wired::QpCc;
use crate::cc::{ControllerFactory, DcqcnParams, HopTelemetry};
use crate::error::{DeregError, VerbsError};
use crate::framing::LinkKind;
use crate::gsi::{Gsi, MadTimeout, OutgoingMad, ReceivedMad};
use crate::mcast::{McastError, McastTable};
use crate::memory::{Access, MemoryRegion, MemoryTable, Pd, RegionMemory};
use crate::qp::{AddressVector, CqId, Qp, QpAttr, QpInitAttr, QpParams, QpState, QpType, SrqId, XrcdId};
use crate::qpn_alloc::QpnAllocator;
use crate::rng::Rng;
use crate::stats::QpStats;
use crate::time::Instant;
use crate::timers::Timer;
use crate::window::{MemoryWindow, MwId, MwType};
use crate::wr::{RecvWr, SendOp, SendWr, WorkCompletion};
use core::net::IpAddr;
use core::time::Duration;
use gsi_slot::GsiSlot;
use port::Port;
use qp_table::QpTable;
use rdma_wire::{IdentRecovery, Psn};
use std::collections::VecDeque;

mod agenda;
mod deadlines;
mod gsi_slot;
mod port;
mod qp_table;
mod qpn_bits;
mod rx;
mod sched;
mod scheduler;
mod transmit;

// Everything that lived in this file before the split stays reachable
// at its old path.
pub use crate::cq::CqTable;
pub use crate::events::AsyncEvent;
pub use crate::srq::SrqTable;
pub use crate::stats::{Drop, Stats};
pub use transmit::{Transmit, MAX_PACKET, TX_BURST};

pub use port::DEFAULT_PKEY;
/// Entries a port's P_Key table can hold.
pub const MAX_PKEYS: usize = 16;

/// One soft RDMA device.
#[derive(Debug)]
pub struct Endpoint {
    /// What packets are framed with, addressed by and checked against.
    port: Port,
    mrs: MemoryTable,
    next_pd: u32,
    /// By QPN, in pages of 64 pointers (see `qp_table`): a lookup reads two
    /// lines before the QP, on a device of any size.
    qps: QpTable,
    /// The QPNs this device hands out ([`Endpoint::set_qpn_range`]).
    qpns: QpnAllocator,
    cqs: CqTable,
    srqs: SrqTable,
    stats: Stats,
    /// The transmit scheduler's state (see [`scheduler::Scheduler`]).
    sched: scheduler::Scheduler,
    events: VecDeque<AsyncEvent>,
    /// Congestion control for the QPs, existing and new.
    cc: CcSettings,
    /// QP1, created by the first MAD sent or received.
    gsi: GsiSlot,
    /// Multicast groups and their UD QPs (see [`crate::mcast`]).
    mcast: McastTable,
}

pub use crate::cc::settings::DEFAULT_NP;

impl Endpoint {
    /// A device bound to `local`, its RoCE v2 GID, whose QP numbers and
    /// memory keys are drawn from the operating system's randomness.
    pub fn new(local: IpAddr) -> Endpoint {
        Endpoint::with_rng(local, Rng::from_os())
    }

    /// A device whose QP numbers and keys follow from `seed`: the same
    /// seed gives the same numbers, for simulations that must reproduce.
    pub fn with_seed(local: IpAddr, seed: u64) -> Endpoint {
        Endpoint::with_rng(local, Rng::new(seed))
    }

    fn with_rng(local: IpAddr, mut rng: Rng) -> Endpoint {
        let qpns = QpnAllocator::new(&mut rng);
        let gsi = GsiSlot::new(rng.next_u64());
        Endpoint {
            port: Port::roce_v2(local),
            mrs: MemoryTable::with_rng(rng),
            next_pd: 1,
            qps: QpTable::default(),
            qpns,
            cqs: CqTable::default(),
            srqs: SrqTable::default(),
            stats: Stats::default(),
            sched: scheduler::Scheduler::new(),
            events: VecDeque::new(),
            cc: CcSettings::default(),
            gsi,
            mcast: McastTable::default(),
        }
    }

    /// Turns DCQCN on (`Some`) or off (`None`, the default) for every RC/UC
    /// QP, existing and new: each gets a reaction point that starts at
    /// `line_rate_bps` and a pacer that holds its data packets (requests and
    /// READ responses; never ACKs, NAKs or CNPs) to the reaction point's
    /// rate. Received CNPs then cut the rate. The notification point (CNPs
    /// sent for CE-marked data) runs either way; these parameters set its
    /// interval, mode and CNP DSCP while on, [`DEFAULT_NP`] while off.
    /// Turning it on again starts every QP over at line rate.
    pub fn set_congestion_control(&mut self, params: Option<DcqcnParams>) {
        self.set_controller(params.map(|p| std::sync::Arc::new(p) as std::sync::Arc<dyn ControllerFactory>));
    }

    /// Puts every RC/UC QP, existing and new, under a congestion
    /// controller that `factory` makes (`None`, the default: no rate
    /// control). Each QP gets its own controller and a pacer that holds
    /// its data packets (requests and READ responses; never ACKs, NAKs or
    /// CNPs) to the controller's rate. The notification point (CNPs sent
    /// for CE-marked data) runs either way, with the settings the factory
    /// brings ([`ControllerFactory::notification_point`]: DCQCN's) or
    /// [`DEFAULT_NP`]. Setting it again starts every QP over.
    pub fn set_controller(&mut self, factory: Option<std::sync::Arc<dyn ControllerFactory>>) {
        self.touch();
        self.cc.np = factory.as_ref().and_then(|f| f.notification_point()).unwrap_or(DEFAULT_NP);
        self.cc.factory = factory;
        for qp in self.qps.values_mut() {
            Self::attach_cc(qp, self.cc.factory.as_ref());
        }
    }

    /// The factory in force, if a controller runs.
    pub fn controller(&self) -> Option<&dyn ControllerFactory> {
        self.cc.factory.as_deref()
    }

    /// The DCQCN parameters in force, if DCQCN is the controller.
    pub fn congestion_control(&self) -> Option<&DcqcnParams> {
        self.cc.factory.as_deref()?.as_any().downcast_ref()
    }

    /// A QP's current rate in bits per second, if a controller runs. A
    /// DCQCN QP whose pacer went idle takes the increases due since at
    /// its next send, CNP or due timer; until then this is the rate as of
    /// the last of those ([`crate::cc::Controller::next_timer_on_time`]).
    pub fn qp_rate(&self, qpn: u32) -> Option<u64> {
        self.qps.get(qpn)?.cc.as_ref()?.rate_bps()
    }

    /// In-band network telemetry for QP `qpn`, echoed by the response
    /// naming `acked` that arrived at `now` (the fabric's NIC model hands
    /// it over before the response itself, as HPCC's NIC does). Returns
    /// whether a controller took it: false for an unknown QP or one
    /// without a controller.
    pub fn congestion_telemetry(&mut self, now: Instant, qpn: u32, acked: Psn, hops: &[HopTelemetry]) -> bool {
        let Some(qp) = self.qps.get_mut(qpn) else { return false };
        let next = qp.req.sq.next_psn();
        let Some(cc) = qp.cc.as_mut().filter(|c| c.rate.is_some()) else { return false };
        cc.on_telemetry(now, hops, (acked, next), &mut qp.stats, &mut self.stats, &mut qp.timers);
        self.touch_qp(qpn);
        true
    }

    /// The lowest current rate over the QPs, if a controller runs (each as
    /// [`Endpoint::qp_rate`] gives it).
    pub fn min_qp_rate(&self) -> Option<u64> {
        self.qps.values().filter_map(|q| q.cc.as_ref()?.rate_bps()).min()
    }

    fn attach_cc(qp: &mut Qp, factory: Option<&std::sync::Arc<dyn ControllerFactory>>) {
        if qp.init.qp_type == QpType::Ud {
            return;
        }
        QpCc::attach(&mut qp.cc, factory, &mut qp.timers);
    }

    /// Sets the port's P_Key table (at most [`MAX_PKEYS`] entries, none 0
    /// or 0x8000, the invalid keys). Bit 15 of each key says whether the
    /// port is a full member of that partition; QPs pick one with their
    /// `pkey_index` when they next move to INIT.
    pub fn set_pkey_table(&mut self, pkeys: &[u16]) -> Result<(), VerbsError> {
        if pkeys.is_empty() || pkeys.len() > MAX_PKEYS || pkeys.iter().any(|&k| k & 0x7fff == 0) {
            return Err(VerbsError::InvalidAttribute {
                qpn: 0,
                attr: "P_Key table (1 to 16 keys, none 0x0000 or 0x8000)",
                value: pkeys.len() as u64,
            });
        }
        self.port.pkeys = pkeys.to_vec();
        Ok(())
    }

    /// `ibv_query_pkey`.
    pub fn query_pkey(&self, index: u16) -> Option<u16> {
        self.port.pkeys.get(usize::from(index)).copied()
    }

    /// Tells the endpoint that the IPv4 Identification of received packets
    /// is unknown (a UDP socket does not show it) and that handle_packet
    /// gets it as 0: the ICRC check then solves for the value instead.
    pub fn set_ipv4_ident_unknown(&mut self, unknown: bool) {
        self.port.ident_recovery = unknown.then(IdentRecovery::new);
    }

    /// Whether data packets (requests and READ responses) leave
    /// ECN-capable, ECT(0), when their QP's traffic class has ECN bits 00
    /// (see [`crate::AddressVector::for_data`]); ACKs and NAKs never are.
    /// On by default. Applies to every QP, existing and new.
    pub fn set_ecn_capable(&mut self, on: bool) {
        self.cc.ecn_capable = on;
        for qp in self.qps.values_mut() {
            qp.ecn_capable = on;
        }
    }

    /// Lets packets carry payloads of [`crate::framing::BY_REF_MIN`] bytes
    /// or more by reference to their memory region instead of a copy in
    /// the packet buffer (see [`Transmit::payload`]): for a driver that
    /// hands the kernel the headers, the region's bytes and the trailer
    /// as one scattered send, and so copies each byte once. Off by default:
    /// every packet is then whole in its buffer.
    pub fn set_payload_by_reference(&mut self, on: bool) {
        // Only RoCE v2 packets are sealed apart from their payload (PayloadRef).
        self.port.framer.by_ref = on && self.port.framer.link == LinkKind::RoceV2;
    }

    /// Sets the kind of link the device's packets go over (RoCE v2 by
    /// default): the headers written in front of the BTH and expected on
    /// received packets. `local` stays the port's GID; `lid` is the
    /// port's LID for native IB (the SLID of its packets, and the DLID it
    /// accepts), ignored by RoCE. Set it before creating QPs.
    pub fn set_link(&mut self, link: LinkKind, lid: u16) {
        self.touch();
        self.port.framer.link = link;
        self.port.framer.lid = lid;
        if link != LinkKind::RoceV2 {
            self.port.framer.by_ref = false;
            self.port.ident_recovery = None;
        }
    }

    /// The kind of link the device's packets go over.
    pub fn link(&self) -> LinkKind {
        self.port.framer.link
    }

    /// The port's LID (native IB; 0 on RoCE).
    pub fn lid(&self) -> u16 {
        self.port.framer.lid
    }

    /// Native IB: records that the port of GID `gid` has LID `lid`, for
    /// the MADs and the connected QPs the GSI and the CM address by GID.
    /// (What a path record query answers on a managed fabric.)
    pub fn set_path(&mut self, gid: IpAddr, lid: u16) {
        self.port.paths.set(gid, lid);
    }

    /// Native IB: the LID GID `gid` is known at (set, or learned from a
    /// MAD it sent).
    pub fn path_lid(&self, gid: IpAddr) -> Option<u16> {
        self.port.paths.lid(gid)
    }

    /// The address vector of a peer known by its GID: on native IB with
    /// the LID from the path table (0 if unknown: such packets are
    /// dropped by every port).
    pub fn route(&self, gid: IpAddr) -> AddressVector {
        self.port.paths.route(self.port.framer.link, gid)
    }

    /// The UDP source port a QP sends from (rxe's hash of the QPN by default).
    pub fn qp_src_port(&self, qpn: u32) -> Result<u16, VerbsError> {
        Ok(self.qps.get(qpn).ok_or(VerbsError::NoSuchQp(qpn))?.src_port)
    }

    /// Changes a QP's UDP source port, for a driver that could not bind the
    /// default one. The ICRC covers the port, so the driver must send from it.
    pub fn set_qp_src_port(&mut self, qpn: u32, port: u16) -> Result<(), VerbsError> {
        self.touch();
        self.qps.get_mut(qpn).ok_or(VerbsError::NoSuchQp(qpn))?.src_port = port;
        Ok(())
    }

    pub fn local_addr(&self) -> IpAddr {
        self.port.framer.local
    }

    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.cq_overruns = self.cqs.overruns();
        s.completions = self.cqs.kept();
        s
    }

    /// The PSN the responder of `qpn` expects next: for the engine fuzz
    /// target's oracles, which must tell in-sequence requests from duplicates.
    #[doc(hidden)]
    pub fn expected_psn(&self, qpn: u32) -> Option<u32> {
        self.qps.get(qpn).map(|q| q.resp.epsn.value())
    }

    /// Responses the responder of `qpn` has queued and not yet sent: for
    /// the engine fuzz target's bound on queues.
    #[doc(hidden)]
    pub fn queued_responses(&self, qpn: u32) -> usize {
        self.qps.get(qpn).map_or(0, |q| q.resp.out.len())
    }

    /// Work completions queued so far, counting those a layer above later
    /// lost ([`Endpoint::cq_overrun`]): a change says there are completions
    /// to take (cheap: no copy of the counters).
    pub fn completions_delivered(&self) -> u64 {
        self.cqs.delivered()
    }

    pub fn alloc_pd(&mut self) -> Pd {
        self.next_pd += 1;
        Pd(self.next_pd - 1)
    }

    /// Registers `memory` at address `va`; returns (lkey, rkey).
    pub fn reg_mr(&mut self, pd: Pd, va: u64, memory: RegionMemory, access: Access) -> (u32, u32) {
        self.mrs.register(pd, va, memory, access)
    }

    /// `ibv_rereg_mr`: see [`crate::memory::MemoryTable::reregister`].
    pub fn rereg_mr(
        &mut self,
        key: u32,
        pd: Option<Pd>,
        translation: Option<(u64, RegionMemory)>,
        access: Option<Access>,
    ) -> bool {
        self.mrs.reregister(key, pd, translation, access)
    }

    /// Deregisters the region of `key`; returns whether it existed. Memory
    /// windows still bound to it are unbound first, so that none reaches
    /// memory the caller may now free. `ibv_dereg_mr`, which refuses
    /// instead, is [`Endpoint::try_dereg_mr`].
    pub fn dereg_mr(&mut self, key: u32) -> bool {
        self.mrs.deregister(key)
    }

    /// `ibv_dereg_mr`: deregisters the region of `key`, or refuses while
    /// memory windows are bound to it ([`DeregError::WindowsBound`]; rxe:
    /// EINVAL, IBA 10.6.7.2.6), changing nothing.
    pub fn try_dereg_mr(&mut self, key: u32) -> Result<(), DeregError> {
        if self.mrs.get(key).is_none() {
            return Err(DeregError::NoSuchRegion(key));
        }
        let bound = self.mrs.windows_bound_to(key);
        if bound > 0 {
            return Err(DeregError::WindowsBound { key, bound });
        }
        self.mrs.deregister(key);
        Ok(())
    }

    /// `ibv_alloc_mw`: a new, unbound memory window of `pd`; its handle
    /// and rkey. `None` when the window table is full.
    pub fn alloc_mw(&mut self, pd: Pd, mw_type: MwType) -> Option<(MwId, u32)> {
        self.mrs.alloc_window(pd, mw_type)
    }

    /// `ibv_dealloc_mw`: unbinds and frees a window; returns whether it existed.
    pub fn dealloc_mw(&mut self, id: MwId) -> bool {
        self.touch();
        self.mrs.dealloc_window(id)
    }

    /// The window of a handle: its PD, type, current rkey and binding.
    pub fn mw(&self, id: MwId) -> Option<MemoryWindow> {
        self.mrs.window(id)
    }

    /// The memory window table, for [`Endpoint::share_windows`].
    pub fn window_table(&self) -> crate::window::WindowTable {
        self.mrs.window_table()
    }

    /// Makes this endpoint use `table`, another engine's, for memory
    /// windows: a device of several engines, whose QPs reach a type 1
    /// window bound through any of them, and whose engines' regions have
    /// the same keys (registered in every engine in the same order from
    /// one seed). Call it before any window is allocated here.
    pub fn share_windows(&mut self, table: crate::window::WindowTable) {
        self.mrs.share_window_table(table);
    }

    /// How many memory windows are bound to the region of `key`.
    pub fn windows_bound_to(&self, key: u32) -> usize {
        self.mrs.windows_bound_to(key)
    }

    /// `ibv_advise_mr` with a prefetch advice: every SGE must name an
    /// on-demand region of `pd` ([`crate::memory::AccessError::NotOnDemand`]
    /// otherwise) that holds its range and, for `write`, allows local
    /// writes; then, if `fault`, its pages are faulted in (for writing if
    /// `write`), and a range that is not mapped is
    /// [`crate::memory::AccessError::Unmapped`]. Without `fault`
    /// (`PREFETCH_NO_FAULT`) only the checks are made: there is no page
    /// table of the device's to fill. Stops at the first failing SGE.
    pub fn advise_mr(
        &self,
        pd: Pd,
        sges: &[crate::Sge],
        write: bool,
        fault: bool,
    ) -> Result<(), crate::memory::AccessError> {
        let needed = if write { Access::LOCAL_WRITE } else { Access::NONE };
        for s in sges {
            let (r, at) = self.mrs.check(s.lkey, pd, s.addr, u64::from(s.length), needed)?;
            if !r.memory.is_on_demand() {
                return Err(crate::memory::AccessError::NotOnDemand { key: s.lkey });
            }
            if fault {
                r.memory.prefetch(at, s.length as usize, write).map_err(|_| crate::memory::AccessError::Unmapped {
                    key: s.lkey,
                    addr: s.addr,
                    len: u64::from(s.length),
                })?;
            }
        }
        Ok(())
    }

    /// The region behind a key.
    pub fn mr(&self, key: u32) -> Option<&MemoryRegion> {
        self.mrs.get(key)
    }

    /// A CQ of `depth` completions (at least one): the one that finds it
    /// full is lost, the CQ is in error and its QPs fail. A layer that
    /// keeps the CQ's completions itself (the verbs device) creates it with
    /// `usize::MAX`, takes them with [`Endpoint::drain_cq`] and bounds the
    /// depth itself ([`Endpoint::cq_overrun`]).
    pub fn create_cq(&mut self, depth: usize) -> CqId {
        self.cqs.create(depth)
    }

    /// Takes every completion waiting in `cq`, oldest first: for a layer
    /// that keeps the CQ's completions itself (a device whose CQs take
    /// completions from several engines). Such a layer creates the CQ with
    /// a depth of `usize::MAX`, bounds it itself and reports what found no
    /// room with [`Endpoint::cq_overrun`].
    pub fn drain_cq(&mut self, cq: CqId) -> impl Iterator<Item = WorkCompletion> + '_ {
        self.cqs.drain(cq)
    }

    /// `lost` completions of `cq` taken with [`Endpoint::drain_cq`] found
    /// the CQ full (or in error) above: they are counted as overruns, and
    /// the CQ overflowed as if here (IBTA 11.4.2.1): in error from now on,
    /// its CQ error event raised and every QP on it moved to ERR (their
    /// flushes into this CQ lost and counted; those into a QP's other CQ
    /// delivered there). The difference from an overflow here: the QPs
    /// go to ERR when this is called (the end of the round that overflowed
    /// the CQ above), not in the call that queued the completion. `lost`
    /// may be 0: the CQ overflowed above with another engine's completions
    /// (a device of several engines), and this engine's QPs on it fail too.
    pub fn cq_overrun(&mut self, cq: CqId, lost: u64) {
        self.cqs.overrun(cq, lost);
        self.settle_cq_errors();
    }

    /// How many completions `cq` holds (0: no such CQ).
    pub fn cq_depth(&self, cq: CqId) -> usize {
        self.cqs.depth(cq)
    }

    /// `ibv_resize_cq`: `cq` holds up to `depth` completions from now on.
    /// Refused (the CQ unchanged) when more than `at_least` completions wait
    /// in it, as rxe refuses a size below the count: the caller passes the
    /// size the application asked for, before any rounding up.
    pub fn resize_cq(&mut self, cq: CqId, depth: usize, at_least: usize) -> Result<(), VerbsError> {
        self.cqs.resize(cq, depth, at_least)
    }

    /// Takes up to `max` completions, oldest first.
    pub fn poll_cq(&mut self, cq: CqId, max: usize) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        self.poll_cq_into(cq, max, &mut out);
        out
    }

    /// Appends up to `max` completions, oldest first, to `out` (no
    /// allocation once `out` has room); returns how many.
    pub fn poll_cq_into(&mut self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        self.cqs.poll_into(cq, max, out)
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.cqs.queued(cq)
    }

    /// Completions delivered to `cq` since its creation that a CQ armed
    /// for solicited events only is woken by: receives of messages whose
    /// sender set the solicited-event bit, and every error (IBTA 11.4.2.2).
    pub fn cq_solicited(&self, cq: CqId) -> u64 {
        self.cqs.solicited(cq)
    }

    /// The shared receive queues, for [`Endpoint::share_srqs`].
    pub fn srq_table(&self) -> SrqTable {
        self.srqs.clone()
    }

    /// Makes this endpoint use `table`, another engine's, for its SRQs and
    /// XRC domains: a device of several engines, whose QPs on every engine
    /// take receives from one SRQ (their PDs and CQs have the same numbers
    /// in every engine). Call it before any SRQ or domain is made here.
    /// `close_xrcd` counts only this engine's XRC QPs: ask the others.
    pub fn share_srqs(&mut self, table: SrqTable) {
        debug_assert!(self.srqs.is_empty(), "SRQs are shared before any is made");
        self.srqs = table;
    }

    pub fn create_srq(&mut self, pd: Pd, max_wr: u32, limit: u32) -> SrqId {
        self.srqs.create(pd, max_wr, limit)
    }

    /// Arms the SRQ limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    pub fn arm_srq(&mut self, srq: SrqId, limit: u32) -> Result<(), VerbsError> {
        self.srqs.arm(srq, limit)
    }

    /// (A device's application posts copies through the table,
    /// [`SrqTable::post_copy`], which needs no engine.)
    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        self.srqs.post(srq, wr)
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        if let Some(id) = self.srqs.take_limit_event() {
            return Some(AsyncEvent::SrqLimitReached(id));
        }
        self.events.pop_front()
    }

    /// `ibv_open_xrcd` of a new, process-private XRC domain (in the SRQ
    /// table: engines that share it share the domains).
    pub fn open_xrcd(&mut self) -> XrcdId {
        self.srqs.open_xrcd()
    }

    /// `ibv_close_xrcd`: refused (`XrcdInUse`, EBUSY) while an XRC SRQ or
    /// an XRC_RECV QP of this engine is in it. A device of several engines
    /// asks the others first ([`Endpoint::xrcd_has_qps`]).
    pub fn close_xrcd(&mut self, xrcd: XrcdId) -> Result<(), VerbsError> {
        let qps = self.xrcd_has_qps(xrcd);
        self.srqs.close_xrcd(xrcd, qps)
    }

    /// Whether an XRC_RECV QP of this engine is in `xrcd`.
    pub fn xrcd_has_qps(&self, xrcd: XrcdId) -> bool {
        self.qps.values().any(|q| q.xrcd == Some(xrcd))
    }

    fn xrcd_open(&self, xrcd: XrcdId) -> Result<(), VerbsError> {
        if self.srqs.xrcd_open(xrcd) {
            Ok(())
        } else {
            Err(VerbsError::NoSuchXrcd(xrcd.0))
        }
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ in `xrcd` whose
    /// receives complete on `cq` and whose buffers (and the RDMA targets of
    /// requests naming it) belong to `pd`.
    pub fn create_xrc_srq(
        &mut self,
        pd: Pd,
        xrcd: XrcdId,
        cq: CqId,
        max_wr: u32,
        limit: u32,
    ) -> Result<SrqId, VerbsError> {
        if !self.cqs.exists(cq) {
            return Err(VerbsError::NoSuchCq(cq.0));
        }
        self.srqs.create_xrc(pd, xrcd, cq, max_wr, limit)
    }

    /// `ibv_get_srq_num`: the number XRC senders name (`remote_srqn`).
    pub fn srq_num(&self, srq: SrqId) -> Option<u32> {
        self.srqs.xrc_of(srq).map(|_| srq.0 as u32)
    }

    /// `ibv_destroy_srq` of an XRC SRQ: no request can name it any more,
    /// and its domain is free of it.
    pub fn destroy_xrc_srq(&mut self, srq: SrqId) {
        self.srqs.release(srq);
    }

    /// `ibv_create_qp_ex` of an XRC QP: `IBV_QPT_XRC_SEND` (a send queue
    /// only: `init.recv_cq` is unused) or `IBV_QPT_XRC_RECV` in `xrcd`
    /// (the receive side only: `init`'s PD and CQs are unused; each
    /// request goes to the XRC SRQ it names).
    pub fn create_xrc_qp(&mut self, init: QpInitAttr, xrcd: Option<XrcdId>) -> Result<u32, VerbsError> {
        let qpn = match (init.qp_type, xrcd) {
            (QpType::XrcSend, None) => {
                let cap = crate::qp::QpCap { max_recv_wr: 0, max_recv_sge: 0, ..init.cap };
                self.create_qp(QpInitAttr { recv_cq: init.send_cq, srq: None, cap, ..init })?
            }
            (QpType::XrcRecv, Some(x)) => {
                self.xrcd_open(x)?;
                // An XRC target has no PD, CQ or queue of its own: a PD that
                // owns nothing, so nothing is reachable but through an SRQ,
                // and no CQ (no send queue; receives complete on the SRQ's).
                let cq = CqId(usize::MAX);
                let qpn = self.insert_qp(QpInitAttr {
                    pd: Pd(u32::MAX),
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: crate::qp::QpCap { max_send_wr: 0, max_recv_wr: 0, ..init.cap },
                    ..init
                })?;
                if let Some(q) = self.qps.get_mut(qpn) {
                    q.xrcd = Some(x);
                }
                qpn
            }
            (QpType::XrcRecv, None) => return Err(VerbsError::MissingXrcd),
            (t, _) => return Err(VerbsError::InvalidAttribute { qpn: 0, attr: "XRC QP type", value: t as u64 }),
        };
        Ok(qpn)
    }

    /// `ibv_open_qp`: another handle to the XRC_RECV QP `qpn` of `xrcd`
    /// (the QP goes when every handle is destroyed).
    pub fn open_xrc_qp(&mut self, qpn: u32, xrcd: XrcdId) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        if qp.init.qp_type != QpType::XrcRecv || qp.xrcd != Some(xrcd) {
            return Err(VerbsError::NoSuchQp(qpn));
        }
        qp.opens += 1;
        Ok(())
    }

    /// The XRC domain of an XRC_RECV QP (`ibv_open_qp` checks it).
    pub fn qp_xrcd(&self, qpn: u32) -> Option<XrcdId> {
        self.qps.get(qpn)?.xrcd
    }

    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<u32, VerbsError> {
        self.touch();
        if init.qp_type == QpType::XrcRecv {
            return Err(VerbsError::MissingXrcd);
        }
        if init.srq.is_some_and(|s| self.srqs.xrc_of(s).is_some()) {
            return Err(VerbsError::InvalidAttribute { qpn: 0, attr: "srq (an XRC SRQ takes no QP)", value: 0 });
        }
        for cq in [init.send_cq, init.recv_cq] {
            if !self.cqs.exists(cq) {
                return Err(VerbsError::NoSuchCq(cq.0));
            }
        }
        if let Some(srq) = init.srq.filter(|&s| !self.srqs.exists(s)) {
            return Err(VerbsError::NoSuchSrq(srq.0));
        }
        self.insert_qp(init)
    }

    /// Hands out QPNs from `range` only (clamped to the QPNs a created
    /// QP may have), starting at a point of it that follows from the
    /// random first QPN: on a device that several processes share, each
    /// process has a range of its own, by which the host steers packets.
    /// Fails if a QP exists already, or the range holds no QPN.
    pub fn set_qpn_range(&mut self, range: std::ops::Range<u32>) -> Result<(), VerbsError> {
        self.qpns.set_range(range, !self.qps.is_empty())
    }

    /// The QPNs this device hands out.
    pub fn qpn_range(&self) -> std::ops::Range<u32> {
        self.qpns.range()
    }

    fn insert_qp(&mut self, init: QpInitAttr) -> Result<u32, VerbsError> {
        let qps = &self.qps;
        let qpn = self.qpns.allocate(qps.len(), |q| qps.contains_key(q))?;
        let mut qp = Qp::new(qpn, init);
        qp.ecn_capable = self.cc.ecn_capable;
        Self::attach_cc(&mut qp, self.cc.factory.as_ref());
        self.qps.insert(qpn, Box::new(qp));
        self.touch(); // the agenda indexes every QP anew
        Ok(qpn)
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        self.touch();
        if let Some(qp) = self.qps.get_mut(qpn).filter(|q| q.opens > 0) {
            qp.opens -= 1; // another handle still holds it (ibv_open_qp)
            return Ok(());
        }
        self.qps.remove(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        // Type 2 windows bound to it reach nothing any more.
        self.mrs.windows.unbind_all_of_qp(qpn);
        self.mcast.detach_all(qpn);
        Ok(())
    }

    /// `ibv_attach_mcast`: UD QP `qpn` receives the packets sent to the
    /// multicast group `gid` (QPN 0xFFFFFF). `lid` is the group's LID on
    /// native IB (0xc000..0xfffe) and ignored on RoCE, as the RoCE annex
    /// says. Attaching twice is a no-op.
    pub fn attach_mcast(&mut self, qpn: u32, gid: IpAddr, lid: u16) -> Result<(), McastError> {
        let qp = self.qps.get(qpn).ok_or(McastError::NoSuchQp(qpn))?;
        if qp.init.qp_type != QpType::Ud {
            return Err(McastError::NotUd { qpn });
        }
        if !crate::mcast::is_multicast_gid(gid) {
            return Err(McastError::NotMulticast { gid });
        }
        if self.port.framer.link == LinkKind::Ib && !crate::mcast::is_multicast_lid(lid) {
            return Err(McastError::NotMulticastLid { lid });
        }
        self.mcast.attach(gid, lid, qpn)
    }

    /// `ibv_detach_mcast`: undoes [`Endpoint::attach_mcast`]; a QP that is
    /// not attached to `gid` is an error (rxe: EINVAL).
    pub fn detach_mcast(&mut self, qpn: u32, gid: IpAddr, lid: u16) -> Result<(), McastError> {
        if !self.qps.contains_key(qpn) {
            return Err(McastError::NoSuchQp(qpn));
        }
        self.mcast.detach(gid, lid, qpn)
    }

    /// The multicast groups (GID, LID) QP `qpn` is attached to.
    pub fn mcast_groups_of(&self, qpn: u32) -> Vec<(IpAddr, u16)> {
        self.mcast.groups_of(qpn)
    }

    /// `ibv_modify_qp`. Moving to ERR flushes every queued request.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), VerbsError> {
        self.touch();
        let qp = self.qps.get_mut(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let pkey = match attr.pkey_index {
            Some(i) => Some(*self.port.pkeys.get(usize::from(i)).ok_or(VerbsError::InvalidAttribute {
                qpn,
                attr: "pkey_index (past the end of the P_Key table)",
                value: u64::from(i),
            })?),
            None => None,
        };
        let was = qp.state;
        qp.modify(attr)?;
        if let Some(pkey) = pkey {
            qp.params.pkey = pkey;
        }
        if qp.state == QpState::Err && qp.flush_owing_ack(&mut self.cqs) && !self.sched.last_words.contains(&qpn) {
            self.sched.last_words.push(qpn);
        }
        if qp.state == QpState::Reset && was != QpState::Reset {
            // As mlx5 and mlx4 clean a CQ of a QP moved to RESET: its
            // completions still queued (flushes of the error that made the
            // application reset it) would otherwise greet the QP's next
            // life with requests it no longer has.
            let (scq, rcq) = (qp.init.send_cq, qp.init.recv_cq);
            let removed = self.cqs.remove_qp(scq, qpn) + if rcq != scq { self.cqs.remove_qp(rcq, qpn) } else { 0 };
            if removed > 0 {
                tracing::debug!(qpn, removed, "QP reset: its queued completions removed from its CQs");
            }
        }
        self.settle_cq_errors();
        Ok(())
    }

    /// `ibv_query_qp`: the state and the attributes in force.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpState, QpParams), VerbsError> {
        let qp = self.qps.get(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        Ok((qp.state, qp.params))
    }

    /// The send and receive CQs of `qpn` (as it was created).
    pub fn qp_cqs(&self, qpn: u32) -> Result<(CqId, CqId), VerbsError> {
        let qp = self.qps.get(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        Ok((qp.init.send_cq, qp.init.recv_cq))
    }

    /// The PSNs `ibv_query_qp` reports, as rxe does: the next this QP's
    /// requester sends (`sq_psn`) and the next its responder expects (`rq_psn`).
    pub fn qp_psns(&self, qpn: u32) -> Result<(u32, u32), VerbsError> {
        let qp = self.qps.get(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        Ok((qp.req.sq.next_psn().value(), qp.resp.epsn.value()))
    }

    /// The counters of one QP.
    pub fn qp_stats(&self, qpn: u32) -> Result<QpStats, VerbsError> {
        Ok(self.qps.get(qpn).ok_or(VerbsError::NoSuchQp(qpn))?.stats)
    }

    /// `ibv_post_send`: checks the request against the QP and queues it.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        let agenda_on = self.agenda_on();
        let qp = self.qps.get_mut(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        // Only a QP that exists enters the agenda.
        self.sched.touched_qp(qpn, agenda_on);
        let t = qp.init.qp_type;
        let cap = qp.init.cap;
        if !matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err) {
            return Err(VerbsError::WrongState { qpn, what: "a send", state: qp.state });
        }
        if wr.sg_list.len() > cap.max_send_sge as usize {
            return Err(VerbsError::TooManySge { qpn, n: wr.sg_list.len(), max: cap.max_send_sge });
        }
        if let Some(d) = &wr.inline_data {
            if d.len() > cap.max_inline_data as usize {
                return Err(VerbsError::InlineTooLarge { qpn, len: d.len(), max: cap.max_inline_data });
            }
        }
        if qp.req.sq.len() >= cap.max_send_wr as usize {
            return Err(VerbsError::QueueFull { qpn, queue: "send", depth: cap.max_send_wr });
        }
        let op_name = match wr.op {
            SendOp::Send => "SEND",
            SendOp::SendWithImm { .. } => "SEND_WITH_IMM",
            SendOp::SendWithInv { .. } => "SEND_WITH_INV",
            SendOp::RdmaWrite { .. } => "RDMA_WRITE",
            SendOp::RdmaWriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::RdmaRead { .. } => "RDMA_READ",
            SendOp::CompareSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::FetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
            SendOp::Flush { .. } => "FLUSH",
            SendOp::AtomicWrite { .. } => "ATOMIC_WRITE",
            SendOp::LocalInv { .. } => "LOCAL_INV",
            SendOp::BindMw { .. } => "BIND_MW",
        };
        let supported = match t {
            QpType::Rc => true,
            // Annex A14: RC's operations less those IBTA 1.5 added for RC
            // only (no XRC opcodes for FLUSH and ATOMIC WRITE).
            QpType::XrcSend => !matches!(wr.op, SendOp::Flush { .. } | SendOp::AtomicWrite { .. }),
            QpType::XrcRecv => false,
            // ibv_post_send(3): BIND_MW and LOCAL_INV on UC, RC and XRC.
            QpType::Uc if wr.op.is_local() => true,
            QpType::Uc => !wr.op.expects_response() && !matches!(wr.op, SendOp::SendWithInv { .. }),
            QpType::Ud => matches!(wr.op, SendOp::Send | SendOp::SendWithImm { .. }),
        };
        if !supported {
            return Err(VerbsError::UnsupportedOp { qpn, op: op_name, qp_type: t });
        }
        let len = wr.length();
        let max = match t {
            QpType::Ud => u64::from(qp.params.mtu.bytes()),
            _ => 1 << 31,
        };
        if len > max {
            return Err(VerbsError::MessageTooLong { qpn, len, max });
        }
        if wr.op.is_atomic() && len != 8 {
            return Err(VerbsError::InvalidAttribute { qpn, attr: "atomic sg_list length (must be 8)", value: len });
        }
        if let SendOp::Flush { .. } | SendOp::AtomicWrite { .. } = wr.op {
            // Their operands are all in the request: no local buffers.
            if len != 0 || !wr.sg_list.is_empty() {
                return Err(VerbsError::InvalidAttribute {
                    qpn,
                    attr: "sg_list of a FLUSH/ATOMIC_WRITE (must be empty)",
                    value: len,
                });
            }
        }
        if wr.op.is_local() && (len != 0 || !wr.sg_list.is_empty() || wr.inline_data.is_some()) {
            // rxe's validate_send_wr: a bind has no sg_list.
            return Err(VerbsError::InvalidAttribute {
                qpn,
                attr: "sg_list of a BIND_MW/LOCAL_INV (must be empty)",
                value: len,
            });
        }
        if let SendOp::Flush { len, placement, selectivity, .. } = wr.op {
            if len > max {
                return Err(VerbsError::MessageTooLong { qpn, len, max });
            }
            let known = crate::wr::flush::GLOBAL | crate::wr::flush::PERSISTENT;
            if placement == 0 || placement & !known != 0 {
                return Err(VerbsError::InvalidAttribute {
                    qpn,
                    attr: "FLUSH placement type",
                    value: placement.into(),
                });
            }
            if selectivity > crate::wr::flush::SELECTIVITY_MR {
                return Err(VerbsError::InvalidAttribute {
                    qpn,
                    attr: "FLUSH selectivity level",
                    value: selectivity.into(),
                });
            }
        }
        if t == QpType::Ud && wr.ud.is_none() {
            return Err(VerbsError::MissingUdDest(qpn));
        }
        qp.req.sq.push(wr);
        if qp.state == QpState::Err {
            qp.flush(&mut self.cqs);
            self.settle_cq_errors();
        }
        Ok(())
    }

    /// [`Endpoint::post_send`] of a copy of `wr`, made without allocating
    /// in steady state (finished requests' lists and inline buffers are reused).
    pub fn post_send_copy(&mut self, qpn: u32, wr: &SendWr) -> Result<(), VerbsError> {
        let sg_list = self.cqs.pool.copy_sges(&wr.sg_list);
        let inline_data = wr.inline_data.as_deref().map(|d| self.cqs.pool.copy_inline(d));
        self.post_send(qpn, SendWr { sg_list, inline_data, ..*wr })
    }

    /// [`Endpoint::post_recv`] of a copy of `wr` (see [`Endpoint::post_send_copy`]).
    pub fn post_recv_copy(&mut self, qpn: u32, wr: &RecvWr) -> Result<(), VerbsError> {
        let sg_list = self.cqs.pool.copy_sges(&wr.sg_list);
        self.post_recv(qpn, RecvWr { wr_id: wr.wr_id, sg_list })
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        if qp.init.srq.is_some() {
            return Err(VerbsError::QpHasSrq(qpn));
        }
        if qp.state == QpState::Reset {
            return Err(VerbsError::WrongState { qpn, what: "a receive", state: qp.state });
        }
        let cap = qp.init.cap;
        if wr.sg_list.len() > cap.max_recv_sge as usize {
            return Err(VerbsError::TooManySge { qpn, n: wr.sg_list.len(), max: cap.max_recv_sge });
        }
        if qp.rq.len() >= cap.max_recv_wr as usize {
            return Err(VerbsError::QueueFull { qpn, queue: "receive", depth: cap.max_recv_wr });
        }
        qp.rq.push_back(wr);
        if qp.state == QpState::Err {
            qp.flush(&mut self.cqs);
            self.settle_cq_errors();
        }
        Ok(())
    }

    /// Raises the event of every CQ that overflowed since the last call,
    /// and moves the QPs that use it to the error state (their flushed
    /// requests are lost with the CQ, and counted as overruns): those
    /// whose own CQ it is, and the XRC_RECV QPs of a domain with an XRC
    /// SRQ that completes on it.
    fn settle_cq_errors(&mut self) {
        while let Some(cq) = self.cqs.take_overflowed() {
            tracing::warn!(cq = cq.0, "completion queue overrun: the CQ and its QPs are in error");
            self.touch();
            self.events.push_back(AsyncEvent::CqError(cq));
            let srqs = &self.srqs;
            for (qpn, qp) in self.qps.iter_mut() {
                let uses = qp.init.send_cq == cq
                    || qp.init.recv_cq == cq
                    || qp.xrcd.is_some_and(|d| srqs.xrc_completes_on(d, cq));
                if qp.state != QpState::Err && uses {
                    qp.state = QpState::Err;
                    qp.flush(&mut self.cqs);
                    self.events.push_back(AsyncEvent::QpFatal(qpn));
                }
            }
        }
    }

    /// The next time [`Endpoint::handle_timeout`] has work, or when a
    /// waiting QP may send again.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let Some(cached) = self.sched.deadline.get() {
            return cached;
        }
        let qps = if self.agenda_on() {
            let mut agenda = self.sched.agenda.borrow_mut();
            agenda.refresh(&self.qps);
            #[cfg(debug_assertions)]
            {
                let scan = self.qps.values().filter_map(|q| q.next_deadline()).min();
                debug_assert_eq!(agenda.earliest(), scan, "a QP's deadline changed without touching it");
            }
            agenda.earliest()
        } else {
            self.qps.values().filter_map(|q| q.next_deadline()).min()
        };
        let t = qps.into_iter().chain(self.gsi.made().and_then(Gsi::next_deadline)).min();
        self.sched.deadline.set(Some(t));
        t
    }

    /// Fires every timer that is due: a QP's ACK timer retransmits (or
    /// fails it), an RNR wait ends, congestion control's timers run, MADs
    /// are sent again; a held ACK that is due leaves in the next round of
    /// [`Endpoint::poll_transmit`].
    pub fn handle_timeout(&mut self, now: Instant) {
        self.touch_some();
        if self.agenda_on() {
            // Only QPs with a deadline due have work (every timer of a QP
            // is in its deadline), in QPN order as the walk below goes.
            let agenda = self.sched.agenda.get_mut();
            agenda.refresh(&self.qps);
            for qpn in agenda.due(now) {
                agenda.mark(qpn);
                if let Some(qp) = self.qps.get_mut(qpn) {
                    fire_timers(qpn, qp, now, &mut self.cqs, &mut self.stats, &mut self.events);
                }
            }
        } else {
            for (qpn, qp) in self.qps.iter_mut() {
                fire_timers(qpn, qp, now, &mut self.cqs, &mut self.stats, &mut self.events);
            }
        }
        if let Some(g) = self.gsi.made_mut() {
            g.handle_timeout(now, &mut self.stats);
        }
        self.settle_cq_errors();
    }

    /// Queues a MAD for the GSI (QP1) of `dest` (its GID): a header and
    /// 232 bytes of class data, or the whole 256 bytes. A transaction ID
    /// of 0 is replaced by one the endpoint assigns; others are kept. With
    /// `expect_response`, the MAD is sent again each time that long passes
    /// after a copy left without an answer (a MAD from `dest` of the same
    /// class and transaction ID), `retries` times, and then reported by
    /// [`Endpoint::poll_mad_timeout`]. Returns the transaction ID.
    pub fn gsi_send(
        &mut self,
        dest: IpAddr,
        mad: impl Into<OutgoingMad>,
        expect_response: Option<Duration>,
        retries: u8,
    ) -> Result<u64, VerbsError> {
        self.touch();
        let gsi = self.gsi_mut();
        let mad = mad.into();
        gsi.send(dest, mad, expect_response, retries).ok_or(VerbsError::InvalidAttribute {
            qpn: rdma_wire::mad::GSI_QPN,
            attr: "transaction ID (a send with it already awaits a response)",
            value: rdma_wire::mad::Mad::new_unchecked(&mad.0[..]).transaction_id(),
        })
    }

    /// The GSI, made at its first use.
    pub(crate) fn gsi_mut(&mut self) -> &mut Gsi {
        self.gsi.get()
    }

    /// The next MAD received on QP1, oldest first.
    pub fn poll_mad(&mut self) -> Option<ReceivedMad> {
        self.gsi.made_mut()?.poll_mad()
    }

    /// A MAD that another engine of this device received on QP1 (a
    /// device of several engines, whose sockets the host steers QP1's
    /// datagrams among: its GSI and CM are on one engine): matched against
    /// this GSI's sends and queued as if it had come here, or dropped (and
    /// counted) as here.
    pub fn gsi_forwarded(&mut self, m: ReceivedMad) {
        self.touch();
        let (gsi, stats) = (self.gsi.get(), &mut self.stats);
        gsi.receive(m.from, rdma_wire::mad::GSI_QKEY, m.src_qp, &m.mad, stats);
    }

    /// Makes this engine's QP1 a relay for another engine's GSI (a device
    /// of several engines, the one whose GSI sends the device's MADs): it
    /// takes in every MAD that passes the MAD layer's checks, responses to
    /// sends it never made included, for [`Endpoint::poll_mad_to_forward`].
    /// Without it such a response was dropped here as unmatched. Makes
    /// QP1 now if it was not.
    pub fn relay_mads(&mut self) {
        self.gsi_mut().set_relay();
    }

    /// The next MAD received on QP1, taken to be handed to the engine of
    /// the device's GSI ([`Endpoint::gsi_forwarded`]), which counts it:
    /// not counted in this engine's `mads_received` (a device adds its
    /// engines' counters).
    pub fn poll_mad_to_forward(&mut self) -> Option<ReceivedMad> {
        let g = self.gsi.made_mut()?;
        let relay = g.is_relay();
        let m = g.poll_mad()?;
        if !relay {
            // A relay did not count it; an agent that matched it did.
            self.stats.mads_received = self.stats.mads_received.saturating_sub(1);
        }
        Some(m)
    }

    /// Whether a MAD or a MAD timeout waits for [`Endpoint::poll_mad`] or
    /// [`Endpoint::poll_mad_timeout`].
    pub fn mads_waiting(&self) -> bool {
        self.gsi.made().is_some_and(Gsi::has_reports)
    }

    /// The next send that got no response after all its retries.
    pub fn poll_mad_timeout(&mut self) -> Option<MadTimeout> {
        self.gsi.made_mut()?.poll_timeout_report()
    }

    /// The UDP source port MADs leave from (by default
    /// [`crate::gsi::frame::GSI_SRC_PORT`]); a backend that sends from a
    /// socket per port reserves it and sets what it got.
    pub fn gsi_src_port(&self) -> u16 {
        self.gsi.made().map_or(crate::gsi::frame::GSI_SRC_PORT, Gsi::src_port)
    }

    pub fn set_gsi_src_port(&mut self, port: u16) {
        self.gsi_mut().set_src_port(port);
    }

    /// Gives the send to `dest` with `transaction_id` `extra` more time
    /// before its next retransmission (the CM's answer to an MRA). Returns
    /// whether such a send was waiting.
    pub fn gsi_delay(&mut self, now: Instant, dest: IpAddr, transaction_id: u64, extra: Duration) -> bool {
        self.touch();
        self.gsi.made_mut().is_some_and(|g| g.delay(now, dest, transaction_id, extra))
    }
}

/// The timers of QP `qpn` that are due at `now` ([`Endpoint::handle_timeout`]):
/// the ACK timer retransmits (or fails the QP), an RNR wait ends,
/// congestion control's timers run.
#[inline]
fn fire_timers(
    qpn: u32,
    qp: &mut Qp,
    now: Instant,
    cqs: &mut CqTable,
    stats: &mut Stats,
    events: &mut VecDeque<AsyncEvent>,
) {
    if qp.timers.is_due(Timer::Retransmit, now) {
        let was_error = qp.state == QpState::Err;
        qp.handle_ack_timeout(cqs, stats);
        if !was_error && qp.state == QpState::Err {
            events.push_back(AsyncEvent::QpFatal(qpn));
        }
    }
    if qp.timers.is_due(Timer::RnrWait, now) {
        qp.timers.stop(Timer::RnrWait);
    }
    let due = [Timer::Cnp, Timer::RateControl, Timer::Paced].into_iter().any(|t| qp.timers.is_due(t, now));
    if let Some(cc) = qp.cc.as_mut().filter(|_| due) {
        cc.on_timer(now, &mut qp.stats, stats, &mut qp.timers);
    }
}
