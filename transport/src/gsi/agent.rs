//! The MAD agent of QP1: what it sends (transaction IDs, retransmission
//! until a response or `retries` run out, then a timeout) and what it
//! receives (the checks Linux's MAD layer makes, matching responses to
//! sends, and a bounded queue of MADs for the consumer).

use super::frame::{frame_mad, GSI_SRC_PORT};
use crate::framing::Framer;
use crate::paths::PathTable;
use crate::stats::{Drop, Stats};
use crate::time::Instant;
use core::net::IpAddr;
use core::time::Duration;
use rdma_wire::mad::{method, Mad, MadHeaderRepr, BASE_VERSION, GSI_QKEY, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN};
use std::collections::VecDeque;

/// The CM's management class and its MRA attribute (see `rdma_wire::cm`).
const MGMT_CLASS_CM: u8 = 0x07;
const CM_ATTR_MRA: u16 = 0x0011;

/// Received MADs the consumer has not taken yet, at most: past it they are
/// dropped (a peer must not grow our memory without bound).
pub const RECV_QUEUE_MAX: usize = 1024;
/// Transaction IDs of answered sends remembered to tell a late duplicate
/// response from a stray one.
const RECENT_MAX: usize = 64;

/// A whole 256-byte MAD to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutgoingMad(pub [u8; MAD_LEN]);

impl From<[u8; MAD_LEN]> for OutgoingMad {
    fn from(b: [u8; MAD_LEN]) -> OutgoingMad {
        OutgoingMad(b)
    }
}

/// A header and the 232 bytes of class data behind it.
impl From<(MadHeaderRepr, [u8; MAD_DATA_LEN])> for OutgoingMad {
    fn from((h, data): (MadHeaderRepr, [u8; MAD_DATA_LEN])) -> OutgoingMad {
        let mut b = [0u8; MAD_LEN];
        b[MAD_HEADER_LEN..].copy_from_slice(&data);
        h.emit(&mut Mad::new_unchecked(&mut b[..]));
        OutgoingMad(b)
    }
}

/// A MAD that arrived on QP1 and passed the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMad {
    /// The sender's GID (its IP address).
    pub from: IpAddr,
    /// The DETH source QP (1 for a GSI peer).
    pub src_qp: u32,
    pub mad: [u8; MAD_LEN],
    /// It answered one of our sends (same peer, class and transaction
    /// ID), which then stopped retransmitting.
    pub answers_send: bool,
}

/// A send that expected a response and got none after all its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadTimeout {
    pub dest: IpAddr,
    pub transaction_id: u64,
    /// Copies sent: the first and every retry.
    pub attempts: u32,
}

#[derive(Debug, Clone)]
struct Pending {
    dest: IpAddr,
    tid: u64,
    class: u8,
    mad: [u8; MAD_LEN],
    /// `None`: sent once and forgotten.
    timeout: Option<Duration>,
    retries_left: u8,
    attempts: u32,
    /// Waiting for `poll_transmit`.
    queued: bool,
    /// When the copy last sent is given up on.
    deadline: Option<Instant>,
}

/// The GSI: sends in flight and received MADs not yet taken.
#[derive(Debug, Clone, Default)]
pub struct Gsi {
    /// In order of `send`, so that MADs leave in that order (a CM's REP
    /// must not overtake its MRA, say). Few at a time: a Vec is enough.
    pending: Vec<Pending>,
    received: VecDeque<ReceivedMad>,
    timeouts: VecDeque<MadTimeout>,
    recent: VecDeque<(IpAddr, u64)>,
    next_tid: u64,
    psn: u32,
    /// The UDP source port MADs leave from, if not [`GSI_SRC_PORT`].
    src_port: Option<u16>,
    /// Only a relay for another agent ([`Gsi::set_relay`]).
    relay: bool,
}

impl Gsi {
    /// A GSI whose own transaction IDs follow `first` (a random start: see
    /// the endpoint's `gsi_first_tid`).
    pub fn with_first_tid(first: u64) -> Gsi {
        Gsi { next_tid: first, ..Gsi::default() }
    }

