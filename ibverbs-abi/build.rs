//! Links the cdylib as rdma-core's libibverbs: its soname, and its symbol
//! versions (IBVERBS_1.0 ... IBVERBS_1.14, IBVERBS_PRIVATE_34, the
//! provider nodes perftest binds, and SOFTROCE_PRIVATE_1 for librdmacm.so.1),
//! as listed in libibverbs.map.
//!
//! Each call is exported by Rust as `softroce_NAME` (the private node's
//! as `softroce_rdma_NAME_impl`), and a trampoline made by `abi-symver`
//! from the map is exported as `NAME@@NODE` (see that crate for why).
//! The fast paths (post, poll) go through the context's ops table, not
//! through these.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let map_path = format!("{dir}/libibverbs.map");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rerun-if-changed=build.rs");
    let map = std::fs::read_to_string(&map_path).expect("libibverbs.map is part of the crate");
    let asm = abi_symver::trampolines(&abi_symver::exports(&map), "softroce_v_", |e| {
        // The private node's calls are Rust's `softroce_rdma_X_impl`.
        if e.node.starts_with("SOFTROCE_PRIVATE") {
            format!("{}_impl", e.name)
        } else {
            format!("softroce_{}", e.name)
        }
    });
    std::fs::write(format!("{out}/symver.rs"), asm).expect("OUT_DIR is writable");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map_path}");
}
