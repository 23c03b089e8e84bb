//! `--threads N`: the event loop as a conservative parallel discrete-event
//! simulation (docs/parallel-simulation.md).
//!
//! The nodes are split into partitions by pod ([`partition`]): every
//! switch with hosts on it (a leaf, a rail switch, the one switch of an
//! incast) is a partition with its hosts; switches without hosts (spines)
//! are dealt round-robin to those partitions. Each partition has its own
//! event queue, host timers, random generator (drawn from the seed and the
//! partition's number, never from the thread count), counters, NIC holds
//! and latency samples. A packet or PFC frame put on a link to another
//! partition is a message; it arrives no sooner than the link's delay
//! after it was sent, so the shortest delay across a partition boundary is
//! the lookahead.
//!
//! Time goes in windows [T, E), E = min(T + lookahead, next sample time,
//! end of run): every partition runs its events before E, on whichever
//! thread holds it (partition p on thread p mod N); then the last thread
//! to reach the barrier, the others waiting, hands each message to its receiver's queue
//! in the order (source partition, order sent) (the queue orders by time,
//! then by that), takes the samples that fall at E, looks for a deadlock
//! and decides whether to stop. Nothing a partition does in a window
//! depends on another partition's work in that window, so the partitions
//! can run in any order on any number of threads: the same seed gives the
//! same run, byte for byte, with one thread or sixteen.
//!
//! What is global in the single-queue loop, and where it lives here:
//!
//! | state | here |
//! |---|---|
//! | the event queue and its sequence numbers | one queue per partition; messages merged at the barrier in (time, source partition, order sent) |
//! | the random generator (RED marking at dequeue, IB flow-control loss) | one per partition, from the seed and the partition's number (one partition: the fabric's); kept between runs |
//! | host timers | per partition (its hosts'), fired in host order |
//! | counters, message latencies, NIC holds | per partition, summed or joined in partition order at the end |
//! | flows | each flow is its sender's partition's (its completions arrive there); flows done counted per partition |
//! | the workload (a collective) | one, behind a lock: its calls for different hosts commute ([`crate::workload::Workload`]) |
//! | samples, per-window bytes, deadlock detection, the stop test | at the barrier, on one thread, every partition stopped |
//! | IB: a sender's P_Key and address by LID | tables built before the run |
//!
//! It gives the same results for every thread count, not the single
//! queue's: the partitions draw their own random numbers, events at the
//! same instant in one partition may run in another order, a sample at T
//! sees every event before T and none at T, and a run that stops when its
//! work is done runs to the end of the window in which it finished (its
//! time is still that of the last completion). With one partition (one
//! switch) it draws from the fabric's own generator and is the single
//! queue's run (`fabric/tests/parallel.rs` checks it, byte for byte).
//!
//! RoCE and InfiniBand: IB's flow-control packets cross partitions as
//! messages, as data does; the SMA is not partitioned (a partitioned run
//! starts on a configured fabric, `--sm` sweeps before it, and a VL15
//! packet during it is dropped and counted), and frames are not captured.

use crate::clock::{Event, EventQueue, HostTimers};
use crate::fabric::{stalled, stuck_ports, Counters, Deadlock, Fabric};
use crate::handlers::Handlers;
use crate::host::{Flow, Host};
use crate::ib::IbConfig;
use crate::packet::Packet;
use crate::site::Site;
use crate::switch::Switch;
use crate::topology::{Node, Port, Topology};
use crate::workload::Workload;
use core::time::Duration;
use rdma_transport::sim::Rng;
use rdma_transport::{Instant, WorkCompletion};
use rustc_hash::FxHashMap;
use std::any::Any;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// How the nodes are split into partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitioning {
    /// The partition of each node.
    pub of_node: Vec<usize>,
    pub parts: usize,
    /// The shortest propagation delay of a link between two partitions
    /// (`None`: no link crosses; one partition).
    pub lookahead: Option<Duration>,
}

