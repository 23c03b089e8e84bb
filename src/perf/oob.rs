//! The out-of-band exchange of rdma-perf: what each side tells the other
//! over TCP (or over a channel in `--loopback` runs) before, between and
//! after the RDMA traffic. One JSON object per line.
//!
//! The peer is not trusted: a line is at most [`MAX_LINE`] bytes (what is
//! buffered while waiting for its newline is bounded by that), a line that
//! does not parse is a [`MsgError`], and what a parsed message asks for is
//! checked before use ([`SideInfo::check`], [`check_done`], the server's
//! `adopt` and the memory budget).

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

use super::PerfError;

/// The test the client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub test: String,
    pub size: usize,
    pub iters: u64,
    pub duration_ms: Option<u64>,
    pub qps: usize,
    pub mtu: u32,
    pub tx_depth: usize,
    pub atomic: String,
    pub verify: bool,
}

/// One side's QPs and memory, as the peer needs them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideInfo {
    pub qpns: Vec<u32>,
    pub psns: Vec<u32>,
    /// The GID, 32 hex digits.
    pub gid: String,
    /// The port's LID (native IB; 0 on RoCE).
    #[serde(default)]
    pub lid: u16,
    /// Per QP: where the peer aims (the first of `slots` targets).
    pub addrs: Vec<u64>,
    pub rkeys: Vec<u32>,
    /// Targets per QP, `slot_len` bytes apart; the peer's message `i` goes
    /// to target `i % slots`.
    pub slots: usize,
    pub slot_len: usize,
    /// RDMA READs and atomics this side takes in flight per QP.
    pub out_reads: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Msg {
    Hello(Hello),
    Info(SideInfo),
    /// The server is ready (receives posted): go.
    Ready,
    /// The client finished: iterations completed on each QP.
    Done {
        iters: Vec<u64>,
    },
    /// The server's verdict and counters.
    Result {
        verified: Option<bool>,
        detail: Option<String>,
        retransmits: u64,
    },
    /// The other side gives up, and why.
    Error(String),
}

/// The longest line accepted from the peer. The longest legitimate one is
/// an `Info` of 1024 QPs, about 60 KB; 1 MiB leaves room for whatever a
/// newer rdma-perf adds, and bounds what a peer that never sends a newline
/// can make this side buffer.
pub const MAX_LINE: usize = 1 << 20;

/// How long to wait for the peer between phases.
pub const OOB_TIMEOUT: Duration = Duration::from_secs(30);

/// A message from the peer that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MsgError {
    #[error("a line of more than {limit} bytes from the peer (no newline within the limit)")]
    TooLong { limit: usize },
    #[error("bad message from the peer: {0}")]
    Json(#[from] serde_json::Error),
}

