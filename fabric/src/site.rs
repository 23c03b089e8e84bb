//! What an event handler reaches: the whole fabric on the single event
//! queue ([`crate::fabric::Fabric`]), or one partition's share of it on
//! `--threads` ([`crate::parallel`]). The handlers themselves
//! ([`crate::handlers`], and the IB link layer in [`crate::ib::engine`])
//! are written once, over this trait, so both loops run the same code.
//!
//! The required methods are the accesses whose borrows differ between the
//! two (a partition holds pointers into the fabric, checked per element)
//! and the few steps that differ in what they do (an event for another
//! partition travels as a message; only the single queue has the SMA, a
//! capture and one generator for all).

use crate::clock::{Event, HostTimers};
use crate::counters::Counters;
use crate::host::{Flow, Host};
use crate::ib::IbConfig;
use crate::packet::Packet;
use crate::switch::Switch;
use crate::topology::{Node, Port};
use rdma_transport::sim::Rng;
use rdma_transport::{Instant, WorkCompletion};
use std::net::Ipv4Addr;

pub(crate) trait Site {
    /// The virtual time of the event being handled.
    fn now(&self) -> Instant;
    fn node(&self, node: usize) -> Node;
    /// The node of host `h`.
    fn host_node(&self, h: usize) -> usize;
    fn host(&mut self, h: usize) -> &mut Host;
    /// Switch `sw`, which is node `node`.
    fn switch(&mut self, node: usize, sw: usize) -> &mut Switch;
    fn ports(&mut self, node: usize) -> &mut Vec<Port>;
    /// Switch `sw` and its node's ports at once (adaptive routing reads
    /// the ports' queues while it draws from the switch's generator).
    fn switch_and_ports(&mut self, node: usize, sw: usize) -> (&mut Switch, &mut Vec<Port>);
    /// Switch `sw` and the generator its dequeue draws from.
    fn switch_and_rng(&mut self, node: usize, sw: usize) -> (&mut Switch, &mut Rng);
    fn rng(&mut self) -> &mut Rng;
    fn flow(&mut self, f: usize) -> &mut Flow;
    /// The flow whose sender is QP `qpn` of host `h`.
    fn flow_of(&self, h: usize, qpn: u32) -> Option<usize>;
    fn counters(&mut self) -> &mut Counters;
    fn timers(&mut self) -> &mut HostTimers;
    /// Host `h`'s data packet held while its port is paused.
    fn held(&mut self, h: usize) -> &mut Option<Packet>;
    /// `ev` at `at`, for `node`.
    fn schedule(&mut self, node: usize, at: Instant, ev: Event);
    /// Whether switches stamp INT (HPCC).
    fn int_on(&self) -> bool;
    /// The IB link layer's settings (`None`: RoCE).
    fn ib(&self) -> Option<&IbConfig>;
    /// A node's ports with the IB settings, at once.
    fn ports_and_ib(&mut self, node: usize) -> (&mut Vec<Port>, Option<&IbConfig>);

    /// Hands host `h` a packet that reached it ([`crate::fabric::deliver`]).
    fn deliver(&mut self, h: usize, packet: Packet);
    /// The next packet host `h`'s engine sends ([`crate::fabric::next_packet`]),
    /// its engine deadline noted.
    fn next_packet(&mut self, h: usize) -> Option<Packet>;
    /// Flow `f` posts WRITEs up to its window.
    fn top_up(&mut self, f: usize);
    /// A flow finished or failed just now.
    fn flow_finished(&mut self);
    /// A WRITE's post-to-completion time.
    fn record_latency(&mut self, ns: u64);
    /// A completion of host `h` that is no flow's: the workload's.
    fn workload_completion(&mut self, h: usize, wc: &WorkCompletion);
    /// After anything that touched host `h` ([`crate::handlers::Handlers::serve`]).
    fn service(&mut self, h: usize);

    /// IB: the address of the host whose port has LID `lid`.
    fn lid_addr(&self, lid: u16) -> Option<Ipv4Addr>;
    /// IB: the P_Key the port with LID `slid` sends with (`None`: no check).
    fn sender_pkey(&self, slid: u16) -> Option<u16>;
    /// IB: a VL15 packet (an SMP) reached port `port` of `node`.
    fn vl15_arrive(&mut self, node: usize, port: usize, f: Vec<u8>);
    /// IB: whether frames put on links are captured.
    fn capturing(&self) -> bool {
        false
    }
    /// IB: captures a frame put on a link now.
    fn capture(&mut self, _erf_type: u8, _frame: &[u8]) {}

    fn port(&mut self, node: usize, port: usize) -> &mut Port {
        &mut self.ports(node)[port]
    }

    /// Puts `packet` on port `port` of `node`, which must be idle.
    fn launch(&mut self, node: usize, port: usize, packet: Packet) {
        let len = packet.wire_len();
        self.launch_len(node, port, packet, len);
    }

    /// As [`Self::launch`], for a packet that costs `wire_len` bytes on the wire.
    fn launch_len(&mut self, node: usize, port: usize, packet: Packet, wire_len: usize) {
        self.counters().packet_hops += 1;
        self.port(node, port).tx_bytes += wire_len as u64;
        let (at, peer, peer_port) = self.occupy(node, port, wire_len);
        self.schedule(peer, at, Event::Arrive { node: peer, port: peer_port, packet });
    }

    /// Starts sending `wire_len` bytes on port `port` of `node`, which must
    /// be idle: the port is busy until the last byte is out (its
    /// `PortFree`, scheduled here). Returns when that byte reaches the
    /// peer, and the peer's node and port: where the caller's frame goes.
    fn occupy(&mut self, node: usize, port: usize, wire_len: usize) -> (Instant, usize, usize) {
        let now = self.now();
        let p = self.port(node, port);
        p.busy = true;
        let done = now + p.link.serialise(wire_len);
        let (peer, peer_port, delay) = (p.peer, p.peer_port, p.link.delay);
        self.schedule(node, done, Event::PortFree { node, port });
        (done + delay, peer, peer_port)
    }
}
