//! Links the cdylib as rdma-core's librdmacm: its soname, its symbol
//! versions (RDMACM_1.0 ... 1.3, librdmacm.map), and nothing else.
//!
//! The RDMA CM calls are implemented inside this project's libibverbs.so.1
//! (ibverbs-abi's `rdmacm` module), because the objects they hand out
//! (`id->verbs`, `id->qp`, ...) must be the same objects the application's
//! libibverbs calls take: one copy of the stack per process. So each call
//! here is a one-instruction trampoline made by `abi-symver`, `rdma_X@@RDMACM_1.x:
//! jmp softroce_rdma_X@PLT`, bound at run time to libibverbs.so.1's
//! `softroce_rdma_X@SOFTROCE_PRIVATE_1`; arguments pass untouched.
//!
//! To record that binding (DT_NEEDED libibverbs.so.1, and the version of
//! every reference) without needing the real library at link time, the
//! link is made against a stub libibverbs.so.1 built here from the same
//! list: the private symbols, empty, with their version.

use std::fmt::Write as _;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let map_path = format!("{dir}/librdmacm.map");
    println!("cargo:rerun-if-changed=librdmacm.map");
    println!("cargo:rerun-if-changed=build.rs");
    let map = std::fs::read_to_string(&map_path).expect("librdmacm.map is part of the crate");
    let exports = abi_symver::exports(&map);
    let asm = abi_symver::trampolines(&exports, "softroce_t_", |e| format!("softroce_{}", e.name));
    std::fs::write(format!("{out}/trampolines.rs"), asm).expect("OUT_DIR is writable");

    // The stub libibverbs.so.1, for the link only (never loaded).
    let mut stub = String::from(".text\n");
    let mut private = String::from("SOFTROCE_PRIVATE_1 {\n  global:\n");
    for e in &exports {
        let sym = &e.name;
        writeln!(stub, ".globl softroce_{sym}\n.type softroce_{sym}, @function\nsoftroce_{sym}:\n  ud2")
            .expect("write to a String");
        writeln!(private, "    softroce_{sym};").expect("write to a String");
    }
    private.push_str("  local: *;\n};\n");
    let stub_dir = format!("{out}/stub");
    std::fs::create_dir_all(&stub_dir).expect("OUT_DIR is writable");
    std::fs::write(format!("{stub_dir}/stub.s"), stub).expect("OUT_DIR is writable");
    std::fs::write(format!("{stub_dir}/stub.map"), private).expect("OUT_DIR is writable");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-nostdlib", "-o"])
        .arg(format!("{stub_dir}/libibverbs.so.1"))
        .arg(format!("{stub_dir}/stub.s"))
        .arg("-Wl,-soname,libibverbs.so.1")
        .arg(format!("-Wl,--version-script={stub_dir}/stub.map"))
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc} to build the stub libibverbs.so.1: {e}"));
    assert!(status.success(), "{cc} failed to build the stub libibverbs.so.1");

    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map_path}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg=-L{stub_dir}");
    println!("cargo:rustc-cdylib-link-arg=-l:libibverbs.so.1");
}
