//! The out-of-band exchange of rdma-perf: what each side tells the other
//! over TCP (or over a channel in `--loopback` runs) before, between and
//! after the RDMA traffic. One JSON object per line.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

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
    /// The RoCE v2 GID, 32 hex digits.
    pub gid: String,
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
    pending: Vec<u8>,
}

impl TcpOob {
    pub fn new(stream: TcpStream) -> io::Result<TcpOob> {
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(TcpOob { stream, pending: Vec::new() })
    }
}

impl Oob for TcpOob {
    fn send(&mut self, m: &Msg) -> io::Result<()> {
        let mut line = serde_json::to_vec(m).map_err(io::Error::other)?;
        line.push(b'\n');
        self.stream.set_nonblocking(false)?;
        let r = self.stream.write_all(&line);
        self.stream.set_nonblocking(true)?;
        r
    }

    fn try_recv(&mut self) -> io::Result<Option<Msg>> {
        loop {
            if let Some(nl) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=nl).collect();
                return serde_json::from_slice(&line).map(Some).map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("bad message from the peer: {e}"))
                });
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the connection")),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
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
