//! The memory budget of a run (issue 17, finding 6).
//!
//! What a side allocates is sized by numbers that may come from its peer:
//! a `Hello`'s QPs x message size x depth, a perftest peer's cycle buffer,
//! an `Info`'s targets per QP. One `Hello` asking for 1024 QPs x 1 GiB
//! made a server try to allocate 1 TiB and abort. Every such number is now
//! checked against the budget before anything is allocated, in `u128` so
//! that no product overflows on the way.

pub use super::error::OverBudget;
use super::layout::Layout;
use super::Config;

/// 1 GiB of registered memory per side. A default run registers at most
/// 64 MiB of slots (`layout::SLOT_MEMORY`), and the largest message `--size`
/// allows (1 GiB) still fits one QP's region, so every single-QP run works
/// unchanged; what a hostile peer can make a side take is then about that
/// much (plus a message's scratch buffer), not whatever it names.
/// `--mem-budget` raises it for many QPs of huge messages.
pub const DEFAULT_MEM_BUDGET: u64 = 1 << 30;

/// What one queued work request or completion costs in the engine's queues
/// and in the lists this tool builds to post them (a generous estimate:
/// the request, its scatter/gather list, the completion).
pub const WR_BYTES: u128 = 256;

/// What one atomic target's bookkeeping costs on the client (its base value).
pub const TARGET_BYTES: u128 = 16;

/// `Ok` when `asked` bytes fit `limit`.
pub fn check(asked: u128, limit: u64, what: impl FnOnce() -> String) -> Result<(), OverBudget> {
    if asked <= u128::from(limit) {
        Ok(())
    } else {
        let e = OverBudget { what: what(), asked, limit };
        tracing::warn!(what = %e.what, asked, limit, "over the memory budget");
        Err(e)
    }
}

/// The bytes a side cut as `layout` registers: `qps` regions of `buffers`
/// buffers of `slot_len` bytes.
pub fn region_bytes(qps: usize, layout: &Layout) -> u128 {
    product(&[qps, layout.buffers, layout.slot_len], 1)
}

/// The product of `factors` and `unit`, saturating (three `usize`s can
/// overflow even a `u128`).
fn product(factors: &[usize], unit: u128) -> u128 {
    factors.iter().fold(unit, |p, &f| p.saturating_mul(f as u128))
}

/// The work requests and completions a side of `cfg` may have queued at
/// once: per QP, a receive per slot and `tx_depth` sends.
pub fn queue_bytes(cfg: &Config, layout: &Layout) -> u128 {
    product(&[cfg.qps, layout.slots.saturating_add(cfg.tx_depth)], 2 * WR_BYTES)
}

/// Checks the resources of a side of `cfg` cut as `layout` before any is
/// made: the registered region and the queued requests, each against the budget.
pub fn check_side(cfg: &Config, layout: &Layout) -> Result<(), OverBudget> {
    let limit = cfg.mem_budget;
    check(region_bytes(cfg.qps, layout), limit, || {
        format!(
            "{} with {} QP(s) x {} buffer(s) of {} bytes (--size {}, --tx-depth {})",
            cfg.test, cfg.qps, layout.buffers, layout.slot_len, cfg.size, cfg.tx_depth
        )
    })?;
    check(queue_bytes(cfg, layout), limit, || {
        format!("the work requests of {} QP(s) x ({} slots + --tx-depth {})", cfg.qps, layout.slots, cfg.tx_depth)
    })
}

/// Checks the bookkeeping the peer's targets take on this side (one
/// remembered value per target of every QP for the atomic tests).
pub fn check_targets(qps: usize, targets: usize, limit: u64) -> Result<(), OverBudget> {
    check(product(&[qps, targets], TARGET_BYTES), limit, || {
        format!("the peer's {targets} target(s) per QP x {qps} QP(s)")
    })
}

/// Parses a `--mem-budget` value: bytes, or a number with a K, M, G or T
/// suffix (powers of 1024; "GiB", "G" and "g" alike).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (bytes, or a number with K, M, G or T)"))?;
    let shift = match unit.trim().to_ascii_lowercase().trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("{s:?} overflows 64 bits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("3 T"), Ok(3 << 40));
        assert_eq!(parse_size("64KB"), Ok(64 << 10));
        assert!(parse_size("").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn the_hostile_hello_of_issue_17_is_over_the_default_budget() {
        let layout = Layout { slots: 1, slot_len: 1 << 30, buffers: 1 };
        assert_eq!(region_bytes(1024, &layout), 1 << 40);
        let e = check(region_bytes(1024, &layout), DEFAULT_MEM_BUDGET, || "1024 QPs".into()).unwrap_err();
        assert_eq!((e.asked, e.limit), (1 << 40, 1 << 30));
        assert!(e.to_string().contains("1099511627776") && e.to_string().contains("1073741824"), "{e}");
        // no overflow, whatever the numbers
        let huge = Layout { slots: usize::MAX, slot_len: usize::MAX, buffers: usize::MAX };
        assert!(check(region_bytes(usize::MAX, &huge), u64::MAX, String::new).is_err());
        assert!(check(region_bytes(1, &layout), DEFAULT_MEM_BUDGET, String::new).is_ok());
    }
}
