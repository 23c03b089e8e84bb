//! Fuzz target bodies of the tools (see `docs/fuzzing.md`): rdma-dump's
//! frame decoding, and the out-of-band parsers (issue 17): what a peer
//! on the TCP side channel sends before any RDMA happens. The thin
//! `fuzz_target!` wrappers in `fuzz/` call these; `tests/fuzz_corpus_oob.rs`
//! runs them over the checked-in seed corpora, so `cargo test` exercises
//! them too.
//!
//! Oracles, besides "no panic": a message that parses re-encodes to one
//! that parses to the same value; whatever the checks accept fits the
//! memory budget (computed here again, independently of the checks); the
//! bytes buffered while waiting for a line stay bounded.

use crate::capture::linktype::*;
use crate::decode::decode;
use crate::dump::PacketLine;
use crate::perf::budget::{self, OverBudget};
use crate::perf::oob::{self, LineBuf, Msg, MAX_LINE};
use crate::perf::perftest::{self, Dest, KEY_MSG_LEN, VERSION_LEN};
use crate::perf::side::{self, Layout};
use crate::perf::{server, AtomicType, Config, Exchange, PerfError, Role, TestKind};
use crate::pingpong;
use rdma_core_rs::{FaultConfig, Mtu};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// A budget small enough that fuzz input crosses it both ways.
const BUDGET: u64 = 64 << 20;

/// A server's configuration before it adopts a client's `Hello`.
fn base_config(test: TestKind, qps: usize) -> Config {
    Config {
        test,
        size: test.default_size(),
        iters: 100,
        duration: None,
        qps,
        mtu: Mtu::Mtu4096,
        gid_index: 0,
        tx_depth: 128,
        qp_timeout: 14,
        atomic: AtomicType::FetchAndAdd,
        verify: false,
        faults: FaultConfig::default(),
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        role: Role::Server,
        port: 18515,
        exchange: Exchange::RdmaPerf,
        progress: false,
        events: false,
        spin: Duration::ZERO,
        plain_datagrams: false,
        unconnected_sends: false,
        udp_as_link: false,
        delay: Default::default(),
        shared: false,
        threads: 0,
        ack_delay: Duration::ZERO,
        io_driver: rdma_core_rs::IoDriver::Sockets,
        mem_budget: BUDGET,
        tos: 0,
        pkey_index: 0,
        ecn_capable: true,
        cc: None,
        link: crate::backend::LinkArgs::default(),
    }
}

/// The memory a side of `cfg` cut as `l` takes, computed here without the
/// budget module's helpers: the region, and the queued requests.
fn independent_footprint(cfg: &Config, l: &Layout) -> (u128, u128) {
    let region = (cfg.qps as u128).checked_mul(l.buffers as u128).and_then(|x| x.checked_mul(l.slot_len as u128));
    let queues = (l.slots as u128 + cfg.tx_depth as u128) * cfg.qps as u128 * 2 * budget::WR_BYTES;
    (region.unwrap_or(u128::MAX), queues)
}

/// Asserts that a side the checks accepted fits the budget.
fn assert_within_budget(cfg: &Config, l: &Layout, accepted: Result<(), OverBudget>) {
    let (region, queues) = independent_footprint(cfg, l);
    let fits = region <= u128::from(cfg.mem_budget) && queues <= u128::from(cfg.mem_budget);
    match accepted {
        Ok(()) => assert!(fits, "accepted over budget: {cfg:?} {l:?}: region {region}, queues {queues}"),
        Err(e) => {
            assert!(!fits, "refused within budget: {e}");
            assert_eq!(e.limit, cfg.mem_budget);
        }
    }
}

