//! perftest's `-R` (`--rdma_cm`): the exchange of [`super::perftest`]
//! carried by SEND/RECV on a control RC connection made over the RDMA CM,
//! and the test QPs connected over the RDMA CM instead of by hand.
//!
//! What perftest 4.5 does, and so this side:
//!
//! 1. The client connects a **control** connection to the server's test
//!    port (18515) in RDMA_PS_TCP: REQ with no RDMA READ resources, retry
//!    and RNR retry 7. Each side posts its receive before connecting or
//!    accepting; the server then destroys its listener. (This client
//!    tries again on REJ 8 as for the test QPs; perftest's gives up.)
//! 2. Every message of the TCP exchange (version, system data, MTU, hand
//!    shakes, reports) is one SEND of exactly its size; a hand shake is
//!    perftest's `struct pingpong_dest` in binary, 56 bytes, big-endian
//!    fields ([`Dest::to_bytes`](super::perftest::Dest::to_bytes)). There is no closing "done".
//! 3. After the MTU: a hand shake, then the server listens again on the
//!    same port and the client connects the test QPs there (REJ 8 while the
//!    server is not listening yet: up to 10 attempts 100 ms apart), then
//!    another hand shake. The hand shakes of the test follow as without
//!    `-R`; their QPNs and PSNs are the peer's, the CM already used them.
//! 4. At the end the client disconnects every test connection (DREQ) and
//!    waits for DISCONNECTED; the server answers, then both drop the rest.

use super::oob::OOB_TIMEOUT;
use super::{Config, PerfError, TestKind};
use rdma_core_rs::cm::{CmError, CmEvent, CmId, ConnParam, EventChannel, EventType, PortSpace};
use rdma_core_rs::{
    Access, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpCap, QpInitAttr, QpType, QueuePair, RecvWr,
    SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod test_conns;

/// How many times a test QP's connection is tried while the server
/// answers "nobody listens" (REJ 8), and how far apart: perftest's numbers.
pub const CONNECT_ATTEMPTS: usize = 10;
pub const CONNECT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// RDMA READs and atomics in flight the CM negotiates for the READ and
/// atomic tests: "the device's most" (perftest asks for the device's).
const RD_ATOMIC: u8 = 0xff;

/// The largest control message (a hand shake, 56 bytes) fits a receive slot.
const SLOT: usize = 64;
/// Receives the control QP keeps posted.
const RECVS: usize = 4;

fn cm_err(call: &str) -> impl Fn(CmError) -> PerfError + '_ {
    move |e| PerfError::Failed(format!("RDMA CM {call}: {e}"))
}

/// A REJ reason, in words where it helps.
fn rejected(status: i32) -> String {
    match status {
        8 => "REJ 8 (invalid service ID): nobody listens on that port".into(),
        28 => "REJ 28 (consumer reject)".into(),
        n => format!("REJ {n}"),
    }
}

/// The events of one channel; those nobody waited for yet are kept.
pub struct Events {
    ch: EventChannel,
    pending: VecDeque<CmEvent>,
}

impl Default for Events {
    fn default() -> Events {
        Events::new()
    }
}

impl Events {
    pub fn new() -> Events {
        Events { ch: EventChannel::new(), pending: VecDeque::new() }
    }

    pub fn create_id(&self) -> CmId {
        self.ch.create_id(PortSpace::Tcp)
    }

    /// The next event `pick` takes, waiting up to `timeout` (while the
    /// device's engine and CM keep going).
    pub fn next(
        &mut self,
        timeout: Duration,
        what: &str,
        pick: impl Fn(&CmEvent) -> bool,
    ) -> Result<CmEvent, PerfError> {
        if let Some(i) = self.pending.iter().position(&pick) {
            return Ok(self.pending.remove(i).expect("the position found"));
        }
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PerfError::Failed(format!("RDMA CM: no {what} in {timeout:?}")));
            }
            match self.ch.get_cm_event(Some(left)) {
                Ok(e) if pick(&e) => return Ok(e),
                Ok(e) => {
                    tracing::debug!(event = %e.event, "RDMA CM event kept for later");
                    self.pending.push_back(e)
                }
                Err(CmError::Timeout(_)) => {}
                Err(e) => return Err(cm_err("get_cm_event")(e)),
            }
        }
    }

    /// The next event of `id` (TIMEWAIT_EXIT aside).
    pub fn of(&mut self, id: &CmId, timeout: Duration, what: &str) -> Result<CmEvent, PerfError> {
        self.next(timeout, what, |e| e.id == *id && e.event != EventType::TimewaitExit)
    }

    /// Whether `id`'s DISCONNECTED has come, without waiting (every event
    /// read stays for the `next` that wants it).
    fn has_disconnected(&mut self, id: &CmId) -> bool {
        while let Ok(e) = self.ch.get_cm_event(Some(Duration::ZERO)) {
            self.pending.push_back(e);
        }
        self.pending.iter().any(|e| e.id == *id && e.event == EventType::Disconnected)
    }

    /// Waits up to `timeout` for DISCONNECTED on every ID of `ids`; the
    /// ones still connected.
    fn disconnected(&mut self, ids: &[&CmId], timeout: Duration) -> usize {
        let end = Instant::now() + timeout;
        let mut left: Vec<&CmId> = ids.to_vec();
        while !left.is_empty() {
            let wait = end.saturating_duration_since(Instant::now());
            let picked = self.next(wait, "DISCONNECTED", |e| {
                e.event == EventType::Disconnected && left.iter().any(|id| **id == e.id)
            });
            match picked {
                Ok(e) => left.retain(|id| **id != e.id),
                Err(_) => break,
            }
        }
        left.len()
    }
}

