//! `rping`: librdmacm's rping over the software RoCE v2 stack, with its
//! flags, its protocol and its output, so either side can be the real tool
//! (`rping` of rdmacm-utils, over kernel Soft-RoCE or a RoCE NIC).
//!
//! Server: `cargo run --example rping -- -s -a 127.0.0.1 -v`
//! Client: `cargo run --example rping -- -c -I 127.0.0.2 -a 127.0.0.1 -v -V -C 10`
//!
//! One iteration, as rping does it: the client advertises its source
//! buffer (a 16-byte `{addr, rkey, size}` SEND); the server RDMA READs it
//! and says "go ahead"; the client advertises its sink buffer; the server
//! RDMA WRITEs the data back and says "go ahead"; the client compares (-V)
//! and prints (-v).
//!
//! `-P` (persistent server) serves each connection on a thread of its own,
//! its ID migrated to an event channel of its own, as rping does.
//!
//! `--backend roce1|ib --netdev IFACE` runs it over raw frames (root;
//! the addresses are the interface's, or the peers' GIDs).
//!
//! Differences: `-q` (the application's own QP) is refused. The server
//! needs an address (`-a`): this stack has no wildcard device. A server
//! given `-C` ends after that many pings: it waits 3 s for the client's
//! disconnect and then disconnects itself (rdma-core's server ignores
//! `-C` and waits for a DREQ that may never come: see `close_served`).

use clap::Parser;
use rdma_core_rs::cm::{CmEvent, CmId, ConnParam, EventChannel, EventType, PortSpace};
use rdma_core_rs::{
    Access, CompletionQueue, MemoryRegion, QpCap, QpInitAttr, QpType, QueuePair, RecvWr, SendOp, SendWr, WcOpcode,
    WcStatus, WorkCompletion,
};
use softroce::backend::LinkArgs;
use softroce::cm_tools::CmBackend;
use std::cell::Cell;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug, Clone)]
#[command(name = "rping", about = "RDMA ping over the RDMA CM (rdma-core's rping)")]
struct Args {
    /// Server side.
    #[arg(short = 's')]
    server: bool,
    /// Client side.
    #[arg(short = 'c')]
    client: bool,
    /// Address: the server's to connect to (client) or to bind (server).
    #[arg(short = 'a')]
    addr: Option<String>,
    /// Source address to bind to (client).
    #[arg(short = 'I')]
    source: Option<String>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Ping count (0: forever).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// Ping data size.
    #[arg(short = 'S', default_value_t = 64)]
    size: usize,
    /// Display ping data to stdout.
    #[arg(short = 'v')]
    verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    validate: bool,
    /// Debug printfs.
    #[arg(short = 'd')]
    debug: bool,
    /// Persistent server: one connection after another.
    #[arg(short = 'P')]
    persistent: bool,
    /// Use a self-created, self-modified QP (not supported here).
    #[arg(short = 'q')]
    self_create_qp: bool,
    #[command(flatten)]
    link: LinkArgs,
}

/// rping's `RPING_MIN_BUFSIZE`: `sizeof(stringify(INT_MAX)) + sizeof("rdma-ping-%d: ")`.
const MIN_BUFSIZE: usize = 11 + 15;
const MAX_BUFSIZE: usize = 65535;
/// `struct rping_rdma_info`: be64 buf, be32 rkey, be32 size.
const INFO_LEN: usize = 16;
const SQ_DEPTH: u32 = 16;
/// How long a server that served its `-C` pings waits for their last
/// "go ahead" to be acknowledged, and then for the client's DREQ.
const LAST_ACK_LIMIT: Duration = Duration::from_secs(30);
const DREQ_GRACE: Duration = Duration::from_secs(3);

/// rping's `enum test_state`, with its numbers (they appear in its messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum St {
    Idle = 1,
    ConnectRequest,
    AddrResolved,
    RouteResolved,
    Connected,
    RdmaReadAdv,
    RdmaReadComplete,
    RdmaWriteAdv,
    RdmaWriteComplete,
    Disconnected,
    Error,
}

macro_rules! debug_log {
    ($cb:expr, $($t:tt)*) => { if $cb.debug { eprint!($($t)*); } };
}

