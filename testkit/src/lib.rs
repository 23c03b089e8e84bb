//! What the workspace's test suites share.
//!
//! Tests that need a real peer (tshark, Debian's rdma-core and perftest
//! binaries, ibsim, opensm), root (namespaces, packet sockets, TUN) or a
//! kernel feature skip with a message where it is missing, so that
//! `cargo test` passes on a developer's machine. CI installs every peer and
//! runs as root; there a skip would hide a test that never ran, so CI sets
//! `SOFTROCE_REQUIRE_TOOLS=1` and every skip becomes a failure that says
//! what was missing.

pub mod netns;

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

/// The full path of `name` on PATH, or `None` after a [`skip`] that names
/// the Debian package to install: the test then returns.
pub fn need(name: &str, package: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(p) = std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file()) {
        return Some(p);
    }
    skip(format!("{name} is not installed (apt-get install {package})"));
    None
}

/// `file` in the test program's directory (`target/<profile>/deps`, where
/// `cargo test` leaves the cdylibs of the build), asserted to exist.
pub fn beside_test(file: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test program's path");
    let p = exe.parent().expect("a directory").join(file);
    assert!(p.is_file(), "{} is missing", p.display());
    p
}

/// Waits for a child up to `limit`, killing it after; returns its output
/// and whether it finished in time.
pub fn wait(mut child: std::process::Child, limit: std::time::Duration) -> (std::process::Output, bool) {
    let start = std::time::Instant::now();
    let mut in_time = true;
    while child.try_wait().expect("wait on a child").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            in_time = false;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (child.wait_with_output().expect("collect the output"), in_time)
}

/// A finished program's status, stdout and stderr, for a failure message.
pub fn show(o: &std::process::Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The lines `pipe` gives (a child's stderr, say), gathered by a thread
/// until it closes; `until` waits (up to `limit`) for `needle` to appear
/// `n` times in what came, then 300 ms more, in which one too many would
/// show: for a process that prints when its threads get to it.
pub struct Gathered(std::sync::Arc<std::sync::Mutex<String>>, std::thread::JoinHandle<()>);

impl Gathered {
    pub fn new(pipe: impl std::io::Read + Send + 'static) -> Gathered {
        use std::io::BufRead;
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let into = text.clone();
        let thread = std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(pipe);
            let mut line = Vec::new();
            while r.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                into.lock().unwrap().push_str(&String::from_utf8_lossy(&line));
                line.clear();
            }
        });
        Gathered(text, thread)
    }

    pub fn until(&self, needle: &str, n: usize, limit: std::time::Duration) {
        let start = std::time::Instant::now();
        while self.0.lock().unwrap().matches(needle).count() < n && start.elapsed() < limit {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // A moment more, in which one too many would show.
        std::thread::sleep(std::time::Duration::from_millis(300));
    }

    /// Everything, once the pipe closed.
    pub fn text(self) -> String {
        self.1.join().expect("the reader");
        std::sync::Arc::try_unwrap(self.0).expect("the reader is done").into_inner().unwrap()
    }
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
        // here, where the variable is unset: a missing program is a skip
        assert!(need("no-such-program-softroce", "nothing").is_none());
        std::env::set_var(REQUIRE_TOOLS, "0");
        assert!(!tools_required());
        std::env::set_var(REQUIRE_TOOLS, "1");
        assert!(tools_required());
        let failed = std::panic::catch_unwind(|| skip("tshark is not installed")).expect_err("a required skip fails");
        let msg = failed.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("tshark is not installed") && msg.contains(REQUIRE_TOOLS), "{msg}");
        std::env::remove_var(REQUIRE_TOOLS);
    }

    #[test]
    fn need_finds_a_program_on_path() {
        let sh = need("sh", "dash").expect("sh is on PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
    }

    #[test]
    fn wait_returns_the_output_or_kills_after_the_limit() {
        use std::process::{Command, Stdio};
        use std::time::Duration;
        let spawn = |c: &mut Command| c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("it starts");
        let (o, in_time) =
            wait(spawn(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"])), Duration::from_secs(10));
        assert!(in_time);
        assert_eq!(o.status.code(), Some(3));
        let shown = show(&o);
        assert!(shown.contains("--- stdout\nout\n--- stderr\nerr\n"), "{shown}");
        let (o, in_time) = wait(spawn(Command::new("sleep").arg("30")), Duration::from_millis(200));
        assert!(!in_time && !o.status.success());
    }
}
