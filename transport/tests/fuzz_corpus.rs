//! Runs the transport's fuzz target bodies over their checked-in seed
//! corpora (`fuzz/seeds/<target>/`), so that `cargo test` builds the
//! bodies and replays every seed's oracles without a fuzzer.

use rdma_transport::fuzzing;
use rdma_transport::Drop;

/// Seeds that reproduce a known, not yet fixed finding (see docs/fuzzing.md).
fn known(name: &str) -> bool {
    name.starts_with("known-")
}

#[test]
fn responder() {
    for (name, data) in rdma_wire::fuzzing::seeds("responder") {
        eprintln!("responder/{name}");
        fuzzing::responder(&data);
    }
}

/// Every engine seed but the known findings passes every oracle, and
/// together they reach what the target is for: crafted packets pass the
/// framing checks (no ICRC or address drops unless a seed asks for a wrong
/// source), the responder executes READs and writes memory, completions
/// arrive, and the regions that nothing may write stay as they were.
#[test]
fn engine() {
    let mut reads = 0;
    let mut completions = 0;
    let mut changed = [false; 5];
    let mut zeros_kept_and_ended = (false, false);
    for (name, data) in rdma_wire::fuzzing::seeds("engine").into_iter().filter(|(n, _)| !known(n)) {
        eprintln!("engine/{name}");
        let r = fuzzing::engine_report(&data);
        assert_eq!(r.stats.drops_for(Drop::IcrcMismatch), 0, "{name}: crafted packets carry a correct ICRC");
        assert_eq!(r.stats.drops_for(Drop::Malformed), 0, "{name}: crafted packets are well formed");
        if name != "bad-headers" {
            assert_eq!(r.stats.drops_for(Drop::AddressMismatch), 0, "{name}: crafted packets come from the peer");
        }
        if name != "timeouts" {
            assert!(r.delivered > 0, "{name}: delivers packets");
        }
        assert!(r.response_bytes + r.request_bytes > 0, "{name}: the endpoint sent something");
        reads += r.reads_executed;
        completions += r.completions;
        for (c, &x) in changed.iter_mut().zip(&r.regions_changed) {
            *c |= x;
        }
        if data[0] & 4 != 0 {
            // A seed with the writable region served as zeros.
            eprintln!(
                "  zeros served at the end: {}, region changed: {}, completions {}, NAKs sent {}",
                r.zeros_served[0], r.regions_changed[0], r.completions, r.stats.naks_sent
            );
            // Kept, with the zeros' WRITE and SENDs executed (no NAK, the
            // five receives completed), not merely never reached.
            zeros_kept_and_ended.0 |= r.zeros_served[0] && r.stats.naks_sent == 0 && r.completions >= 5;
            zeros_kept_and_ended.1 |= !r.zeros_served[0] && r.regions_changed[0];
        } else {
            assert!(!r.zeros_served.contains(&true), "{name}: no region starts as zeros without bit 2");
        }
    }
    assert!(reads > 0, "some seed has the responder execute a READ");
    assert!(completions > 0, "some seed completes work requests");
    // The region without remote access changes only through a receive a
    // seed posts into it; the read-only and other-PD regions never.
    assert_eq!(changed, [true, false, true, true, false], "which regions changed");
    // The zeroed region's seeds: one reads it by reference and writes
    // zeros into it (still served as zeros), one writes other bytes.
    assert_eq!(zeros_kept_and_ended, (true, true), "a zeroed region kept (zeros written) and ended (other bytes)");
}

/// The seeds of the engine target's first findings (issue 17 finding 1,
/// duplicate READ amplification), which failed before the responder kept
/// `max_dest_rd_atomic` READ resources and replayed only those.
#[test]
fn engine_known_findings() {
    let failed: Vec<String> = rdma_wire::fuzzing::seeds("engine")
        .into_iter()
        .filter(|(n, _)| known(n))
        .filter(|(_, data)| std::panic::catch_unwind(|| fuzzing::engine(data)).is_err())
        .map(|(n, _)| n)
        .collect();
    assert!(failed.is_empty(), "seeds still failing: {failed:?}");
}

/// Every CM seed passes the oracles, and together they reach what the
/// target is for: requests reach the consumer, and passive and active
/// connections are established by their real exchanges.
#[test]
fn cm_receive() {
    let mut established = Vec::new();
    for (name, data) in rdma_wire::fuzzing::seeds("cm_receive") {
        eprintln!("cm_receive/{name}");
        let r = fuzzing::cm_receive_report(&data);
        assert!(r.steps > 0, "{name}: runs");
        if r.established > 0 {
            established.push(name.clone());
        }
        if name == "req-flood" {
            assert_eq!(r.requests, 4 + 1, "{name}: the backlog's worth, then one after the reject");
        }
    }
    established.sort();
    assert!(
        established.iter().any(|n| n == "passive-handshake") && established.iter().any(|n| n == "active-handshake"),
        "both handshakes establish: {established:?}"
    );
}
