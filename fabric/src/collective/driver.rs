//! The ranks of a collective as a [`Workload`]: each rank walks its
//! [`Schedule`], posting a step's messages as RDMA WRITEs (the last WRITE
//! of each with immediate data, which is how its receiver learns that the
//! message is in place) and moving on when its WRITEs have completed and
//! the messages it waits for have arrived: what a collective library's
//! progress loop does with its CQ.

use super::schedule::{messages, Schedule};
use crate::host::{connect_with, Host, MAX_MESSAGE};
use crate::topology::Topology;
use crate::workload::Workload;
use rdma_transport::{Instant, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion};
use std::any::Any;
use std::collections::BTreeMap;

/// WRITEs one message keeps in flight (as a flow's window, enough for a 40G link).
const SEND_WINDOW: u32 = 4;
/// Receives kept posted per connection (the QPs hold 4,096).
const RECV_DEPTH: u64 = 64;

/// One message of the current step being sent.
#[derive(Debug)]
struct Sending {
    qpn: u32,
    peer: usize,
    bytes: u64,
    posted: u64,
    outstanding: u32,
    /// The step number, carried as the last WRITE's immediate data.
    imm: u32,
}

impl Sending {
    fn finished(&self) -> bool {
        self.posted >= self.bytes && self.outstanding == 0
    }
}

#[derive(Debug, Default)]
struct Rank {
    step: usize,
    sending: Vec<Sending>,
    /// Messages arrived from each peer, and those the steps so far wait for.
    arrived: BTreeMap<usize, u64>,
    awaited: BTreeMap<usize, u64>,
    finish: Option<Instant>,
}

/// What a QP of a host is to the collective.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// The sending end towards `peer`.
    To(usize),
    /// The receiving end from `peer`, with receives still to post.
    From(usize),
}

#[derive(Debug)]
pub struct Collective {
    schedule: Schedule,
    ranks: Vec<Rank>,
    /// (from, to) rank: the sender's QPN.
    send_qp: BTreeMap<(usize, usize), u32>,
    /// Per host: its QPs' roles.
    roles: Vec<BTreeMap<u32, Role>>,
    /// (from, to): receives not yet posted.
    recv_left: BTreeMap<(usize, usize), u64>,
    /// Per host: the (VA, rkey) its peers write to, so that a rank posts
    /// with its own host alone in hand.
    remote: Vec<(u64, u32)>,
    /// A WRITE completed in error: the collective cannot finish.
    pub failed: bool,
}

impl Collective {
    /// Connects every pair the schedule sends over (rank r is host r),
    /// posts the first receives and starts every rank's first step.
    pub fn start(schedule: Schedule, topo: &mut Topology, now: Instant) -> Collective {
        let n = schedule.len();
        let mut c = Collective {
            ranks: (0..n).map(|_| Rank::default()).collect(),
            send_qp: BTreeMap::new(),
            roles: vec![BTreeMap::new(); topo.hosts.len()],
            recv_left: BTreeMap::new(),
            remote: topo.hosts.iter().map(|h| (h.va, h.rkey)).collect(),
            failed: false,
            schedule: Vec::new(),
        };
        for (&(a, b), &count) in &messages(&schedule) {
            let (to_b, to_a) = (topo.av_to(b), topo.av_to(a));
            let (qa, qb) = connect_with(&mut topo.hosts, a, b, to_b, to_a);
            c.send_qp.insert((a, b), qa);
            c.roles[a].insert(qa, Role::To(b));
            c.roles[b].insert(qb, Role::From(a));
            c.recv_left.insert((a, b), count);
            for _ in 0..RECV_DEPTH.min(count) {
                c.post_recv(&mut topo.hosts[b], a, b, qb);
            }
        }
        c.schedule = schedule;
        for r in 0..n {
            c.begin(r, 0, &mut topo.hosts[r], now);
        }
        c
    }

    /// When each rank finished its last step (`None`: it did not).
    pub fn finish_times(&self) -> Vec<Option<Instant>> {
        self.ranks.iter().map(|r| r.finish).collect()
    }

