//! `ucmatose`: librdmacm's cmatose (RC connections over the RDMA CM) over
//! the software RoCE v2 stack, with its flags and output. The server
//! sends `-C` messages on each of `-c` connections, the client answers
//! with as many, then the server disconnects.
//!
//! Server: `cargo run --example ucmatose -- -b 127.0.0.1`
//! Client: `cargo run --example ucmatose -- -b 127.0.0.2 -s 127.0.0.1`
//!
//! `-m` moves every ID to a new event channel after the data transfers
//! (`rdma_migrate_id`), as cmatose does.
//!
//! Differences: the server needs `-b` (this stack has no wildcard
//! device); `-P ib` and `-f gid` are refused.

use clap::Parser;
use rdma_core_rs::cm::{CmEvent, CmId, ConnParam, EventChannel, EventType, PortSpace};
use rdma_core_rs::{Access, CompletionQueue, MemoryRegion, QpCap, QpInitAttr, QpType, RecvWr, SendOp, SendWr};
use softroce::backend::LinkArgs;
use softroce::cm_tools::CmBackend;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "ucmatose", about = "RC connections over the RDMA CM (librdmacm's cmatose)")]
struct Args {
    /// The server's address (makes this side the client).
    #[arg(short = 's')]
    server_addr: Option<String>,
    /// The address to bind to.
    #[arg(short = 'b')]
    bind_addr: Option<String>,
    /// Connections.
    #[arg(short = 'c', default_value_t = 1)]
    connections: usize,
    /// Messages per connection.
    #[arg(short = 'C', default_value_t = 10)]
    count: usize,
    /// Message size.
    #[arg(short = 'S', default_value_t = 100)]
    size: usize,
    /// Type of service.
    #[arg(short = 't')]
    tos: Option<u8>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7471)]
    port: u16,
    /// Port space: only "tcp".
    #[arg(short = 'P')]
    port_space: Option<String>,
    /// Address format: name or ip.
    #[arg(short = 'f')]
    format: Option<String>,
    /// Migrate the IDs to a new event channel after the data transfers.
    #[arg(short = 'm')]
    migrate: bool,
    #[command(flatten)]
    link: LinkArgs,
}

struct Node {
    id: CmId,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    qp: Arc<rdma_core_rs::QueuePair>,
    mr: MemoryRegion,
    connected: bool,
}

type Res<T> = Result<T, String>;

fn init_node(id: &CmId, count: usize, size: usize) -> Res<Node> {
    let ctx = id.context().ok_or("cmatose: the CM ID has no device")?;
    let pd = ctx.alloc_pd().map_err(|e| format!("cmatose: unable to allocate PD: {e}"))?;
    let cqe = count.max(1);
    let send_cq = ctx.create_cq(cqe, None).map_err(|e| format!("cmatose: unable to create CQ: {e}"))?;
    let recv_cq = ctx.create_cq(cqe, None).map_err(|e| format!("cmatose: unable to create CQ: {e}"))?;
    let mut attr = QpInitAttr::new(QpType::Rc, &send_cq);
    attr.recv_cq = &recv_cq;
    attr.sq_sig_all = true;
    attr.cap = QpCap { max_send_wr: cqe as u32, max_recv_wr: cqe as u32, max_send_sge: 1, max_recv_sge: 1, ..attr.cap };
    let qp = id.create_qp(&pd, &attr).map_err(|e| format!("cmatose: unable to create QP: {e}"))?;
    let mr = pd.reg_mr(size.max(1), Access::LOCAL_WRITE).map_err(|e| format!("failed to reg MR: {e}"))?;
    for _ in 0..count {
        let sge = mr.sge(0, size as u32).map_err(|e| e.to_string())?;
        qp.post_recv(&[RecvWr { wr_id: 1, sg_list: vec![sge] }])
            .map_err(|e| format!("failed to post receives: {e}"))?;
    }
    Ok(Node { id: id.clone(), send_cq, recv_cq, qp, mr, connected: false })
}