/// One side of one connection (rping's `struct rping_cb`).
struct Cb {
    server: bool,
    debug: bool,
    verbose: bool,
    validate: bool,
    count: u64,
    size: usize,
    state: St,
    /// Pending `sem_post`s: rping's two threads post a semaphore on every
    /// state change; here one thread counts them.
    posts: u32,
    /// Work requests on the send queue not yet completed.
    sends_outstanding: Cell<u32>,
    ch: EventChannel,
    cq: Option<CompletionQueue>,
    qp: Option<Arc<QueuePair>>,
    recv_mr: Option<MemoryRegion>,
    send_mr: Option<MemoryRegion>,
    rdma_mr: Option<MemoryRegion>,
    start_mr: Option<MemoryRegion>,
    remote: (u64, u32, u32),
}

type Res<T> = Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Cb {
    fn new(a: &Args, ch: EventChannel) -> Cb {
        Cb {
            server: a.server,
            debug: a.debug,
            verbose: a.verbose,
            validate: a.validate,
            count: a.count,
            size: a.size,
            state: St::Idle,
            posts: 0,
            sends_outstanding: Cell::new(0),
            ch,
            cq: None,
            qp: None,
            recv_mr: None,
            send_mr: None,
            rdma_mr: None,
            start_mr: None,
            remote: (0, 0, 0),
        }
    }

    fn post(&mut self, st: St) {
        self.state = st;
        self.posts += 1;
    }

    /// rping's `rping_cma_event_handler`. Errors end the program there.
    fn on_cm(&mut self, ev: CmEvent) -> Res<()> {
        debug_log!(
            self,
            "cma_event type {} cma_id {:?} ({})\n",
            ev.event,
            ev.id.local_addr(),
            if self.server { "parent" } else { "child" }
        );
        match ev.event {
            EventType::AddrResolved => {
                self.state = St::AddrResolved;
                ev.id.resolve_route(Duration::from_millis(2000)).map_err(|e| format!("rdma_resolve_route: {e}"))?;
            }
            EventType::RouteResolved => self.post(St::RouteResolved),
            EventType::ConnectRequest => self.post(St::ConnectRequest),
            EventType::Established => {
                debug_log!(self, "ESTABLISHED\n");
                // The server wakes up when the first RECV completes.
                if !self.server {
                    self.state = St::Connected;
                }
                self.posts += 1;
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => {
                eprintln!("cma event {}, error {}", ev.event, ev.status);
                self.post(St::Error);
                return Err(String::new());
            }
            EventType::Disconnected => {
                eprintln!("{} DISCONNECT EVENT...", if self.server { "server" } else { "client" });
                self.post(St::Disconnected);
            }
            EventType::DeviceRemoval => {
                eprintln!("cma detected device removal!!!!");
                self.post(St::Error);
                return Err(String::new());
            }
            _ => debug_log!(self, "unhandled event: {}, ignoring\n", ev.event),
        }
        Ok(())
    }

    /// rping's `rping_cq_event_handler` for one completion.
    fn on_wc(&mut self, wc: WorkCompletion) -> Res<()> {
        if wc.opcode != WcOpcode::Recv {
            self.sends_outstanding.set(self.sends_outstanding.get().saturating_sub(1));
        }
        if wc.status != WcStatus::Success {
            if wc.status == WcStatus::WrFlushErr {
                debug_log!(self, "cq flushed\n");
                return Ok(());
            }
            eprintln!("cq completion failed status {}", wc.status as u32);
            self.post(St::Error);
            return Err(String::new());
        }
        match wc.opcode {
            WcOpcode::Send => debug_log!(self, "send completion\n"),
            WcOpcode::RdmaWrite => {
                debug_log!(self, "rdma write completion\n");
                self.post(St::RdmaWriteComplete);
            }
            WcOpcode::RdmaRead => {
                debug_log!(self, "rdma read completion\n");
                self.post(St::RdmaReadComplete);
            }
            WcOpcode::Recv => {
                debug_log!(self, "recv completion\n");
                if wc.byte_len as usize != INFO_LEN {
                    eprintln!("Received bogus data, size {}", wc.byte_len);
                    self.post(St::Error);
                    return Err(String::new());
                }
                let mut info = [0u8; INFO_LEN];
                self.recv_mr.as_ref().ok_or("no receive buffer")?.read(0, &mut info).map_err(err)?;
                let next = if self.server {
                    self.remote = (
                        u64::from_be_bytes(info[0..8].try_into().unwrap_or_default()),
                        u32::from_be_bytes(info[8..12].try_into().unwrap_or_default()),
                        u32::from_be_bytes(info[12..16].try_into().unwrap_or_default()),
                    );
                    debug_log!(
                        self,
                        "Received rkey {:x} addr {:x} len {} from peer\n",
                        self.remote.1,
                        self.remote.0,
                        self.remote.2
                    );
                    if self.state <= St::Connected || self.state == St::RdmaWriteComplete {
                        St::RdmaReadAdv
                    } else {
                        St::RdmaWriteAdv
                    }
                } else if self.state == St::RdmaReadAdv {
                    St::RdmaWriteAdv
                } else {
                    St::RdmaWriteComplete
                };
                self.post_recv().map_err(|e| format!("post recv error: {e}"))?;
                self.post(next);
            }
            other => {
                debug_log!(self, "unknown!!!!! completion {:?}\n", other);
                self.post(St::Error);
                return Err(String::new());
            }
        }
        Ok(())
    }

    /// `sem_wait(&cb->sem)`: handles completions and CM events until one
    /// of them posts.
    fn sem_wait(&mut self) -> Res<()> {
        self.sem_wait_until(None).map(|_| ())
    }

    /// `sem_wait` with a deadline: false when it passed without a post.
    fn sem_wait_until(&mut self, deadline: Option<Instant>) -> Res<bool> {
        let mut wcs = Vec::new();
        loop {
            if self.posts > 0 {
                self.posts -= 1;
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            if let Some(cq) = &self.cq {
                cq.wait(&mut wcs, 16, Some(Duration::from_millis(10))).map_err(err)?;
                for wc in std::mem::take(&mut wcs) {
                    if let Err(e) = self.on_wc(wc) {
                        if !e.is_empty() {
                            eprintln!("{e}");
                        }
                    }
                }
            }
            let wait = if self.cq.is_some() { Duration::ZERO } else { Duration::from_millis(100) };
            match self.ch.get_cm_event(Some(wait)) {
                Ok(ev) => {
                    if let Err(e) = self.on_cm(ev) {
                        if !e.is_empty() {
                            eprintln!("{e}");
                        }
                    }
                }
                Err(rdma_core_rs::cm::CmError::Timeout(_)) => {}
                Err(e) => return Err(format!("rdma_get_cm_event: {e}")),
            }
        }
    }

    fn post_recv(&self) -> rdma_core_rs::Result<()> {
        let (Some(qp), Some(mr)) = (&self.qp, &self.recv_mr) else { return Ok(()) };
        qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, INFO_LEN as u32)?] }])
    }

    /// rping's `rping_setup_qp` and `rping_setup_buffers` on `id`.
    fn setup(&mut self, id: &CmId) -> Res<()> {
        let ctx = id.context().ok_or("the CM ID has no device")?;
        let pd = ctx.alloc_pd().map_err(|e| format!("ibv_alloc_pd failed: {e}"))?;
        let cq = ctx.create_cq(SQ_DEPTH as usize * 2, None).map_err(|e| format!("ibv_create_cq failed: {e}"))?;
        let mut attr = QpInitAttr::new(QpType::Rc, &cq);
        attr.cap = QpCap { max_send_wr: SQ_DEPTH, max_recv_wr: 2, max_send_sge: 1, max_recv_sge: 1, ..attr.cap };
        let qp = id.create_qp(&pd, &attr).map_err(|e| format!("rdma_create_qp: {e}"))?;
        debug_log!(self, "created pd, cq, qp {}\n", qp.qp_num());
        let remote = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        self.recv_mr = Some(pd.reg_mr(INFO_LEN, Access::LOCAL_WRITE).map_err(err)?);
        self.send_mr = Some(pd.reg_mr(INFO_LEN, Access::NONE).map_err(err)?);
        self.rdma_mr = Some(pd.reg_mr(self.size, remote).map_err(err)?);
        if !self.server {
            self.start_mr = Some(pd.reg_mr(self.size, remote).map_err(err)?);
        }
        self.cq = Some(cq);
        self.qp = Some(qp);
        self.post_recv().map_err(|e| format!("ibv_post_recv failed: {e}"))?;
        debug_log!(self, "allocated & registered buffers...\n");
        Ok(())
    }

    fn post_send(&self, op: SendOp, mr: &MemoryRegion, len: u32) -> Res<()> {
        let qp = self.qp.as_ref().ok_or("no QP")?;
        let wr = SendWr {
            wr_id: 2,
            op,
            sg_list: vec![mr.sge(0, len).map_err(err)?],
            signaled: true,
            solicited: false,
            inline_data: None,
            ud: None,
            xrc_srqn: 0,
        };
        qp.post_send(&[wr]).map_err(|e| format!("post send error {e}"))?;
        self.sends_outstanding.set(self.sends_outstanding.get() + 1);
        Ok(())
    }

    /// rping's `rping_format_send` and the SEND of `send_buf`.
    fn send_info(&self, mr: Option<&MemoryRegion>) -> Res<()> {
        let send = self.send_mr.as_ref().ok_or("no send buffer")?;
        let mut info = [0u8; INFO_LEN];
        if let Some(mr) = mr {
            info[0..8].copy_from_slice(&mr.addr().to_be_bytes());
            info[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
            info[12..16].copy_from_slice(&(self.size as u32).to_be_bytes());
            debug_log!(self, "RDMA addr {:x} rkey {:x} len {}\n", mr.addr(), mr.rkey(), self.size);
        }
        send.write(0, &info).map_err(err)?;
        self.post_send(SendOp::Send, send, INFO_LEN as u32)
    }

    /// rping's `rping_test_server`; with `-C`, it ends after that many
    /// pings (see [`Cb::close_served`]).
    fn test_server(&mut self) -> Res<()> {
        let mut served: u64 = 0;
        loop {
            if self.count > 0 && served == self.count {
                return self.close_served();
            }
            self.sem_wait()?;
            if self.state != St::RdmaReadAdv {
                eprintln!("wait for RDMA_READ_ADV state {}", self.state as u32);
                break;
            }
            debug_log!(self, "server received sink adv\n");
            let (addr, rkey, len) = self.remote;
            let rdma = self.rdma_mr.as_ref().ok_or("no rdma buffer")?;
            self.post_send(SendOp::RdmaRead { remote_addr: addr, rkey }, rdma, len)?;
            debug_log!(self, "server posted rdma read req \n");
            self.sem_wait()?;
            if self.state != St::RdmaReadComplete {
                eprintln!("wait for RDMA_READ_COMPLETE state {}", self.state as u32);
                break;
            }
            debug_log!(self, "server received read complete\n");
            let data = self.rdma_mr.as_ref().ok_or("no rdma buffer")?.to_vec();
            let text_len = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            if self.verbose {
                println!("server ping data: {}", String::from_utf8_lossy(&data[..text_len]));
            }
            self.send_info(None)?;
            debug_log!(self, "server posted go ahead\n");
            self.sem_wait()?;
            if self.state != St::RdmaWriteAdv {
                eprintln!("wait for RDMA_WRITE_ADV state {}", self.state as u32);
                break;
            }
            debug_log!(self, "server received sink adv\n");
            let (addr, rkey, _) = self.remote;
            let rdma = self.rdma_mr.as_ref().ok_or("no rdma buffer")?;
            // strlen(rdma_buf) + 1, as rping writes it.
            let n = (text_len + 1).min(data.len()) as u32;
            self.post_send(SendOp::RdmaWrite { remote_addr: addr, rkey }, rdma, n)?;
            self.sem_wait()?;
            if self.state != St::RdmaWriteComplete {
                eprintln!("wait for RDMA_WRITE_COMPLETE state {}", self.state as u32);
                break;
            }
            debug_log!(self, "server rdma write complete \n");
            self.send_info(None)?;
            debug_log!(self, "server posted go ahead\n");
            served += 1;
        }
        if self.state == St::Disconnected {
            Ok(())
        } else {
            Err("rping server failed: -1".into())
        }
    }

    /// The end of a server that has served its `-C` pings (rdma-core's
    /// server ignores `-C` and waits for the client's disconnect, however
    /// long). Once the last "go ahead" is acknowledged, the client has all
    /// it needs and disconnects; if its DREQ does not come within
    /// [`DREQ_GRACE`], this side disconnects itself. A DREQ can be lost
    /// for good: a client that destroys its ID right after
    /// `rdma_disconnect` (rping does) also cancels the DREQ's retries.
    fn close_served(&mut self) -> Res<()> {
        let acked_by = Instant::now() + LAST_ACK_LIMIT;
        let mut grace: Option<Instant> = None;
        loop {
            match self.state {
                St::Disconnected => return Ok(()),
                St::Error => return Err("rping server failed: -1".into()),
                St::RdmaReadAdv => {
                    eprintln!(
                        "server: the client asks for ping {} of -C {}; disconnecting",
                        self.count + 1,
                        self.count
                    );
                    return Ok(());
                }
                _ => {}
            }
            let now = Instant::now();
            match grace {
                None if self.sends_outstanding.get() == 0 => grace = Some(now + DREQ_GRACE),
                None if now >= acked_by => {
                    return Err(format!("the last go ahead was not acknowledged within {LAST_ACK_LIMIT:?}"));
                }
                Some(end) if now >= end => {
                    eprintln!(
                        "server: no DISCONNECT from the client {DREQ_GRACE:?} after its last ping was answered; \
                         disconnecting"
                    );
                    return Ok(());
                }
                _ => {}
            }
            self.sem_wait_until(Some(now + Duration::from_millis(10)))?;
        }
    }

    /// rping's `rping_test_client`.
    fn test_client(&mut self) -> Res<()> {
        let mut start: u8 = 65;
        let mut ping: u64 = 0;
        while self.count == 0 || ping < self.count {
            self.state = St::RdmaReadAdv;
            let buf = ping_data(ping, start, self.size);
            start = if start >= 122 { 65 } else { start + 1 };
            let start_mr = self.start_mr.as_ref().ok_or("no start buffer")?;
            start_mr.write(0, &buf).map_err(err)?;
            self.send_info(Some(start_mr))?;
            self.sem_wait()?;
            if self.state != St::RdmaWriteAdv {
                eprintln!("wait for RDMA_WRITE_ADV state {}", self.state as u32);
                return self.client_result();
            }
            self.send_info(self.rdma_mr.as_ref())?;
            self.sem_wait()?;
            if self.state != St::RdmaWriteComplete {
                eprintln!("wait for RDMA_WRITE_COMPLETE state {}", self.state as u32);
                return self.client_result();
            }
            let got = self.rdma_mr.as_ref().ok_or("no rdma buffer")?.to_vec();
            if self.validate && got != buf {
                eprintln!("data mismatch!");
                return Err("rping client failed: -1".into());
            }
            if self.verbose {
                let end = got.iter().position(|&b| b == 0).unwrap_or(got.len());
                println!("ping data: {}", String::from_utf8_lossy(&got[..end]));
            }
            ping += 1;
        }
        Ok(())
    }

    fn client_result(&self) -> Res<()> {
        if self.state == St::Disconnected {
            Ok(())
        } else {
            Err("rping client failed: -1".into())
        }
    }
}

