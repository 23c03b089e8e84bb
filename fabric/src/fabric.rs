//! The discrete-event loop: packets over links and through switches,
//! endpoint timers, flows posting work, and the samples the reports use.
//! Hosts pull a packet from their endpoint only when their NIC port is
//! idle, so a host never queues more than the engine itself holds.
//!
//! PFC: a switch ingress crossing XOFF queues a pause frame (real 802.1Qbb
//! bytes) on that port ahead of everything else; the upstream port parses
//! it and holds data for the time it gives. A paused host NIC that has
//! already pulled a data packet keeps it and sends nothing until the pause
//! ends (the endpoint cannot be asked for "control only"); senders send
//! almost only data, so this costs little.

use crate::clock::{Event, EventQueue, HostTimers};
use crate::host::{connect_with, Flow, Host};
use crate::packet::Packet;
use crate::pfc::{data_pause, quanta_to_duration, PfcFrame, DATA_PRIORITY, WIRE_LEN};
use crate::switch::{ecn_capable, ipv4_src, Admit};
use crate::topology::{Node, Topology};
use crate::workload::Workload;
use core::time::Duration;
use rdma_transport::sim::Rng;
use rdma_transport::{Instant, WcStatus, WorkCompletion, MAX_PACKET};
use rustc_hash::FxHashMap;