/// rdma-perf's JSON exchange: the input is what the peer sends on the
/// TCP connection, fed in chunks whose sizes the first byte picks.
pub fn perf_oob(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else { return };
    let chunk = 1 + first as usize * 37;
    let mut lines = LineBuf::default();
    let mut input = rest.chunks(chunk);
    loop {
        match lines.next_line() {
            Some(Ok(line)) => {
                assert!(line.len() <= MAX_LINE + 1 && line.ends_with(b"\n"));
                check_line(&line);
            }
            Some(Err(oob::MsgError::TooLong { limit })) => assert_eq!(limit, MAX_LINE),
            Some(Err(e)) => panic!("framing gave {e}"),
            None => match input.next() {
                Some(c) => lines.push(c),
                None => break,
            },
        }
        // bounded: the limit plus what one read brings
        assert!(lines.buffered() <= MAX_LINE + chunk, "{} bytes buffered", lines.buffered());
    }
    // the whole input as one line too (most seeds are one message)
    check_line(rest);
}

/// One line through the parser and the checks the tools apply to it.
fn check_line(line: &[u8]) {
    let Ok(m) = Msg::parse_line(line) else { return };
    let again: Msg = serde_json::from_slice(&m.to_line()).expect("a re-encoded message parses");
    assert_eq!(again, m, "re-encoding changed the message");
    match &m {
        Msg::Hello(h) => {
            for test in [TestKind::WriteBw, TestKind::SendLat] {
                let cfg = base_config(test, 1);
                match server::adopt(&cfg, h) {
                    Ok(c) => {
                        assert!((1..=1024).contains(&c.qps) && (1..=1 << 30).contains(&c.size), "{c:?}");
                        assert!((1..=4096).contains(&c.tx_depth), "{c:?}");
                        let l = side::layout(&c);
                        assert_within_budget(&c, &l, Ok(()));
                        // the tools' scratch buffers are one message each
                        assert!(c.size as u128 <= budget::region_bytes(c.qps, &l));
                    }
                    Err(PerfError::OverBudget(e)) => {
                        assert!(e.asked > u128::from(BUDGET) && e.limit == BUDGET, "{e}");
                    }
                    Err(PerfError::Peer(_)) => {}
                    Err(e) => panic!("adopt failed with an unexpected error: {e}"),
                }
            }
        }
        Msg::Info(info) => {
            for qps in [1, 2, info.qpns.len()] {
                if info.check(qps, BUDGET).is_ok() {
                    assert_eq!(
                        (info.qpns.len(), info.psns.len(), info.addrs.len(), info.rkeys.len()),
                        (qps, qps, qps, qps)
                    );
                    assert!(info.slots >= 1);
                    assert!(qps as u128 * info.slots as u128 * budget::TARGET_BYTES <= u128::from(BUDGET));
                    for q in 0..qps {
                        for i in [0, 1, u64::MAX] {
                            side::remote_addr(info, q, i); // wraps, never panics
                        }
                    }
                }
            }
        }
        Msg::Done { iters } => {
            assert!(oob::check_done(iters, iters.len()).is_ok());
            assert!(oob::check_done(iters, iters.len() + 1).is_err());
        }
        Msg::Error(e) | Msg::Result { detail: Some(e), .. } => {
            // printable and short, whatever the peer wrote
            let t = oob::peer_text(e);
            assert!(t.len() <= 300 * 10 + 3 && !t.chars().any(char::is_control), "{t:?}");
        }
        Msg::Ready | Msg::Result { detail: None, .. } => {}
    }
}