/// One partition per switch with hosts on it (a pod: the switch and its
/// hosts, in switch order); switches without hosts (spines) dealt
/// round-robin to them. A fabric whose boundary would cross a link of no
/// delay (no lookahead) is one partition.
pub fn partition(topo: &Topology) -> Partitioning {
    let n = topo.nodes.len();
    let is_host = |node: usize| matches!(topo.nodes[node], Node::Host(_));
    let mut of_node = vec![usize::MAX; n];
    let mut parts = 0;
    for node in (0..n).filter(|&x| !is_host(x)) {
        if topo.ports[node].iter().any(|p| is_host(p.peer)) {
            of_node[node] = parts;
            parts += 1;
        }
    }
    let parts = parts.max(1);
    let hostless = (0..n).filter(|&x| !is_host(x) && of_node[x] == usize::MAX).collect::<Vec<_>>();
    for (i, node) in hostless.into_iter().enumerate() {
        of_node[node] = i % parts;
    }
    for node in (0..n).filter(|&x| is_host(x)) {
        let up = topo.ports[node].first().map(|p| of_node[p.peer]);
        of_node[node] = up.filter(|&p| p != usize::MAX).unwrap_or(0);
    }
    let mut lookahead: Option<Duration> = None;
    for (a, ports) in topo.ports.iter().enumerate() {
        for p in ports.iter().filter(|p| of_node[a] != of_node[p.peer]) {
            lookahead = Some(lookahead.map_or(p.link.delay, |l| l.min(p.link.delay)));
        }
    }
    if lookahead == Some(Duration::ZERO) {
        return Partitioning { of_node: vec![0; n], parts: 1, lookahead: None };
    }
    Partitioning { of_node, parts, lookahead }
}

/// Partition `p`'s generator: from the seed and `p` alone.
fn part_rng(seed: u64, p: usize) -> Rng {
    Rng::new(seed ^ (p as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29) ^ 0x9a27_17e5)
}

// The world is handed to several threads as raw pointers; what they point
// at must be able to move between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Host>();
    send::<Switch>();
    send::<Port>();
    send::<Flow>();
    send::<Event>();
};

/// The nodes and flows, shared by the partitions. A partition reaches only
/// its own hosts, switches, ports and flows (its sender's) while a window
/// runs; the barrier phase, with every other thread waiting, reads any.
struct World<'a> {
    hosts: *mut Host,
    switches: *mut Switch,
    ports: *mut Vec<Port>,
    flows: *mut Flow,
    /// Lengths of the four, for bounds checks.
    lens: [usize; 4],
    nodes: &'a [Node],
    host_nodes: &'a [usize],
    flow_of: &'a FxHashMap<(usize, u32), usize>,
    of_node: &'a [usize],
    /// Each host's (VA, rkey), for a flow's WRITEs to it.
    remote: Vec<(u64, u32)>,
    /// IB: the link layer's settings; per LID, the host's address (`None`:
    /// a switch's) and the P_Key its port sends with (`None`: no IB port),
    /// so that a receiver need not look at another partition's node.
    ib: Option<&'a IbConfig>,
    lid_addr: HashMap<u16, Option<Ipv4Addr>>,
    lid_pkey: HashMap<u16, Option<u16>>,
    workload: Mutex<Option<Box<dyn Workload>>>,
}

// SAFETY: the pointers are to elements that are `Send` (checked above);
// the window protocol gives each element to one thread at a time (its
// partition's, or the barrier phase's, ordered by the barrier), which is
// what the accessors below assume.
unsafe impl Sync for World<'_> {}

