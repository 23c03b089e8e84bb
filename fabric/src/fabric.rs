//! The discrete-event loop on one queue: events and endpoint timers in
//! time order, flows posting work, and the samples the reports use. What
//! each event does is `crate::handlers`' (the same for `--threads`,
//! [`crate::parallel`]); this file gives the handlers the whole fabric
//! (`Site`). Hosts pull a packet from their endpoint only when their
//! NIC port is idle, so a host never queues more than the engine itself
//! holds.

use crate::clock::{Event, EventQueue, HostTimers};
use crate::handlers::Handlers;
use crate::host::{connect_with, Flow, Host};
use crate::ib::engine::blocked_ports;
use crate::ib::IbConfig;
use crate::packet::Packet;
use crate::site::Site;
use crate::switch::{ecn_capable, ipv4_src, Switch};
use crate::topology::{Node, Port, Topology};
use crate::workload::Workload;
use core::time::Duration;
use rdma_transport::sim::Rng;
use rdma_transport::{Instant, WorkCompletion, MAX_PACKET};
use rustc_hash::FxHashMap;
use std::net::Ipv4Addr;

pub use crate::counters::Counters;

/// A PFC deadlock: nothing delivered for a whole detection window while
/// data waits only at paused switch egress ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadlock {
    pub at: Instant,
    /// (node, port) of every switch egress holding data, all paused.
    pub ports: Vec<(usize, usize)>,
}

#[derive(Debug)]
pub struct Fabric {
    pub now: Instant,
    pub(crate) events: EventQueue,
    pub topo: Topology,
    pub flows: Vec<Flow>,
    pub(crate) flow_of: FxHashMap<(usize, u32), usize>,
    /// Flows finished or failed: the loop's stop test, without a walk over every flow.
    pub(crate) flows_done: usize,
    /// Work besides the flows (a collective), if any: see [`Fabric::set_workload`].
    pub(crate) workload: Option<Box<dyn Workload>>,
    pub(crate) rng: Rng,
    /// Scratch of [`SCRATCH`] bytes for the packet a host sends.
    pub(crate) tx_scratch: Vec<u8>,
    /// Scratch for a packet delivered whole ([`deliver`]).
    pub(crate) rx_scratch: Vec<u8>,
    /// IB: SMP answers that reached an SM's node: (node, SMP).
    pub sm_inbox: Vec<(usize, rdma_wire::smp::SmpRepr)>,
    /// IB: when set, every VL15 and flow-control frame put on a link.
    pub ib_capture: Option<Vec<crate::ib::capture::Captured>>,
    /// Post-to-completion time of every WRITE, ns.
    pub message_latency_ns: Vec<u64>,
    /// Per host: a data packet pulled from the endpoint while its port was paused.
    pub(crate) held: Vec<Option<Packet>>,
    /// Every host's next engine deadline, refreshed whenever the loop has
    /// touched its endpoint (all of that ends in `Site::service`).
    timers: HostTimers,
    pub counters: Counters,
    /// How often the bottleneck queue is sampled, and per-flow bytes are recorded every `window`.
    pub sample_every: Duration,
    pub window: Duration,
    /// (time, data bytes queued at the bottleneck port).
    pub queue_samples: Vec<(Instant, u64)>,
    /// (time, bytes delivered so far per flow) at every window boundary.
    pub windows: Vec<(Instant, Vec<u64>)>,
    /// Look for a deadlock at window boundaries: no delivery for this long.
    /// A run stops once one is found (nothing can change after it).
    pub deadlock_window: Option<Duration>,
    pub deadlock: Option<Deadlock>,
    /// Total bytes delivered at the last window boundary, and when it last grew.
    pub(crate) last_delivered: (u64, Instant),
    /// In-band network telemetry for HPCC ([`Fabric::enable_int`]): what
    /// each host's ACKs echo (the partitioned loop keeps a table per
    /// partition instead).
    pub(crate) int: Option<crate::int::EchoTable>,
    /// `Some(n)`: run the partitioned loop ([`crate::parallel`]) on `n`
    /// threads; `None`: the single event queue below. The partitioned
    /// loop gives the same results for every `n`, but not the same as
    /// the single queue (its own random streams, tie order and stop test)
    /// unless the fabric is one partition.
    pub threads: Option<usize>,
    /// The partitions' random generators, kept between runs.
    pub(crate) part_rngs: Vec<Rng>,
    /// The seed of the run, from which each partition's generator is drawn.
    pub(crate) seed: u64,
}