    /// Makes this agent one that only takes MADs in for another, which
    /// matches them: on a device of several engines, the host steers QP1's
    /// datagrams to any engine, but the MADs are sent from one, whose sends
    /// a response answers. A relay queues every MAD that passes the MAD
    /// layer's checks, responses included, for [`Gsi::poll_mad`] to hand on.
    pub fn set_relay(&mut self) {
        self.relay = true;
    }

    /// Whether this agent only relays.
    pub fn is_relay(&self) -> bool {
        self.relay
    }

    /// Queues `mad` for `dest`. A transaction ID of 0 is replaced by one
    /// the agent assigns; any other is kept (a response carries its
    /// request's). With `expect_response`, the MAD is sent again each time
    /// that long passes without a response, `retries` times, and then
    /// reported as a [`MadTimeout`]. Returns the transaction ID, or `None`
    /// if a send to `dest` with that ID already awaits a response.
    pub fn send(
        &mut self,
        dest: IpAddr,
        mad: OutgoingMad,
        expect_response: Option<Duration>,
        retries: u8,
    ) -> Option<u64> {
        // A relay hands every response on: one it awaited would never match.
        debug_assert!(!self.relay || expect_response.is_none(), "a relay sends no request that awaits a response");
        let mut b = mad.0;
        let mut m = Mad::new_unchecked(&mut b[..]);
        let mut tid = m.transaction_id();
        let dest = dest.to_canonical();
        if tid == 0 {
            // The next free one: never 0, never one a send to `dest` still
            // waits on (a response of ours may echo a peer's ID).
            loop {
                self.next_tid = self.next_tid.wrapping_add(1);
                tid = self.next_tid;
                if tid != 0 && !self.pending.iter().any(|p| p.dest == dest && p.tid == tid) {
                    break;
                }
            }
            m.set_transaction_id(tid);
        }
        if expect_response.is_some()
            && self.pending.iter().any(|p| p.timeout.is_some() && p.dest == dest && p.tid == tid)
        {
            return None;
        }
        tracing::debug!(%dest, tid, attr = m.attribute_id(), "MAD queued");
        self.pending.push(Pending {
            dest,
            tid,
            class: m.mgmt_class(),
            mad: b,
            timeout: expect_response,
            retries_left: retries,
            attempts: 0,
            queued: true,
            deadline: None,
        });
        Some(tid)
    }

    /// Pushes back the timer of the send to `dest` with `tid` by `extra`
    /// (from `now` at the earliest: a CM MRA, the peer has the message and
    /// needs time). A copy queued
    /// for retransmission is taken back. Returns whether the send exists.
    pub fn delay(&mut self, now: Instant, dest: IpAddr, tid: u64, extra: Duration) -> bool {
        let dest = dest.to_canonical();
        let Some(p) = self.pending.iter_mut().find(|p| p.timeout.is_some() && p.dest == dest && p.tid == tid) else {
            return false;
        };
        if p.attempts > 0 {
            p.queued = false;
            p.deadline = Some(p.deadline.map_or(now, |d| d.max(now)) + extra);
        }
        true
    }

    /// The UDP source port MADs leave from.
    pub fn src_port(&self) -> u16 {
        self.src_port.unwrap_or(GSI_SRC_PORT)
    }

    /// Sends MADs from UDP port `port` (a backend that could not have
    /// [`GSI_SRC_PORT`] gives the one it has).
    pub fn set_src_port(&mut self, port: u16) {
        self.src_port = Some(port);
    }

    /// Whether a MAD waits for `poll_transmit`.
    pub fn has_queued(&self) -> bool {
        self.pending.iter().any(|p| p.queued)
    }