/// The accessors: `part` is the partition asking (`None`: the barrier
/// phase). Each returns a reference the caller must drop before asking for
/// the same element again.
#[allow(clippy::mut_from_ref)] // Disjoint by partition; see `World`.
impl World<'_> {
    fn host(&self, part: usize, h: usize) -> &mut Host {
        assert!(h < self.lens[0]);
        debug_assert_eq!(self.of_node[self.host_nodes[h]], part, "host {h} is another partition's");
        // SAFETY: in bounds; host h is this partition's alone during the window.
        unsafe { &mut *self.hosts.add(h) }
    }

    fn switch(&self, part: usize, node: usize, sw: usize) -> &mut Switch {
        assert!(sw < self.lens[1]);
        debug_assert_eq!(self.of_node[node], part, "switch {sw} is another partition's");
        // SAFETY: as `host`.
        unsafe { &mut *self.switches.add(sw) }
    }

    fn ports_of(&self, part: usize, node: usize) -> &mut Vec<Port> {
        assert!(node < self.lens[2]);
        debug_assert_eq!(self.of_node[node], part, "node {node} is another partition's");
        // SAFETY: as `host`; a node's ports go with the node.
        unsafe { &mut *self.ports.add(node) }
    }

    fn port(&self, part: usize, node: usize, port: usize) -> &mut Port {
        assert!(node < self.lens[2]);
        debug_assert_eq!(self.of_node[node], part, "node {node} is another partition's");
        // SAFETY: as `host`; a node's ports go with the node.
        let ports: &mut Vec<Port> = unsafe { &mut *self.ports.add(node) };
        &mut ports[port]
    }

    fn flow(&self, part: usize, f: usize) -> &mut Flow {
        assert!(f < self.lens[3]);
        // SAFETY: as `host`; a flow is its sender's partition's.
        let flow = unsafe { &mut *self.flows.add(f) };
        debug_assert_eq!(self.of_node[self.host_nodes[flow.src]], part, "flow {f} is another partition's");
        flow
    }

    // The barrier phase's views, every partition stopped.

    fn peek_host(&self, h: usize) -> &Host {
        assert!(h < self.lens[0]);
        // SAFETY: in bounds; no partition runs during the barrier phase.
        unsafe { &*self.hosts.add(h) }
    }

    fn peek_switch(&self, sw: usize) -> &Switch {
        assert!(sw < self.lens[1]);
        // SAFETY: as `peek_host`.
        unsafe { &*self.switches.add(sw) }
    }

    fn peek_ports(&self, node: usize) -> &[Port] {
        assert!(node < self.lens[2]);
        // SAFETY: as `peek_host`.
        unsafe { &*self.ports.add(node) }
    }

    fn peek_flow(&self, f: usize) -> &Flow {
        assert!(f < self.lens[3]);
        // SAFETY: as `peek_host`.
        unsafe { &*self.flows.add(f) }
    }

    fn workload(&self) -> MutexGuard<'_, Option<Box<dyn Workload>>> {
        self.workload.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One partition's own state.
#[derive(Debug)]
struct Part {
    id: usize,
    now: Instant,
    /// The end of the window being run: a message must arrive no sooner.
    end: Instant,
    events: EventQueue,
    timers: HostTimers,
    rng: Rng,
    counters: Counters,
    /// Scratch of [`crate::fabric::SCRATCH`] bytes for the packet a host sends.
    tx_scratch: Vec<u8>,
    /// Scratch for a packet delivered whole.
    rx_scratch: Vec<u8>,
    held: Vec<Option<Packet>>,
    /// Events for other partitions: (partition, time, event), in the order sent.
    outbox: Vec<(usize, Instant, Event)>,
    flows_done: usize,
    /// When a flow of this partition last finished or its workload last
    /// heard a completion: the run's time if it stops when done.
    done_at: Instant,
    message_latency_ns: Vec<u64>,
    /// HPCC's INT ([`crate::int`]), when the fabric has it on: the echoes
    /// of this partition's hosts (a host's stamps are kept and echoed by
    /// the host itself, and a switch stamps at its own egress, so INT never
    /// crosses a partition but inside the packets).
    int: Option<crate::int::EchoTable>,
}

impl Part {
    /// Runs every event and timer before `end`.
    fn run_window(&mut self, w: &World, end: Instant) {
        self.end = end;
        loop {
            let te = self.events.next_time();
            let tt = self.timers.earliest();
            let Some(t) = te.into_iter().chain(tt).min() else { return };
            if t >= end {
                return;
            }
            self.now = self.now.max(t);
            self.counters.events += 1;
            if te.is_some_and(|e| e <= t) {
                let (_, ev) = self.events.pop().expect("peeked");
                let me = self.id;
                crate::fabric::prefetch_next(
                    &self.events,
                    &self.timers,
                    w.nodes,
                    |h| &*w.host(me, h),
                    |node, sw| &*w.switch(me, node, sw),
                );
                PartSite { part: self, w }.handle(ev);
            } else {
                PartSite { part: self, w }.fire_timers();
            }
        }
    }

    /// `ev` at `at` for `node`: into this queue, or a message to its partition.
    fn schedule(&mut self, w: &World, node: usize, at: Instant, mut ev: Event) {
        let p = w.of_node[node];
        if p == self.id {
            return self.events.schedule(at, ev);
        }
        ev.make_whole(); // the payload read on the sender's thread
        assert!(
            at >= self.end,
            "a message for partition {p} at {} ns, inside the window ending at {} ns: the lookahead is wrong",
            at.as_nanos(),
            self.end.as_nanos()
        );
        self.counters.messages += 1;
        self.outbox.push((p, at, ev));
    }