impl From<MsgError> for io::Error {
    fn from(e: MsgError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

impl Msg {
    /// Parses one line (its newline included or not).
    pub fn parse_line(line: &[u8]) -> Result<Msg, MsgError> {
        if line.len() > MAX_LINE + 1 {
            return Err(MsgError::TooLong { limit: MAX_LINE });
        }
        Ok(serde_json::from_slice(line)?)
    }

    /// The line that carries this message, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        // Plain data (strings, numbers, vectors): serializing cannot fail.
        let mut line = serde_json::to_vec(self).expect("a message serializes");
        line.push(b'\n');
        line
    }
}

/// A peer's text (an error, a test name) fit to print: control characters
/// escaped, at most a few hundred characters.
pub fn peer_text(s: &str) -> String {
    const MAX: usize = 300;
    let mut out: String = s.chars().take(MAX).flat_map(char::escape_default).collect();
    if s.chars().nth(MAX).is_some() {
        out.push_str("...");
    }
    out
}

impl SideInfo {
    /// Checks a peer's `Info` against this side's `qps` QPs before any of
    /// it is used: one entry per QP in every list, and bookkeeping for its
    /// targets within `budget` bytes.
    pub fn check(&self, qps: usize, budget: u64) -> Result<(), PerfError> {
        let lens = [self.qpns.len(), self.psns.len(), self.addrs.len(), self.rkeys.len()];
        if lens.iter().any(|&n| n != qps) {
            return Err(PerfError::Peer(format!(
                "the peer's Info has {} QPNs, {} PSNs, {} addresses and {} rkeys; this side has {qps} QPs",
                lens[0], lens[1], lens[2], lens[3]
            )));
        }
        if self.slots == 0 {
            return Err(PerfError::Peer("the peer's Info has 0 targets per QP".into()));
        }
        super::budget::check_targets(qps, self.slots, budget)?;
        Ok(())
    }
}

/// Checks a client's `Done`: one count per QP.
pub fn check_done(iters: &[u64], qps: usize) -> Result<(), PerfError> {
    if iters.len() != qps {
        return Err(PerfError::Peer(format!("the client's Done has {} counts for {qps} QPs", iters.len())));
    }
    Ok(())
}

/// Splits what arrives into lines, buffering at most [`MAX_LINE`] bytes
/// towards the next newline.
#[derive(Debug, Default)]
pub struct LineBuf {
    pending: Vec<u8>,
}

impl LineBuf {
    /// The next complete line (newline included), if one is there, or the
    /// error of a line over the limit (the buffer is dropped with it).
    pub fn next_line(&mut self) -> Option<Result<Vec<u8>, MsgError>> {
        match self.pending.iter().position(|&b| b == b'\n') {
            Some(nl) if nl < MAX_LINE + 1 => Some(Ok(self.pending.drain(..=nl).collect())),
            None if self.pending.len() <= MAX_LINE => None,
            _ => {
                self.pending = Vec::new();
                Some(Err(MsgError::TooLong { limit: MAX_LINE }))
            }
        }
    }

    /// Adds bytes that arrived; call [`LineBuf::next_line`] before adding more.
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// Bytes buffered towards the next line.
    pub fn buffered(&self) -> usize {
        self.pending.len()
    }
}

/// A bidirectional message pipe.
pub trait Oob: Send {
    fn send(&mut self, m: &Msg) -> io::Result<()>;
    /// The next message if one is there.
    fn try_recv(&mut self) -> io::Result<Option<Msg>>;