fn post_sends(node: &Node, count: usize, size: usize) -> Res<()> {
    if !node.connected {
        return Ok(());
    }
    for _ in 0..count {
        let wr = SendWr {
            wr_id: 2,
            op: SendOp::Send,
            sg_list: vec![node.mr.sge(0, size as u32).map_err(|e| e.to_string())?],
            signaled: false,
            solicited: false,
            inline_data: None,
            ud: None,
            xrc_srqn: 0,
        };
        node.qp.post_send(&[wr]).map_err(|e| format!("failed to post sends: {e}"))?;
    }
    Ok(())
}

/// cmatose's `poll_cqs`: `count` completions on one CQ of every connected node.
fn poll_cqs(nodes: &[Node], count: usize, send: bool) -> Res<()> {
    let mut wcs = Vec::new();
    for node in nodes.iter().filter(|n| n.connected) {
        let cq = if send { &node.send_cq } else { &node.recv_cq };
        let mut done = 0;
        while done < count {
            let n = cq.wait(&mut wcs, 8, Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!("cmatose: failed polling CQ: only {done} of {count} completions in 30 s"));
            }
            if let Some(wc) = wcs.iter().find(|w| w.status != rdma_core_rs::WcStatus::Success) {
                return Err(format!("cmatose: completion failed with status {:?}", wc.status));
            }
            done += n;
            wcs.clear();
        }
    }
    Ok(())
}

fn resolve(s: &str, port: u16) -> Res<SocketAddr> {
    softroce::cm_tools::resolve(s, port).map_err(|e| format!("cmatose: getaddrinfo error: {e}"))
}

fn event_error(ev: &CmEvent) -> String {
    format!("cmatose: event: {}, error: {}", ev.event, ev.status)
}

/// Waits for DISCONNECTED on every connection, answering each with
/// `rdma_disconnect` as cmatose does.
fn disconnect_events(ch: &EventChannel, mut left: usize) -> Res<()> {
    while left > 0 {
        let ev = ch.get_cm_event(None).map_err(|e| e.to_string())?;
        if ev.event == EventType::Disconnected {
            let _ = ev.id.disconnect();
            left -= 1;
        }
    }
    Ok(())
}

