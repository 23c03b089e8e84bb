//! `udaddy`: librdmacm's UD example over the software RoCE v2 stack, with
//! its flags and output. The RDMA CM resolves the peer's UD QP with SIDR
//! (RDMA_PS_UDP, port 7174); then the client sends `-C` messages (SEND
//! with immediate = its QPN) and the server answers each connection with
//! as many, to the address and QPN of the first message it got.
//!
//! Server: `cargo run --example udaddy -- -b 127.0.0.1`
//! Client: `cargo run --example udaddy -- -b 127.0.0.2 -s 127.0.0.1`
//!
//! Differences: the server needs `-b` (this stack has no wildcard
//! device); `-P ipoib`, `-p` other than RDMA_PS_UDP and `-f gid` are
//! refused; `--port` sets the port (udaddy's is fixed at 7174).

use clap::Parser;
use rdma_core_rs::cm::{CmEvent, CmId, ConnParam, EventChannel, EventType, PortSpace};
use rdma_core_rs::{
    Access, AddressHandle, AhAttr, CompletionQueue, Gid, MemoryRegion, ProtectionDomain, QpCap, QpInitAttr, QpType,
    RecvWr, SendOp, SendWr, UdDest, WorkCompletion,
};
use softroce::backend::LinkArgs;
use softroce::cm_tools::CmBackend;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "udaddy", about = "UD messages over the RDMA CM (librdmacm's udaddy)")]
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
    /// Port space: only 0x111 (RDMA_PS_UDP).
    #[arg(short = 'p', value_parser = parse_num)]
    port_space: Option<u32>,
    /// Port space by name: only "udp".
    #[arg(short = 'P')]
    port_space_name: Option<String>,
    /// Address format: name or ip.
    #[arg(short = 'f')]
    format: Option<String>,
    /// The port (udaddy's own is 7174, fixed).
    #[arg(long = "port", default_value_t = 7174)]
    port: u16,
    #[command(flatten)]
    link: LinkArgs,
}

fn parse_num(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

/// The 40 bytes ahead of every UD receive.
const GRH_LEN: usize = 40;
/// The largest message: the port MTU (4096).
const MAX_MESSAGE: usize = 4096;

struct Node {
    id: CmId,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: Arc<rdma_core_rs::QueuePair>,
    mr: MemoryRegion,
    ah: Option<AddressHandle>,
    dest: Option<UdDest>,
}

type Res<T> = Result<T, String>;

fn init_node(id: &CmId, count: usize, size: usize) -> Res<Node> {
    let ctx = id.context().ok_or("udaddy: the CM ID has no device")?;
    let pd = ctx.alloc_pd().map_err(|e| format!("udaddy: unable to allocate PD: {e}"))?;
    let cqe = if count > 0 { count * 2 } else { 2 };
    let cq = ctx.create_cq(cqe, None).map_err(|e| format!("udaddy: unable to create CQ: {e}"))?;
    let mut attr = QpInitAttr::new(QpType::Ud, &cq);
    let wrs = count.max(1) as u32;
    attr.cap = QpCap { max_send_wr: wrs, max_recv_wr: wrs, max_send_sge: 1, max_recv_sge: 1, ..attr.cap };
    let qp = id.create_qp(&pd, &attr).map_err(|e| format!("udaddy: unable to create QP: {e}"))?;
    let mr = pd.reg_mr(size + GRH_LEN, Access::LOCAL_WRITE).map_err(|e| format!("failed to reg MR: {e}"))?;
    let node = Node { id: id.clone(), pd, cq, qp, mr, ah: None, dest: None };
    for _ in 0..count {
        let sge = node.mr.sge(0, (size + GRH_LEN) as u32).map_err(|e| e.to_string())?;
        node.qp
            .post_recv(&[RecvWr { wr_id: 1, sg_list: vec![sge] }])
            .map_err(|e| format!("failed to post receives: {e}"))?;
    }
    Ok(node)
}

fn post_sends(node: &Node, count: usize, size: usize, signaled: bool) -> Res<()> {
    let Some(dest) = node.dest else { return Ok(()) };
    for _ in 0..count {
        let wr = SendWr {
            wr_id: 2,
            op: SendOp::SendWithImm { imm: node.qp.qp_num() },
            sg_list: vec![node.mr.sge(0, size as u32).map_err(|e| e.to_string())?],
            signaled,
            solicited: false,
            inline_data: None,
            ud: Some(dest),
            xrc_srqn: 0,
        };
        node.qp.post_send(&[wr]).map_err(|e| format!("failed to post sends: {e}"))?;
    }
    Ok(())
}

/// The sender's address from the GRH area of a receive (IPv4: its header
/// in the last 20 bytes; IPv6: the source GID at bytes 8..24).
fn grh_source(grh: &[u8; GRH_LEN]) -> IpAddr {
    if grh[20] >> 4 == 4 {
        IpAddr::V4(Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]))
    } else {
        let mut g = [0u8; 16];
        g.copy_from_slice(&grh[8..24]);
        Ipv6Addr::from(g).to_canonical()
    }
}