    /// Waits up to `timeout` for the next message.
    fn recv(&mut self, timeout: Duration) -> io::Result<Msg> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(m) = self.try_recv()? {
                return Ok(m);
            }
            if Instant::now() >= end {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no message from the peer"));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// JSON lines over TCP.
pub struct TcpOob {
    stream: TcpStream,
    lines: LineBuf,
}

impl TcpOob {
    pub fn new(stream: TcpStream) -> io::Result<TcpOob> {
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(TcpOob { stream, lines: LineBuf::default() })
    }
}

impl Oob for TcpOob {
    fn send(&mut self, m: &Msg) -> io::Result<()> {
        let line = m.to_line();
        self.stream.set_nonblocking(false)?;
        let r = self.stream.write_all(&line);
        self.stream.set_nonblocking(true)?;
        r
    }

    fn try_recv(&mut self) -> io::Result<Option<Msg>> {
        loop {
            if let Some(line) = self.lines.next_line() {
                return Ok(Some(Msg::parse_line(&line?)?));
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the connection")),
                Ok(n) => self.lines.push(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Two channels, for both sides in one process.
pub struct ChannelOob {
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
}

/// A connected pair of channel pipes.
pub fn channel_pair() -> (ChannelOob, ChannelOob) {
    let (a_tx, b_rx) = std::sync::mpsc::channel();
    let (b_tx, a_rx) = std::sync::mpsc::channel();
    (ChannelOob { tx: a_tx, rx: a_rx }, ChannelOob { tx: b_tx, rx: b_rx })
}

impl Oob for ChannelOob {
    fn send(&mut self, m: &Msg) -> io::Result<()> {
        self.tx.send(m.clone()).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the other side has gone"))
    }

    fn try_recv(&mut self) -> io::Result<Option<Msg>> {
        match self.rx.try_recv() {
            Ok(m) => Ok(Some(m)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the other side has gone"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_and_a_line_over_the_limit_is_an_error_with_bounded_buffering() {
        let mut b = LineBuf::default();
        b.push(b"{\"Ready\":null}\n\"Rea");
        assert_eq!(b.next_line().unwrap().unwrap(), b"{\"Ready\":null}\n");
        assert!(b.next_line().is_none());
        b.push(b"dy\"\n");
        assert_eq!(Msg::parse_line(&b.next_line().unwrap().unwrap()).unwrap(), Msg::Ready);
        // a peer that never sends a newline: an error once past the limit,
        // and what was buffered is let go
        let chunk = [b' '; 4096];
        let mut pushed = 0;
        let err = loop {
            if let Some(r) = b.next_line() {
                break r.unwrap_err();
            }
            assert!(b.buffered() <= MAX_LINE, "{} bytes buffered", b.buffered());
            b.push(&chunk);
            pushed += chunk.len();
        };
        assert!(matches!(err, MsgError::TooLong { limit: MAX_LINE }), "{err}");
        assert_eq!((pushed, b.buffered()), (MAX_LINE + 4096, 0));
        // a newline just past the limit is too late too
        let mut long = vec![b' '; MAX_LINE + 1];
        long.push(b'\n');
        b.push(&long);
        assert!(matches!(b.next_line(), Some(Err(MsgError::TooLong { .. }))));
    }

    #[test]
    fn wrong_types_and_numbers_are_typed_errors() {
        for bad in [
            &b"{\"Done\":{\"iters\":[-1]}}"[..],
            b"{\"Done\":{\"iters\":[18446744073709551616]}}",
            b"{\"Done\":{\"iters\":\"x\"}}",
            b"{\"Hello\":{}}",
            b"[1,2",
            b"\xff\xfe",
            b"",
        ] {
            assert!(matches!(Msg::parse_line(bad), Err(MsgError::Json(_))), "{:?}", String::from_utf8_lossy(bad));
        }
        let m = Msg::Done { iters: vec![u64::MAX, 0] };
        assert_eq!(Msg::parse_line(&m.to_line()).unwrap(), m);
    }

    #[test]
    fn an_info_must_have_one_entry_per_qp_and_targets_within_the_budget() {
        let info = SideInfo {
            qpns: vec![1, 2],
            psns: vec![1, 2],
            gid: "00000000000000000000ffff7f000001".into(),
            lid: 0,
            addrs: vec![0, 0],
            rkeys: vec![1, 1],
            slots: 64,
            slot_len: 64,
            out_reads: 16,
        };
        assert!(info.check(2, 1 << 30).is_ok());
        assert!(info.check(1, 1 << 30).is_err());
        let e = SideInfo { slots: 1 << 40, ..info.clone() }.check(2, 1 << 30).unwrap_err();
        assert!(matches!(e, PerfError::OverBudget(_)), "{e}");
        assert!(SideInfo { slots: 0, ..info.clone() }.check(2, 1 << 30).is_err());
        assert!(SideInfo { addrs: vec![0], ..info }.check(2, 1 << 30).is_err());
        assert!(check_done(&[1, 2], 2).is_ok() && check_done(&[1], 2).is_err());
    }

    #[test]
    fn a_peers_text_is_escaped_and_cut() {
        assert_eq!(peer_text("ok"), "ok");
        assert_eq!(peer_text("a\u{1b}[2J\n"), "a\\u{1b}[2J\\n");
        let long = peer_text(&"x".repeat(10_000));
        assert_eq!(long.len(), 303);
    }
}