impl Fabric {
    pub fn new(topo: Topology, seed: u64) -> Fabric {
        let mut events = EventQueue::default();
        events.schedule(Instant::ZERO, Event::Sample);
        let held = vec![None; topo.hosts.len()];
        let timers = HostTimers::new(topo.hosts.len());
        let ib = topo.ib.is_some();
        let mut f = Fabric {
            now: Instant::ZERO,
            events,
            topo,
            flows: Vec::new(),
            flow_of: FxHashMap::default(),
            flows_done: 0,
            workload: None,
            rng: Rng::new(seed),
            tx_scratch: vec![0; SCRATCH],
            rx_scratch: Vec::with_capacity(MAX_PACKET),
            sm_inbox: Vec::new(),
            message_latency_ns: Vec::new(),
            ib_capture: None,
            held,
            timers,
            counters: Counters::default(),
            sample_every: Duration::from_micros(1),
            window: Duration::from_micros(100),
            queue_samples: Vec::new(),
            windows: Vec::new(),
            deadlock_window: None,
            deadlock: None,
            last_delivered: (0, Instant::ZERO),
            int: None,
            threads: None,
            part_rngs: Vec::new(),
            seed,
        };
        if ib {
            f.start_ib();
        }
        f
    }

    /// Turns on in-band network telemetry (HPCC's INT, see [`crate::int`]):
    /// switches stamp data packets, hosts echo the stamps in their ACKs and
    /// hand echoes to the QP's controller. RoCE only.
    pub fn enable_int(&mut self) {
        self.int = Some(crate::int::EchoTable::default());
    }

    /// Connects a flow from host `src` to host `dst` (host indices) of
    /// `size` bytes (None: forever) that starts at `start`.
    pub fn add_flow(&mut self, src: usize, dst: usize, size: Option<u64>, start: Instant) -> usize {
        let (to_dst, to_src) = (self.topo.av_to(dst), self.topo.av_to(src));
        let (s, d) = connect_with(&mut self.topo.hosts, src, dst, to_dst, to_src);
        let flow = Flow {
            src,
            dst,
            src_qpn: s,
            dst_qpn: d,
            size,
            start,
            posted: 0,
            completed: 0,
            outstanding: 0,
            finish: None,
            failed: false,
            posted_at: Default::default(),
        };
        self.flows.push(flow);
        let f = self.flows.len() - 1;
        self.flow_of.insert((src, s), f);
        self.events.schedule(start, Event::FlowStart { flow: f });
        f
    }

    /// Bytes delivered so far to each flow's receiver from its sender.
    pub fn delivered(&self) -> Vec<u64> {
        let h = &self.topo.hosts;
        self.flows.iter().map(|f| h[f.dst].rx_data_bytes.get(&h[f.src].addr).copied().unwrap_or(0)).collect()
    }

    /// Runs until virtual time `until`, or until every finite flow is done
    /// when `stop_when_done`. `progress` is told the virtual time now and then.
    pub fn run(&mut self, until: Instant, stop_when_done: bool, progress: &mut dyn FnMut(Instant)) {
        match self.threads {
            Some(n) => self.run_partitioned(until, stop_when_done, n, progress),
            None => self.run_events(until, stop_when_done, progress),
        }
        self.account_pauses();
    }

    fn run_events(&mut self, until: Instant, stop_when_done: bool, progress: &mut dyn FnMut(Instant)) {
        // Endpoints may have been touched from outside since the last run.
        for h in 0..self.topo.hosts.len() {
            self.timers.set(h, self.topo.hosts[h].ep.poll_timeout());
        }
        loop {
            if self.deadlock.is_some() {
                return;
            }
            if stop_when_done && self.all_done() {
                return;
            }
            let te = self.events.next_time();
            let tt = self.timers.earliest();
            // Every path that touches an engine must note its deadline
            // (service, pull); a sampled check in debug builds and tests.
            #[cfg(debug_assertions)]
            if self.counters.events % 1024 == 0 {
                let scan = self.topo.hosts.iter().filter_map(|h| h.ep.poll_timeout()).min();
                debug_assert_eq!(
                    tt, scan,
                    "an engine's deadline changed without Site::service or next_packet noting it"
                );
            }
            let Some(t) = te.into_iter().chain(tt).min() else { return };
            if t > until {
                self.now = until;
                return;
            }
            self.now = self.now.max(t);
            self.counters.events += 1;
            if self.counters.events % crate::progress::EVENTS_PER_CALL == 0 {
                progress(self.now);
            }
            if te.is_some_and(|e| e <= t) {
                let (_, ev) = self.events.pop().expect("peeked");
                self.prefetch_next();
                match ev {
                    Event::Sample => self.sample(),
                    Event::Sma { node, port } => self.sma_event(node, port),
                    ev => self.handle(ev),
                }
            } else {
                self.fire_timers();
            }
        }
    }