/// `ibv_create_ah_from_wc` and the QPN from the immediate: where a reply goes.
fn create_reply_ah(node: &mut Node, wc: &WorkCompletion) -> Res<()> {
    let mut grh = [0u8; GRH_LEN];
    node.mr.read(0, &mut grh).map_err(|e| e.to_string())?;
    let src = grh_source(&grh);
    let ah = node.pd.create_ah(&AhAttr::new(Gid::from_ip(src))).map_err(|e| e.to_string())?;
    let qpn = wc.imm_data.unwrap_or(wc.src_qp);
    node.dest = Some(ah.ud_dest(qpn, rdma_core_rs::cm::RDMA_UDP_QKEY));
    node.ah = Some(ah);
    Ok(())
}

/// udaddy's `poll_cqs`: `count` completions on every connected node.
fn poll_cqs(nodes: &mut [Node], count: usize) -> Res<()> {
    let mut wcs = Vec::new();
    for node in nodes.iter_mut() {
        let mut done = 0;
        while done < count {
            let n = node.cq.wait(&mut wcs, 8, Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!("udaddy: failed polling CQ: only {done} of {count} completions in 30 s"));
            }
            if let Some(wc) = wcs.first() {
                if wc.status != rdma_core_rs::WcStatus::Success {
                    return Err(format!("udaddy: completion failed with status {:?}", wc.status));
                }
                if node.ah.is_none() {
                    let wc = *wc;
                    create_reply_ah(node, &wc)?;
                }
            }
            done += n;
            wcs.clear();
        }
    }
    Ok(())
}

fn resolve(s: &str, port: u16) -> Res<SocketAddr> {
    softroce::cm_tools::resolve(s, port).map_err(|e| format!("udaddy: getaddrinfo error: {e}"))
}

fn event_error(ev: &CmEvent) -> String {
    format!("udaddy: event: {}, error: {}", ev.event, ev.status)
}