/// perftest's exchange: the input is what a perftest peer sends, in its
/// order: version (16 bytes), cycle buffer and cache line (4 each), MTU
/// (2), then hand-shake messages (108 each).
pub fn perftest_exchange(data: &[u8]) {
    let (version, rest) = data.split_at(data.len().min(VERSION_LEN));
    if let Ok(text) = perftest::parse_version(version) {
        // one char per byte (bytes over 0x7f take two in UTF-8)
        assert!(text.chars().count() <= VERSION_LEN);
        assert!(text.trim().parse::<f64>().is_ok_and(|v| v >= perftest::MIN_PEER_VERSION));
    }
    let (cycle, rest) = rest.split_at(rest.len().min(4));
    let (cache, rest) = rest.split_at(rest.len().min(4));
    let (mtu, rest) = rest.split_at(rest.len().min(2));
    for mine in [Mtu::Mtu1024, Mtu::Mtu4096] {
        assert!(perftest::agree_mtu(mtu, mine).bytes() <= mine.bytes());
    }
    let system = perftest::parse_system_data(cycle, cache);
    let dests: Vec<Dest> = rest.chunks(KEY_MSG_LEN).filter_map(check_dest).collect();
    // a message longer than perftest's is refused whole
    if rest.len() > KEY_MSG_LEN {
        assert!(Dest::decode(rest).is_err());
    }
    let Ok((cycle, cache)) = system else { return };
    assert!((64..=1 << 30).contains(&cycle) && (64..=4096).contains(&cache), "{cycle} {cache}");
    // what this side would set up from the peer's system data: checked
    // against the budget before anything is made
    for (test, qps, size) in [(TestKind::AtomicBw, 1, 8), (TestKind::SendBw, 4, 64), (TestKind::WriteLat, 1, 2)] {
        let cfg = Config { size, exchange: Exchange::Perftest, ..base_config(test, qps) };
        let l = perftest::layout(&cfg, cycle, cache);
        assert_within_budget(&cfg, &l, budget::check_side(&cfg, &l));
        let peer = perftest::peer_of(&dests, &cfg, cycle, cache);
        if peer.check(dests.len(), BUDGET).is_ok() {
            assert!(dests.len() as u128 * peer.slots as u128 * budget::TARGET_BYTES <= u128::from(BUDGET));
        }
    }
}

/// One hand-shake message: if it decodes, it re-encodes into a 108-byte
/// NUL-terminated message that decodes to the same entry.
fn check_dest(m: &[u8]) -> Option<Dest> {
    let d = Dest::decode(m).ok()?;
    let e = d.encode();
    assert_eq!(e[KEY_MSG_LEN - 1], 0, "the encoding is NUL-terminated");
    assert_eq!(Dest::decode(&e), Ok(d), "{:?}", String::from_utf8_lossy(&e));
    assert!(d.qpn <= 0xff_ffff && d.psn <= 0xff_ffff && d.out_reads <= 0xffff);
    Some(d)
}

/// The ping-pong examples' `LID:QPN:PSN:GID` exchange: the input is what
/// the peer sends; it is read as one entry (rc, uc, ud) and as srq's table.
pub fn pingpong_exchange(data: &[u8]) {
    for m in data.chunks(pingpong::MSG_LEN) {
        if let Ok(d) = pingpong::parse_msg(m) {
            let p = d.info;
            let again =
                pingpong::parse_msg(&pingpong::wire_msg(d.lid, p.qpn, p.psn, p.gid)).expect("re-encoded parses");
            assert_eq!(again, d, "the LID, QPN, PSN and GID survive re-encoding");
            assert!(p.qpn <= 0xff_ffff && p.psn <= 0xff_ffff);
        }
    }
    assert!(pingpong::parse_msg(&[b'0'; 2 * pingpong::MSG_LEN]).is_err());
    for (entries, used) in [(1, 1), (256, 16), (256, 256)] {
        let mut input = data;
        if let Ok(remote) = pingpong::read_remote(&mut input, entries, used) {
            assert_eq!(remote.len(), used);
            assert!(data.len() >= entries * pingpong::MSG_LEN);
        }
    }
}

/// Whole captured frames as rdma-dump reads them: the first byte picks the
/// link type, the rest is the frame. Decoding and formatting never panic,
/// and a frame decoded as RDMA prints as a non-empty line.
pub fn capture_frame(data: &[u8]) {
    let Some((&pick, frame)) = data.split_first() else { return };
    let link = [ETHERNET, RAW, LINUX_SLL, IPV4, IPV6, INFINIBAND, LINUX_SLL2][usize::from(pick) % 7];
    let d = decode(link, frame);
    if let Some(Ok(line)) = PacketLine::from_decoded(1, &d) {
        assert!(!line.to_text().is_empty(), "an RDMA frame prints as a line");
        let _ = line.to_json().to_string();
    }
}