    /// Asks for the state the next event reads (a packet's QP, a host's
    /// next QP, a switch port's next packet) while this event runs (see
    /// [`prefetch_next`]).
    fn prefetch_next(&self) {
        let topo = &self.topo;
        prefetch_next(&self.events, &self.timers, &topo.nodes, |h| &topo.hosts[h], |_, sw| &topo.switches[sw]);
    }

    /// Every flow is finished or failed and the workload, if any, is done
    /// (false while there is neither: a run of nothing runs its time).
    fn all_done(&self) -> bool {
        let work = !self.flows.is_empty() || self.workload.is_some();
        work && self.flows_done == self.flows.len() && self.workload.as_ref().is_none_or(|w| w.done())
    }

    /// Installs `w`, which has posted its first work on the hosts: every
    /// host is serviced so that it starts sending.
    pub fn set_workload(&mut self, w: Box<dyn Workload>) {
        self.workload = Some(w);
        for h in 0..self.topo.hosts.len() {
            self.service(h);
        }
    }

    /// The workload, after a run.
    pub fn take_workload(&mut self) -> Option<Box<dyn Workload>> {
        self.workload.take()
    }

    /// Adds every port's paused time up to now.
    pub fn account_pauses(&mut self) {
        let now = self.now;
        self.topo.ports.iter_mut().flatten().for_each(|p| p.account(now));
    }

    /// Starts every IB link: the first round of (Init) flow-control packets.
    fn start_ib(&mut self) {
        for node in 0..self.topo.ports.len() {
            for port in 0..self.topo.ports[node].len() {
                self.events.schedule(Instant::ZERO, Event::FcPeriod { node, port });
            }
        }
    }

    /// Data bytes waiting at output `port` of switch `sw`.
    pub fn queued_bytes(&self, sw: usize, port: usize) -> u64 {
        let node = self.topo.nodes.iter().position(|n| *n == Node::Switch(sw));
        match node.and_then(|n| self.topo.ports[n][port].ib.as_ref()) {
            Some(ib) => ib.queued_bytes(),
            None => self.topo.switches[sw].egress[port].data_bytes(),
        }
    }

    fn check_deadlock(&mut self, delivered: u64) {
        let Some(window) = self.deadlock_window else { return };
        if !stalled(&mut self.last_delivered, delivered, self.now, window) {
            return;
        }
        let topo = &self.topo;
        let stuck = stuck_ports(&topo.nodes, |n| &topo.ports[n], |sw| &topo.switches[sw], topo.ib.is_some(), self.now);
        if let Some(ports) = stuck {
            self.deadlock = Some(Deadlock { at: self.now, ports });
        }
    }

    fn sample(&mut self) {
        let (sw, port) = self.topo.bottleneck;
        let q = self.queued_bytes(sw, port);
        self.queue_samples.push((self.now, q));
        let w = self.window.as_nanos() as u64;
        if w > 0 && self.now.as_nanos() % w == 0 {
            let d = self.delivered();
            let total = d.iter().sum();
            self.windows.push((self.now, d));
            self.check_deadlock(total);
        }
        self.events.schedule(self.now + self.sample_every, Event::Sample);
    }
}