fn run_server(a: &Args, be: &CmBackend) -> Res<()> {
    println!("udaddy: starting server");
    let ch = EventChannel::new();
    let listen = ch.create_id(PortSpace::Udp);
    let bind =
        be.bind(resolve(a.bind_addr.as_deref().ok_or("udaddy: the server needs -b (a device address)")?, a.port)?)?;
    listen.bind_addr(bind).map_err(|e| format!("udaddy: bind address failed: {e}"))?;
    listen.listen(0).map_err(|e| format!("udaddy: failure trying to listen: {e}"))?;
    let mut nodes = Vec::new();
    while nodes.len() < a.connections {
        let ev = ch.get_cm_event(None).map_err(|e| e.to_string())?;
        match ev.event {
            EventType::ConnectRequest => {
                let node = init_node(&ev.id, a.count, a.size)?;
                let r = ev.id.accept(&ConnParam::default());
                if let Err(e) = r {
                    println!("udaddy: failure accepting: {e}");
                    println!("udaddy: failing connection request");
                    let _ = ev.id.reject(&[]);
                    continue;
                }
                nodes.push(node);
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => return Err(event_error(&ev)),
            _ => {}
        }
    }
    if a.count > 0 {
        println!("receiving data transfers");
        poll_cqs(&mut nodes, a.count)?;
        println!("sending replies");
        for n in &nodes {
            post_sends(n, a.count, a.size, true)?;
        }
        poll_cqs(&mut nodes, a.count)?;
        println!("data transfers complete");
    }
    drop(listen);
    Ok(())
}

fn run_client(a: &Args, be: &CmBackend, server: &str) -> Res<()> {
    println!("udaddy: starting client");
    let dst = be.peer(resolve(server, a.port)?)?;
    let src = be.source(a.bind_addr.as_deref().map(|s| resolve(s, 0).map(|x| x.ip())).transpose()?)?;
    let ch = EventChannel::new();
    println!("udaddy: connecting");
    let ids: Vec<CmId> = (0..a.connections).map(|_| ch.create_id(PortSpace::Udp)).collect();
    for id in &ids {
        if let Some(tos) = a.tos {
            id.set_tos(tos);
        }
        id.resolve_addr(src, dst, Duration::from_millis(2000))
            .map_err(|e| format!("udaddy: failure getting addr: {e}"))?;
    }
    let mut nodes: Vec<Option<Node>> = (0..a.connections).map(|_| None).collect();
    let mut left = a.connections;
    while left > 0 {
        let ev = ch.get_cm_event(None).map_err(|e| e.to_string())?;
        let Some(i) = ids.iter().position(|id| *id == ev.id) else { continue };
        match ev.event {
            EventType::AddrResolved => ev
                .id
                .resolve_route(Duration::from_millis(2000))
                .map_err(|e| format!("udaddy: resolve route failed: {e}"))?,
            EventType::RouteResolved => {
                nodes[i] = Some(init_node(&ev.id, a.count, a.size)?);
                ev.id.connect(&ConnParam::default()).map_err(|e| format!("udaddy: failure connecting: {e}"))?;
            }
            EventType::Established => {
                let node = nodes[i].as_mut().ok_or("udaddy: resolved before its QP")?;
                let peer = ev.id.peer_addr().ok_or("udaddy: no peer address")?;
                let ah = node
                    .pd
                    .create_ah(&AhAttr::new(Gid::from_ip(peer.ip())))
                    .map_err(|e| format!("udaddy: failure creating address handle: {e}"))?;
                node.dest = Some(ah.ud_dest(ev.param.qp_num, ev.param.qkey));
                node.ah = Some(ah);
                left -= 1;
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => return Err(event_error(&ev)),
            _ => {}
        }
    }
    let mut nodes: Vec<Node> = nodes.into_iter().flatten().collect();
    if a.count > 0 {
        println!("initiating data transfers");
        for n in &nodes {
            post_sends(n, a.count, a.size, false)?;
        }
        println!("receiving data transfers");
        poll_cqs(&mut nodes, a.count)?;
        println!("data transfers complete");
    }
    for n in &nodes {
        let _ = n.id.disconnect();
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if a.port_space.is_some_and(|p| p != 0x111) || a.port_space_name.as_deref().is_some_and(|p| p != "udp") {
        eprintln!("udaddy: only the RDMA_PS_UDP port space (0x111, \"udp\") is supported by this stack");
        return ExitCode::from(1);
    }
    if a.format.as_deref().is_some_and(|f| f.starts_with("gid")) {
        eprintln!("udaddy: -f gid (AF_IB addresses) is not supported by this stack");
        return ExitCode::from(1);
    }
    if a.count > 0 && a.size > MAX_MESSAGE {
        println!("udaddy: message_size {} is larger than active mtu {MAX_MESSAGE}", a.size);
        return ExitCode::from(1);
    }
    let r = CmBackend::open(&a.link, "udaddy").and_then(|be| match &a.server_addr {
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
