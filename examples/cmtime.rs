//! `cmtime`: how fast the RDMA CM sets up and tears down connections, in
//! the spirit of rdma-core's `cmtime`: each step (create ID, resolve
//! address, resolve route, create QP, connect, disconnect, destroy) is
//! started for every connection at once and timed until the last one is
//! done, with the slowest and fastest connection; then the same number of
//! TCP connect/accept/close over loopback in the same run, for the ratio.
//!
//! One process, both sides (a server thread on `-b`, the client on `-B`):
//!
//! ```sh
//! cargo run --release --example cmtime -- -c 100        # 100 in parallel
//! cargo run --release --example cmtime -- -c 1 -r 200   # one at a time, 200 rounds
//! ```
//!
//! `--json` prints one object (the keys of the table) for scripts.

use clap::Parser;
use rdma_core_rs::cm::{CmEvent, CmId, ConnParam, EventChannel, EventType, PortSpace};
use rdma_core_rs::{CompletionQueue, ProtectionDomain, QpInitAttr, QpType, QueuePair};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(name = "cmtime", about = "RDMA CM connection setup and teardown times, against TCP over loopback")]
struct Args {
    /// Connections set up in parallel in each round.
    #[arg(short = 'c', default_value_t = 100)]
    connections: usize,
    /// Rounds (each sets up and tears down `-c` connections).
    #[arg(short = 'r', default_value_t = 1)]
    rounds: usize,
    /// The server's address (a device of this stack).
    #[arg(short = 'b', default_value = "127.0.0.1")]
    server: IpAddr,
    /// The client's address.
    #[arg(short = 'B', default_value = "127.0.0.2")]
    client: IpAddr,
    /// Port (the CM's and TCP's).
    #[arg(short = 'p', default_value_t = 7472)]
    port: u16,
    /// How long any one step may take before the run fails.
    #[arg(long, default_value_t = 30)]
    timeout_s: u64,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

type Res<T> = Result<T, String>;

/// The client's steps, in order.
const STEPS: [&str; 7] =
    ["create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"];

/// One step's times over every connection of every round.
#[derive(Default, Clone)]
struct StepTimes {
    /// From the step's start to its last connection, summed over rounds.
    total: Duration,
    /// Each connection's time from the step's start to its own end.
    per_conn: Vec<Duration>,
}

impl StepTimes {
    fn add_round(&mut self, start: Instant, ends: &[Instant]) {
        let last = ends.iter().max().copied().unwrap_or(start);
        self.total += last - start;
        self.per_conn.extend(ends.iter().map(|e| *e - start));
    }
}

/// A QP's resources on one device, shared by every connection there.
struct Verbs {
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

impl Verbs {
    fn of(id: &CmId) -> Res<Verbs> {
        let ctx = id.context().ok_or("cmtime: the CM ID has no device")?;
        let pd = ctx.alloc_pd().map_err(|e| format!("cmtime: alloc_pd: {e}"))?;
        let cq = ctx.create_cq(4096, None).map_err(|e| format!("cmtime: create_cq: {e}"))?;
        Ok(Verbs { pd, cq })
    }