/// The single queue's handlers reach the whole fabric.
impl Site for Fabric {
    fn now(&self) -> Instant {
        self.now
    }
    fn node(&self, node: usize) -> Node {
        self.topo.nodes[node]
    }
    fn host_node(&self, h: usize) -> usize {
        self.topo.host_nodes[h]
    }
    fn host(&mut self, h: usize) -> &mut Host {
        &mut self.topo.hosts[h]
    }
    fn switch(&mut self, _node: usize, sw: usize) -> &mut Switch {
        &mut self.topo.switches[sw]
    }
    fn ports(&mut self, node: usize) -> &mut Vec<Port> {
        &mut self.topo.ports[node]
    }
    fn switch_and_ports(&mut self, node: usize, sw: usize) -> (&mut Switch, &mut Vec<Port>) {
        (&mut self.topo.switches[sw], &mut self.topo.ports[node])
    }
    fn switch_and_rng(&mut self, _node: usize, sw: usize) -> (&mut Switch, &mut Rng) {
        (&mut self.topo.switches[sw], &mut self.rng)
    }
    fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
    fn flow(&mut self, f: usize) -> &mut Flow {
        &mut self.flows[f]
    }
    fn flow_of(&self, h: usize, qpn: u32) -> Option<usize> {
        self.flow_of.get(&(h, qpn)).copied()
    }
    fn counters(&mut self) -> &mut Counters {
        &mut self.counters
    }
    fn timers(&mut self) -> &mut HostTimers {
        &mut self.timers
    }
    fn held(&mut self, h: usize) -> &mut Option<Packet> {
        &mut self.held[h]
    }
    fn schedule(&mut self, _node: usize, at: Instant, ev: Event) {
        self.events.schedule(at, ev);
    }
    fn int_on(&self) -> bool {
        self.int.is_some()
    }
    fn ib(&self) -> Option<&IbConfig> {
        self.topo.ib.as_ref()
    }
    fn ports_and_ib(&mut self, node: usize) -> (&mut Vec<Port>, Option<&IbConfig>) {
        (&mut self.topo.ports[node], self.topo.ib.as_ref())
    }
    fn deliver(&mut self, h: usize, packet: Packet) {
        deliver(&mut self.topo.hosts[h], h, self.int.as_mut(), self.now, packet, &mut self.rx_scratch);
    }
    fn next_packet(&mut self, h: usize) -> Option<Packet> {
        let ep = &mut self.topo.hosts[h].ep;
        let packet = next_packet(ep, self.now, &mut self.tx_scratch, self.int.as_ref(), h);
        self.timers.set(h, ep.poll_timeout());
        packet
    }
    fn top_up(&mut self, f: usize) {
        self.flows[f].top_up(&mut self.topo.hosts, self.now);
    }
    fn flow_finished(&mut self) {
        self.flows_done += 1;
    }
    fn record_latency(&mut self, ns: u64) {
        self.message_latency_ns.push(ns);
    }
    fn workload_completion(&mut self, h: usize, wc: &WorkCompletion) {
        if let Some(w) = self.workload.as_mut() {
            w.on_completion(h, wc, &mut self.topo.hosts[h], self.now);
        }
    }
    fn service(&mut self, h: usize) {
        self.serve(h);
    }
    fn lid_addr(&self, lid: u16) -> Option<Ipv4Addr> {
        let node = self.topo.lids.iter().position(|&l| l == lid && l != 0)?;
        match self.topo.nodes[node] {
            Node::Host(h) => Some(self.topo.hosts[h].addr),
            Node::Switch(_) => None,
        }
    }
    fn sender_pkey(&self, slid: u16) -> Option<u16> {
        let src = self.topo.lids.iter().position(|&l| l == slid && l != 0)?;
        self.topo.ports[src].first().and_then(|p| p.ib.as_ref()).map(|ib| ib.mgmt.pkeys[0])
    }
    fn vl15_arrive(&mut self, node: usize, port: usize, f: Vec<u8>) {
        self.sma_arrive(node, port, f);
    }
    fn capturing(&self) -> bool {
        self.ib_capture.is_some()
    }
    fn capture(&mut self, erf_type: u8, frame: &[u8]) {
        if let Some(c) = self.ib_capture.as_mut() {
            c.push(crate::ib::capture::Captured { at: self.now, erf_type, bytes: frame.to_vec() });
        }
    }
}

/// Whether nothing was delivered for `window` up to `now` (both loops'
/// deadlock watch): `delivered` is the total so far, `last` the total at
/// its last change and when that was, which this keeps up to date.
pub(crate) fn stalled(last: &mut (u64, Instant), delivered: u64, now: Instant, window: Duration) -> bool {
    if delivered != last.0 {
        *last = (delivered, now);
        return false;
    }
    now - last.1 >= window
}

/// The ports of a fabric that is stuck at `now`, if it is (both loops'
/// deadlock test, after a window without delivery): on IB, data queued at
/// switch outputs and no head packet with credit anywhere (a credit loop);
/// on RoCE, data waiting only at paused switch egress ports (PFC). `None`
/// when anything may still move, or nothing waits.
pub(crate) fn stuck_ports<'a>(
    nodes: &[Node],
    ports: impl Fn(usize) -> &'a [Port],
    switch: impl Fn(usize) -> &'a Switch,
    ib: bool,
    now: Instant,
) -> Option<Vec<(usize, usize)>> {
    if ib {
        return blocked_ports(nodes, ports).filter(|p| !p.is_empty());
    }
    let mut stuck = Vec::new();
    for (node, n) in nodes.iter().enumerate() {
        let Node::Switch(sw) = *n else { continue };
        let s = switch(sw);
        for (port, p) in ports(node).iter().enumerate().filter(|&(p, _)| s.has_data(p)) {
            if !p.data_paused(now) {
                return None; // Data that may still move: congestion, not deadlock.
            }
            stuck.push((node, port));
        }
    }
    (!stuck.is_empty()).then_some(stuck)
}