    fn flow_done(&mut self) {
        self.flows_done += 1;
        self.done_at = self.done_at.max(self.now);
    }
}

/// A partition's handlers ([`crate::handlers`]) reach its own state and,
/// through the world, its own hosts, switches, ports and flows; an event
/// for another partition's node leaves as a message ([`Part::schedule`]).
struct PartSite<'s, 'w> {
    part: &'s mut Part,
    w: &'s World<'w>,
}

impl Site for PartSite<'_, '_> {
    fn now(&self) -> Instant {
        self.part.now
    }
    fn node(&self, node: usize) -> Node {
        self.w.nodes[node]
    }
    fn host_node(&self, h: usize) -> usize {
        self.w.host_nodes[h]
    }
    fn host(&mut self, h: usize) -> &mut Host {
        self.w.host(self.part.id, h)
    }
    fn switch(&mut self, node: usize, sw: usize) -> &mut Switch {
        self.w.switch(self.part.id, node, sw)
    }
    fn ports(&mut self, node: usize) -> &mut Vec<Port> {
        self.w.ports_of(self.part.id, node)
    }
    fn switch_and_ports(&mut self, node: usize, sw: usize) -> (&mut Switch, &mut Vec<Port>) {
        (self.w.switch(self.part.id, node, sw), self.w.ports_of(self.part.id, node))
    }
    fn switch_and_rng(&mut self, node: usize, sw: usize) -> (&mut Switch, &mut Rng) {
        (self.w.switch(self.part.id, node, sw), &mut self.part.rng)
    }
    fn rng(&mut self) -> &mut Rng {
        &mut self.part.rng
    }
    fn flow(&mut self, f: usize) -> &mut Flow {
        self.w.flow(self.part.id, f)
    }
    fn flow_of(&self, h: usize, qpn: u32) -> Option<usize> {
        self.w.flow_of.get(&(h, qpn)).copied()
    }
    fn counters(&mut self) -> &mut Counters {
        &mut self.part.counters
    }
    fn timers(&mut self) -> &mut HostTimers {
        &mut self.part.timers
    }
    fn held(&mut self, h: usize) -> &mut Option<Packet> {
        &mut self.part.held[h]
    }
    fn schedule(&mut self, node: usize, at: Instant, ev: Event) {
        self.part.schedule(self.w, node, at, ev);
    }
    fn int_on(&self) -> bool {
        self.part.int.is_some()
    }
    fn ib(&self) -> Option<&IbConfig> {
        self.w.ib
    }
    fn ports_and_ib(&mut self, node: usize) -> (&mut Vec<Port>, Option<&IbConfig>) {
        (self.w.ports_of(self.part.id, node), self.w.ib)
    }
    fn deliver(&mut self, h: usize, packet: Packet) {
        let p = &mut *self.part;
        let host = self.w.host(p.id, h);
        crate::fabric::deliver(host, h, p.int.as_mut(), p.now, packet, &mut p.rx_scratch);
    }
    fn next_packet(&mut self, h: usize) -> Option<Packet> {
        let p = &mut *self.part;
        let ep = &mut self.w.host(p.id, h).ep;
        let packet = crate::fabric::next_packet(ep, p.now, &mut p.tx_scratch, p.int.as_ref(), h);
        p.timers.set(h, ep.poll_timeout());
        packet
    }
    fn top_up(&mut self, f: usize) {
        let (me, now) = (self.part.id, self.part.now);
        let flow = self.w.flow(me, f);
        let (src, remote) = (flow.src, self.w.remote[flow.dst]);
        flow.top_up_on(self.w.host(me, src), remote, now);
    }
    fn flow_finished(&mut self) {
        self.part.flow_done();
    }
    fn record_latency(&mut self, ns: u64) {
        self.part.message_latency_ns.push(ns);
    }
    fn workload_completion(&mut self, h: usize, wc: &WorkCompletion) {
        let (me, now) = (self.part.id, self.part.now);
        if let Some(wl) = self.w.workload().as_mut() {
            wl.on_completion(h, wc, self.w.host(me, h), now);
            self.part.done_at = self.part.done_at.max(now);
        }
    }
    fn service(&mut self, h: usize) {
        self.serve(h);
    }
    fn lid_addr(&self, lid: u16) -> Option<Ipv4Addr> {
        self.w.lid_addr.get(&lid).copied().flatten()
    }
    fn sender_pkey(&self, slid: u16) -> Option<u16> {
        self.w.lid_pkey.get(&slid).copied().flatten()
    }
    fn vl15_arrive(&mut self, node: usize, port: usize, _f: Vec<u8>) {
        // The SMA is not partitioned: a run with --threads starts on a
        // configured fabric, and an SMP during it is dropped, counted.
        self.w.port(self.part.id, node, port).ib.as_mut().expect("an IB port").counters.vl15_dropped += 1;
    }
}

