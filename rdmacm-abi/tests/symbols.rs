//! The symbol versions: what Debian's rdmacm-utils binaries import from
//! librdmacm.so.1 is exported by ours with the same version, and every
//! trampoline has its target in libibverbs.so.1's SOFTROCE_PRIVATE_1 node.

mod common;

use testkit::dyn_syms;

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