/// Asks the engine that the next event of a queue reaches to bring the
/// state of that packet's QP into the cache while this event runs: the
/// next event's QP with what it points to, the one after's alone (its
/// lines arrive by the time the deep ask reads them). When a host's
/// timer comes first (the next event lies in a later bucket or later in
/// this one), the QP of that host's earliest deadline instead: under
/// congestion one packet-hop in five waits for a pacer's or rate timer on
/// a QP gone cold (docs/performance.md). When the next event frees a
/// host's port, the QP the host will send from next; a switch's port,
/// the packet at the head of its queue. The single queue and each
/// partition of the partitioned loop ask the same way; `host` gives the
/// hosts the queue's events and timers are for, `switch` its switches (by
/// node and switch index).
pub(crate) fn prefetch_next<'h>(
    events: &EventQueue,
    timers: &HostTimers,
    nodes: &[Node],
    host: impl Fn(usize) -> &'h Host,
    switch: impl Fn(usize, usize) -> &'h Switch,
) {
    let next = events.peek();
    if let Some((tt, h)) = timers.peek_hint() {
        if next.is_none_or(|(te, _)| tt < te) {
            host(h).ep.prefetch_due();
            return;
        }
    }
    for (ev, deep) in [(next.map(|(_, e)| e), true), (events.peek_second(), false)] {
        match ev {
            Some(Event::Arrive { node, packet, .. }) => {
                if let Node::Host(h) = nodes[*node] {
                    host(h).ep.prefetch_for(packet.headers(), deep);
                }
            }
            // A host's port comes free: it pulls its next packet, from
            // the QP whose turn is next (cold on a host of many QPs). A
            // switch's port sends the head of its queue, written when it
            // was queued, long before on a busy fabric.
            Some(Event::PortFree { node, port }) => match nodes[*node] {
                Node::Host(h) => host(h).ep.prefetch_transmit(deep),
                Node::Switch(sw) if deep => switch(*node, sw).prefetch_head(*port),
                Node::Switch(_) => {}
            },
            _ => {}
        }
    }
}

/// The next packet host `h`'s engine `ep` has to send at `now`, sealed,
/// with its INT trailer when `int` is on (both event loops use it). A
/// payload the engine gives by reference stays in the region
/// ([`Packet`]). `buf` is scratch of [`SCRATCH`] bytes.
pub(crate) fn next_packet(
    ep: &mut rdma_transport::Endpoint,
    now: Instant,
    buf: &mut [u8],
    int: Option<&crate::int::EchoTable>,
    h: usize,
) -> Option<Packet> {
    let (buf, spare) = buf.split_at_mut(MAX_PACKET);
    let tx = ep.poll_transmit(now, buf)?;
    let mut packet = match tx.payload {
        None => Packet::from(&buf[..tx.len]),
        Some(p) => {
            let payload = &mut spare[..p.len];
            p.memory.read(p.offset, payload);
            p.seal(&mut buf[..tx.len], payload);
            Packet::by_reference(&buf[..tx.len], p)
        }
    };
    if let Some(table) = int {
        table.on_send(h, packet.headers_mut());
    }
    Some(packet)
}

/// Hands host `h` a packet that reached it at `now`: INT's trailer off
/// (into `int`), the data bytes counted by source, the packet whole to its
/// engine (`scratch` holds it if its payload came by reference). Both
/// event loops use it.
pub(crate) fn deliver(
    host: &mut Host,
    h: usize,
    int: Option<&mut crate::int::EchoTable>,
    now: Instant,
    mut packet: Packet,
    scratch: &mut Vec<u8>,
) {
    if let Some(table) = int {
        table.on_arrive(h, &mut host.ep, now, packet.headers_mut());
    }
    if ecn_capable(packet.headers()) {
        if let Some(src) = ipv4_src(packet.headers()) {
            *host.rx_data_bytes.entry(src).or_default() += packet.wire_len() as u64;
        }
    }
    host.ep.handle_packet(now, packet.whole(scratch));
}

/// The scratch [`next_packet`] takes: a packet's buffer, and room to read
/// a payload given by reference to seal it.
pub(crate) const SCRATCH: usize = 2 * MAX_PACKET;