/// What the barrier phase keeps: the samples and the deadlock watch.
struct Watch<'a> {
    queue_samples: &'a mut Vec<(Instant, u64)>,
    windows: &'a mut Vec<(Instant, Vec<u64>)>,
    deadlock: &'a mut Option<Deadlock>,
    last_delivered: &'a mut (u64, Instant),
    deadlock_window: Option<Duration>,
    window: Duration,
    bottleneck: (usize, usize),
    /// The bottleneck switch's node.
    bottleneck_node: Option<usize>,
}

impl Watch<'_> {
    /// [`Fabric`]'s sample at `now`, read from the stopped partitions.
    fn sample(&mut self, w: &World, now: Instant) {
        let (sw, port) = self.bottleneck;
        let ib = self.bottleneck_node.and_then(|n| w.peek_ports(n)[port].ib.as_ref());
        let q = ib.map_or_else(|| w.peek_switch(sw).egress[port].data_bytes(), |ib| ib.queued_bytes());
        self.queue_samples.push((now, q));
        let win = self.window.as_nanos() as u64;
        if win > 0 && now.as_nanos() % win == 0 {
            let d: Vec<u64> = (0..w.lens[3])
                .map(|f| {
                    let f = w.peek_flow(f);
                    let src = w.peek_host(f.src).addr;
                    w.peek_host(f.dst).rx_data_bytes.get(&src).copied().unwrap_or(0)
                })
                .collect();
            let total = d.iter().sum();
            self.windows.push((now, d));
            self.check_deadlock(w, now, total);
        }
    }

    fn check_deadlock(&mut self, w: &World, now: Instant, delivered: u64) {
        let Some(window) = self.deadlock_window else { return };
        if !stalled(self.last_delivered, delivered, now, window) {
            return;
        }
        let stuck = stuck_ports(w.nodes, |n| w.peek_ports(n), |sw| w.peek_switch(sw), w.ib.is_some(), now);
        if let Some(ports) = stuck {
            *self.deadlock = Some(Deadlock { at: now, ports });
        }
    }
}

/// A barrier whose last arrival does the window's serial work before it
/// releases the others (one crossing a window, and the serial work done
/// by a thread that is running, not one that must be woken), and that
/// waits by spinning first: a window is short (a link delay of simulated
/// time, tens to hundreds of microseconds of work), and waking a thread
/// that slept on a condition variable costs a scheduling delay (std's
/// `Barrier`, twice a window, was 10 % slower on the 128-host all-to-all
/// of docs/performance.md).
struct SpinBarrier {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(n: usize) -> SpinBarrier {
        SpinBarrier { n, arrived: AtomicUsize::new(0), generation: AtomicUsize::new(0) }
    }

    /// Waits for all; the last to arrive runs `leader`, then releases the others.
    fn wait(&self, leader: &dyn Fn()) {
        let g = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            leader();
            // Reset before releasing: the others come back only after the release.
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        // Spin a few microseconds, yield a while, then nap: more threads
        // than free cores must not burn the cores the others need.
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == g {
            match spins {
                0..500 => std::hint::spin_loop(),
                500..550 => std::thread::yield_now(),
                _ => std::thread::sleep(Duration::from_micros(20)),
            }
            spins = spins.saturating_add(1);
        }
    }
}

