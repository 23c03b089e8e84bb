//! The InfiniBand link layer of the fabric (`--link ib`): credit-based
//! flow control per data VL, VL15, SL-to-VL mapping, VL arbitration, and
//! switches forwarding by DLID through linear forwarding tables.
//!
//! | module | what it holds |
//! |---|---|
//! | [`capture`] | VL15 and flow-control frames as an ERF pcap for tshark |
//! | [`credit`] | FCTBS/FCCL/ABR per VL and the flow-control packet |
//! | [`vlarb`] | the high/low VL arbitration tables and VLHighLimit |
//! | [`frame`] | how an engine packet travels as an IB frame: its LRH and wire size |
//! | [`engine`] | the event-loop side: sending, receiving, forwarding, FC packets |
//!
//! Every packet on an IB link is a native IB packet: the hosts' engines
//! frame it (`LinkKind::Ib`, LID routes) with their ports' LIDs, and the
//! fabric reads its LRH to route and rewrites its VL per hop ([`frame`]).

pub mod capture;
pub mod credit;
pub mod engine;
pub mod frame;
pub mod netfile;
pub mod routing;
pub mod sma;
pub mod vlarb;

use crate::ib::credit::{CreditRx, VlCredits};
use crate::ib::vlarb::{VlArbiter, VlWeight};
use core::time::Duration;
use std::collections::VecDeque;

/// The management VL.
pub const VL15: u8 = 15;
/// An SL2VL entry that drops the SL.
pub const SL2VL_DROP: u8 = 15;
/// The LFT entry for "no route".
pub const LFT_DROP: u8 = 0xff;

/// How the IB links of a fabric are set up.
#[derive(Debug, Clone, PartialEq)]
pub struct IbConfig {
    /// Data VLs per link (VL0 .. data_vls-1), 1..=15.
    pub data_vls: u8,
    /// Receive buffer per data VL, in 64-byte blocks (at most 2048).
    pub buffer_blocks: u16,
    /// VL15 receive buffer, in packets.
    pub vl15_packets: usize,
    /// Every VL gets a flow-control packet at least this often.
    pub fc_period: Duration,
    /// Probability that a flow-control packet is lost, and that one arrives
    /// with a flipped bit (so a bad LPCRC): fault injection.
    pub fc_loss: f64,
    pub fc_corrupt: f64,
    /// VL arbitration on every port.
    pub vlarb_high: Vec<VlWeight>,
    pub vlarb_low: Vec<VlWeight>,
    pub high_limit: u8,
    /// SL -> VL on every port (15: drop).
    pub sl2vl: [u8; 16],
    /// The SL data (ECN-capable) packets and everything else (ACKs, CNPs) use.
    pub data_sl: u8,
    pub control_sl: u8,
}

impl IbConfig {
    /// `data_vls` VLs of `buffer_blocks` each; SL i -> VL i mod data_vls;
    /// equal low-priority weights; data on SL0, ACKs on SL1.
    pub fn new(data_vls: u8, buffer_blocks: u16) -> IbConfig {
        let vls = data_vls.clamp(1, 15);
        let mut sl2vl = [0u8; 16];
        for (sl, v) in sl2vl.iter_mut().enumerate() {
            *v = sl as u8 % vls;
        }
        IbConfig {
            data_vls: vls,
            buffer_blocks: buffer_blocks.clamp(1, credit::MAX_WINDOW),
            vl15_packets: 4,
            // 65,536 symbol times (§2.1) at 4x QDR (10 Gbaud per lane).
            fc_period: Duration::from_nanos(6_554),
            fc_loss: 0.0,
            fc_corrupt: 0.0,
            vlarb_high: Vec::new(),
            vlarb_low: (0..vls).map(|vl| VlWeight { vl, weight: 64 }).collect(),
            high_limit: 0,
            sl2vl,
            data_sl: 0,
            control_sl: 1,
        }
    }
}

impl Default for IbConfig {
    /// Two data VLs of 256 blocks (16 KiB, above a 40G 2 µs-RTT BDP of 10 KB).
    fn default() -> IbConfig {
        IbConfig::new(2, 256)
    }
}

