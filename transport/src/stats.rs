//! The counters: the endpoint's [`Stats`], the reasons it drops packets
//! ([`Drop`]), and the counters of one QP ([`QpStats`]).

use std::collections::BTreeMap;

/// Why the endpoint dropped a packet. Each reason has its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Drop {
    Malformed,
    IcrcMismatch,
    UnknownQp,
    QpNotReady,
    PkeyMismatch,
    AddressMismatch,
    WrongTransport,
    PsnOutOfSequence,
    OpcodeOutOfSequence,
    NoReceiveWqe,
    BadLength,
    ReceiveTooSmall,
    ReceiveBufferFault,
    RkeyViolation,
    MisalignedAtomic,
    UnsupportedOpcode,
    QkeyMismatch,
    UcMessageDropped,
    GhostResponse,
    DuplicateResponse,
    /// A duplicate READ or atomic that matches no remembered responder resource.
    DuplicateUnknown,
    BadResponse,
    /// A READ or atomic past the `max_dest_rd_atomic` the QP advertised.
    TooManyReads,
    /// Both ends are limited members of the partition (P_Key bit 15 clear).
    PkeyLimitedMembers,
    /// A MAD on QP1 whose DETH Q_Key is not 0x80010000.
    MadQkeyMismatch,
    /// A MAD on QP1 that is not exactly 256 bytes.
    MadBadLength,
    /// A MAD whose base version is not 1.
    MadBadVersion,
    /// A response MAD (response bit set) for a send it already answered.
    MadDuplicateResponse,
    /// A response MAD that answers no send of ours.
    MadUnmatchedResponse,
    /// A MAD that found the receive queue of the GSI full.
    MadQueueFull,
    /// A native IB packet whose VCRC is wrong (it was damaged on the link).
    VcrcMismatch,
    /// A native IB packet whose DLID is not this port's LID.
    LidMismatch,
    /// A RoCE v1 packet whose destination GID is not this port's.
    GidMismatch,
    /// A MAD that came over a route this GSI cannot answer (native IB
    /// without a GRH: the GSI addresses peers by GID).
    MadNoGid,
    /// A SEND with invalidate naming a key this QP may not invalidate (a
    /// type 1 window, a region, another QP's or PD's window, an unbound one).
    InvalidateRefused,
    /// A peer's request reached a page of an on-demand region that is not
    /// mapped, or not writable for a write (docs/odp.md): NAK Remote
    /// Access Error.
    PageFault,
    /// An XRC request whose XRCETH names no XRC SRQ of the target QP's
    /// XRC domain (docs/xrc.md): NAK Invalid Request.
    XrcSrqInvalid,
    /// A multicast packet (DQPN 0xFFFFFF) for a group no QP of this
    /// device is attached to, or sent to a unicast address.
    NoMulticastGroup,
}

/// Counters of an endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub packets_received: u64,
    pub packets_sent: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub naks_sent: u64,
    pub naks_received: u64,
    pub rnr_naks_sent: u64,
    pub rnr_naks_received: u64,
    pub implied_naks: u64,
    pub duplicates: u64,
    /// CNPs accepted for one of this device's RC/UC QPs (the rest are drops).
    pub cnps_received: u64,
    /// CNPs this device's notification points sent.
    pub cnps_sent: u64,
    /// Rate cuts of this device's reaction points (congestion control on).
    pub rate_cuts: u64,
    pub ecn_ce_received: u64,
    /// IPv4 packets whose ICRC checked out only with a recovered
    /// Identification (see [`crate::Endpoint::set_ipv4_ident_unknown`]).
    pub ipv4_ident_recovered: u64,
    /// Work completions delivered to completion queues: queued here, less
    /// those a layer above lost to a full CQ (`Endpoint::cq_overrun`).
    pub completions: u64,
    pub cq_overruns: u64,
    /// MADs the GSI sent (retransmissions included).
    pub mads_sent: u64,
    /// MADs the GSI accepted and queued for the consumer.
    pub mads_received: u64,
    /// Retransmissions of MADs whose response was overdue.
    pub mad_retries: u64,
    /// Sends given up after all their retries.
    pub mad_timeouts: u64,
    pub drops: BTreeMap<Drop, u64>,
}

impl Stats {
    pub(crate) fn drop(&mut self, why: Drop, qpn: u32) {
        *self.drops.entry(why).or_default() += 1;
        tracing::debug!(qpn, reason = ?why, "packet dropped");
    }

    /// Drops for one reason.
    pub fn drops_for(&self, why: Drop) -> u64 {
        self.drops.get(&why).copied().unwrap_or(0)
    }

    /// Adds `other`'s counters to these: one device's figures over the
    /// engines it runs (a multi-core device).
    pub fn add(&mut self, other: &Stats) {
        let Stats {
            packets_received,
            packets_sent,
            retransmits,
            timeouts,
            naks_sent,
            naks_received,
            rnr_naks_sent,
            rnr_naks_received,
            implied_naks,
            duplicates,
            cnps_received,
            cnps_sent,
            rate_cuts,
            ecn_ce_received,
            ipv4_ident_recovered,
            completions,
            cq_overruns,
            mads_sent,
            mads_received,
            mad_retries,
            mad_timeouts,
            drops,
        } = other;
        self.packets_received += packets_received;
        self.packets_sent += packets_sent;
        self.retransmits += retransmits;
        self.timeouts += timeouts;
        self.naks_sent += naks_sent;
        self.naks_received += naks_received;
        self.rnr_naks_sent += rnr_naks_sent;
        self.rnr_naks_received += rnr_naks_received;
        self.implied_naks += implied_naks;
        self.duplicates += duplicates;
        self.cnps_received += cnps_received;
        self.cnps_sent += cnps_sent;
        self.rate_cuts += rate_cuts;
        self.ecn_ce_received += ecn_ce_received;
        self.ipv4_ident_recovered += ipv4_ident_recovered;
        self.completions += completions;
        self.cq_overruns += cq_overruns;
        self.mads_sent += mads_sent;
        self.mads_received += mads_received;
        self.mad_retries += mad_retries;
        self.mad_timeouts += mad_timeouts;
        for (why, n) in drops {
            *self.drops.entry(*why).or_default() += n;
        }
    }
}

/// Counters of one QP ([`crate::Endpoint::qp_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Packets accepted for this QP that arrived marked CE (congestion
    /// experienced): the input of a DCQCN notification point.
    pub ecn_ce_received: u64,
    /// CNPs this QP sent for CE-marked data it received (notification point).
    pub cnps_sent: u64,
    /// CNPs addressed to this QP (whether or not congestion control acts on them).
    pub cnps_received: u64,
    /// Times this QP's reaction point cut its rate.
    pub rate_cuts: u64,
}
