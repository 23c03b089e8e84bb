//! Transparent huge pages for the simulator's own memory.
//!
//! A large fabric keeps most of its state in small heap objects touched
//! at random: at 256 hosts about 270 MB (65,280 QPs of 864 bytes, their
//! queues, packets, events). With 4 KiB pages nearly every cold access
//! also misses the TLB, whose second level reaches a few MiB. Linux backs
//! memory with 2 MiB pages where the process asks (`MADV_HUGEPAGE`) and
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` (a common
//! default) or `always`; glibc's malloc asks for its heap only when its
//! `glibc.malloc.hugetlb=1` tunable is set, which it reads at start.
//!
//! So the `rdma-fabric` tool and the fabric benches start again, once, with
//! that tunable added to `GLIBC_TUNABLES` ([`restart_with_huge_pages`]). It
//! changes where memory comes from, never what a run computes: the same
//! JSON. The per-hop cost at 256 hosts falls 5-8 %; at 16 hosts, whose
//! state fits the TLB, nothing changes; at 32-64 hosts the bench, which
//! makes many fabrics in one process, pays about 2 % for zeroing 2 MiB
//! pages (docs/performance.md, seventh session). A start costs an exec, a
//! few milliseconds. `RDMA_FABRIC_HUGE_PAGES=0` turns it off.

use std::ffi::OsString;

const TUNABLE: &str = "glibc.malloc.hugetlb";
const ON: &str = "glibc.malloc.hugetlb=1";
/// The opt-out: `RDMA_FABRIC_HUGE_PAGES=0`.
pub const ENV: &str = "RDMA_FABRIC_HUGE_PAGES";
const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// The `GLIBC_TUNABLES` to start again with, or None to go on as is:
/// when the user turned it off (`opt_out` "0"), when the tunables already
/// name the huge-page setting (the user's own choice, or this process is
/// the restarted one), or when the kernel gives no huge pages (`thp`, the
/// contents of its setting, absent or with `[never]` chosen).
pub fn tunables_to_restart_with(current: Option<&str>, opt_out: Option<&str>, thp: Option<&str>) -> Option<String> {
    if opt_out.is_some_and(|v| v.trim() == "0") {
        return None;
    }
    if !thp.is_some_and(|t| t.contains("[always]") || t.contains("[madvise]")) {
        return None;
    }
    match current.filter(|c| !c.is_empty()) {
        Some(c) if c.contains(TUNABLE) => None,
        Some(c) => Some(format!("{c}:{ON}")),
        None => Some(ON.to_string()),
    }
}

/// Starts this program again with glibc's malloc asking for huge pages,
/// if it does not yet and the kernel gives them (see the module's doc).
/// Call it first in `main`, before any thread starts; it returns only if
/// the program goes on as is (a failed restart is logged and ignored).
pub fn restart_with_huge_pages() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let current = std::env::var("GLIBC_TUNABLES").ok();
    let opt_out = std::env::var(ENV).ok();
    let thp = std::fs::read_to_string(THP_ENABLED).ok();
    let Some(tunables) = tunables_to_restart_with(current.as_deref(), opt_out.as_deref(), thp.as_deref()) else {
        return;
    };
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("rdma-fabric"));
    let err = std::process::Command::new("/proc/self/exe").arg0(arg0).args(args).env("GLIBC_TUNABLES", tunables).exec();
    tracing::debug!(%err, "could not start again with huge pages; going on without");
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
        assert_eq!(tunables_to_restart_with(Some("glibc.malloc.hugetlb=1"), None, MADVISE), None, "restarted");
        assert_eq!(tunables_to_restart_with(Some("glibc.malloc.hugetlb=0"), None, MADVISE), None, "the user's choice");
        assert_eq!(
            tunables_to_restart_with(None, None, Some("[always] madvise never")).as_deref(),
            Some(ON),
            "always: the heap still gets huge pages only where it asks, or khugepaged finds it"
        );
    }

    #[test]
    fn no_restart_when_turned_off_or_the_kernel_gives_none() {
        assert_eq!(tunables_to_restart_with(None, Some("0"), MADVISE), None);
        assert_eq!(tunables_to_restart_with(None, Some("1"), MADVISE).as_deref(), Some(ON));
        assert_eq!(tunables_to_restart_with(None, None, Some("always madvise [never]")), None);
        assert_eq!(tunables_to_restart_with(None, None, None), None, "no THP in this kernel");
    }
}