/// A packet waiting at an output port on a VL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub frame: Vec<u8>,
    /// Where it came in (switches): the port and VL whose buffer it holds.
    pub from: Option<(usize, u8)>,
    pub blocks: u16,
    pub wire_len: usize,
}

/// Counters of one IB port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbPortCounters {
    /// Times a head packet found no credit (counted once per wait).
    pub credit_stalls: u64,
    pub fc_sent: u64,
    pub fc_received: u64,
    pub fc_lost: u64,
    pub fc_bad: u64,
    pub vl15_dropped: u64,
    /// Dropped by SL2VL (15), an LFT miss or a PortState that forbids data.
    pub drops: u64,
    /// VL15 packets that were not a well-formed SMP with good CRCs.
    pub smp_bad: u64,
    /// Data packets dropped at this HCA port for a P_Key mismatch.
    pub pkey_violations: u64,
}

/// The IB state of one port (host or switch).
#[derive(Debug, Clone)]
pub struct IbPort {
    /// Per data VL: both directions' credit state.
    pub vls: Vec<VlCredits>,
    /// Per data VL: packets waiting for this port's link.
    pub out: Vec<VecDeque<Queued>>,
    pub vl15_out: VecDeque<Queued>,
    /// VL15 packets received and not yet handled.
    pub vl15_held: usize,
    pub vl15_capacity: usize,
    pub arb: VlArbiter,
    /// VLs owed a flow-control packet (bit per VL).
    pub fc_dirty: u16,
    /// Until the first round is out, FC packets carry Op = Init.
    pub fc_init: bool,
    /// VLs whose head packet is waiting for credit.
    stalled: u16,
    /// SL2VL of a host port (switches keep theirs per input/output pair).
    pub sl2vl: [u8; 16],
    pub counters: IbPortCounters,
    /// LID, SM LID, PortState, P_Keys: what the SM programs.
    pub mgmt: PortMgmt,
    /// VL15 packets waiting for the SMA.
    pub vl15_in: VecDeque<Vec<u8>>,
}

impl IbPort {
    pub fn new(cfg: &IbConfig) -> IbPort {
        let n = usize::from(cfg.data_vls);
        IbPort {
            vls: vec![VlCredits { rx: CreditRx::new(cfg.buffer_blocks), ..VlCredits::default() }; n],
            out: vec![VecDeque::new(); n],
            vl15_out: VecDeque::new(),
            vl15_held: 0,
            vl15_capacity: cfg.vl15_packets,
            arb: VlArbiter::new(cfg.vlarb_high.clone(), cfg.vlarb_low.clone(), cfg.high_limit),
            fc_dirty: 0,
            fc_init: true,
            stalled: 0,
            sl2vl: cfg.sl2vl,
            counters: IbPortCounters::default(),
            mgmt: PortMgmt { state: 4, ..PortMgmt::fresh() },
            vl15_in: VecDeque::new(),
        }
    }

    /// Bytes queued for the link on data VLs.
    pub fn queued_bytes(&self) -> u64 {
        self.out.iter().flatten().map(|q| q.frame.len() as u64).sum()
    }

    /// Packets queued for the link on data VLs (adaptive routing's load).
    pub fn queued_packets(&self) -> u64 {
        self.out.iter().map(|q| q.len() as u64).sum()
    }

    pub fn has_data(&self) -> bool {
        self.out.iter().any(|q| !q.is_empty())
    }

    /// Whether some data VL's head packet has credit (and the port is Active).
    pub fn can_send_data(&self) -> bool {
        self.mgmt.state == 4
            && self.out.iter().zip(&self.vls).any(|(q, c)| q.front().is_some_and(|p| c.tx.may_send(p.blocks)))
    }