    fn create_qp(&self, id: &CmId) -> Res<Arc<QueuePair>> {
        let mut attr = QpInitAttr::new(QpType::Rc, &self.cq);
        attr.cap.max_send_wr = 1;
        attr.cap.max_recv_wr = 1;
        id.create_qp(&self.pd, &attr).map_err(|e| format!("cmtime: create_qp: {e}"))
    }
}

fn event_error(ev: &CmEvent) -> String {
    format!("cmtime: unexpected event {} (status {})", ev.event.as_str(), ev.status)
}

/// Waits until every ID in `ids` has had an event of `kind`; returns when
/// each did. Any error event fails the run.
fn wait_all(ch: &EventChannel, ids: &[CmId], kind: EventType, limit: Duration) -> Res<Vec<Instant>> {
    let mut ends: Vec<Option<Instant>> = vec![None; ids.len()];
    let mut left = ids.len();
    let deadline = Instant::now() + limit;
    while left > 0 {
        let wait = deadline.checked_duration_since(Instant::now()).ok_or_else(|| {
            format!("cmtime: {left} of {} connections had no {} within {limit:?}", ids.len(), kind.as_str())
        })?;
        let ev = ch.get_cm_event(Some(wait)).map_err(|e| format!("cmtime: waiting for {}: {e}", kind.as_str()))?;
        let Some(i) = ids.iter().position(|id| *id == ev.id) else { continue };
        if ev.event == kind {
            if ends[i].replace(Instant::now()).is_none() {
                left -= 1;
            }
        } else if ev.event != EventType::TimewaitExit {
            return Err(event_error(&ev));
        }
    }
    Ok(ends.into_iter().flatten().collect())
}

/// The server: accepts every request with a QP, and on a disconnect from
/// the client disconnects and destroys its side. Runs until `stop`.
fn serve(listen_addr: SocketAddr, ready: std::sync::mpsc::Sender<Res<()>>, stop: Arc<std::sync::atomic::AtomicBool>) {
    let ch = EventChannel::new();
    let listen = ch.create_id(PortSpace::Tcp);
    let started = listen
        .bind_addr(listen_addr)
        .and_then(|()| listen.listen(1024))
        .map_err(|e| format!("cmtime: the server cannot listen on {listen_addr}: {e}"));
    let failed = started.is_err();
    let _ = ready.send(started);
    if failed {
        return;
    }
    let mut verbs: Option<Verbs> = None;
    let mut conns: Vec<(CmId, Arc<QueuePair>)> = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let Ok(ev) = ch.get_cm_event(Some(Duration::from_millis(50))) else { continue };
        match ev.event {
            EventType::ConnectRequest => {
                if verbs.is_none() {
                    match Verbs::of(&ev.id) {
                        Ok(v) => verbs = Some(v),
                        Err(e) => {
                            eprintln!("{e}");
                            let _ = ev.id.reject(&[]);
                            continue;
                        }
                    }
                }
                let qp = match verbs.as_ref().map(|v| v.create_qp(&ev.id)) {
                    Some(Ok(qp)) => qp,
                    Some(Err(e)) => {
                        eprintln!("{e}");
                        let _ = ev.id.reject(&[]);
                        continue;
                    }
                    None => continue,
                };
                let p = ConnParam {
                    responder_resources: ev.param.responder_resources,
                    initiator_depth: ev.param.initiator_depth,
                    ..ConnParam::default()
                };
                if let Err(e) = ev.id.accept(&p) {
                    eprintln!("cmtime: accept: {e}");
                    continue;
                }
                conns.push((ev.id, qp));
            }
            EventType::Disconnected => {
                let _ = ev.id.disconnect();
                conns.retain(|(id, _)| *id != ev.id);
            }
            _ => {}
        }
    }
}

/// One round on the client: every step for `n` connections at once.
fn round(a: &Args, steps: &mut [StepTimes], verbs: &mut Option<Verbs>) -> Res<()> {
    let limit = Duration::from_secs(a.timeout_s);
    let dst = SocketAddr::new(a.server, a.port);
    let ch = EventChannel::new();

    let t = Instant::now();
    let ids: Vec<CmId> = (0..a.connections).map(|_| ch.create_id(PortSpace::Tcp)).collect();
    let made = vec![Instant::now(); ids.len()];
    steps[0].add_round(t, &made);

    let t = Instant::now();
    for id in &ids {
        id.resolve_addr(Some(a.client), dst, Duration::from_secs(2))
            .map_err(|e| format!("cmtime: resolve_addr: {e}"))?;
    }
    steps[1].add_round(t, &wait_all(&ch, &ids, EventType::AddrResolved, limit)?);

    let t = Instant::now();
    for id in &ids {
        id.resolve_route(Duration::from_secs(2)).map_err(|e| format!("cmtime: resolve_route: {e}"))?;
    }
    steps[2].add_round(t, &wait_all(&ch, &ids, EventType::RouteResolved, limit)?);

    let t = Instant::now();
    if verbs.is_none() {
        *verbs = Some(Verbs::of(&ids[0])?);
    }
    let v = verbs.as_ref().expect("made above");
    let mut qps = Vec::with_capacity(ids.len());
    let mut ends = Vec::with_capacity(ids.len());
    for id in &ids {
        qps.push(v.create_qp(id)?);
        ends.push(Instant::now());
    }
    steps[3].add_round(t, &ends);

    let t = Instant::now();
    for id in &ids {
        id.connect(&ConnParam::default()).map_err(|e| format!("cmtime: connect: {e}"))?;
    }
    steps[4].add_round(t, &wait_all(&ch, &ids, EventType::Established, limit)?);

    let t = Instant::now();
    for id in &ids {
        id.disconnect().map_err(|e| format!("cmtime: disconnect: {e}"))?;
    }
    steps[5].add_round(t, &wait_all(&ch, &ids, EventType::Disconnected, limit)?);

    let t = Instant::now();
    let mut ends = Vec::with_capacity(ids.len());
    for (id, qp) in ids.into_iter().zip(qps) {
        drop(qp);
        drop(id); // the last handle: rdma_destroy_id
        ends.push(Instant::now());
    }
    steps[6].add_round(t, &ends);
    Ok(())
}

/// `n` TCP connections over loopback set up at once (connect, with a
/// thread accepting meanwhile, as a server would) and closed, `rounds`
/// times: the time per round, summed.
fn tcp_baseline(server: IpAddr, n: usize, rounds: usize) -> Res<Duration> {
    // A backlog for every connection of a round, as the CM side has (std's
    // 128 would drop SYNs, each then retried only after a second).
    let listener = (|| {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(SocketAddr::new(server, 0)),
            socket2::Type::STREAM,
            None,
        )?;
        s.bind(&SocketAddr::new(server, 0).into())?;
        s.listen(n.max(128) as i32)?;
        std::io::Result::Ok(TcpListener::from(s))
    })()
    .map_err(|e| format!("cmtime: TCP listen on {server}: {e}"))?;
    let listener = Arc::new(listener);
    let to = listener.local_addr().map_err(|e| e.to_string())?;
    let mut total = Duration::ZERO;
    for _ in 0..rounds {
        let t = Instant::now();
        let acceptor = {
            let l = listener.clone();
            std::thread::spawn(move || (0..n).map(|_| l.accept().map(|(s, _)| s)).collect::<std::io::Result<Vec<_>>>())
        };
        let clients = (0..n)
            .map(|_| TcpStream::connect(to))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| format!("cmtime: TCP connect: {e}"))?;
        let accepted = acceptor
            .join()
            .map_err(|_| "cmtime: the TCP acceptor panicked".to_string())?
            .map_err(|e| format!("cmtime: TCP accept: {e}"))?;
        drop(clients);
        drop(accepted);
        total += t.elapsed();
    }
    Ok(total)
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn run(a: &Args) -> Res<()> {
    if a.connections == 0 || a.rounds == 0 {
        return Err("cmtime: -c and -r must be at least 1".into());
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let listen = SocketAddr::new(a.server, a.port);
    let server = {
        let stop = stop.clone();
        std::thread::Builder::new().name("cmtime-server".into()).spawn(move || serve(listen, tx, stop))
    }
    .map_err(|e| e.to_string())?;
    rx.recv().map_err(|_| "cmtime: the server thread ended".to_string())??;

    let mut steps = vec![StepTimes::default(); STEPS.len()];
    let mut verbs = None;
    let start = Instant::now();
    let mut result = Ok(());
    for r in 0..a.rounds {
        if let Err(e) = round(a, &mut steps, &mut verbs) {
            result = Err(format!("{e} (round {} of {})", r + 1, a.rounds));
            break;
        }
        if !a.json && a.rounds > 1 && (r + 1) % 50 == 0 {
            eprintln!("cmtime: {} of {} rounds", r + 1, a.rounds);
        }
    }
    let cm_total = start.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = server.join();
    result?;
    let tcp_total = tcp_baseline(a.server, a.connections, a.rounds)?;

    let conns = (a.connections * a.rounds) as f64;
    let cm_rate = conns / cm_total.as_secs_f64();
    let tcp_rate = conns / tcp_total.as_secs_f64();
    let rows: Vec<(&str, f64, f64, f64, f64)> = STEPS
        .iter()
        .zip(&mut steps)
        .map(|(name, s)| {
            s.per_conn.sort();
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            (
                *name,
                s.total.as_secs_f64() * 1e3,
                us(s.total) / conns,
                us(percentile(&s.per_conn, 0.0)),
                us(percentile(&s.per_conn, 1.0)),
            )
        })
        .collect();
    if a.json {
        let steps: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(n, total_ms, per, min, max)| {
                (
                    n.replace(' ', "_"),
                    serde_json::json!({"total_ms": total_ms, "us_per_conn": per, "min_us": min, "max_us": max}),
                )
            })
            .collect();
        let j = serde_json::json!({
            "connections": a.connections,
            "rounds": a.rounds,
            "steps": steps,
            "cm_conns_per_s": cm_rate,
            "tcp_conns_per_s": tcp_rate,
            "ratio": cm_rate / tcp_rate,
        });
        println!("{j}");
    } else {
        println!(
            "cmtime: {} connection(s) at once, {} round(s), {} -> {}:{}",
            a.connections, a.rounds, a.client, a.server, a.port
        );
        println!("{:<14} {:>10} {:>10} {:>10} {:>10}", "step", "total ms", "us/conn", "min us", "max us");
        for (n, total_ms, per, min, max) in &rows {
            println!("{n:<14} {total_ms:>10.2} {per:>10.1} {min:>10.1} {max:>10.1}");
        }
        println!("RDMA CM: {cm_rate:.0} connections set up and torn down per second");
        println!("TCP over loopback, same run: {tcp_rate:.0} per second (connect, accept, close)");
        println!("ratio RDMA CM / TCP: {:.3}", cm_rate / tcp_rate);
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
