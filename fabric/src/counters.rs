//! What a run counts: packets switched and put on links, PFC frames,
//! events and, with `--threads`, what crossed partitions.

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
