//! The symbol versions: everything Debian's binaries and libraries that
//! use libibverbs import from it (and, through the stand-ins softroce-run
//! links, from libmlx5.so.1 and libefa.so.1) is exported by this library
//! with the same version, so that they load: ibverbs-utils, perftest, UCX's
//! InfiniBand transport (`libuct_ib`, which imports mlx5dv calls),
//! libfabric (which imports efadv calls) and pyverbs (whose provider
//! modules import both, and which Python loads with RTLD_NOW).

mod common;

use std::path::{Path, PathBuf};
use testkit::dyn_syms;

/// Each file of `dir` (recursively) that is a shared object.
fn shared_objects(dir: &Path, into: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            shared_objects(&p, into);
        } else if p.extension().is_some_and(|x| x == "so") {
            into.push(p);
        }
    }
}

const PERFTEST: [&str; 8] = [
    "ib_write_bw",
    "ib_write_lat",
    "ib_read_bw",
    "ib_read_lat",
    "ib_send_bw",
    "ib_send_lat",
    "ib_atomic_bw",
    "ib_atomic_lat",
];
const LIB: &str = "/usr/lib/x86_64-linux-gnu";
const PYVERBS: &str = "/usr/lib/python3/dist-packages/pyverbs";

#[test]
fn debians_users_of_libibverbs_find_every_symbol_with_its_version() {
    let ours = dyn_syms(&common::library(), true).expect("readelf (binutils) reads the library");
    let mut users: Vec<(PathBuf, &str)> = Vec::new();
    for (tool, package) in [("ibv_devinfo", "ibverbs-utils"), ("ibv_rc_pingpong", "ibverbs-utils")]
        .into_iter()
        .chain(PERFTEST.iter().map(|t| (*t, "perftest")))
    {
        if let Some(p) = common::need(tool, package) {
            users.push((p, package));
        }
    }
    for (lib, package) in [
        ("ucx/libuct_ib.so.0", "ucx-utils"),
        ("libucp.so.0", "ucx-utils"),
        ("libfabric.so.1", "libfabric1"),
        ("librdmacm.so.1", "librdmacm1"),
    ] {
        let p = Path::new(LIB).join(lib);
        if p.exists() {
            users.push((p, package));
        } else {
            testkit::skip(format!("{} is not installed (apt-get install {package})", p.display()));
        }
    }
    let mut modules = Vec::new();
    shared_objects(Path::new(PYVERBS), &mut modules);
    if modules.is_empty() {
        testkit::skip("pyverbs is not installed (apt-get install python3-pyverbs)");
    }
    users.extend(modules.into_iter().map(|m| (m, "python3-pyverbs")));

    let mut checked = 0;
    let mut missing = Vec::new();
    for (user, package) in &users {
        let imports = dyn_syms(user, false).expect("readelf reads it");
        for (name, ver) in
            imports.iter().filter(|(_, v)| ["IBVERBS_", "MLX5_", "EFA_"].iter().any(|p| v.starts_with(p)))
        {
            if !ours.contains(&(name.clone(), ver.clone())) {
                missing.push(format!("{} ({package}) needs {name}@{ver}", user.display()));
            }
            checked += 1;
        }
    }
    assert!(missing.is_empty(), "not exported:\n{}", missing.join("\n"));
    println!("{checked} imports of {} binaries checked", users.len());
    assert!(checked > 500 || !testkit::tools_required(), "only {checked} imports checked");
}

/// The stand-ins are complete: every call Debian's provider libraries
/// export (under its default version) is exported here with that version,
/// so a program built against a newer list than our users above still loads.
#[test]
fn every_call_of_debians_libmlx5_and_libefa_is_exported_with_its_version() {
    let ours = dyn_syms(&common::library(), true).expect("readelf (binutils) reads the library");
    let mut checked = 0;
    for lib in ["libmlx5.so.1", "libefa.so.1"] {
        let path = Path::new(LIB).join(lib);
        if !path.exists() {
            testkit::skip(format!("{} is not installed (apt-get install ibverbs-providers)", path.display()));
            continue;
        }
        let theirs = dyn_syms(&path, true).expect("readelf reads it");
        // readelf writes a default version NAME@@NODE, another NAME@NODE: both
        // come back as (NAME, NODE); the older, non-default ones are for
        // binaries built before the current version and have none here.
        let ours_names: std::collections::BTreeSet<&str> = ours.iter().map(|(n, _)| n.as_str()).collect();
        for (name, node) in theirs.iter().filter(|(_, v)| v.starts_with("MLX5_") || v.starts_with("EFA_")) {
            if ours.contains(&(name.clone(), node.clone())) {
                checked += 1;
            } else {
                assert!(ours_names.contains(name.as_str()), "{lib} exports {name}@{node}; this library has no {name}");
            }
        }
    }
    println!("{checked} provider calls checked");
    assert!(checked > 130 || !testkit::tools_required(), "only {checked} provider calls checked");
}