    /// Picks the next data packet by VL arbitration among VLs whose head
    /// has credit, counting each VL that newly waits for credit.
    pub fn next_data(&mut self) -> Option<(u8, Queued)> {
        // Data moves only on an Active port (Init carries SMPs and link packets).
        if self.mgmt.state != 4 {
            return None;
        }
        for (v, (q, c)) in self.out.iter().zip(&self.vls).enumerate() {
            let bit = 1u16 << v;
            match q.front() {
                Some(p) if !c.tx.may_send(p.blocks) => {
                    if self.stalled & bit == 0 {
                        self.stalled |= bit;
                        self.counters.credit_stalls += 1;
                    }
                }
                _ => self.stalled &= !bit,
            }
        }
        let (out, vls) = (&self.out, &self.vls);
        let ready = |vl: u8| {
            let v = usize::from(vl);
            v < out.len() && out[v].front().is_some_and(|p| vls[v].tx.may_send(p.blocks))
        };
        let (vl, high) = self.arb.pick(&ready)?;
        let p = self.out[usize::from(vl)].pop_front().expect("ready means a head packet");
        self.vls[usize::from(vl)].tx.sent(p.blocks);
        self.arb.sent(high, p.wire_len);
        Some((vl, p))
    }

    /// The flow-control packet this port owes next (the lowest VL owed
    /// one; Op = Init until the first round is out), counted as sent.
    pub fn next_fc_packet(&mut self) -> Option<[u8; credit::FC_LEN]> {
        if self.fc_dirty == 0 {
            return None;
        }
        let vl = self.fc_dirty.trailing_zeros() as u8;
        self.fc_dirty &= !(1 << vl);
        let init = self.fc_init;
        if vl as usize + 1 == self.vls.len() {
            self.fc_init = false;
        }
        self.counters.fc_sent += 1;
        Some(credit::fc_packet(vl, &self.vls[usize::from(vl)], init))
    }

    /// The next packet for the link after flow control: VL15 first, then
    /// data by VL arbitration.
    pub fn next_packet(&mut self) -> Option<Queued> {
        self.vl15_out.pop_front().or_else(|| self.next_data().map(|(_, q)| q))
    }

    /// A packet that came in on this port's VL `vl` left the switch: its
    /// buffer frees, and the upstream is owed a flow-control packet.
    pub fn free_input(&mut self, vl: u8, blocks: u16) {
        if let Some(c) = self.vls.get_mut(usize::from(vl)) {
            c.rx.free(blocks);
            self.fc_dirty |= 1 << vl;
        }
    }

    /// Takes a received flow-control packet; false (counted) for a bad one.
    pub fn take_fc_packet(&mut self, frame: &[u8]) -> bool {
        match credit::receive_fc(frame, &mut self.vls) {
            Ok(_) => {
                self.counters.fc_received += 1;
                true
            }
            Err(_) => {
                self.counters.fc_bad += 1;
                false
            }
        }
    }

    /// Whether a host's port (`busy` with a packet or not) should take
    /// another packet from its engine: nothing is ready to go and fewer
    /// than `ahead` wait.
    pub fn wants_host_packet(&self, busy: bool, ahead: usize) -> bool {
        !busy && self.fc_dirty == 0 && !self.can_send_data() && self.out.iter().map(|q| q.len()).sum::<usize>() < ahead
    }

    /// Queues a packet of a host's engine: on the data or the control SL
    /// by what it carries, on that SL's VL; counted as a drop without a
    /// path (DLID 0) or for SL2VL 15.
    pub fn enqueue_host(&mut self, mut f: Vec<u8>, cfg: &IbConfig) {
        let sl = if frame::is_data(&f) { cfg.data_sl } else { cfg.control_sl };
        let dlid = frame::lrh(&f).map_or(0, |l| l.dlid);
        let vl = self.sl2vl[usize::from(sl & 0xf)];
        if dlid == 0 || usize::from(vl) >= self.out.len() {
            self.counters.drops += 1;
            return;
        }
        frame::set_sl_vl(&mut f, sl, vl);
        let wire_len = frame::wire_len(&f);
        self.out[usize::from(vl)].push_back(Queued {
            frame: f,
            from: None,
            blocks: credit::blocks(wire_len),
            wire_len,
        });
    }
}