/// A new ID on `events`, its address and route resolved from `bind` towards `to`.
fn resolve(events: &mut Events, bind: IpAddr, to: SocketAddr, tos: u8) -> Result<CmId, PerfError> {
    let id = events.create_id();
    id.set_tos(tos);
    id.resolve_addr(Some(bind), to, Duration::from_secs(2)).map_err(cm_err("resolve_addr"))?;
    let e = events.of(&id, Duration::from_secs(2), "ADDR_RESOLVED")?;
    if e.event != EventType::AddrResolved {
        return Err(PerfError::Failed(format!("RDMA CM: resolving {to}: {}", e.event)));
    }
    id.resolve_route(Duration::from_secs(2)).map_err(cm_err("resolve_route"))?;
    let e = events.of(&id, Duration::from_secs(2), "ROUTE_RESOLVED")?;
    if e.event != EventType::RouteResolved {
        return Err(PerfError::Failed(format!("RDMA CM: the route to {to}: {}", e.event)));
    }
    Ok(id)
}

/// The address the RDMA CM knows this side by: `--bind` on udp; on a raw
/// link (`--backend roce1|ib`) the device's GID.
fn local(ctx: &Context, cfg: &Config) -> IpAddr {
    if cfg.link.backend == crate::backend::BackendKind::Udp {
        cfg.bind
    } else {
        ctx.device().addr()
    }
}

/// How a connect ended when it did not: refused with REJ `status`, or otherwise.
enum Refused {
    Rej(i32),
    Other(PerfError),
}

/// Connects `id` (resolved, with its QP) and waits for ESTABLISHED.
fn connect(events: &mut Events, id: &CmId, param: &ConnParam, to: SocketAddr) -> Result<(), Refused> {
    id.connect(param).map_err(|e| Refused::Other(cm_err("connect")(e)))?;
    answer(events, id, to)
}

/// The answer to `id`'s connect request: ESTABLISHED, or why not.
fn answer(events: &mut Events, id: &CmId, to: SocketAddr) -> Result<(), Refused> {
    // a REQ nobody answers ends in UNREACHABLE after the CM's retries
    let e = events.of(id, Duration::from_secs(120), "answer to the connect request").map_err(Refused::Other)?;
    match e.event {
        EventType::Established => Ok(()),
        EventType::Rejected => Err(Refused::Rej(e.status)),
        other => Err(Refused::Other(PerfError::Failed(format!(
            "RDMA CM: connecting to {to}: {other} (status {})",
            e.status
        )))),
    }
}

/// Connects with up to [`CONNECT_ATTEMPTS`] attempts while the peer
/// answers REJ 8: `fresh` makes a resolved ID with its QP each time.
fn dial(
    events: &mut Events,
    to: SocketAddr,
    param: &ConnParam,
    what: &str,
    fresh: &mut dyn FnMut(&mut Events) -> Result<CmId, PerfError>,
) -> Result<CmId, PerfError> {
    let mut attempt = 1;
    loop {
        let id = fresh(events)?;
        match connect(events, &id, param, to) {
            Ok(()) => return Ok(id),
            Err(Refused::Rej(8)) if attempt < CONNECT_ATTEMPTS => {
                tracing::debug!(attempt, %to, "{what}: REJ 8, trying again");
                std::thread::sleep(CONNECT_RETRY_DELAY);
                attempt += 1;
            }
            Err(Refused::Rej(s)) => {
                return Err(PerfError::Failed(format!(
                    "{what} to {to} refused after {attempt} attempt(s): {}",
                    rejected(s)
                )))
            }
            Err(Refused::Other(e)) => return Err(e),
        }
    }
}

