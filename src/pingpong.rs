//! The libibverbs ping-pong examples (`ibv_rc_pingpong`, `ibv_uc_pingpong`,
//! `ibv_ud_pingpong`, `ibv_srq_pingpong`) over the verbs API: the same
//! flags, the same TCP exchange of `LID:QPN:PSN:GID` on port 18515, the
//! same output, so either side can be the real tool.

use crate::backend::BackendKind;
use clap::Parser;
use rdma_core_rs::*;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::result::Result;
use std::time::{Duration, Instant};

/// Which example.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Rc,
    Uc,
    Ud,
    Srq,
}

/// The flags of the libibverbs examples, plus `--bind`.
#[derive(Parser, Debug, Clone)]
#[command(disable_help_flag = false)]
pub struct Args {
    /// Server to connect to; none: wait for a client.
    pub servername: Option<String>,
    /// Listen on / connect to this TCP port.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// The device name (the soft device made on --bind).
    #[arg(short = 'd', long = "ib-dev", default_value = "rxe0")]
    pub ib_dev: String,
    /// The port of the device (a soft device has port 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Message size [default: 4096; ud_pingpong 2048].
    #[arg(short = 's', long = "size")]
    pub size: Option<usize>,
    /// Path MTU (RC, UC, SRQ; UD messages go up to the port MTU, 4096).
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: u32,
    /// Receives to post at a time [default: 500; srq_pingpong 1000].
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<usize>,
    /// Iterations.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u64,
    /// Service level (accepted; RoCE v2 carries none).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local GID index.
    #[arg(short = 'g', long = "gid-idx", default_value_t = 0)]
    pub gid_idx: i32,
    /// QPs (srq_pingpong).
    #[arg(short = 'q', long = "num-qp", default_value_t = 16)]
    pub num_qp: usize,
    /// Local address of the soft device.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Traffic class (IP TOS / IPv6 traffic class: DSCP << 2 | ECN) of the
    /// QPs' packets, as perftest's --tos; the examples of libibverbs have
    /// no such flag and send 0.
    #[arg(short = 'T', long = "tos", default_value_t = 0)]
    pub tos: u8,
    /// Run the server in a thread of this process too (on --loopback-peer),
    /// and be its client: with --backend roce1 or ib, over the in-process link.
    #[arg(long, conflicts_with = "servername")]
    pub loopback: bool,
    /// The server's address in --loopback runs.
    #[arg(long, default_value = "127.0.0.2")]
    pub loopback_peer: IpAddr,
    #[command(flatten)]
    pub link: crate::backend::LinkArgs,
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
pub(crate) const MSG_LEN: usize = 52; // "0000:000000:000000:" + 32 hex digits + NUL
const UD_QKEY: u32 = 0x1111_1111;
const GRH: usize = 40;
/// How long the TCP exchange may wait for the peer's next bytes.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// srq_pingpong's table size (`MAX_QP`), which its exchange always sends.
const SRQ_MAX_QP: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum PingPongError {
    #[error("{0}")]
    Verbs(#[from] rdma_core_rs::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
}

/// One side's entry of the exchange (the examples' `pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dest {
    pub lid: u16,
    pub info: PeerInfo,
}

/// `LID:QPN:PSN:GID` as the examples write it (QPN and PSN are 24 bits:
/// wider values are cut, so the message always fits).
pub(crate) fn wire_msg(lid: u16, qpn: u32, psn: u32, gid: Gid) -> [u8; MSG_LEN] {
    let s = format!("{:04x}:{:06x}:{:06x}:{}", lid, qpn & 0xff_ffff, psn & 0xff_ffff, gid.to_wire_hex());
    let mut m = [0u8; MSG_LEN];
    m[..s.len()].copy_from_slice(s.as_bytes());
    m
}

/// Parses the peer's `LID:QPN:PSN:GID`. A QPN or PSN wider than 24 bits,
/// a LID wider than 16 or a message longer than [`MSG_LEN`] is refused.
pub(crate) fn parse_msg(m: &[u8]) -> Result<Dest, PingPongError> {
    let s = std::str::from_utf8(&m[..m.len().min(MSG_LEN)]).unwrap_or("").trim_end_matches('\0');
    let bad = || PingPongError::Failed(format!("Couldn't parse the remote address {s:?}"));
    if m.len() > MSG_LEN {
        return Err(bad());
    }
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 4 {
        return Err(bad());
    }
    let field = |p: &str, max: u32| u32::from_str_radix(p, 16).ok().filter(|&v| v <= max).ok_or_else(bad);
    let lid = field(parts[0], 0xffff)? as u16;
    let qpn = field(parts[1], 0xff_ffff)?;
    let psn = field(parts[2], 0xff_ffff)?;
    let gid = Gid::from_wire_hex(parts[3]).ok_or_else(bad)?;
    Ok(Dest { lid, info: PeerInfo { qpn, psn, gid } })
}

/// How many `LID:QPN:PSN:GID` entries each side sends: srq_pingpong always
/// sends its full table of 256 (zeros past the QPs it uses), the others one.
fn exchange_entries(kind: Kind) -> usize {
    if kind == Kind::Srq {
        SRQ_MAX_QP
    } else {
        1
    }
}

/// This side's entries, padded with all-zero ones to `entries`.
fn exchange_messages(local: &[Dest], entries: usize) -> Vec<u8> {
    let zero = Dest { lid: 0, info: PeerInfo { qpn: 0, psn: 0, gid: Gid::default() } };
    (0..entries)
        .flat_map(|i| {
            let d = local.get(i).unwrap_or(&zero);
            wire_msg(d.lid, d.info.qpn, d.info.psn, d.info.gid)
        })
        .collect()
}

/// Reads the peer's `entries` entries and keeps the first `used`: fixed-size
/// messages into one fixed buffer, so nothing the peer sends sizes memory.
pub(crate) fn read_remote(stream: &mut impl Read, entries: usize, used: usize) -> Result<Vec<Dest>, PingPongError> {
    let mut buf = [0u8; MSG_LEN];
    let mut remote = Vec::with_capacity(used.min(entries));
    for i in 0..entries {
        stream
            .read_exact(&mut buf)
            .map_err(|e| PingPongError::Failed(format!("Couldn't read remote address [{i}] of {entries}: {e}")))?;
        if i < used {
            remote.push(parse_msg(&buf)?);
        }
    }
    Ok(remote)
}

fn print_dest(which: &str, d: &Dest) {
    let p = &d.info;
    println!("  {which} address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}", d.lid, p.qpn, p.psn, p.gid);
}

fn psn() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u32);
    (t.wrapping_mul(2_654_435_761)) & 0xff_ffff
}