/// What the subnet manager sets on a port (PortInfo's writable part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortMgmt {
    pub lid: u16,
    pub sm_lid: u16,
    /// PortState: 1 Down, 2 Init, 3 Armed, 4 Active.
    pub state: u8,
    pub lmc: u8,
    /// OperationalVLs as PortInfo encodes it (1: VL0, 2: VL0-1, 3: VL0-3, 4: VL0-7).
    pub op_vls: u8,
    pub pkeys: [u16; 32],
}

impl PortMgmt {
    /// A port an SM has not seen: Init (the physical link is up), no LID.
    pub fn fresh() -> PortMgmt {
        let mut pkeys = [0u16; 32];
        pkeys[0] = 0xffff;
        PortMgmt { lid: 0, sm_lid: 0, state: 2, lmc: 0, op_vls: 1, pkeys }
    }
}

/// An IB switch's tables. Port numbers in the LFT are IB's (0: the
/// switch itself); `ib_port` maps each fabric port to its IB number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbSwitch {
    /// DLID -> IB output port; [`LFT_DROP`] where there is none.
    pub lft: Vec<u8>,
    /// DLID -> the fabric ports of its adaptive-routing group, where it has
    /// more than one equal-cost port (as an SM programs AR groups beside
    /// the LFT); used only with `--multipath spray|adaptive`.
    pub ar_groups: Vec<Vec<usize>>,
    /// SL2VL per (fabric input port, fabric output port).
    pub sl2vl: Vec<Vec<[u8; 16]>>,
    pub ib_port: Vec<u8>,
    /// Port 0 (the switch's management port): its LID and SM LID.
    pub port0: PortMgmt,
    pub linear_fdb_top: u16,
    pub port_state_change: bool,
}

impl IbSwitch {
    pub fn new(ib_port: Vec<u8>, sl2vl: [u8; 16]) -> IbSwitch {
        let ports = ib_port.len();
        IbSwitch {
            lft: Vec::new(),
            ar_groups: Vec::new(),
            sl2vl: vec![vec![sl2vl; ports]; ports],
            ib_port,
            port0: PortMgmt { state: 4, ..PortMgmt::fresh() },
            linear_fdb_top: 0,
            port_state_change: false,
        }
    }

    /// The fabric port of IB port `p`.
    pub fn fabric_port(&self, p: u8) -> Option<usize> {
        self.ib_port.iter().position(|&q| q == p)
    }

    /// The fabric port towards `dlid`; `None` for no route or the switch itself.
    pub fn route(&self, dlid: u16) -> Option<usize> {
        let p = self.lft.get(usize::from(dlid)).copied().filter(|&p| p != LFT_DROP && p != 0)?;
        self.fabric_port(p)
    }

    /// The adaptive-routing group of `dlid`, if it has one.
    pub fn ar_group(&self, dlid: u16) -> Option<&[usize]> {
        self.ar_groups.get(usize::from(dlid)).map(Vec::as_slice).filter(|g| g.len() > 1)
    }

    /// Makes `ports` the adaptive-routing group of `dlid`.
    pub fn set_ar_group(&mut self, dlid: u16, ports: Vec<usize>) {
        let i = usize::from(dlid);
        if self.ar_groups.len() <= i {
            self.ar_groups.resize(i + 1, Vec::new());
        }
        self.ar_groups[i] = ports;
    }

    /// Routes `dlid` out of fabric port `port`.
    pub fn set_route(&mut self, dlid: u16, port: usize) {
        let p = self.ib_port.get(port).copied().unwrap_or(LFT_DROP);
        self.set_ib_route(dlid, p);
    }

    /// Sets the LFT entry of `dlid` to IB port `port` (0: the switch itself).
    pub fn set_ib_route(&mut self, dlid: u16, port: u8) {
        let i = usize::from(dlid);
        if self.lft.len() <= i {
            self.lft.resize(i + 1, LFT_DROP);
        }
        self.lft[i] = port;
    }
}