fn run_server(a: &Args, be: &CmBackend) -> Res<()> {
    println!("cmatose: starting server");
    let mut ch = EventChannel::new();
    let listen = ch.create_id(PortSpace::Tcp);
    let bind =
        be.bind(resolve(a.bind_addr.as_deref().ok_or("cmatose: the server needs -b (a device address)")?, a.port)?)?;
    listen.bind_addr(bind).map_err(|e| format!("cmatose: bind address failed: {e}"))?;
    listen.listen(0).map_err(|e| format!("cmatose: failure trying to listen: {e}"))?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut left = a.connections;
    while left > 0 {
        let ev = ch.get_cm_event(None).map_err(|e| e.to_string())?;
        match ev.event {
            EventType::ConnectRequest => {
                if nodes.len() == a.connections {
                    println!("cmatose: failing connection request");
                    let _ = ev.id.reject(&[]);
                    continue;
                }
                let node = init_node(&ev.id, a.count, a.size)?;
                // rdma_accept(id, NULL): the request's values.
                let p = ConnParam {
                    responder_resources: ev.param.responder_resources,
                    initiator_depth: ev.param.initiator_depth,
                    ..ConnParam::default()
                };
                if let Err(e) = ev.id.accept(&p) {
                    println!("cmatose: failure accepting: {e}");
                    left -= 1;
                    continue;
                }
                nodes.push(node);
            }
            EventType::Established => {
                if let Some(n) = nodes.iter_mut().find(|n| n.id == ev.id) {
                    n.connected = true;
                }
                left -= 1;
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => {
                println!("{}", event_error(&ev));
                left -= 1;
            }
            _ => {}
        }
    }
    if a.count > 0 {
        println!("initiating data transfers");
        for n in &nodes {
            post_sends(n, a.count, a.size)?;
        }
        println!("completing sends");
        poll_cqs(&nodes, a.count, true)?;
        println!("receiving data transfers");
        poll_cqs(&nodes, a.count, false)?;
        println!("data transfers complete");
    }
    if a.migrate {
        ch = migrate_channel(Some(&listen), &nodes);
    }
    println!("cmatose: disconnecting");
    let mut disconnecting = 0;
    for n in nodes.iter_mut().filter(|n| n.connected) {
        n.connected = false;
        let _ = n.id.disconnect();
        disconnecting += 1;
    }
    disconnect_events(&ch, disconnecting)?;
    println!("disconnected");
    Ok(())
}

fn run_client(a: &Args, be: &CmBackend, server: &str) -> Res<()> {
    println!("cmatose: starting client");
    let dst = be.peer(resolve(server, a.port)?)?;
    let src = be.source(a.bind_addr.as_deref().map(|s| resolve(s, 0).map(|x| x.ip())).transpose()?)?;
    let mut ch = EventChannel::new();
    println!("cmatose: connecting");
    let ids: Vec<CmId> = (0..a.connections).map(|_| ch.create_id(PortSpace::Tcp)).collect();
    for id in &ids {
        if let Some(tos) = a.tos {
            id.set_tos(tos);
        }
        id.resolve_addr(src, dst, Duration::from_millis(2000))
            .map_err(|e| format!("cmatose: failure getting addr: {e}"))?;
    }
    let mut nodes: Vec<Option<Node>> = (0..a.connections).map(|_| None).collect();
    let mut left = a.connections;
    let mut err = None;
    while left > 0 {
        let ev = ch.get_cm_event(None).map_err(|e| e.to_string())?;
        let Some(i) = ids.iter().position(|id| *id == ev.id) else { continue };
        match ev.event {
            EventType::AddrResolved => ev
                .id
                .resolve_route(Duration::from_millis(2000))
                .map_err(|e| format!("cmatose: resolve route failed: {e}"))?,
            EventType::RouteResolved => {
                nodes[i] = Some(init_node(&ev.id, a.count, a.size)?);
                // cmatose: one READ each way, 5 retries, RNR retry 0.
                let p = ConnParam { retry_count: 5, rnr_retry_count: 0, ..ConnParam::default() };
                ev.id.connect(&p).map_err(|e| format!("cmatose: failure connecting: {e}"))?;
            }
            EventType::Established => {
                if let Some(n) = nodes[i].as_mut() {
                    n.connected = true;
                }
                left -= 1;
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => {
                let e = event_error(&ev);
                println!("{e}");
                err = Some(e);
                left -= 1;
            }
            _ => {}
        }
    }
    let nodes: Vec<Node> = nodes.into_iter().flatten().collect();
    if let Some(e) = err {
        return Err(e);
    }
    if a.count > 0 {
        println!("receiving data transfers");
        poll_cqs(&nodes, a.count, false)?;
        println!("sending replies");
        for n in &nodes {
            post_sends(n, a.count, a.size)?;
        }
        println!("data transfers complete");
    }
    if a.migrate {
        ch = migrate_channel(None, &nodes);
    }
    disconnect_events(&ch, nodes.iter().filter(|n| n.connected).count())
}

/// cmatose's `migrate_channel`: every ID to a new event channel.
fn migrate_channel(listen: Option<&CmId>, nodes: &[Node]) -> EventChannel {
    println!("migrating to new event channel");
    let ch = EventChannel::new();
    if let Some(l) = listen {
        l.migrate(&ch);
    }
    for n in nodes {
        n.id.migrate(&ch);
    }
    ch
}

fn main() -> ExitCode {
    let a = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if a.port_space.as_deref().is_some_and(|p| p != "tcp") {
        eprintln!("cmatose: -P ib is not supported by this stack");
        return ExitCode::from(1);
    }
    if a.format.as_deref().is_some_and(|f| f.starts_with("gid")) {
        eprintln!("cmatose: -f gid (AF_IB addresses) is not supported by this stack");
        return ExitCode::from(1);
    }
    let r = CmBackend::open(&a.link, "cmatose").and_then(|be| match &a.server_addr {
        Some(s) => run_client(&a, &be, s),
        None => run_server(&a, &be),
    });
    println!("test complete");
    let status = match &r {
        Ok(()) => 0,
        Err(e) => {
            println!("{e}");
            -1
        }
    };
    println!("return status {status}");
    if r.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
