//! The event handlers of both loops, written once over a [`Site`]: a
//! packet reaching a host or a switch, a port coming free, PFC pauses and
//! their refreshes, a flow starting; a host's NIC pulling its next packet
//! when its port is idle, and its completions posting more work. IB
//! links' events go to [`crate::ib::engine`].
//!
//! PFC: a switch ingress crossing XOFF queues a pause frame (real 802.1Qbb
//! bytes) on that port ahead of everything else; the upstream port parses
//! it and holds data for the time it gives. A paused host NIC that has
//! already pulled a data packet keeps it and sends nothing until the pause
//! ends (the endpoint cannot be asked for "control only"); senders send
//! almost only data, so this costs little.

use crate::clock::Event;
use crate::ib::engine::IbLink;
use crate::pfc::{data_pause, quanta_to_duration, PfcFrame, DATA_PRIORITY, WIRE_LEN};
use crate::site::Site;
use crate::switch::{ecn_capable, Admit};
use crate::topology::Node;
use core::time::Duration;
use rdma_transport::{WcStatus, WorkCompletion};

/// The handlers, for every [`Site`].
pub(crate) trait Handlers: Site {
    /// Runs `ev`, which is neither a sample nor an SMA's (the loops' own).
    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Arrive { node, port, packet } if self.port(node, port).ib.is_some() => {
                self.ib_arrive(node, port, packet.into_bytes())
            }
            Event::FlowControl { node, port, frame } => self.ib_receive_fc(node, port, &frame),
            Event::FcPeriod { node, port } => self.ib_fc_period(node, port),
            Event::PortFree { node, port } if self.port(node, port).ib.is_some() => {
                self.port(node, port).busy = false;
                self.ib_wake(node, port);
            }
            Event::Arrive { node, port: in_port, packet } => match self.node(node) {
                Node::Host(h) => {
                    self.deliver(h, packet);
                    self.service(h);
                }
                Node::Switch(sw) => {
                    self.counters().packets_switched += 1;
                    match self.switch(node, sw).admit(packet, in_port) {
                        Admit::Queued { port, pause } => {
                            if pause {
                                let g = self.switch(node, sw).ingress[in_port].generation;
                                self.send_pause(node, in_port);
                                self.schedule_refresh(node, in_port, g);
                            }
                            self.switch_send(node, sw, port)
                        }
                        Admit::Dropped => {}
                        Admit::Unroutable => self.counters().unroutable += 1,
                    }
                }
            },
            Event::PortFree { node, port } => {
                self.port(node, port).busy = false;
                self.wake(node, port);
            }
            Event::FlowStart { flow } => {
                let was_done = self.flow(flow).done();
                self.top_up(flow);
                if !was_done && self.flow(flow).done() {
                    self.flow_finished();
                }
                let src = self.flow(flow).src;
                self.service(src);
            }
            Event::Pfc { node, port, frame } => self.receive_pfc(node, port, &frame),
            Event::Unpause { node, port } => self.wake(node, port),
            Event::PfcRefresh { node, port, generation } => {
                let Node::Switch(sw) = self.node(node) else { return };
                let ing = self.switch(node, sw).ingress[port];
                if ing.xoff && ing.generation == generation {
                    self.send_pause(node, port);
                    self.schedule_refresh(node, port, generation);
                }
            }
            Event::Sample | Event::Sma { .. } => unreachable!("the loop runs its samples and the SMA itself"),
        }
    }

    /// Fires every host timer that is due, in host order. (Deadlines can
    /// be overdue, not only due now: a host serviced late may report one
    /// in the past. Host order, not deadline order, keeps runs identical
    /// to asking every host in turn.)
    fn fire_timers(&mut self) {
        let now = self.now();
        let mut due = Vec::new();
        while let Some(h) = self.timers().pop_due(now) {
            due.push(h);
        }
        due.sort_unstable();
        for h in due {
            self.host(h).ep.handle_timeout(now);
            self.service(h);
        }
    }

    /// Tries to send on port `port` of `node` (after a pause ran out).
    fn wake(&mut self, node: usize, port: usize) {
        match self.node(node) {
            Node::Host(h) => self.service(h),
            Node::Switch(sw) => self.switch_send(node, sw, port),
        }
    }

    fn pause_quanta(&mut self, node: usize) -> u16 {
        match self.node(node) {
            Node::Switch(sw) => self.switch(node, sw).pfc.map_or(0, |p| p.pause_quanta),
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
            self.counters().resumes += 1;
        } else {
            self.counters().pauses += 1;
        }
        self.port(node, port).pfc_out.push_back(frame.to_vec());
        self.wake(node, port);
    }

    /// The next XOFF refresh: half the pause time, so the upstream never
    /// resumes while the ingress is still above XON (§3.2).
    fn schedule_refresh(&mut self, node: usize, port: usize, generation: u64) {
        let d = quanta_to_duration(self.pause_quanta(node), self.port(node, port).link.rate_bps);
        let at = self.now() + (d / 2).max(Duration::from_nanos(1));
        self.schedule(node, at, Event::PfcRefresh { node, port, generation });
    }

    fn receive_pfc(&mut self, node: usize, port: usize, frame: &[u8]) {
        let now = self.now();
        let p = self.port(node, port);
        let d = match data_pause(frame, p.link.rate_bps) {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(_) => {
                self.counters().pfc_malformed += 1;
                return;
            }
        };
        p.pause(now, d);
        if d.is_zero() {
            self.wake(node, port);
        } else {
            self.schedule(node, now + d, Event::Unpause { node, port });
        }
    }

    /// Puts a PFC frame on port `port` of `node`, which must be idle.
    fn launch_pfc(&mut self, node: usize, port: usize, frame: Vec<u8>) {
        let (at, peer, peer_port) = self.occupy(node, port, WIRE_LEN);
        self.schedule(peer, at, Event::Pfc { node: peer, port: peer_port, frame });
    }

    fn switch_send(&mut self, node: usize, sw: usize, port: usize) {
        let now = self.now();
        let p = self.port(node, port);
        if p.busy {
            return;
        }
        if let Some(frame) = p.pfc_out.pop_front() {
            return self.launch_pfc(node, port, frame);
        }
        let paused = p.data_paused(now);
        let (s, rng) = self.switch_and_rng(node, sw);
        if let Some((mut p, resume)) = s.dequeue(port, paused, rng) {
            if self.int_on() {
                let queued = self.switch(node, sw).egress[port].data_bytes();
                crate::int::stamp_at_egress(p.headers_mut(), self.port(node, port), queued, now);
            }
            self.launch(node, port, p);
            if let Some(in_port) = resume {
                self.send_pfc(node, in_port, 0);
            }
        }
    }

    /// After anything that touched host `h`: reap completions, post more
    /// work, and send one packet if its NIC is idle; then note its next
    /// engine deadline. ([`Site::service`] of both loops.)
    fn serve(&mut self, h: usize) {
        self.pump(h);
        let t = self.host(h).ep.poll_timeout();
        self.timers().set(h, t);
    }

    fn pump(&mut self, h: usize) {
        let cq = self.host(h).cq;
        for wc in self.host(h).ep.poll_cq(cq, 64) {
            let Some(f) = self.flow_of(h, wc.qp_num) else {
                self.workload_completion(h, &wc);
                continue;
            };
            let was_done = self.flow(f).done();
            self.complete(f, &wc);
            if !was_done && self.flow(f).done() {
                self.flow_finished();
            }
        }
        if self.ib().is_some() {
            return self.ib_host_send(h);
        }
        let (node, now) = (self.host_node(h), self.now());
        let port = self.port(node, 0);
        if port.busy {
            return;
        }
        let paused = port.data_paused(now);
        if let Some(p) = self.held(h).take() {
            if paused {
                *self.held(h) = Some(p);
            } else {
                self.launch(node, 0, p);
            }
            return;
        }
        let Some(packet) = self.next_packet(h) else { return };
        if paused && ecn_capable(packet.headers()) {
            *self.held(h) = Some(packet);
            return;
        }
        self.launch(node, 0, packet);
    }

    /// Flow `f`'s WRITE completed with `wc`: count it and post more.
    fn complete(&mut self, f: usize, wc: &WorkCompletion) {
        let now = self.now();
        let flow = self.flow(f);
        flow.outstanding = flow.outstanding.saturating_sub(1);
        if let Some(t) = flow.posted_at.pop_front() {
            self.record_latency((now - t).as_nanos() as u64);
        }
        let flow = self.flow(f);
        if wc.status != WcStatus::Success {
            flow.failed = true;
            return;
        }
        flow.completed += u64::from(wc.byte_len);
        if flow.size.is_some_and(|s| flow.completed >= s) && flow.finish.is_none() {
            flow.finish = Some(now);
        }
        self.top_up(f);
    }
}

impl<S: Site + ?Sized> Handlers for S {}
