//! perftest's out-of-band exchange (TCP port 18515), so that `rdma-perf`
//! pairs with `ib_write_bw` and friends with no extra flag.
//!
//! Learned from captures of perftest 4.5 talking to itself (kernel
//! Soft-RoCE guests) and checked against its behaviour: fixed-size binary
//! and text messages, each exchanged as "the client writes, then reads;
//! the server reads, then writes":
//!
//! 1. versions: 16 bytes, NUL-padded text ("6.06");
//! 2. system data: page size ("cycle buffer") and cache line size, 4-byte
//!    big-endian each; both sides take the larger;
//! 3. MTU: the `ibv_mtu` enum in decimal, 2 bytes ("3\0" is 1024); both
//!    take the smaller;
//! 4. "hand shakes": one 108-byte text message per QP,
//!    `LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID bytes:SRQN:`, repeated as
//!    barriers at fixed points of each test ([`Script`]);
//! 5. after a bandwidth test, reports (size, iterations, peak, average,
//!    message rate; 8 bytes each, big-endian);
//! 6. closing: one more hand shake and "done\0".

use rdma_core_rs::{Gid, Mtu};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub use super::layout::{cycle_slots, stride, CACHE_LINE, CYCLE_BUFFER};
use super::oob::SideInfo;
use super::rdma_cm::Control;
use super::side::{Layout, Side};
use super::{AtomicType, Config, PerfError, TestKind};

pub mod session;

/// The protocol revision this speaks (perftest 4.5's).
pub const VERSION: &str = "6.06";
/// perftest refuses peers older than this, and so do we.
pub const MIN_PEER_VERSION: f64 = 5.70;
pub const VERSION_LEN: usize = 16;
/// A hand-shake message with a GID (`KEY_MSG_SIZE_GID`).
pub const KEY_MSG_LEN: usize = 108;
/// A hand shake over the RDMA CM (`-R`): `struct pingpong_dest` in binary.
pub const DEST_LEN: usize = 56;
/// One QP's entry of a hand shake (perftest's `pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    pub lid: u16,
    /// RDMA READs and atomics this side takes in flight (max_dest_rd_atomic).
    pub out_reads: u32,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    /// Where the peer aims its WRITEs, READs and atomics.
    pub vaddr: u64,
    pub gid: Gid,
    pub srqn: u32,
}

