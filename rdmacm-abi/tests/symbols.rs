//! The symbol versions: what Debian's rdmacm-utils binaries import from
//! librdmacm.so.1 is exported by ours with the same version, and every
//! trampoline has its target in libibverbs.so.1's SOFTROCE_PRIVATE_1 node.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

/// `(name, version)` of the versioned dynamic symbols readelf lists for
/// `file`: the defined ones if `defined`, else the undefined ones.
fn dyn_syms(file: &std::path::Path, defined: bool) -> Option<BTreeSet<(String, String)>> {
    let out = Command::new("readelf").args(["--dyn-syms", "-W"]).arg(file).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut set = BTreeSet::new();
    for l in text.lines() {
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.len() < 8 {
            continue;
        }
        let undefined = cols[6] == "UND";
        if undefined == defined {
            continue;
        }
        let sym = cols[7];
        let (name, ver) = match sym.split_once("@@").or_else(|| sym.split_once('@')) {
            Some((n, v)) => (n, v.split_whitespace().next().unwrap_or(v)),
            None => continue,
        };
        set.insert((name.to_string(), ver.to_string()));
    }
    Some(set)
}

#[test]
fn the_binaries_find_every_symbol_with_its_version() {
    let ours = dyn_syms(&common::librdmacm(), true).expect("readelf (binutils) reads the library");
    let mut checked = 0;
    for tool in ["rping", "ucmatose", "udaddy", "rdma_client", "rdma_server", "cmtime", "mckey"] {
        let Some(path) = common::need(tool, "rdmacm-utils") else { continue };
        let Some(imports) = dyn_syms(&path, false) else { continue };
        for (name, ver) in imports.iter().filter(|(_, v)| v.starts_with("RDMACM_")) {
            assert!(ours.contains(&(name.clone(), ver.clone())), "{tool} needs {name}@{ver}, which is not exported");
            checked += 1;
        }
    }
    eprintln!("{checked} imports checked");
}

#[test]
fn every_trampoline_has_its_private_target() {
    let ours = dyn_syms(&common::librdmacm(), true).expect("readelf reads librdmacm");
    let wanted = dyn_syms(&common::librdmacm(), false).expect("readelf reads librdmacm");
    let verbs = dyn_syms(&common::libibverbs(), true).expect("readelf reads libibverbs");
    let public: Vec<&String> = ours.iter().filter(|(_, v)| v.starts_with("RDMACM_")).map(|(n, _)| n).collect();
    assert!(public.len() >= 40, "{public:?}");
    for name in public {
        let target = (format!("softroce_{name}"), "SOFTROCE_PRIVATE_1".to_string());
        assert!(wanted.contains(&target), "{name}'s trampoline does not reference {target:?}");
        assert!(verbs.contains(&target), "libibverbs.so.1 does not export {target:?}");
    }
}
