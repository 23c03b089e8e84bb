//! Links the cdylib as rdma-core's libibverbs: its soname, and its symbol
//! versions (IBVERBS_1.0 ... IBVERBS_1.14, IBVERBS_PRIVATE_34, the
//! provider nodes perftest binds, and SOFTROCE_PRIVATE_1 for librdmacm.so.1),
//! as listed in libibverbs.map.
//!
//! rustc hands the linker its own version script, which exports every
//! `#[no_mangle]` symbol unversioned; so each call is exported by Rust as
//! `softroce_NAME`, and a one-instruction trampoline generated here from
//! the map (a tail jump, arguments untouched) is exported as `NAME@@NODE`:
//! the name with rdma-core's version. (`.symver` must name a symbol of the
//! same assembly unit, hence the trampoline.) The fast paths (post, poll)
//! go through the context's ops table, not through these.

use std::fmt::Write as _;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let map_path = format!("{dir}/libibverbs.map");
    println!("cargo:rerun-if-changed=libibverbs.map");
    let map = std::fs::read_to_string(&map_path).expect("libibverbs.map is part of the crate");
    let mut asm = String::from("core::arch::global_asm!(\n    \".text\",\n");
    let mut node: Option<&str> = None;
    for line in map.lines().map(str::trim) {
        if let Some(name) = line.strip_suffix(" {") {
            node = Some(name);
        } else if line.starts_with('}') {
            node = None;
        } else if let (Some(n), Some(sym)) = (node, line.strip_suffix(';')) {
            if !sym.contains(':') && !sym.contains('*') && !sym.is_empty() {
                // The private node's calls are Rust's `softroce_rdma_X_impl`.
                let target =
                    if n.starts_with("SOFTROCE_PRIVATE") { format!("{sym}_impl") } else { format!("softroce_{sym}") };
                for l in [
                    format!(".globl softroce_v_{sym}"),
                    format!(".type softroce_v_{sym}, @function"),
                    format!("softroce_v_{sym}:"),
                    format!("jmp {target}@PLT"),
                    format!(".size softroce_v_{sym}, . - softroce_v_{sym}"),
                    format!(".symver softroce_v_{sym}, {sym}@@{n}"),
                ] {
                    writeln!(asm, "    \"{l}\",").expect("write to a String");
                }
            }
        }
    }
    asm.push_str(");\n");
    std::fs::write(format!("{out}/symver.rs"), asm).expect("OUT_DIR is writable");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map_path}");
}