/// What the barrier's leader decides, every partition stopped.
struct Ctl<'a> {
    /// Every event before `t` has run.
    t: Instant,
    /// The window to run next: [t, end).
    end: Instant,
    next_sample: Option<Instant>,
    /// The run's time, once it is over.
    stop: Option<Instant>,
    /// Events run so far, windows run.
    events: u64,
    windows: u64,
    watch: Watch<'a>,
}

fn lock(p: &Mutex<Part>) -> MutexGuard<'_, Part> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

impl Fabric {
    /// [`Fabric::run`] as a partitioned simulation on `threads` threads
    /// (see the module's documentation).
    pub(crate) fn run_partitioned(
        &mut self,
        until: Instant,
        stop_when_done: bool,
        threads: usize,
        progress: &mut dyn FnMut(Instant),
    ) {
        assert!(self.ib_capture.is_none(), "--threads does not capture IB frames");
        let plan = partition(&self.topo);
        let n = plan.parts;
        let threads = threads.clamp(1, n);
        if self.part_rngs.len() != n {
            // One partition draws from the fabric's own generator, as the
            // single queue does; several, each from its own.
            self.part_rngs = match n {
                1 => vec![self.rng.clone()],
                _ => (0..n).map(|p| part_rng(self.seed, p)).collect(),
            };
        }
        let hosts = self.topo.hosts.len();
        let mut parts: Vec<Part> = (0..n)
            .map(|id| Part {
                id,
                now: self.now,
                end: self.now,
                events: EventQueue::default(),
                timers: HostTimers::new(hosts),
                rng: self.part_rngs[id].clone(),
                counters: Counters::default(),
                tx_scratch: vec![0; crate::fabric::SCRATCH],
                rx_scratch: Vec::with_capacity(rdma_transport::MAX_PACKET),
                held: vec![None; hosts],
                outbox: Vec::new(),
                flows_done: 0,
                done_at: self.now,
                message_latency_ns: Vec::new(),
                int: self.int.is_some().then(crate::int::EchoTable::default),
            })
            .collect();
        // Packets already on their way (a run before this one) are made
        // whole: their receiver may be another partition's thread.
        for sw in &mut self.topo.switches {
            sw.queued_packets_mut().for_each(Packet::make_whole);
        }
        // The queue so far, to the partitions, in its order.
        let mut next_sample = None;
        while let Some((t, mut ev)) = self.events.pop() {
            ev.make_whole();
            let node = match &ev {
                Event::Arrive { node, .. }
                | Event::Pfc { node, .. }
                | Event::Unpause { node, .. }
                | Event::PfcRefresh { node, .. }
                | Event::PortFree { node, .. }
                | Event::FlowControl { node, .. }
                | Event::FcPeriod { node, .. } => *node,
                Event::FlowStart { flow } => self.topo.host_nodes[self.flows[*flow].src],
                Event::Sample => {
                    next_sample = next_sample.or(Some(t));
                    continue;
                }
                Event::Sma { .. } => panic!("--threads: an SMP is still on its way (the SMA is not partitioned)"),
            };
            parts[plan.of_node[node]].events.schedule(t, ev);
        }
        for h in 0..hosts {
            let p = &mut parts[plan.of_node[self.topo.host_nodes[h]]];
            p.timers.set(h, self.topo.hosts[h].ep.poll_timeout());
            p.held[h] = self.held[h].take();
        }
        let flows_done_before = self.flows_done;
        let sample_every = self.sample_every.max(Duration::from_nanos(1));
        let start = self.now;
        let parts: Vec<Mutex<Part>> = parts.into_iter().map(Mutex::new).collect();
        let workload = self.workload.take();
        let has_workload = workload.is_some();
        let nflows = self.flows.len();
        let remote = self.topo.hosts.iter().map(|h| (h.va, h.rkey)).collect();
        let (mut lid_addr, mut lid_pkey) = (HashMap::new(), HashMap::new());
        for (node, &lid) in self.topo.lids.iter().enumerate().filter(|(_, &l)| l != 0) {
            let addr = match self.topo.nodes[node] {
                Node::Host(h) => Some(self.topo.hosts[h].addr),
                Node::Switch(_) => None,
            };
            lid_addr.entry(lid).or_insert(addr);
            let pkey = self.topo.ports[node].first().and_then(|p| p.ib.as_ref()).map(|ib| ib.mgmt.pkeys[0]);
            lid_pkey.entry(lid).or_insert(pkey);
        }
        let (bsw, _) = self.topo.bottleneck;
        let bottleneck_node = self.topo.nodes.iter().position(|n| *n == Node::Switch(bsw));
        let topo = &mut self.topo;
        let world = World {
            hosts: topo.hosts.as_mut_ptr(),
            switches: topo.switches.as_mut_ptr(),
            ports: topo.ports.as_mut_ptr(),
            flows: self.flows.as_mut_ptr(),
            lens: [topo.hosts.len(), topo.switches.len(), topo.ports.len(), nflows],
            nodes: &topo.nodes,
            host_nodes: &topo.host_nodes,
            flow_of: &self.flow_of,
            of_node: &plan.of_node,
            remote,
            ib: topo.ib.as_ref(),
            lid_addr,
            lid_pkey,
            workload: Mutex::new(workload),
        };
        let watch = Watch {
            queue_samples: &mut self.queue_samples,
            windows: &mut self.windows,
            deadlock: &mut self.deadlock,
            last_delivered: &mut self.last_delivered,
            deadlock_window: self.deadlock_window,
            window: self.window,
            bottleneck: topo.bottleneck,
            bottleneck_node,
        };
        let barrier = SpinBarrier::new(threads);
        let panicked: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);
        let ctl = Mutex::new(Ctl { t: start, end: start, next_sample, stop: None, events: 0, windows: 0, watch });
        let lock_ctl = || ctl.lock().unwrap_or_else(|e| e.into_inner());
        // Thread k's share of a window: partitions k, k + threads, ...
        let share = |k: usize, end: Instant| {
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                for p in (k..n).step_by(threads) {
                    lock(&parts[p]).run_window(&world, end);
                }
            }));
            if let Err(e) = r {
                panicked.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
            }
        };
        // At c.t, every event before it run and every partition stopped:
        // the samples, the stop test, and the next window.
        let decide = |c: &mut Ctl| {
            let t = c.t;
            let flows_done = flows_done_before + parts.iter().map(|p| lock(p).flows_done).sum::<usize>();
            let work_done = (nflows > 0 || has_workload)
                && flows_done == nflows
                && world.workload().as_ref().is_none_or(|w| w.done());
            if stop_when_done && work_done {
                c.stop = Some(parts.iter().map(|p| lock(p).done_at).max().unwrap_or(t));
                return;
            }
            if t > until {
                c.stop = Some(until);
                return;
            }
            if let Some(s) = c.next_sample.filter(|&s| s <= t) {
                c.watch.sample(&world, t);
                let mut next = s + sample_every;
                while next <= t {
                    next += sample_every;
                }
                c.next_sample = Some(next);
            }
            if c.watch.deadlock.is_some() {
                c.stop = Some(t);
                return;
            }
            let mut end = until + Duration::from_nanos(1);
            if let Some(l) = plan.lookahead {
                end = end.min(t + l);
            }
            if let Some(s) = c.next_sample {
                end = end.min(s);
            }
            c.end = end;
        };
        // The last thread to reach the barrier, the others waiting: the
        // messages to their partitions (by source, in the order sent),
        // then the decision at the window's end.
        let leader = || {
            let mut c = lock_ctl();
            if panicked.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                c.stop = Some(c.t);
                return;
            }
            for p in &parts {
                let out = std::mem::take(&mut lock(p).outbox);
                for (dst, at, ev) in out {
                    debug_assert!(
                        !matches!(&ev, Event::Arrive { packet, .. } if packet.refers_to_region()),
                        "a packet crossed partitions with its payload in the sender's region"
                    );
                    lock(&parts[dst]).events.schedule(at, ev);
                }
            }
            c.events = parts.iter().map(|p| lock(p).counters.events).sum();
            c.windows += 1;
            c.t = c.end;
            decide(&mut c);
        };
        decide(&mut lock_ctl());
        // Each thread: read the window, run its share, meet the others.
        let next_window = || {
            let c = lock_ctl();
            (c.stop, c.end, c.t, c.events)
        };
        std::thread::scope(|s| {
            for k in 1..threads {
                let (barrier, share, leader, next_window) = (&barrier, &share, &leader, &next_window);
                s.spawn(move || loop {
                    let (stop, end, ..) = next_window();
                    if stop.is_some() {
                        return;
                    }
                    share(k, end);
                    barrier.wait(leader);
                });
            }
            let mut calls = 0;
            loop {
                let (stop, end, t, events) = next_window();
                for _ in calls..events / crate::progress::EVENTS_PER_CALL {
                    progress(t);
                }
                calls = events / crate::progress::EVENTS_PER_CALL;
                if stop.is_some() {
                    return;
                }
                share(0, end);
                barrier.wait(&leader);
            }
        });
        if let Some(e) = panicked.into_inner().unwrap_or_else(|e| e.into_inner()) {
            std::panic::resume_unwind(e);
        }
        // Back to the single queue's state, so that a later run goes on.
        self.workload = world.workload.into_inner().unwrap_or_else(|e| e.into_inner());
        let c = ctl.into_inner().unwrap_or_else(|e| e.into_inner());
        self.now = c.stop.expect("a run ends with a decision to stop");
        self.counters.windows += c.windows;
        let next_sample = c.next_sample;
        let mut left = Vec::new();
        for (i, p) in parts.into_iter().enumerate() {
            let mut p = p.into_inner().unwrap_or_else(|e| e.into_inner());
            let c = p.counters;
            let sc = &mut self.counters;
            sc.packets_switched += c.packets_switched;
            sc.packet_hops += c.packet_hops;
            sc.unroutable += c.unroutable;
            sc.events += c.events;
            sc.pauses += c.pauses;
            sc.resumes += c.resumes;
            sc.pfc_malformed += c.pfc_malformed;
            sc.messages += c.messages;
            self.flows_done += p.flows_done;
            self.message_latency_ns.append(&mut p.message_latency_ns);
            for (h, held) in p.held.into_iter().enumerate().filter(|(_, x)| x.is_some()) {
                self.held[h] = held;
            }
            self.part_rngs[i] = p.rng;
            let mut k = 0;
            while let Some((t, ev)) = p.events.pop() {
                left.push((t, i, k, ev));
                k += 1;
            }
        }
        if n == 1 {
            self.rng = self.part_rngs[0].clone();
        }
        left.sort_by_key(|&(t, i, k, _)| (t, i, k));
        for (t, _, _, ev) in left {
            self.events.schedule(t, ev);
        }
        if let Some(t) = next_sample {
            self.events.schedule(t, Event::Sample);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sm::fabric_transport::default_settings as settings;

    #[test]
    fn a_leaf_spine_partitions_by_pod_with_spines_dealt_round_robin() {
        let t = Topology::leaf_spine(4, 2, 3, &settings());
        let p = partition(&t);
        assert_eq!(p.parts, 4);
        assert_eq!(p.lookahead, Some(Duration::from_micros(1)));
        // Leaves are switches 0..4, spines 4..6: nodes in that order.
        assert_eq!(&p.of_node[..6], &[0, 1, 2, 3, 0, 1]);
        for (h, &node) in t.host_nodes.iter().enumerate() {
            assert_eq!(p.of_node[node], h / 3, "host {h} is in its leaf's partition");
        }
        let one = partition(&Topology::incast(4, &settings()));
        assert_eq!((one.parts, one.lookahead), (1, None));
    }

    #[test]
    fn the_barrier_leader_sees_every_thread_s_round_and_runs_once_a_round() {
        use std::sync::atomic::AtomicU64;
        const THREADS: usize = 4;
        const ROUNDS: u64 = 2000;
        let barrier = SpinBarrier::new(THREADS);
        let work = AtomicU64::new(0);
        let seen = Mutex::new(Vec::new());
        let leader = || seen.lock().unwrap().push(work.load(Ordering::Relaxed));
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        work.fetch_add(1, Ordering::Relaxed);
                        barrier.wait(&leader);
                    }
                });
            }
        });
        let seen = seen.into_inner().unwrap();
        let want: Vec<u64> = (1..=ROUNDS).map(|r| r * THREADS as u64).collect();
        assert_eq!(seen, want, "the leader runs once a round, after every thread's work of that round");
    }

    #[test]
    fn partition_generators_differ_and_do_not_depend_on_threads() {
        let a: Vec<u64> = (0..4).map(|p| part_rng(7, p).next_u64()).collect();
        let b: Vec<u64> = (0..4).map(|p| part_rng(7, p).next_u64()).collect();
        assert_eq!(a, b);
        let mut d = a.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), 4);
    }
}