/// The client's ping `ping`: "rdma-ping-N: " then ASCII cycling 'A'..'z'
/// from `start`, NUL-terminated at `size - 1` (snprintf truncates too).
fn ping_data(ping: u64, start: u8, size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; size];
    let head = format!("rdma-ping-{ping}: ");
    let cc = head.len().min(size.saturating_sub(1));
    buf[..cc].copy_from_slice(&head.as_bytes()[..cc]);
    let mut c = start;
    for b in buf.iter_mut().skip(head.len()) {
        *b = c;
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
    buf
}

fn resolve(s: &str, port: u16) -> Res<SocketAddr> {
    softroce::cm_tools::resolve(s, port)
        .map_err(|e| format!("getaddrinfo failed ({e}) - invalid hostname or IP address"))
}

fn wait_for(cb: &mut Cb, want: St, what: &str) -> Res<()> {
    cb.sem_wait()?;
    if cb.state != want {
        return Err(format!("{what} state {}", cb.state as u32));
    }
    Ok(())
}

fn run_client(a: &Args, be: &CmBackend) -> Res<()> {
    let ch = EventChannel::new();
    let id = ch.create_id(PortSpace::Tcp);
    let mut cb = Cb::new(a, ch);
    let dst = be.peer(resolve(a.addr.as_deref().ok_or("-a is required for the client")?, a.port)?)?;
    let src = be.source(a.source.as_deref().map(|s| resolve(s, 0).map(|x| x.ip())).transpose()?)?;
    id.resolve_addr(src, dst, Duration::from_millis(2000)).map_err(|e| format!("rdma_resolve_addr: {e}"))?;
    wait_for(&mut cb, St::RouteResolved, "waiting for addr/route resolution")?;
    debug_log!(cb, "rdma_resolve_addr - rdma_resolve_route successful\n");
    cb.setup(&id).map_err(|e| format!("setup_qp failed: {e}"))?;
    id.connect(&ConnParam::default()).map_err(|e| format!("rdma_connect: {e}"))?;
    wait_for(&mut cb, St::Connected, "wait for CONNECTED").map_err(|e| format!("{e}\nconnect error -1"))?;
    debug_log!(cb, "rdma_connect successful\n");
    let r = cb.test_client();
    // rping_disconnect; then wait briefly for the DREP so that the DREQ
    // is not lost with the process.
    if let Err(e) = id.disconnect() {
        eprintln!("rdma_disconnect: {e}");
    }
    if cb.state != St::Disconnected {
        let _ = cb.ch.get_cm_event(Some(Duration::from_secs(2)));
    }
    r
}