/// Packet counts over the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets_switched: u64,
    /// Packets put on a link (hosts' and switches'; not PFC or IB flow
    /// control): the unit of simulated work the benchmarks divide by.
    pub packet_hops: u64,
    pub unroutable: u64,
    pub events: u64,
    /// PFC frames sent with a non-zero time (XOFF and its refreshes), and with time 0 (XON).
    pub pauses: u64,
    pub resumes: u64,
    /// Received frames that did not parse as PFC.
    pub pfc_malformed: u64,
    /// `--threads`: events sent to another partition (packets, PFC frames
    /// and IB flow-control packets crossing a partition boundary), and
    /// synchronisation windows run; both 0 on the single queue.
    pub messages: u64,
    pub windows: u64,
}

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
    /// touched its endpoint (all of that ends in [`Fabric::service`]).
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
                debug_assert_eq!(tt, scan, "an engine's deadline changed without Fabric::service or pull noting it");
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
                self.handle(ev);
            } else {
                self.fire_timers();
            }
        }
    }

    /// Asks the engine that the next event reaches to bring the state of
    /// that packet's QP into the cache while this event runs (see
    /// [`prefetch_next`]).
    fn prefetch_next(&self) {
        prefetch_next(&self.events, &self.timers, &self.topo.nodes, |h| &self.topo.hosts[h]);
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

    /// Fires every host timer that is due, in host order. (Deadlines can
    /// be overdue, not only due now: a host serviced late may report one
    /// in the past. Host order, not deadline order, keeps runs identical
    /// to asking every host in turn.)
    fn fire_timers(&mut self) {
        let now = self.now;
        let mut due = Vec::new();
        while let Some(h) = self.timers.pop_due(now) {
            due.push(h);
        }
        due.sort_unstable();
        for h in due {
            self.topo.hosts[h].ep.handle_timeout(now);
            self.service(h);
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Arrive { node, port, packet } if self.topo.ports[node][port].ib.is_some() => {
                self.ib_arrive(node, port, packet.into_bytes())
            }
            Event::FlowControl { node, port, frame } => self.ib_receive_fc(node, port, &frame),
            Event::FcPeriod { node, port } => self.ib_fc_period(node, port),
            Event::Sma { node, port } => self.sma_event(node, port),
            Event::PortFree { node, port } if self.topo.ports[node][port].ib.is_some() => {
                self.topo.ports[node][port].busy = false;
                self.ib_wake(node, port);
            }
            Event::Arrive { node, port: in_port, packet } => match self.topo.nodes[node] {
                Node::Host(h) => {
                    let host = &mut self.topo.hosts[h];
                    deliver(host, h, self.int.as_mut(), self.now, packet, &mut self.rx_scratch);
                    self.service(h);
                }
                Node::Switch(sw) => {
                    self.counters.packets_switched += 1;
                    match self.topo.switches[sw].admit(packet, in_port) {
                        Admit::Queued { port, pause } => {
                            if pause {
                                let g = self.topo.switches[sw].ingress[in_port].generation;
                                self.send_pause(node, in_port);
                                self.schedule_refresh(node, in_port, g);
                            }
                            self.switch_send(node, sw, port)
                        }
                        Admit::Dropped => {}
                        Admit::Unroutable => self.counters.unroutable += 1,
                    }
                }
            },
            Event::PortFree { node, port } => {
                self.topo.ports[node][port].busy = false;
                match self.topo.nodes[node] {
                    Node::Host(h) => self.service(h),
                    Node::Switch(sw) => self.switch_send(node, sw, port),
                }
            }
            Event::FlowStart { flow } => {
                let now = self.now;
                let was_done = self.flows[flow].done();
                self.flows[flow].top_up(&mut self.topo.hosts, now);
                self.flows_done += usize::from(!was_done && self.flows[flow].done());
                let src = self.flows[flow].src;
                self.service(src);
            }
            Event::Sample => self.sample(),
            Event::Pfc { node, port, frame } => self.receive_pfc(node, port, &frame),
            Event::Unpause { node, port } => self.wake(node, port),
            Event::PfcRefresh { node, port, generation } => {
                let Node::Switch(sw) = self.topo.nodes[node] else { return };
                let ing = self.topo.switches[sw].ingress[port];
                if ing.xoff && ing.generation == generation {
                    self.send_pause(node, port);
                    self.schedule_refresh(node, port, generation);
                }
            }
        }
    }

    /// Tries to send on port `port` of `node` (after a pause ran out).
    fn wake(&mut self, node: usize, port: usize) {
        match self.topo.nodes[node] {
            Node::Host(h) => self.service(h),
            Node::Switch(sw) => self.switch_send(node, sw, port),
        }
    }

    fn pause_quanta(&self, node: usize) -> u16 {
        match self.topo.nodes[node] {
            Node::Switch(sw) => self.topo.switches[sw].pfc.map_or(0, |p| p.pause_quanta),
            Node::Host(_) => 0,
        }
    }

    /// Queues an XOFF for the data priority on port `port` of switch `node`.
    fn send_pause(&mut self, node: usize, port: usize) {
        let q = self.pause_quanta(node);
        self.send_pfc(node, port, q);
    }

    fn send_pfc(&mut self, node: usize, port: usize, quanta: u16) {
        let mac = [2, 0, 0, 0, (node >> 8) as u8, node as u8];
        let frame = PfcFrame::single(mac, DATA_PRIORITY, quanta).emit();
        if quanta == 0 {
            self.counters.resumes += 1;
        } else {
            self.counters.pauses += 1;
        }
        self.topo.ports[node][port].pfc_out.push_back(frame.to_vec());
        self.wake(node, port);
    }

    /// The next XOFF refresh: half the pause time, so the upstream never
    /// resumes while the ingress is still above XON (§3.2).
    fn schedule_refresh(&mut self, node: usize, port: usize, generation: u64) {
        let d = quanta_to_duration(self.pause_quanta(node), self.topo.ports[node][port].link.rate_bps);
        self.events
            .schedule(self.now + (d / 2).max(Duration::from_nanos(1)), Event::PfcRefresh { node, port, generation });
    }

    fn receive_pfc(&mut self, node: usize, port: usize, frame: &[u8]) {
        let p = &mut self.topo.ports[node][port];
        let d = match data_pause(frame, p.link.rate_bps) {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(_) => {
                self.counters.pfc_malformed += 1;
                return;
            }
        };
        p.pause(self.now, d);
        if d.is_zero() {
            self.wake(node, port);
        } else {
            self.events.schedule(self.now + d, Event::Unpause { node, port });
        }
    }

    /// Adds every port's paused time up to now.
    pub fn account_pauses(&mut self) {
        let now = self.now;
        self.topo.ports.iter_mut().flatten().for_each(|p| p.account(now));
    }

    /// Puts a PFC frame on port `port` of `node`, which must be idle.
    fn launch_pfc(&mut self, node: usize, port: usize, frame: Vec<u8>) {
        let p = &mut self.topo.ports[node][port];
        p.busy = true;
        let done = self.now + p.link.serialise(WIRE_LEN);
        let (peer, peer_port, delay) = (p.peer, p.peer_port, p.link.delay);
        self.events.schedule(done, Event::PortFree { node, port });
        self.events.schedule(done + delay, Event::Pfc { node: peer, port: peer_port, frame });
    }

    /// Puts `packet` on port `port` of `node`, which must be idle.
    fn launch(&mut self, node: usize, port: usize, packet: Packet) {
        let len = packet.wire_len();
        self.launch_len(node, port, packet, len);
    }

    /// As [`Self::launch`], for a packet that costs `wire_len` bytes on the wire.
    pub(crate) fn launch_len(&mut self, node: usize, port: usize, packet: Packet, wire_len: usize) {
        self.counters.packet_hops += 1;
        let p = &mut self.topo.ports[node][port];
        p.busy = true;
        p.tx_bytes += wire_len as u64;
        let done = self.now + p.link.serialise(wire_len);
        let (peer, peer_port, delay) = (p.peer, p.peer_port, p.link.delay);
        self.events.schedule(done, Event::PortFree { node, port });
        self.events.schedule(done + delay, Event::Arrive { node: peer, port: peer_port, packet });
    }

    fn switch_send(&mut self, node: usize, sw: usize, port: usize) {
        let p = &mut self.topo.ports[node][port];
        if p.busy {
            return;
        }
        if let Some(frame) = p.pfc_out.pop_front() {
            return self.launch_pfc(node, port, frame);
        }
        let paused = p.data_paused(self.now);
        if let Some((mut p, resume)) = self.topo.switches[sw].dequeue(port, paused, &mut self.rng) {
            if self.int.is_some() {
                let queued = self.topo.switches[sw].egress[port].data_bytes();
                crate::int::stamp_at_egress(p.headers_mut(), &self.topo.ports[node][port], queued, self.now);
            }
            self.launch(node, port, p);
            if let Some(in_port) = resume {
                self.send_pfc(node, in_port, 0);
            }
        }
    }

    /// After anything that touched host `h`: reap completions, post more
    /// work, and send one packet if its NIC is idle; then note its next
    /// engine deadline.
    pub(crate) fn service(&mut self, h: usize) {
        self.pump(h);
        self.timers.set(h, self.topo.hosts[h].ep.poll_timeout());
    }

    fn pump(&mut self, h: usize) {
        let cq = self.topo.hosts[h].cq;
        for wc in self.topo.hosts[h].ep.poll_cq(cq, 64) {
            let Some(&f) = self.flow_of.get(&(h, wc.qp_num)) else {
                if let Some(w) = self.workload.as_mut() {
                    w.on_completion(h, &wc, &mut self.topo.hosts[h], self.now);
                }
                continue;
            };
            let was_done = self.flows[f].done();
            self.complete(f, &wc);
            self.flows_done += usize::from(!was_done && self.flows[f].done());
        }
        if self.topo.ib.is_some() {
            return self.ib_host_send(h);
        }
        let node = self.topo.host_nodes[h];
        let port = &self.topo.ports[node][0];
        if port.busy {
            return;
        }
        let paused = port.data_paused(self.now);
        if let Some(p) = self.held[h].take() {
            if paused {
                self.held[h] = Some(p);
            } else {
                self.launch(node, 0, p);
            }
            return;
        }
        let Some(packet) = self.pull(h) else { return };
        if paused && ecn_capable(packet.headers()) {
            self.held[h] = Some(packet);
            return;
        }
        self.launch(node, 0, packet);
    }

    /// Flow `f`'s WRITE completed with `wc`: count it and post more.
    fn complete(&mut self, f: usize, wc: &WorkCompletion) {
        let flow = &mut self.flows[f];
        flow.outstanding = flow.outstanding.saturating_sub(1);
        if let Some(t) = flow.posted_at.pop_front() {
            self.message_latency_ns.push((self.now - t).as_nanos() as u64);
        }
        if wc.status != WcStatus::Success {
            flow.failed = true;
            return;
        }
        flow.completed += u64::from(wc.byte_len);
        if flow.size.is_some_and(|s| flow.completed >= s) && flow.finish.is_none() {
            flow.finish = Some(self.now);
        }
        flow.top_up(&mut self.topo.hosts, self.now);
    }

    /// The next packet host `h`'s engine has to send ([`next_packet`]).
    /// Sending arms the engine's timers, so its deadline is noted.
    pub(crate) fn pull(&mut self, h: usize) -> Option<Packet> {
        let ep = &mut self.topo.hosts[h].ep;
        let packet = next_packet(ep, self.now, &mut self.tx_scratch, self.int.as_ref(), h);
        self.timers.set(h, ep.poll_timeout());
        packet
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
        if delivered != self.last_delivered.0 {
            self.last_delivered = (delivered, self.now);
            return;
        }
        if self.now - self.last_delivered.1 < window {
            return;
        }
        if self.topo.ib.is_some() {
            if let Some(ports) = self.ib_blocked_ports().filter(|p| !p.is_empty()) {
                self.deadlock = Some(Deadlock { at: self.now, ports });
            }
            return;
        }
        let mut ports = Vec::new();
        for (node, n) in self.topo.nodes.iter().enumerate() {
            let Node::Switch(sw) = *n else { continue };
            for port in (0..self.topo.ports[node].len()).filter(|&p| self.topo.switches[sw].has_data(p)) {
                if !self.topo.ports[node][port].data_paused(self.now) {
                    return; // Data that may still move: congestion, not deadlock.
                }
                ports.push((node, port));
            }
        }
        if !ports.is_empty() {
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

/// Asks the engine that the next event of a queue reaches to bring the
/// state of that packet's QP into the cache while this event runs: the
/// next event's QP with what it points to, the one after's alone (its
/// lines arrive by the time the deep ask reads them). When a host's
/// timer comes first (the next event lies in a later bucket or later in
/// this one), the QP of that host's earliest deadline instead: under
/// congestion one packet-hop in five waits for a pacer's or rate timer on
/// a QP gone cold (docs/performance.md). The single queue and each
/// partition of the partitioned loop ask the same way; `host` gives the
/// hosts the queue's events and timers are for.
pub(crate) fn prefetch_next<'h>(
    events: &EventQueue,
    timers: &HostTimers,
    nodes: &[Node],
    host: impl Fn(usize) -> &'h Host,
) {
    let next = events.peek();
    if let Some((tt, h)) = timers.peek_hint() {
        if next.is_none_or(|(te, _)| tt < te) {
            host(h).ep.prefetch_due();
            return;
        }
    }
    for (ev, deep) in [(next.map(|(_, e)| e), true), (events.peek_second(), false)] {
        if let Some(Event::Arrive { node, packet, .. }) = ev {
            if let Node::Host(h) = nodes[*node] {
                host(h).ep.prefetch_for(packet.headers(), deep);
            }
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