/// Runs one of the examples with its flags.
pub fn run(kind: Kind, args: &Args) -> Result<(), PingPongError> {
    let size = args.size.unwrap_or(if kind == Kind::Ud { 2048 } else { 4096 });
    let rx_depth = args.rx_depth.unwrap_or(if kind == Kind::Srq { 1000 } else { 500 });
    let num_qp = if kind == Kind::Srq { args.num_qp } else { 1 };
    let mtu = Mtu::from_bytes(args.mtu).ok_or_else(|| PingPongError::Usage(format!("Invalid MTU {}", args.mtu)))?;
    if args.gid_idx > 0 {
        return Err(PingPongError::Usage(format!("GID index {}: a soft device has GID 0 only", args.gid_idx)));
    }
    if args.ib_port != 1 {
        return Err(PingPongError::Usage(format!("IB port {}: a soft device has port 1", args.ib_port)));
    }
    // UD messages are bounded by the port's MTU, not a path MTU (ibv_ud_pingpong
    // has no -m): a soft device's port MTU is 4096, the largest IB MTU.
    let mtu = if kind == Kind::Ud { Mtu::Mtu4096 } else { mtu };
    if kind == Kind::Ud && size > mtu.bytes() as usize {
        return Err(PingPongError::Usage(format!("Requested size larger than port MTU ({})", mtu.bytes())));
    }
    if num_qp == 0 || num_qp > rx_depth || num_qp > SRQ_MAX_QP {
        return Err(PingPongError::Usage(format!("num_qp must be between 1 and rx_depth (and at most {SRQ_MAX_QP})")));
    }
    args.link.validate().map_err(PingPongError::Usage)?;
    if args.link.backend != BackendKind::Udp && args.link.netdev.is_none() && !in_process(args) {
        return Err(PingPongError::Usage(
            "--backend roce1/ib between processes needs --netdev IFACE (or --loopback: in-process)".into(),
        ));
    }
    // The server of a --loopback run is the second device of the in-process link.
    let primary = !(args.loopback && args.servername.is_none());
    let fabric = format!("pingpong-{}-{}", std::process::id(), args.port);
    let dev = args.link.device(&args.ib_dev, args.bind, &fabric, primary, DeviceConfig::default())?;
    let ctx = dev.open()?;
    let pd = ctx.alloc_pd()?;
    let channel = if args.events { Some(ctx.create_comp_channel()?) } else { None };
    let cq = ctx.create_cq(rx_depth + num_qp, channel.as_ref())?;
    let qp_type = match kind {
        Kind::Uc => QpType::Uc,
        Kind::Ud => QpType::Ud,
        _ => QpType::Rc,
    };
    let srq = if kind == Kind::Srq { Some(pd.create_srq(rx_depth as u32, 0)?) } else { None };
    let extra = if kind == Kind::Ud { GRH } else { 0 };
    // Page-aligned in the real examples; one buffer, sent from and received into.
    let mr = pd.reg_mr(size + extra, Access::LOCAL_WRITE)?;
    let mut qps = Vec::new();
    for _ in 0..num_qp {
        let mut attr = QpInitAttr::new(qp_type, &cq);
        attr.srq = srq.as_ref();
        attr.cap = QpCap {
            max_send_wr: 1,
            max_recv_wr: rx_depth as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        qps.push(pd.create_qp(&attr)?);
    }
    let opts = ConnectOptions {
        mtu,
        qkey: UD_QKEY,
        access: Access::NONE,
        traffic_class: args.tos,
        ..ConnectOptions::default()
    };
    for qp in &qps {
        qp.to_init(&opts)?;
    }
    let recv_wr = |i: u64| RecvWr { wr_id: RECV_WRID | i << 8, sg_list: vec![mr.sge_all()] };
    // Receives before the exchange, as the examples do.
    match &srq {
        Some(srq) => srq.post_recv(&(0..rx_depth).map(|_| recv_wr(0)).collect::<Vec<_>>())?,
        None => qps[0].post_recv(&(0..rx_depth).map(|_| recv_wr(0)).collect::<Vec<_>>())?,
    }
    // Armed before the exchange, as the examples arm it: once the peer
    // knows this QP it may send, and a completion that came before the
    // arming would raise no event (a device whose engines run on threads
    // of their own takes packets in while this thread is elsewhere).
    if channel.is_some() {
        cq.req_notify(false)?;
    }
    let gid = ctx.query_gid(0)?;
    let lid = ctx.lid();
    let local: Vec<Dest> =
        qps.iter().map(|q| Dest { lid, info: PeerInfo { qpn: q.qp_num(), psn: psn(), gid } }).collect();
    for l in &local {
        print_dest("local", l);
    }
    let is_client = args.servername.is_some();
    let mut stream = match &args.servername {
        Some(s) => {
            let addr = format!("{}:{}", s, args.port);
            TcpStream::connect(&addr).map_err(|e| PingPongError::Failed(format!("Couldn't connect to {addr}: {e}")))?
        }
        None => {
            // every address, as the libibverbs examples listen (AI_PASSIVE)
            let l = TcpListener::bind(("::", args.port))
                .or_else(|_| TcpListener::bind(("0.0.0.0", args.port)))
                .map_err(|e| PingPongError::Failed(format!("Couldn't listen to port {}: {e}", args.port)))?;
            l.accept()?.0
        }
    };
    // A peer that connects and then says nothing must not hold this side
    // forever (the exchange is a few kilobytes, sent at once).
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    let entries = exchange_entries(kind);
    let remote = if is_client {
        stream.write_all(&exchange_messages(&local, entries))?;
        read_remote(&mut stream, entries, num_qp)?
    } else {
        read_remote(&mut stream, entries, num_qp)?
    };
    for (i, qp) in qps.iter().enumerate() {
        let opts = ConnectOptions { dlid: remote[i].lid, sl: args.sl, ..opts };
        qp.to_rts(local[i].info.psn, &remote[i].info, &opts)?;
    }
    if is_client {
        stream.write_all(b"done\0")?;
    } else {
        stream.write_all(&exchange_messages(&local, entries))?;
        let mut done = [0u8; 5];
        stream.read_exact(&mut done)?;
    }
    for r in &remote {
        print_dest("remote", r);
    }
    let ah_attr = AhAttr { traffic_class: args.tos, ..AhAttr::new(remote[0].info.gid) };
    let ah = match (kind, ctx.link_kind()) {
        (Kind::Ud, LinkKind::Ib) => Some(pd.create_ah_av(AddressVector::lid(remote[0].lid, args.sl))?),
        (Kind::Ud, _) => Some(pd.create_ah(&ah_attr)?),
        _ => None,
    };
    let send = |i: usize| -> Result<(), PingPongError> {
        let len = size as u32;
        let mut wr = SendWr::new(SEND_WRID | (i as u64) << 8, SendOp::Send, vec![mr.sge(extra, len)?]);
        if let Some(ah) = &ah {
            wr.ud = Some(ah.ud_dest(remote[i].info.qpn, UD_QKEY));
        }
        qps[i].post_send(&[wr])?;
        Ok(())
    };
    let mut pending = vec![RECV_WRID; num_qp];
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut posted_recvs = vec![rx_depth; num_qp];
    let start = Instant::now();
    if is_client {
        for (i, p) in pending.iter_mut().enumerate() {
            if scnt < args.iters {
                send(i)?;
                scnt += 1;
                *p |= SEND_WRID;
            }
        }
    }
    let mut wcs = Vec::with_capacity(2 * num_qp + 2);
    while rcnt < args.iters || scnt < args.iters {
        wcs.clear();
        match &channel {
            Some(ch) => {
                if ch.get_cq_event(Some(Duration::from_secs(30)))?.is_none() {
                    return Err(PingPongError::Failed("Failed to get cq_event".into()));
                }
                ch.ack_cq_events(&cq, 1);
                cq.req_notify(false)?;
                cq.poll(&mut wcs, 2 * num_qp + 2)?;
            }
            None => {
                if cq.wait(&mut wcs, 2 * num_qp + 2, Some(Duration::from_secs(30)))? == 0 {
                    return Err(PingPongError::Failed("poll CQ failed: no completion in 30 s".into()));
                }
            }
        }
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return Err(PingPongError::Failed(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status.as_str(),
                    wc.status as u32,
                    wc.wr_id
                )));
            }
            let i = qps.iter().position(|q| q.qp_num() == wc.qp_num).unwrap_or(0);
            match wc.wr_id & 0xff {
                SEND_WRID => {}
                RECV_WRID => {
                    rcnt += 1;
                    posted_recvs[i] -= 1;
                    if posted_recvs[i] <= 1 || srq.is_some() {
                        let n = if srq.is_some() { 1 } else { rx_depth - posted_recvs[i] };
                        let wrs: Vec<RecvWr> = (0..n).map(|_| recv_wr(0)).collect();
                        match &srq {
                            Some(s) => s.post_recv(&wrs)?,
                            None => {
                                qps[i].post_recv(&wrs)?;
                                posted_recvs[i] += n;
                            }
                        }
                    }
                }
                other => return Err(PingPongError::Failed(format!("Completion for unknown wr_id {other}"))),
            }
            pending[i] &= !(wc.wr_id & 0xff);
            if pending[i] == 0 && scnt < args.iters {
                send(i)?;
                scnt += 1;
                pending[i] = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = size as u64 * args.iters * 2;
    let usec = secs * 1e6;
    println!("{} bytes in {:.2} seconds = {:.2} Mbit/sec", bytes, secs, bytes as f64 * 8.0 / usec);
    println!("{} iters in {:.2} seconds = {:.2} usec/iter", args.iters, secs, usec / args.iters as f64);
    Ok(())
}

/// Whether this run's devices are on the in-process link.
fn in_process(args: &Args) -> bool {
    args.loopback
}

/// `--loopback`: the server in a thread (on --loopback-peer), this thread
/// its client; the client retries while the server comes up.
pub fn run_loopback(kind: Kind, args: &Args) -> Result<(), PingPongError> {
    let server_args = Args { bind: args.loopback_peer, ib_dev: format!("{}-srv", args.ib_dev), ..args.clone() };
    let server = std::thread::Builder::new()
        .name("pingpong-server".into())
        .spawn(move || run(kind, &server_args).map_err(|e| e.to_string()))?;
    let client_args = Args { servername: Some(args.loopback_peer.to_string()), ..args.clone() };
    let mut r = run(kind, &client_args);
    for _ in 0..100 {
        match &r {
            Err(PingPongError::Failed(m)) if m.starts_with("Couldn't connect") => {
                std::thread::sleep(Duration::from_millis(20));
                r = run(kind, &client_args);
            }
            _ => break,
        }
    }
    let s = server.join().map_err(|_| PingPongError::Failed("the server thread panicked".into()))?;
    r?;
    s.map_err(|e| PingPongError::Failed(format!("server: {e}")))
}

/// The `main` of each example.
pub fn main(kind: Kind) -> std::process::ExitCode {
    let args = Args::parse();
    let r = if args.loopback { run_loopback(kind, &args) } else { run(kind, &args) };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exchange_message_matches_the_captured_one() {
        // From tests/fixtures/golden/pcaps/rc_pingpong.pcap.
        let captured = b"0000:000017:35de35:00000000000000000000ffff0a4d000c\0";
        let d = parse_msg(captured).unwrap();
        let p = d.info;
        assert_eq!((d.lid, p.qpn, p.psn), (0, 0x17, 0x35de35));
        assert_eq!(p.gid.to_ip(), "10.77.0.12".parse::<IpAddr>().unwrap());
        assert_eq!(&wire_msg(d.lid, p.qpn, p.psn, p.gid), captured);
        let ib = wire_msg(0x2a, p.qpn, p.psn, p.gid);
        assert_eq!(&ib[..5], b"002a:", "the LID field carries an IB port's LID");
        assert_eq!(parse_msg(&ib).unwrap().lid, 0x2a);
    }

    #[test]
    fn a_peers_message_is_checked_field_by_field_and_read_in_fixed_sizes() {
        let gid = "00000000000000000000ffff0a4d000c";
        assert!(parse_msg(format!("0000:ffffff:ffffff:{gid}\0").as_bytes()).is_ok());
        for bad in [
            format!("0000:1000000:000001:{gid}"), // QPN over 24 bits: would not re-encode in 52 bytes
            format!("0000:000001:1000000:{gid}"),
            format!("10000:000001:000001:{gid}"),
            format!("0000:000001:000001:{gid}:"),
            format!("0000:000001:000001:{}", &gid[..30]),
        ] {
            assert!(parse_msg(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(parse_msg(&[b'0'; MSG_LEN + 1]).is_err());
        // a short or absent table is an error, not a wait for more memory
        let one = wire_msg(0, 0x17, 0x35de35, Gid::from_wire_hex(gid).unwrap());
        assert_eq!(read_remote(&mut &one[..], 1, 1).unwrap().len(), 1);
        assert!(read_remote(&mut &one[..], 2, 1).is_err());
        assert!(read_remote(&mut &one[..10], 1, 1).is_err());
    }

    #[test]
    fn srq_pingpong_sends_its_whole_table_like_rdma_core() {
        // rdma-core's srq_pingpong writes and reads MAX_QP (256) entries
        // whatever -q says, zeros past the QPs in use: a peer that sends only
        // -q entries leaves it waiting forever (found in the Soft-RoCE lab).
        let gid = Gid::from_ip("10.88.0.1".parse().unwrap());
        let local = vec![
            Dest { lid: 0, info: PeerInfo { qpn: 0x11, psn: 0x123456, gid } },
            Dest { lid: 0, info: PeerInfo { qpn: 0x12, psn: 0x654321, gid } },
        ];
        assert_eq!(exchange_entries(Kind::Srq), 256);
        assert_eq!(exchange_entries(Kind::Rc), 1);
        let m = exchange_messages(&local, exchange_entries(Kind::Srq));
        assert_eq!(m.len(), 256 * 52);
        assert_eq!(&m[..52], &wire_msg(0, 0x11, 0x123456, gid));
        assert_eq!(&m[52..104], &wire_msg(0, 0x12, 0x654321, gid));
        assert_eq!(&m[104..156], b"0000:000000:000000:00000000000000000000000000000000\0");
        assert!(m[104..].chunks(52).all(|c| c == &m[104..156]));
        assert!(parse_msg(b"0000:zz:0:0").is_err());
    }
}
