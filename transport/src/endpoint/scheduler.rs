//! The transmit scheduler's own state, apart from the QPs it schedules
//! (`sched.rs` holds what it does, as methods of the endpoint, which
//! owns both this and the QPs).

use super::agenda;
use crate::time::Instant;
use core::time::Duration;
use std::cell::{Cell, RefCell};

/// What the transmit scheduler owns: the round robin over QPs and its
/// turn, the agenda of QPs to look at, the policy for held ACKs, and what
/// it remembers of its last round (an idle round, a cached deadline), so
/// that an idle poll costs a comparison.
#[derive(Debug)]
pub(crate) struct Scheduler {
    /// Round-robin cursor over QPs for transmission.
    pub(super) rr: u32,
    /// Packets the QP at `rr` has sent in its current turn.
    pub(super) burst: u32,
    /// How long a lone ACK may wait for other packets to leave with.
    pub(super) ack_delay: Duration,
    /// A held ACK leaves ahead of its QP's next request (see
    /// [`Endpoint::set_ack_before_requests`]).
    pub(super) ack_before_requests: bool,
    /// `poll_transmit` has handed out a packet since it last returned `None`.
    pub(super) sending: bool,
    /// The last `poll_transmit_fresh` found no new packet on any QP.
    pub(super) fresh_done: bool,
    /// The last round of `poll_transmit` found nothing to send and nothing
    /// has happened since that could change it (see [`Endpoint::touch`]):
    /// an idle poll then costs a comparison, not a walk over every QP.
    pub(super) tx_idle: bool,
    /// [`Endpoint::poll_timeout`]'s answer while nothing has changed.
    pub(super) deadline: Cell<Option<Option<Instant>>>,
    /// With more than [`agenda::WALK_MAX_QPS`] QPs: the QPs whose deadline
    /// or sending may have changed, and every QP's deadline by time (a
    /// cell: [`Endpoint::poll_timeout`] takes `&self`).
    pub(super) agenda: RefCell<agenda::Agenda>,
    /// The agenda is kept with more QPs than this ([`Endpoint::set_agenda_threshold`]).
    pub(super) walk_max_qps: usize,
    /// Held ACKs leave in the next round of `poll_transmit` ([`Endpoint::release_acks`]).
    pub(super) release: bool,
    /// QPs their consumer moved to ERR that still owe an ACK: it goes
    /// first, ahead of the MADs (the DREQ that follows the move must not
    /// overtake it, or the peer flushes the request it acknowledges).
    pub(crate) last_words: Vec<u32>,
}

impl Scheduler {
    pub(super) fn new() -> Scheduler {
        Scheduler {
            rr: 0,
            burst: 0,
            ack_delay: Duration::ZERO,
            ack_before_requests: false,
            sending: false,
            fresh_done: false,
            tx_idle: false,
            last_words: Vec::new(),
            deadline: Cell::new(None),
            agenda: RefCell::default(),
            walk_max_qps: agenda::WALK_MAX_QPS,
            release: false,
        }
    }

    /// Something happened that may give a QP packets to send or move a
    /// timer (see `Endpoint::touch`): the next round looks again.
    pub(super) fn touched(&mut self) {
        self.tx_idle = false;
        self.fresh_done = false;
        self.deadline.set(None);
    }

    /// [`Scheduler::touched`] by a change to QP `qpn` alone, which the
    /// agenda marks if the device keeps one (`agenda_on`).
    pub(super) fn touched_qp(&mut self, qpn: u32, agenda_on: bool) {
        self.touched();
        if agenda_on {
            self.agenda.get_mut().mark(qpn);
        }
    }
}