/// What the test QPs' connections ask for: perftest's numbers (RDMA READ
/// resources only for the READ and atomic tests, 7 retries of each kind).
fn test_param(cfg: &Config) -> ConnParam {
    let reads = matches!(cfg.test, TestKind::ReadBw | TestKind::ReadLat) || cfg.test.is_atomic();
    let depth = if reads { RD_ATOMIC } else { 0 };
    ConnParam {
        responder_resources: depth,
        initiator_depth: depth,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

/// The control connection: an RC QP over the RDMA CM that carries the
/// exchange, one SEND per message.
pub struct Control {
    pub events: Events,
    /// The device every ID and QP of this side is on.
    pub ctx: Context,
    id: CmId,
    qp: Arc<QueuePair>,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
    _pd: ProtectionDomain,
    wcs: Vec<WorkCompletion>,
    client: bool,
}

/// A control QP's protection domain, CQs (send, receive) and buffer.
struct Parts {
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
}

impl Parts {
    fn new(ctx: &Context) -> Result<Parts, PerfError> {
        let pd = ctx.alloc_pd()?;
        let send_cq = ctx.create_cq(16, None)?;
        let recv_cq = ctx.create_cq(16, None)?;
        // RECVS receive slots, then the send slot
        let mr = pd.reg_mr(SLOT * (RECVS + 1), Access::LOCAL_WRITE)?;
        Ok(Parts { pd, send_cq, recv_cq, mr })
    }

    /// The QP on `id`, its receives posted (before the REQ or the REP
    /// leaves, as perftest's are).
    fn qp(&self, id: &CmId) -> Result<Arc<QueuePair>, PerfError> {
        let mut attr = QpInitAttr::new(QpType::Rc, &self.send_cq);
        attr.recv_cq = &self.recv_cq;
        attr.cap =
            QpCap { max_send_wr: 4, max_recv_wr: RECVS as u32, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let qp = id.create_qp(&self.pd, &attr).map_err(cm_err("create_qp"))?;
        for slot in 0..RECVS {
            post_recv(&qp, &self.mr, slot)?;
        }
        Ok(qp)
    }
}

fn post_recv(qp: &QueuePair, mr: &MemoryRegion, slot: usize) -> Result<(), rdma_core_rs::Error> {
    let sge = Sge { addr: mr.addr() + (slot * SLOT) as u64, length: SLOT as u32, lkey: mr.lkey() };
    qp.post_recv(&[RecvWr { wr_id: slot as u64, sg_list: vec![sge] }])
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl Control {
    fn of(events: Events, ctx: &Context, id: CmId, qp: Arc<QueuePair>, p: Parts, client: bool) -> Control {
        let Parts { pd, send_cq, recv_cq, mr } = p;
        Control { events, ctx: ctx.clone(), id, qp, send_cq, recv_cq, mr, _pd: pd, wcs: Vec::new(), client }
    }

    /// The client's side: the control connection to `server`, from `cfg.bind`.
    pub fn connect(ctx: &Context, cfg: &Config, server: SocketAddr) -> Result<Control, PerfError> {
        rdma_core_rs::cm::attach_context(ctx).map_err(cm_err("attach_context"))?;
        let server = SocketAddr::new(cfg.link.cm_peer(server.ip()).map_err(PerfError::Failed)?, server.port());
        let mut events = Events::new();
        let p = Parts::new(ctx)?;
        let param = ConnParam { responder_resources: 0, initiator_depth: 0, ..ConnParam::default() };
        let mut qp = None;
        let id = dial(&mut events, server, &param, "the control connection", &mut |ev| {
            let id = resolve(ev, local(ctx, cfg), server, cfg.tos)?;
            qp = Some(p.qp(&id)?);
            Ok(id)
        })?;
        let qp = qp.expect("a QP with the ID");
        tracing::info!(%server, "control connection over the RDMA CM established");
        Ok(Control::of(events, ctx, id, qp, p, true))
    }

    /// The server's side: waits on `cfg.bind`:`cfg.port` for a client's
    /// control connection and accepts it (then listens no more, as perftest).
    pub fn accept(ctx: &Context, cfg: &Config) -> Result<Control, PerfError> {
        rdma_core_rs::cm::attach_context(ctx).map_err(cm_err("attach_context"))?;
        let mut events = Events::new();
        let p = Parts::new(ctx)?;
        let listener = events.create_id();
        let at = local(ctx, cfg);
        listener.bind_addr(SocketAddr::new(at, cfg.port)).map_err(cm_err("bind_addr"))?;
        listener.listen(1).map_err(cm_err("listen"))?;
        if cfg.progress {
            eprintln!("rdma-perf: waiting for a client on RDMA CM port {} (device {at})", cfg.port);
        }
        let req = events.next(Duration::from_secs(10 * 365 * 24 * 3600), "CONNECT_REQUEST", |e| {
            e.event == EventType::ConnectRequest
        })?;
        drop(listener);
        let id = req.id.clone();
        let qp = p.qp(&id)?;
        let param = ConnParam { responder_resources: 0, initiator_depth: 0, ..ConnParam::default() };
        id.accept(&param).map_err(cm_err("accept"))?;
        let e = events.of(&id, OOB_TIMEOUT, "ESTABLISHED (control connection)")?;
        if e.event != EventType::Established {
            return Err(PerfError::Failed(format!(
                "RDMA CM: the control connection: {} (status {})",
                e.event, e.status
            )));
        }
        tracing::info!(peer = ?id.peer_addr(), "control connection over the RDMA CM established");
        Ok(Control::of(events, ctx, id, qp, p, false))
    }

    /// One message: a SEND of exactly its bytes, waited for.
    pub fn send(&mut self, m: &[u8]) -> io::Result<()> {
        if m.len() > SLOT {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("a control message of {} bytes", m.len())));
        }
        let at = RECVS * SLOT;
        self.mr.write(at, m).map_err(io_err)?;
        let sge = Sge { addr: self.mr.addr() + at as u64, length: m.len() as u32, lkey: self.mr.lkey() };
        let mut wr = SendWr::new(u64::MAX, SendOp::Send, vec![sge]);
        wr.signaled = true;
        self.qp.post_send(std::slice::from_ref(&wr)).map_err(io_err)?;
        let end = Instant::now() + OOB_TIMEOUT;
        loop {
            self.wcs.clear();
            self.send_cq.wait(&mut self.wcs, 4, Some(Duration::from_millis(50))).map_err(io_err)?;
            if let Some(wc) = self.wcs.first() {
                if wc.status == WcStatus::WrFlushErr {
                    // The peer hung up (we answered its DREQ, which moved
                    // our QP to ERR) while this SEND's ACK was lost or
                    // late: after the last message, as perftest's client
                    // does once it has read it. Like a TCP write to a
                    // closed peer, no error here: a read that needed more
                    // would fail on the ERR QP.
                    tracing::debug!("a control SEND flushed: the peer has disconnected");
                    return Ok(());
                }
                if wc.status != WcStatus::Success {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        format!("a control SEND completed with {:?} ({})", wc.status, wc.status.as_str()),
                    ));
                }
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "a control SEND did not complete"));
            }
            self.answer_hangup();
        }
    }

    /// If the peer has disconnected, disconnects too, as a librdmacm
    /// application does on DISCONNECTED: that moves the QP to ERR (the
    /// peer's DREQ alone leaves it as it was, as on Linux), so what still
    /// waits on it completes flushed instead of retrying towards a peer
    /// that is gone.
    fn answer_hangup(&mut self) {
        if self.events.has_disconnected(&self.id) {
            if let Err(e) = self.id.disconnect() {
                tracing::debug!(error = %e, "disconnect after the peer's");
            }
        }
    }

    /// The next message if one arrived (its first `len` bytes), without blocking.
    pub fn poll_recv(&mut self, len: usize) -> io::Result<Option<Vec<u8>>> {
        self.wcs.clear();
        self.recv_cq.poll(&mut self.wcs, 1).map_err(io_err)?;
        let Some(wc) = self.wcs.first().copied() else {
            self.answer_hangup();
            return Ok(None);
        };
        if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("a control receive completed with {:?} ({})", wc.status, wc.status.as_str()),
            ));
        }
        let slot = wc.wr_id as usize % RECVS;
        let mut m = vec![0u8; len.min(SLOT)];
        self.mr.read(slot * SLOT, &mut m).map_err(io_err)?;
        if (wc.byte_len as usize) < len {
            tracing::debug!(got = wc.byte_len, len, "a short control message");
        }
        post_recv(&self.qp, &self.mr, slot).map_err(io_err)?;
        Ok(Some(m))
    }

    /// Where the connection goes from and to.
    pub fn addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        (self.id.local_addr(), self.id.peer_addr())
    }

    pub fn is_client(&self) -> bool {
        self.client
    }
}