fn serve_one(a: &Args, cb: &mut Cb, child: &CmId, req: &CmEvent) -> Res<()> {
    cb.setup(child).map_err(|e| format!("setup_qp failed: {e}"))?;
    // rdma_accept(child, NULL): the request's values, within the device's.
    let param = ConnParam {
        responder_resources: req.param.responder_resources,
        initiator_depth: req.param.initiator_depth,
        ..ConnParam::default()
    };
    child.accept(&param).map_err(|e| format!("rdma_accept: {e}\nconnect error -1"))?;
    cb.sem_wait()?;
    if cb.state == St::Error {
        return Err("wait for CONNECTED state 11\nconnect error -1".into());
    }
    let _ = a;
    let r = cb.test_server();
    if let Err(e) = child.disconnect() {
        eprintln!("rdma_disconnect: {e}");
    }
    // A server that disconnects first waits briefly for the DREP, as the
    // client does, so that its DREQ is not lost with the process.
    if cb.state != St::Disconnected {
        let _ = cb.ch.get_cm_event(Some(Duration::from_secs(2)));
    }
    r
}

fn run_server(a: &Args, be: &CmBackend) -> Res<()> {
    let ch = EventChannel::new();
    let listen = ch.create_id(PortSpace::Tcp);
    let bind =
        be.bind(resolve(a.addr.as_deref().ok_or("-a is required: bind the server to a device address")?, a.port)?)?;
    listen.bind_addr(bind).map_err(|e| format!("rdma_bind_addr: {e}"))?;
    listen.listen(3).map_err(|e| format!("rdma_listen: {e}"))?;
    loop {
        let mut cb = Cb::new(a, ch.clone());
        // Wait for a CONNECT_REQUEST (other events on the channel, such as
        // a previous connection's TIMEWAIT_EXIT, are noted and passed by).
        let req = loop {
            let ev = ch.get_cm_event(None).map_err(|e| format!("rdma_get_cm_event: {e}"))?;
            if ev.event == EventType::ConnectRequest {
                break ev;
            }
            debug_log!(cb, "cma_event type {} before a connect request, ignoring\n", ev.event);
        };
        cb.state = St::ConnectRequest;
        let child = req.id.clone();
        if !a.persistent {
            return serve_one(a, &mut cb, &child, &req);
        }
        // rping_persistent_server_thread: the connection's events go to a
        // channel of its own, served by its own thread.
        let own = EventChannel::new();
        child.migrate(&own);
        let args = a.clone();
        let spawned = std::thread::Builder::new().name("rping-conn".into()).spawn(move || {
            let mut cb = Cb::new(&args, own);
            cb.state = St::ConnectRequest;
            if let Err(e) = serve_one(&args, &mut cb, &child, &req) {
                eprintln!("{e}");
            }
        });
        if let Err(e) = spawned {
            return Err(format!("pthread_create: {e}"));
        }
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if a.server == a.client {
        eprintln!("rping: exactly one of -s (server) and -c (client)");
        return ExitCode::from(255);
    }
    if !(MIN_BUFSIZE..=MAX_BUFSIZE).contains(&a.size) {
        eprintln!("Invalid size {} (valid range is {} to {})", a.size, MIN_BUFSIZE, MAX_BUFSIZE);
        return ExitCode::from(255);
    }
    if a.self_create_qp {
        eprintln!("rping: -q (a self-created QP) is not supported by this stack");
        return ExitCode::from(255);
    }
    let r =
        CmBackend::open(&a.link, "rping")
            .and_then(|be| if a.server { run_server(&a, &be) } else { run_client(&a, &be) });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("{e}");
            }
            ExitCode::from(255)
        }
    }
}
