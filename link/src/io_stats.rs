//! The counters a device's backend keeps: a leaf, so that the UDP driver,
//! the frame driver and the fault injectors all count into it without
//! depending on one another.

use crate::faults::FaultCounts;

/// Counters of a device's backend, UDP or frames (the engine counts the
/// rest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Packets received (a GRO datagram counts each packet in it).
    pub datagrams_received: u64,
    /// Packets sent (a GSO send counts each segment).
    pub datagrams_sent: u64,
    pub recv_syscalls: u64,
    pub send_syscalls: u64,
    /// Sends of more than one segment (UDP_SEGMENT).
    pub gso_sends: u64,
    /// Packets whose payload the kernel copied straight from the memory
    /// region (see `UdpIo::sends_by_reference`).
    pub payloads_by_reference: u64,
    /// Received datagrams that held more than one packet (UDP_GRO).
    pub gro_receives: u64,
    /// Datagrams longer than any RoCE packet, dropped.
    pub truncated: u64,
    /// Packets the kernel refused to send (counted and traced; the
    /// transport retransmits).
    pub send_errors: u64,
    /// Packets sent on a connected socket to its peer: no address, no
    /// route lookup (see `connected`).
    pub connected_sends: u64,
    /// Probes that learned an IPv4 send socket's next Identification.
    pub ident_probes: u64,
    /// Probes that found a prediction wrong (the packets since the last
    /// check failed the peer's ICRC check and were resent).
    pub ident_mismatches: u64,
    /// Packets the fault injector dropped, duplicated, reordered, corrupted.
    pub injected_losses: u64,
    pub injected_duplicates: u64,
    pub injected_reorders: u64,
    pub injected_corruptions: u64,
    /// Native IB frames whose CRCs the frame driver checked to learn (or
    /// move) the MAC of their SLID: one per peer while nothing changes,
    /// not one per frame (the engine checks every frame's CRCs itself).
    pub lids_learned: u64,
}

impl IoStats {
    /// Adds `other`'s counters to these: one device's figures over the
    /// sockets of its engines (a multi-core device).
    pub fn add(&mut self, other: &IoStats) {
        let IoStats {
            datagrams_received,
            datagrams_sent,
            recv_syscalls,
            send_syscalls,
            gso_sends,
            payloads_by_reference,
            gro_receives,
            truncated,
            send_errors,
            connected_sends,
            ident_probes,
            ident_mismatches,
            injected_losses,
            injected_duplicates,
            injected_reorders,
            injected_corruptions,
            lids_learned,
        } = other;
        self.datagrams_received += datagrams_received;
        self.datagrams_sent += datagrams_sent;
        self.recv_syscalls += recv_syscalls;
        self.send_syscalls += send_syscalls;
        self.gso_sends += gso_sends;
        self.payloads_by_reference += payloads_by_reference;
        self.gro_receives += gro_receives;
        self.truncated += truncated;
        self.send_errors += send_errors;
        self.connected_sends += connected_sends;
        self.ident_probes += ident_probes;
        self.ident_mismatches += ident_mismatches;
        self.injected_losses += injected_losses;
        self.injected_duplicates += injected_duplicates;
        self.injected_reorders += injected_reorders;
        self.injected_corruptions += injected_corruptions;
        self.lids_learned += lids_learned;
    }

    /// Takes the fault injector's totals.
    #[doc(hidden)] // for the frame driver of the verbs crate
    pub fn set_faults(&mut self, c: FaultCounts) {
        self.injected_losses = c.losses;
        self.injected_duplicates = c.duplicates;
        self.injected_reorders = c.reorders;
        self.injected_corruptions = c.corruptions;
    }
}
