//! Links the cdylib as rdma-core's libibverbs: its soname, and its symbol
//! versions (IBVERBS_1.0 ... IBVERBS_1.14, IBVERBS_PRIVATE_34 and
//! SOFTROCE_PRIVATE_1 for librdmacm.so.1, as listed in libibverbs.map), and
//! the stand-ins for the provider libraries (every call of Debian's
//! libmlx5.so.1 and libefa.so.1, as listed in providers.txt).
//!
//! Each call is exported by Rust as `softroce_NAME` (the private node's
//! as `softroce_rdma_NAME_impl`), and a trampoline made by `abi-symver`
//! from the map is exported as `NAME@@NODE` (see that crate for why). A
//! provider stand-in's trampoline jumps to the one Rust function that
//! gives its answer (`softroce_provider_zero` etc., src/provider_stubs.rs):
//! the answer does not depend on the arguments.
//! The fast paths (post, poll) go through the context's ops table, not
//! through these.

use std::collections::BTreeMap;
use std::fmt::Write as _;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    for f in ["libibverbs.map", "providers.txt", "build.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let map = std::fs::read_to_string(format!("{dir}/libibverbs.map")).expect("libibverbs.map is part of the crate");
    let providers =
        std::fs::read_to_string(format!("{dir}/providers.txt")).expect("providers.txt is part of the crate");

    // The provider calls, node by node, appended to the version script.
    let mut answers = BTreeMap::new();
    let mut nodes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in providers.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let [node, name, answer] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            panic!("providers.txt: {line:?} is not NODE NAME ANSWER");
        };
        assert!(["zero", "eopnotsupp", "minus_one"].contains(&answer), "providers.txt: unknown answer in {line:?}");
        answers.insert(name.to_string(), answer.to_string());
        nodes.entry(node).or_default().push(name);
    }
    let mut full_map = map.clone();
    for (node, names) in &nodes {
        writeln!(full_map, "\n{node} {{\n\tglobal:").unwrap();
        for n in names {
            writeln!(full_map, "\t\t{n};").unwrap();
        }
        full_map.push_str("};\n");
    }
    let map_path = format!("{out}/libibverbs.map");
    std::fs::write(&map_path, &full_map).expect("OUT_DIR is writable");

    let asm = abi_symver::trampolines(&abi_symver::exports(&full_map), "softroce_v_", |e| {
        if let Some(answer) = answers.get(&e.name) {
            format!("softroce_provider_{answer}")
        } else if e.node.starts_with("SOFTROCE_PRIVATE") {
            // The private node's calls are Rust's `softroce_rdma_X_impl`.
            format!("{}_impl", e.name)
        } else {
            format!("softroce_{}", e.name)
        }
    });
    std::fs::write(format!("{out}/symver.rs"), asm).expect("OUT_DIR is writable");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map_path}");
}