    fn post_recv(&mut self, host: &mut Host, from: usize, to: usize, qpn: u32) {
        let left = self.recv_left.get_mut(&(from, to)).expect("a connection");
        if *left == 0 {
            return;
        }
        *left -= 1;
        if host.ep.post_recv(qpn, RecvWr { wr_id: 0, sg_list: Vec::new() }).is_err() {
            tracing::warn!(from, to, "posting a receive failed");
            self.failed = true;
        }
    }

    /// Rank `r` (on `host`) enters step `k` (or finishes), and goes on
    /// while its steps have nothing left to wait for.
    fn begin(&mut self, r: usize, k: usize, host: &mut Host, now: Instant) {
        let mut k = k;
        loop {
            let rank = &mut self.ranks[r];
            rank.step = k;
            let Some(step) = self.schedule[r].get(k) else {
                rank.finish = Some(now);
                tracing::debug!(rank = r, at_ns = now.as_nanos(), "rank finished");
                return;
            };
            for &p in &step.recvs {
                *rank.awaited.entry(p).or_default() += 1;
            }
            rank.sending = step
                .sends
                .iter()
                .map(|&(peer, bytes)| Sending {
                    qpn: self.send_qp[&(r, peer)],
                    peer,
                    bytes,
                    posted: 0,
                    outstanding: 0,
                    imm: k as u32,
                })
                .collect();
            for i in 0..self.ranks[r].sending.len() {
                self.top_up(r, i, host);
            }
            if !self.step_done(r) {
                return;
            }
            k += 1;
        }
    }

    fn step_done(&self, r: usize) -> bool {
        let rank = &self.ranks[r];
        rank.sending.iter().all(Sending::finished)
            && rank.awaited.iter().all(|(p, &n)| rank.arrived.get(p).copied().unwrap_or(0) >= n)
    }

    /// Posts WRITEs of message `i` of rank `r`'s step (on `host`) up to the window.
    fn top_up(&mut self, r: usize, i: usize, host: &mut Host) {
        let s = &mut self.ranks[r].sending[i];
        while s.outstanding < SEND_WINDOW && s.posted < s.bytes {
            let len = (s.bytes - s.posted).min(u64::from(MAX_MESSAGE)) as u32;
            let last = s.posted + u64::from(len) >= s.bytes;
            let (rva, rkey) = self.remote[s.peer];
            let op = if last {
                SendOp::RdmaWriteWithImm { remote_addr: rva, rkey, imm: s.imm }
            } else {
                SendOp::RdmaWrite { remote_addr: rva, rkey }
            };
            let sge = Sge { addr: host.va, length: len, lkey: host.lkey };
            if let Err(e) = host.ep.post_send(s.qpn, SendWr::new(s.posted, op, vec![sge])) {
                tracing::warn!(rank = r, peer = s.peer, error = %e, "posting a WRITE failed");
                self.failed = true;
                return;
            }
            s.posted += u64::from(len);
            s.outstanding += 1;
        }
    }
}

impl Workload for Collective {
    fn on_completion(&mut self, h: usize, wc: &WorkCompletion, host: &mut Host, now: Instant) {
        let Some(&role) = self.roles.get(h).and_then(|m| m.get(&wc.qp_num)) else { return };
        if wc.status != WcStatus::Success {
            tracing::warn!(host = h, qpn = wc.qp_num, status = ?wc.status, "collective WRITE failed");
            self.failed = true;
            return;
        }
        match role {
            Role::To(peer) => {
                let rank = &mut self.ranks[h];
                let Some(i) = rank.sending.iter().position(|s| s.peer == peer) else { return };
                rank.sending[i].outstanding = rank.sending[i].outstanding.saturating_sub(1);
                self.top_up(h, i, host);
            }
            Role::From(peer) if wc.opcode == WcOpcode::RecvRdmaWithImm => {
                *self.ranks[h].arrived.entry(peer).or_default() += 1;
                self.post_recv(host, peer, h, wc.qp_num);
            }
            Role::From(_) => return,
        }
        let rank = &self.ranks[h];
        if rank.finish.is_none() && self.step_done(h) {
            let next = rank.step + 1;
            self.begin(h, next, host, now);
        }
    }

    fn done(&self) -> bool {
        self.failed || self.ranks.iter().all(|r| r.finish.is_some())
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
