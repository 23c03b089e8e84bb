//! Transparent huge pages for the simulator's own memory.
//!
//! A large fabric keeps most of its state in small heap objects touched
//! at random: a 256-host all-to-all holds 270-420 MB (65,280 QPs of 864
//! bytes, their queues, packets, events). With 4 KiB pages nearly every
//! cold access also misses the TLB, whose second level reaches a few MiB.
//! Linux backs memory with 2 MiB pages where the process asks
//! (`MADV_HUGEPAGE`) and `/sys/kernel/mm/transparent_hugepage/enabled` is
//! `madvise` (a common default); glibc's malloc asks for its heap only
//! when its `glibc.malloc.hugetlb=1` tunable is set, which it reads at
//! start, and only in that mode.
//!
//! So the `rdma-fabric` tool and the `all_to_all` and `threads` benches
//! start again, once, with that tunable added to `GLIBC_TUNABLES`
//! ([`restart_with_huge_pages`]). It changes where memory comes from,
//! never what a run computes: the same JSON. The bench's cost per hop at
//! 256 hosts falls 7-9 % and the CLI's wall time 5-7 %; at 16 hosts,
//! whose state fits the TLB, nothing changes; a small run pays the exec
//! and the zeroing of 2 MiB pages, 10-30 ms at 64 hosts
//! (docs/performance.md, seventh session). `RDMA_FABRIC_HUGE_PAGES=0`
//! turns it off (for timing against builds from before it, or under a
//! tool that an exec would escape).

/// The opt-out's variable: `RDMA_FABRIC_HUGE_PAGES=0`.
pub const OPT_OUT_ENV: &str = "RDMA_FABRIC_HUGE_PAGES";
/// Set in the restarted process: it never starts again, whatever glibc
/// did with `GLIBC_TUNABLES` (it drops them in secure-execution mode).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const RESTARTED: &str = "RDMA_FABRIC_HUGE_PAGES_RESTARTED";
const TUNABLE: &str = "glibc.malloc.hugetlb";
const ON: &str = "glibc.malloc.hugetlb=1";

/// The `GLIBC_TUNABLES` to start again with, or None to go on as is:
/// when the user turned it off (`opt_out` "0"), when the tunables already
/// name the huge-page setting (the user's own choice), or when the
/// kernel's THP mode (`thp`, the contents of its setting) is not
/// `madvise`: glibc's setting does nothing under `always` or `never`, or
/// without THP.
pub fn tunables_to_restart_with(current: Option<&str>, opt_out: Option<&str>, thp: Option<&str>) -> Option<String> {
    if opt_out.is_some_and(|v| v.trim() == "0") {
        return None;
    }
    if !thp.is_some_and(|t| t.contains("[madvise]")) {
        return None;
    }
    match current.filter(|c| !c.is_empty()) {
        Some(c) if c.contains(TUNABLE) => None,
        Some(c) => Some(format!("{c}:{ON}")),
        None => Some(ON.to_string()),
    }
}

/// Starts this program again with glibc's malloc asking for huge pages,
/// if it does not yet and the kernel gives them that way (see the
/// module's doc). Call it first in `main`, before any thread starts or
/// anything is printed. It returns if the program goes on as is: no
/// need, a process that already started again, a setuid or otherwise
/// secure-execution process, one run through the dynamic loader or under
/// valgrind (an exec of `/proc/self/exe` would run the loader or escape
/// the tool), or a failed exec (said on stderr).
pub fn restart_with_huge_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    restart();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn restart() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    if std::env::var_os(RESTARTED).is_some() {
        return;
    }
    // SAFETY: reads the auxiliary vector.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return;
    }
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else { return };
    let name = exe.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    let preload = std::env::var_os("LD_PRELOAD").unwrap_or_default();
    if name.starts_with(b"ld-")
        || name.starts_with(b"ld.so")
        || preload.as_bytes().windows(9).any(|w| w == b"vgpreload")
    {
        return;
    }
    // Tunables that are not UTF-8 are the user's business: left alone.
    let current = match std::env::var_os("GLIBC_TUNABLES").map(|c| c.into_string()) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(_)) => return,
    };
    let opt_out = std::env::var(OPT_OUT_ENV).ok();
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok();
    let Some(tunables) = tunables_to_restart_with(current.as_deref(), opt_out.as_deref(), thp.as_deref()) else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let err = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .env(RESTARTED, "1")
        .exec();
    eprintln!("note: could not start again with huge pages for the heap ({err}); going on without");
}

#[cfg(test)]
mod tests {
    use super::*;

    const MADVISE: Option<&str> = Some("always [madvise] never\n");

    #[test]
    fn the_tunable_is_added_once_and_kept_beside_the_users_own() {
        assert_eq!(tunables_to_restart_with(None, None, MADVISE).as_deref(), Some(ON));
        assert_eq!(tunables_to_restart_with(Some(""), None, MADVISE).as_deref(), Some(ON));
        assert_eq!(
            tunables_to_restart_with(Some("glibc.malloc.arena_max=2"), None, MADVISE).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
        );
        assert_eq!(tunables_to_restart_with(Some("glibc.malloc.hugetlb=0"), None, MADVISE), None, "the user's choice");
    }

    #[test]
    fn no_restart_when_turned_off_or_glibc_would_ask_for_nothing() {
        assert_eq!(tunables_to_restart_with(None, Some("0"), MADVISE), None);
        assert_eq!(tunables_to_restart_with(None, Some(" 0\n"), MADVISE), None);
        assert_eq!(tunables_to_restart_with(None, Some("1"), MADVISE).as_deref(), Some(ON));
        assert_eq!(
            tunables_to_restart_with(None, None, Some("[always] madvise never")),
            None,
            "glibc asks only in madvise mode"
        );
        assert_eq!(tunables_to_restart_with(None, None, Some("always madvise [never]")), None);
        assert_eq!(tunables_to_restart_with(None, None, None), None, "no THP in this kernel");
    }
}