    /// Writes the next queued MAD into `buf`, routed by `paths` (native
    /// IB's LIDs); returns its length and destination.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        framer: &Framer,
        paths: &PathTable,
        buf: &mut [u8],
        stats: &mut Stats,
    ) -> Option<(usize, IpAddr)> {
        let i = self.pending.iter().position(|p| p.queued)?;
        let src_port = self.src_port();
        let p = &mut self.pending[i];
        let av = paths.route(framer.link, p.dest);
        let len = frame_mad(framer, buf, &av, src_port, self.psn, &p.mad);
        self.psn = (self.psn + 1) & 0xff_ffff;
        let dest = p.dest;
        p.queued = false;
        p.attempts += 1;
        // The timer runs from when the copy leaves, not from `send`.
        match p.timeout {
            Some(t) => p.deadline = Some(now + t),
            None => {
                self.pending.remove(i);
            }
        }
        stats.mads_sent += 1;
        stats.packets_sent += 1;
        Some((len, dest))
    }

    /// The next retransmission or timeout.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.iter().filter_map(|p| p.deadline).min()
    }

    /// Sends again each MAD whose response is overdue, or gives it up.
    pub fn handle_timeout(&mut self, now: Instant, stats: &mut Stats) {
        let timeouts = &mut self.timeouts;
        self.pending.retain_mut(|p| {
            if p.deadline.is_none_or(|d| d > now) {
                return true;
            }
            p.deadline = None;
            if p.retries_left > 0 {
                p.retries_left -= 1;
                p.queued = true;
                stats.mad_retries += 1;
                tracing::debug!(dest = %p.dest, tid = p.tid, left = p.retries_left, "MAD sent again");
                return true;
            }
            tracing::debug!(dest = %p.dest, tid = p.tid, "MAD timed out");
            stats.mad_timeouts += 1;
            timeouts.push_back(MadTimeout { dest: p.dest, transaction_id: p.tid, attempts: p.attempts });
            false
        });
    }

    /// A UD SEND's payload that arrived for QP1 (transport, P_Key and ICRC
    /// already checked): the MAD layer's checks, then response matching.
    /// Everything wrong is a counted drop, as Linux drops it silently.
    pub fn receive(&mut self, from: IpAddr, qkey: u32, src_qp: u32, payload: &[u8], stats: &mut Stats) {
        if qkey != GSI_QKEY {
            return stats.drop(Drop::MadQkeyMismatch, 1);
        }
        let Ok(mad) = <[u8; MAD_LEN]>::try_from(payload) else {
            return stats.drop(Drop::MadBadLength, 1);
        };
        let m = Mad::new_unchecked(&mad[..]);
        if m.base_version() != BASE_VERSION {
            return stats.drop(Drop::MadBadVersion, 1);
        }
        let (tid, class) = (m.transaction_id(), m.mgmt_class());
        let from = from.to_canonical();
        if self.relay {
            // Counted where it is taken in for good: the GSI it is handed to.
            if self.received.len() >= RECV_QUEUE_MAX {
                return stats.drop(Drop::MadQueueFull, 1);
            }
            return self.received.push_back(ReceivedMad { from, src_qp, mad, answers_send: false });
        }
        // A CM MRA shares its request's transaction ID but answers nothing:
        // it says "received, wait longer", and the CM stretches the send's
        // timer (`delay`) instead of ending it.
        let mra = class == MGMT_CLASS_CM && m.attribute_id() == CM_ATTR_MRA;
        let matched = self.pending.iter().position(|p| {
            !mra && p.timeout.is_some() && p.attempts > 0 && p.dest == from && p.tid == tid && p.class == class
        });
        if let Some(i) = matched {
            self.pending.remove(i);
            if self.recent.len() == RECENT_MAX {
                self.recent.pop_front();
            }
            self.recent.push_back((from, tid));
        } else if m.method() & method::RESP != 0 {
            // A response (GET_RESP and the like) is only ever routed to
            // its send; CM messages (method SEND) go to the consumer even
            // when repeated, as the CM answers a repeated REP with its RTU.
            let why = if self.recent.contains(&(from, tid)) {
                Drop::MadDuplicateResponse
            } else {
                Drop::MadUnmatchedResponse
            };
            return stats.drop(why, 1);
        }
        if self.received.len() >= RECV_QUEUE_MAX {
            return stats.drop(Drop::MadQueueFull, 1);
        }
        stats.mads_received += 1;
        self.received.push_back(ReceivedMad { from, src_qp, mad, answers_send: matched.is_some() });
    }

    pub fn poll_mad(&mut self) -> Option<ReceivedMad> {
        self.received.pop_front()
    }

    pub fn poll_timeout_report(&mut self) -> Option<MadTimeout> {
        self.timeouts.pop_front()
    }

    /// Whether a received MAD or a timeout report waits for the consumer.
    pub fn has_reports(&self) -> bool {
        !self.received.is_empty() || !self.timeouts.is_empty()
    }
}