impl Dest {
    /// The 108-byte message (`KEY_PRINT_FMT_GID`, NUL-padded).
    pub fn encode(&self) -> [u8; KEY_MSG_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid.0 {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut m = [0u8; KEY_MSG_LEN];
        let n = s.len().min(KEY_MSG_LEN - 1);
        m[..n].copy_from_slice(&s.as_bytes()[..n]);
        m
    }

    /// An entry of zeros (perftest's hand shakes around the RDMA CM connection).
    pub fn zero() -> Dest {
        Dest { lid: 0, out_reads: 0, qpn: 0, psn: 0, rkey: 0, vaddr: 0, gid: Gid([0; 16]), srqn: 0 }
    }

    /// perftest's `struct pingpong_dest` as `-R` sends it: the C layout on
    /// x86-64 (five 32-bit fields, 4 bytes of padding, the 64-bit address,
    /// the GID, the SRQ number, the GID index), every number big-endian.
    pub fn to_bytes(&self) -> [u8; DEST_LEN] {
        let mut m = [0u8; DEST_LEN];
        let words = [u32::from(self.lid), self.out_reads, self.qpn, self.psn, self.rkey];
        for (i, w) in words.iter().enumerate() {
            m[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
        }
        m[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        m[32..48].copy_from_slice(&self.gid.0);
        m[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        m
    }

    /// Parses a binary hand shake ([`Dest::to_bytes`]); numbers wider than
    /// the fields they go to are refused, as in the text form.
    pub fn from_bytes(m: &[u8]) -> Result<Dest, String> {
        if m.len() < DEST_LEN {
            return Err(format!("a binary hand shake of {} bytes, not {DEST_LEN}", m.len()));
        }
        let word = |i: usize| u32::from_be_bytes(m[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        let (lid, qpn, psn) = (word(0), word(2), word(3));
        if lid > 0xffff || qpn > 0xff_ffff || psn > 0xff_ffff {
            return Err(format!("a binary hand shake with LID {lid:#x}, QPN {qpn:#x}, PSN {psn:#x}"));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&m[32..48]);
        Ok(Dest {
            lid: lid as u16,
            out_reads: word(1),
            qpn,
            psn,
            rkey: word(4),
            vaddr: u64::from_be_bytes(m[24..32].try_into().expect("8 bytes")),
            gid: Gid(gid),
            srqn: word(12),
        })
    }

    /// Parses a hand-shake message. Every field must fit what perftest
    /// prints into it (LID and outstanding reads 16 bits, QPN and PSN 24,
    /// GID bytes 8, keys 32): a value that does not is the peer's error,
    /// never truncated into another one.
    pub fn decode(m: &[u8]) -> Result<Dest, String> {
        if m.len() > KEY_MSG_LEN {
            return Err(format!("a hand-shake message of {} bytes, at most {KEY_MSG_LEN} expected", m.len()));
        }
        let text = std::str::from_utf8(m).map_err(|_| "a hand-shake message that is not text".to_string())?;
        let text = text.trim_end_matches('\0');
        let f: Vec<&str> = text.split(':').collect();
        // 6 fields, 16 GID bytes, the SRQ number, and the empty tail after the last ':'
        if f.len() < 23 {
            return Err(format!("a hand-shake message with {} fields, expected 23: {text:?}", f.len()));
        }
        let hex = |i: usize, max: u64| match u64::from_str_radix(f[i], 16) {
            Ok(v) if v <= max => Ok(v),
            _ => Err(format!("field {i} ({:?}) of {text:?} is not a hex number up to {max:#x}", f[i])),
        };
        let mut gid = [0u8; 16];
        for (k, b) in gid.iter_mut().enumerate() {
            *b = hex(6 + k, 0xff)? as u8;
        }
        Ok(Dest {
            lid: hex(0, 0xffff)? as u16,
            out_reads: hex(1, 0xffff)? as u32,
            qpn: hex(2, 0xff_ffff)? as u32,
            psn: hex(3, 0xff_ffff)? as u32,
            rkey: hex(4, u32::MAX.into())? as u32,
            vaddr: hex(5, u64::MAX)?,
            gid: Gid(gid),
            srqn: hex(22, u32::MAX.into())? as u32,
        })
    }
}

/// The peer's version message: its text, if new enough.
pub fn parse_version(m: &[u8]) -> Result<String, String> {
    let text: String = m.iter().take(VERSION_LEN).take_while(|&&b| b != 0).map(|&b| b as char).collect();
    // a "NaN" (which compares false with everything) is not new enough either
    let number: f64 = text.trim().parse().ok().filter(|v: &f64| !v.is_nan()).unwrap_or(0.0);
    if number < MIN_PEER_VERSION {
        return Err(format!(
            "the peer speaks perftest exchange version {text:?}; {MIN_PEER_VERSION:.2} or newer is needed"
        ));
    }
    Ok(text)
}

/// The agreed cycle buffer and cache line from the peer's system data
/// (4 bytes each, big-endian): the larger of theirs and ours, within
/// what a real machine has. The cycle buffer sizes this side's buffers
/// (see [`layout`]); the memory budget is checked on that layout.
pub fn parse_system_data(cycle: &[u8], cache: &[u8]) -> Result<(usize, usize), String> {
    let be = |b: &[u8], what: &str| -> Result<u32, String> {
        let b: [u8; 4] = b.try_into().map_err(|_| format!("the peer's {what} is {} bytes, not 4", b.len()))?;
        Ok(u32::from_be_bytes(b))
    };
    let cycle = be(cycle, "cycle buffer")?.max(CYCLE_BUFFER);
    let cache = be(cache, "cache line")?.max(CACHE_LINE);
    if !(64..=1 << 30).contains(&cycle) || cache > 4096 {
        return Err(format!("implausible system data from the peer: page {cycle}, cache line {cache}"));
    }
    Ok((cycle as usize, cache as usize))
}

/// The MTU both take from the peer's MTU message: the smaller of the two
/// (ours if theirs is not one).
pub fn agree_mtu(m: &[u8], mine: Mtu) -> Mtu {
    let theirs = m.first().and_then(|&b| (b as char).to_digit(10)).and_then(|d| mtu_from_enum(d as u8));
    match theirs {
        Some(t) if t.bytes() < mine.bytes() => t,
        _ => mine,
    }
}

/// `ibv_mtu` as perftest exchanges it.
pub fn mtu_enum(m: Mtu) -> u8 {
    match m.bytes() {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

pub fn mtu_from_enum(e: u8) -> Option<Mtu> {
    Mtu::from_bytes(match e {
        1 => 256,
        2 => 512,
        3 => 1024,
        4 => 2048,
        5 => 4096,
        _ => return None,
    })
}

/// What a bandwidth test reports to the peer at the end.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BwReport {
    pub size: u64,
    pub iters: u64,
    /// MB/s, as perftest prints them by default.
    pub bw_peak: f64,
    pub bw_avg: f64,
    /// Millions of messages per second.
    pub msg_rate: f64,
}

/// Where a test's hand shakes fall, as each perftest binary does them:
/// which QPs' entries go before the QPs are connected and after, and what
/// follows the traffic. Every entry but the first per-QP round is a
/// barrier that repeats the same data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub before: Vec<usize>,
    pub after: Vec<usize>,
    /// Bandwidth tests: a hand shake and the reports after the traffic.
    pub reports: bool,
    /// The closing hand shake and "done" (every test but write-lat).
    pub close: bool,
    /// The server closes right after the set-up and lets the client run
    /// (read-lat, atomic-lat: the server has nothing to do).
    pub server_closes_first: bool,
}

impl Script {
    /// The sequence of each perftest binary with `qps` QPs.
    pub fn of(test: TestKind, qps: usize) -> Script {
        let each: Vec<usize> = (0..qps).collect();
        let join = |parts: &[&[usize]]| parts.concat();
        let (before, after) = match test {
            TestKind::WriteBw | TestKind::ReadBw | TestKind::AtomicBw => (each.clone(), join(&[&each, &[0]])),
            // send tests: one after connecting, one per QP, one once receives are posted
            TestKind::SendBw | TestKind::SendLat => (each.clone(), join(&[&[0], &each, &[0]])),
            TestKind::WriteLat | TestKind::ReadLat | TestKind::AtomicLat => {
                (join(&[&[0], &each]), join(&[&each, &[0]]))
            }
        };
        Script {
            before,
            after,
            reports: matches!(test, TestKind::WriteBw | TestKind::ReadBw | TestKind::AtomicBw),
            close: test != TestKind::WriteLat,
            server_closes_first: matches!(test, TestKind::ReadLat | TestKind::AtomicLat),
        }
    }
}

/// What carries the exchange: perftest's TCP connection, or (`-R`) its
/// control connection over the RDMA CM.
enum Transport {
    Tcp(TcpStream),
    Cm(Box<Control>),
}

/// The connection to a perftest peer.
pub struct Link {
    transport: Transport,
    client: bool,
    /// Bytes read towards the message being waited for.
    partial: Vec<u8>,
    timeout: Duration,
}

fn proto_err(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m)
}

impl Link {
    pub fn new(stream: TcpStream, client: bool, timeout: Duration) -> io::Result<Link> {
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(Link { transport: Transport::Tcp(stream), client, partial: Vec::new(), timeout })
    }

    /// The exchange over a control connection of the RDMA CM (`-R`).
    pub fn over_cm(control: Control, timeout: Duration) -> Link {
        let client = control.is_client();
        Link { transport: Transport::Cm(Box::new(control)), client, partial: Vec::new(), timeout }
    }

    /// The control connection, with `-R`.
    pub fn control(&mut self) -> Option<&mut Control> {
        match &mut self.transport {
            Transport::Cm(c) => Some(c),
            Transport::Tcp(_) => None,
        }
    }

    fn write(&mut self, m: &[u8]) -> io::Result<()> {
        match &mut self.transport {
            Transport::Tcp(stream) => {
                stream.set_nonblocking(false)?;
                let r = stream.write_all(m);
                stream.set_nonblocking(true)?;
                r
            }
            Transport::Cm(c) => c.send(m),
        }
    }

    /// Reads towards `len` bytes without blocking; the message once complete.
    fn poll_read(&mut self, len: usize) -> io::Result<Option<Vec<u8>>> {
        let stream = match &mut self.transport {
            Transport::Tcp(s) => s,
            Transport::Cm(c) => return c.poll_recv(len),
        };
        while self.partial.len() < len {
            let mut chunk = vec![0u8; len - self.partial.len()];
            match stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the perftest peer closed the connection"))
                }
                Ok(n) => self.partial.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(std::mem::take(&mut self.partial)))
    }

    /// A hand shake as this link carries it: text over TCP, binary over the CM.
    fn encode(&self, d: &Dest) -> Vec<u8> {
        match self.transport {
            Transport::Tcp(_) => d.encode().to_vec(),
            Transport::Cm(_) => d.to_bytes().to_vec(),
        }
    }

    fn decode(&self, m: &[u8]) -> Result<Dest, String> {
        match self.transport {
            Transport::Tcp(_) => Dest::decode(m),
            Transport::Cm(_) => Dest::from_bytes(m),
        }
    }

    fn key_len(&self) -> usize {
        match self.transport {
            Transport::Tcp(_) => KEY_MSG_LEN,
            Transport::Cm(_) => DEST_LEN,
        }
    }

    /// Reads `len` bytes, calling `idle` while none are there (to keep the
    /// RDMA engine going), up to `wait`.
    fn read(&mut self, len: usize, wait: Duration, idle: &mut dyn FnMut() -> io::Result<()>) -> io::Result<Vec<u8>> {
        let end = Instant::now() + wait;
        loop {
            if let Some(m) = self.poll_read(len)? {
                return Ok(m);
            }
            if Instant::now() >= end {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "the perftest peer went quiet"));
            }
            idle()?;
        }
    }

    /// One exchange: the client writes then reads, the server reads then writes.
    pub fn exchange(
        &mut self,
        mine: &[u8],
        wait: Duration,
        idle: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<Vec<u8>> {
        if self.client {
            self.write(mine)?;
            self.read(mine.len(), wait, idle)
        } else {
            let theirs = self.read(mine.len(), wait, idle)?;
            self.write(mine)?;
            Ok(theirs)
        }
    }

    fn simple(&mut self, mine: &[u8]) -> io::Result<Vec<u8>> {
        let t = self.timeout;
        self.exchange(mine, t, &mut || {
            std::thread::sleep(Duration::from_micros(200));
            Ok(())
        })
    }

    /// Versions, system data and MTU; returns the agreed cycle buffer,
    /// cache line and MTU.
    pub fn set_up(&mut self, mtu: Mtu) -> io::Result<(usize, usize, Mtu)> {
        let mut v = [0u8; VERSION_LEN];
        v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let text = parse_version(&self.simple(&v)?).map_err(proto_err)?;
        tracing::debug!(version = %text, "perftest peer");
        let cycle = self.simple(&CYCLE_BUFFER.to_be_bytes())?;
        let cache = self.simple(&CACHE_LINE.to_be_bytes())?;
        let (cycle, cache) = parse_system_data(&cycle, &cache).map_err(proto_err)?;
        let m = self.simple(&[b'0' + mtu_enum(mtu), 0])?;
        Ok((cycle, cache, agree_mtu(&m, mtu)))
    }

    /// One hand shake per entry of `mine`; the peer's entries.
    pub fn hand_shakes(
        &mut self,
        mine: &[Dest],
        wait: Duration,
        idle: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<Vec<Dest>> {
        let mut theirs = Vec::with_capacity(mine.len());
        for d in mine {
            let m = self.exchange(&self.encode(d), wait, idle)?;
            theirs.push(self.decode(&m).map_err(proto_err)?);
        }
        Ok(theirs)
    }

    /// The server side of a hand shake, without blocking: true once the
    /// client's message was there and ours went back.
    pub fn poll_hand_shake(&mut self, mine: &Dest) -> io::Result<bool> {
        match self.poll_read(self.key_len())? {
            None => Ok(false),
            Some(m) => {
                self.decode(&m).map_err(proto_err)?;
                self.write(&self.encode(mine))?;
                Ok(true)
            }
        }
    }

    /// The reports after a bandwidth test; the peer's.
    pub fn reports(&mut self, mine: &BwReport) -> io::Result<BwReport> {
        let size = self.simple(&mine.size.to_be_bytes())?;
        let iters = self.simple(&mine.iters.to_be_bytes())?;
        let peak = self.simple(&mine.bw_peak.to_bits().to_be_bytes())?;
        let avg = self.simple(&mine.bw_avg.to_bits().to_be_bytes())?;
        let rate = self.simple(&mine.msg_rate.to_bits().to_be_bytes())?;
        let u = |b: Vec<u8>| u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
        Ok(BwReport {
            size: u(size),
            iters: u(iters),
            bw_peak: f64::from_bits(u(peak)),
            bw_avg: f64::from_bits(u(avg)),
            msg_rate: f64::from_bits(u(rate)),
        })
    }

    /// The closing "done" (after the closing hand shake; none over the CM).
    pub fn done(&mut self) -> io::Result<()> {
        if let Transport::Tcp(_) = self.transport {
            // The peer may already have closed; it never reads this.
            let _ = self.write(b"done\0");
        }
        Ok(())
    }
}

// ------------------------------------------------------------------
// rdma-perf's side of it: its QPs and memory as perftest describes them.

/// This side's hand-shake entries: one per QP.
pub fn dests(side: &Side) -> Result<Vec<Dest>, PerfError> {
    let info = side.info()?;
    let gid = side.ctx.query_gid(0)?;
    Ok((0..side.qps.len())
        .map(|q| Dest {
            lid: side.ctx.lid(),
            out_reads: info.out_reads,
            qpn: info.qpns[q],
            psn: info.psns[q],
            rkey: info.rkeys[q],
            vaddr: info.addrs[q],
            gid,
            srqn: 0,
        })
        .collect())
}

/// A perftest peer's entries as the traffic loops use them: its buffer
/// cycles through `cycle_slots` targets `stride` bytes apart.
pub fn peer_of(theirs: &[Dest], cfg: &Config, cycle: usize, cache: usize) -> SideInfo {
    let slots = if cfg.test.is_latency() { 1 } else { cycle_slots(cfg.size, cycle, cache) };
    SideInfo {
        qpns: theirs.iter().map(|d| d.qpn).collect(),
        psns: theirs.iter().map(|d| d.psn).collect(),
        gid: theirs.first().map(|d| d.gid.to_wire_hex()).unwrap_or_default(),
        lid: theirs.first().map_or(0, |d| d.lid),
        addrs: theirs.iter().map(|d| d.vaddr).collect(),
        rkeys: theirs.iter().map(|d| d.rkey).collect(),
        slots,
        slot_len: stride(cfg.size, cache),
        out_reads: theirs.first().map_or(1, |d| d.out_reads),
    }
}

/// The layout of a side facing a perftest peer: message `i` of the peer
/// lands `stride` bytes after message `i - 1`, within the cycle buffer.
pub fn layout(cfg: &Config, cycle: usize, cache: usize) -> Layout {
    let slot_len = stride(cfg.size.max(8), cache);
    let slots = super::layout::slots_for(cfg).max(cycle_slots(cfg.size, cycle, cache));
    Layout { slots, slot_len, buffers: slots }
}

/// What `--verify` can check against a perftest peer, whose buffers hold
/// random bytes: the values FETCH_AND_ADD atomics return (each one more
/// than the last on its target).
pub fn checkable(cfg: &Config) -> bool {
    cfg.test.is_atomic() && cfg.atomic == AtomicType::FetchAndAdd
}

/// What a side does while it waits for the peer's next message: keep its
/// engine answering (a passive server serves the traffic in these waits).
pub fn idle(side: &Side) -> impl FnMut() -> io::Result<()> + '_ {
    || side.ctx.progress_for(Duration::from_millis(1)).map(|_| ()).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    // From the capture of ib_atomic_bw between two kernel Soft-RoCE guests
    // (tests/fixtures/golden/pcaps/ib_atomic_bw.pcap, TCP 18515).
    const CAPTURED: &[u8; KEY_MSG_LEN] = b"0000:0080:00001f:0fecdf:000010f7:000055aa63fb3000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:\0";

    #[test]
    fn a_captured_hand_shake_parses_and_reencodes_byte_for_byte() {
        let d = Dest::decode(CAPTURED).unwrap();
        assert_eq!(d.lid, 0);
        assert_eq!(d.out_reads, 0x80);
        assert_eq!(d.qpn, 0x1f);
        assert_eq!(d.psn, 0x0fecdf);
        assert_eq!(d.rkey, 0x10f7);
        assert_eq!(d.vaddr, 0x55aa_63fb_3000);
        assert_eq!(d.gid.to_ip(), "10.77.0.12".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(d.srqn, 0);
        assert_eq!(&d.encode(), CAPTURED);
    }

    #[test]
    fn the_binary_hand_shake_of_rdma_cm_has_perftests_layout() {
        let d = Dest::decode(CAPTURED).unwrap();
        let b = d.to_bytes();
        assert_eq!(b.len(), 56, "sizeof(struct pingpong_dest) on x86-64");
        assert_eq!(&b[4..8], &0x80u32.to_be_bytes(), "out_reads, big-endian");
        assert_eq!(&b[8..12], &0x1fu32.to_be_bytes(), "qpn");
        assert_eq!(&b[12..16], &0x0fecdfu32.to_be_bytes(), "psn");
        assert_eq!(&b[16..20], &0x10f7u32.to_be_bytes(), "rkey");
        assert_eq!(&b[20..24], &[0; 4], "padding before the 64-bit vaddr");
        assert_eq!(&b[24..32], &0x55aa_63fb_3000u64.to_be_bytes(), "vaddr");
        assert_eq!(&b[32..48], &d.gid.0, "the GID as it is");
        assert_eq!(Dest::from_bytes(&b), Ok(d));
        // perftest's padding and gid_index may hold anything: ignored
        let mut junk = b;
        junk[20..24].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        junk[52..56].copy_from_slice(&7u32.to_be_bytes());
        assert_eq!(Dest::from_bytes(&junk), Ok(d));
        let mut wide = b;
        wide[8..12].copy_from_slice(&0x0100_0000u32.to_be_bytes());
        assert!(Dest::from_bytes(&wide).is_err(), "a QPN over 24 bits");
        assert!(Dest::from_bytes(&b[..40]).is_err(), "short");
        assert_eq!(Dest::from_bytes(&[0; 56]), Ok(Dest::zero()));
    }

    #[test]
    fn bad_hand_shakes_are_errors() {
        assert!(Dest::decode(b"0000:0080:00001f").is_err());
        assert!(Dest::decode(&[0xffu8; KEY_MSG_LEN]).is_err());
        let mut m = *CAPTURED;
        m[5] = b'x';
        assert!(Dest::decode(&m).is_err());
    }

    #[test]
    fn fields_wider_than_perftests_are_refused_not_truncated() {
        let fields = |f: &[(usize, &str)]| {
            let text = std::str::from_utf8(&CAPTURED[..KEY_MSG_LEN - 1]).unwrap();
            let mut parts: Vec<String> = text.split(':').map(String::from).collect();
            for (i, v) in f {
                parts[*i] = v.to_string();
            }
            parts.join(":").into_bytes()
        };
        // each field at its widest decodes and re-encodes to the same entry
        let widest =
            fields(&[(0, "ffff"), (1, "ffff"), (2, "ffffff"), (3, "ffffff"), (4, "ffffffff"), (22, "ffffffff")]);
        let d = Dest::decode(&widest).unwrap();
        assert_eq!(Dest::decode(&d.encode()), Ok(d));
        for (i, v) in [
            (0, "10000"),
            (1, "10000"),
            (2, "1000000"),
            (3, "1000000"),
            (4, "100000000"),
            (7, "100"),
            (22, "100000000"),
        ] {
            assert!(Dest::decode(&fields(&[(i, v)])).is_err(), "field {i} = {v}");
        }
        assert!(Dest::decode(&fields(&[(5, "10000000000000000")])).is_err(), "vaddr over 64 bits");
        assert!(Dest::decode(&[b'0'; KEY_MSG_LEN + 1]).is_err(), "longer than perftest's message");
    }

    #[test]
    fn version_and_system_data_from_the_peer_are_checked() {
        assert_eq!(parse_version(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0").unwrap(), "6.06");
        for bad in [&b"5.60"[..], b"NaN", b"nan", b"", b"\xff\xff", b"-inf"] {
            assert!(parse_version(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_system_data(&4096u32.to_be_bytes(), &64u32.to_be_bytes()), Ok((4096, 64)));
        assert_eq!(parse_system_data(&[0; 4], &[0; 4]), Ok((4096, 64)), "ours when theirs is smaller");
        assert!(parse_system_data(&(2u32 << 30).to_be_bytes(), &64u32.to_be_bytes()).is_err());
        assert!(parse_system_data(&4096u32.to_be_bytes(), &8192u32.to_be_bytes()).is_err());
        assert!(parse_system_data(&[1, 2], &[0; 4]).is_err());
        assert_eq!(agree_mtu(b"3\0", Mtu::Mtu4096), Mtu::Mtu1024);
        assert_eq!(agree_mtu(b"9\0", Mtu::Mtu2048), Mtu::Mtu2048);
        assert_eq!(agree_mtu(b"", Mtu::Mtu2048), Mtu::Mtu2048);
    }

    #[test]
    fn the_cycle_matches_perftests_increase_rem_addr() {
        assert_eq!(stride(8, 64), 64);
        assert_eq!(stride(65, 64), 128);
        assert_eq!(cycle_slots(8, 4096, 64), 64); // atomics: 64 targets
        assert_eq!(cycle_slots(2048, 4096, 64), 2);
        assert_eq!(cycle_slots(2049, 4096, 64), 1);
        assert_eq!(cycle_slots(65536, 4096, 64), 1);
    }

    #[test]
    fn mtu_enum_round_trips() {
        for b in [256, 512, 1024, 2048, 4096] {
            let m = Mtu::from_bytes(b).unwrap();
            assert_eq!(mtu_from_enum(mtu_enum(m)), Some(m));
        }
        assert_eq!(mtu_enum(Mtu::from_bytes(1024).unwrap()), 3); // "3\0" in the capture
    }

    #[test]
    fn the_whole_exchange_of_a_bandwidth_test_runs_against_itself() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let me = Dest::decode(CAPTURED).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut link = Link::new(s, false, Duration::from_secs(5)).unwrap();
            let set = link.set_up(Mtu::from_bytes(4096).unwrap()).unwrap();
            let theirs = link.hand_shakes(&[me], Duration::from_secs(5), &mut || Ok(())).unwrap();
            while !link.poll_hand_shake(&me).unwrap() {}
            let r = link.reports(&BwReport::default()).unwrap();
            (set, theirs, r)
        });
        let mut link = Link::new(TcpStream::connect(addr).unwrap(), true, Duration::from_secs(5)).unwrap();
        let set = link.set_up(Mtu::from_bytes(1024).unwrap()).unwrap();
        let other = Dest { qpn: 0x99, ..me };
        let theirs = link.hand_shakes(&[other], Duration::from_secs(5), &mut || Ok(())).unwrap();
        link.hand_shakes(&[other], Duration::from_secs(5), &mut || Ok(())).unwrap();
        let mine = BwReport { size: 8, iters: 200, bw_peak: 1.5, bw_avg: 1.25, msg_rate: 0.5 };
        link.reports(&mine).unwrap();
        let (sset, stheirs, sr) = server.join().unwrap();
        assert_eq!(set, (4096, 64, Mtu::from_bytes(1024).unwrap()));
        assert_eq!(sset, set, "both sides agree on the smaller MTU");
        assert_eq!(theirs, vec![me]);
        assert_eq!(stheirs, vec![other]);
        assert_eq!(sr, mine);
    }
}
