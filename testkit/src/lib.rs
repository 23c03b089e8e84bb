//! What the workspace's test suites share.
//!
//! Tests that need a real peer (tshark, Debian's rdma-core and perftest
//! binaries, ibsim, opensm), root (namespaces, packet sockets, TUN) or a
//! kernel feature skip with a message where it is missing, so that
//! `cargo test` passes on a developer's machine. CI installs every peer and
//! runs as root; there a skip would hide a test that never ran, so CI sets
//! `SOFTROCE_REQUIRE_TOOLS=1` and every skip becomes a failure that says
//! what was missing.

/// The variable that turns skips into failures.
pub const REQUIRE_TOOLS: &str = "SOFTROCE_REQUIRE_TOOLS";

/// Whether skips are failures here (`SOFTROCE_REQUIRE_TOOLS` set to
/// anything but empty or `0`).
pub fn tools_required() -> bool {
    std::env::var(REQUIRE_TOOLS).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Reports that the calling test cannot run here, and why: a message on
/// stderr, or a panic (failing the test) when [`tools_required`]. The
/// caller returns after it.
#[track_caller]
pub fn skip(why: impl std::fmt::Display) {
    if tools_required() {
        panic!("{why} ({REQUIRE_TOOLS} is set, so this test may not skip)");
    }
    eprintln!("SKIP: {why}");
}

/// `(name, version)` of the versioned dynamic symbols `readelf --dyn-syms`
/// lists for `file`: the ones it defines if `defined`, else the ones it
/// imports. `None` if readelf (binutils) cannot read it.
pub fn dyn_syms(file: &std::path::Path, defined: bool) -> Option<std::collections::BTreeSet<(String, String)>> {
    let out = std::process::Command::new("readelf").args(["--dyn-syms", "-W"]).arg(file).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut set = std::collections::BTreeSet::new();
    for l in text.lines() {
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.len() < 8 || (cols[6] == "UND") == defined {
            continue;
        }
        let sym = cols[7];
        if let Some((name, ver)) = sym.split_once("@@").or_else(|| sym.split_once('@')) {
            set.insert((name.to_string(), ver.split_whitespace().next().unwrap_or(ver).to_string()));
        }
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The one process-wide variable: both cases in one test, so that no
    // other test in this binary sees it set.
    #[test]
    fn a_skip_is_a_message_unless_tools_are_required() {
        std::env::remove_var(REQUIRE_TOOLS);
        assert!(!tools_required());
        skip("nothing is missing; this only prints");
        std::env::set_var(REQUIRE_TOOLS, "0");
        assert!(!tools_required());
        std::env::set_var(REQUIRE_TOOLS, "1");
        assert!(tools_required());
        let failed = std::panic::catch_unwind(|| skip("tshark is not installed")).expect_err("a required skip fails");
        let msg = failed.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("tshark is not installed") && msg.contains(REQUIRE_TOOLS), "{msg}");
        std::env::remove_var(REQUIRE_TOOLS);
    }
}
