//! What the build scripts of `ibverbs-abi` (libibverbs.so.1) and
//! `rdmacm-abi` (librdmacm.so.1) share.
//!
//! rustc hands the linker its own version script, which exports every
//! `#[no_mangle]` symbol unversioned, so a Rust export cannot carry
//! rdma-core's version (`ibv_open_device@@IBVERBS_1.1`). Each library
//! therefore exports its calls under a private name, and its build script
//! generates, from the library's version script (`*.map`), a
//! one-instruction trampoline per symbol: a tail jump to the private name
//! (arguments untouched), exported as `NAME@@NODE` by `.symver` (which
//! must name a symbol of the same assembly unit, hence the trampoline).

use std::fmt::Write as _;

/// One symbol a version script exports, and its version node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The version node, e.g. `IBVERBS_1.1`.
    pub node: String,
    /// The symbol, e.g. `ibv_open_device`.
    pub name: String,
}

/// The symbols `map` (a GNU ld version script, one symbol a line, as
/// rdma-core's `libibverbs.map` and `librdmacm.map`) exports, in order:
/// `global:`/`local:` labels, wildcards and blank lines are not symbols.
pub fn exports(map: &str) -> Vec<Export> {
    let mut out = Vec::new();
    let mut node: Option<&str> = None;
    for line in map.lines().map(str::trim) {
        if let Some(name) = line.strip_suffix(" {") {
            node = Some(name);
        } else if line.starts_with('}') {
            node = None;
        } else if let (Some(n), Some(sym)) = (node, line.strip_suffix(';')) {
            if !sym.contains(':') && !sym.contains('*') && !sym.is_empty() {
                out.push(Export { node: n.to_string(), name: sym.to_string() });
            }
        }
    }
    out
}

/// A `core::arch::global_asm!` invocation (for `include!`) holding one
/// trampoline per export: a function `{label}NAME` that jumps to
/// `target(export)` through the PLT and is exported as `NAME@@NODE`.
/// `label` must not clash with any other symbol of the library.
pub fn trampolines(exports: &[Export], label: &str, target: impl Fn(&Export) -> String) -> String {
    let mut asm = String::from("core::arch::global_asm!(\n    \".text\",\n");
    for e in exports {
        let (sym, t) = (format!("{label}{}", e.name), target(e));
        for l in [
            format!(".globl {sym}"),
            format!(".type {sym}, @function"),
            format!("{sym}:"),
            format!("jmp {t}@PLT"),
            format!(".size {sym}, . - {sym}"),
            format!(".symver {sym}, {}@@{}", e.name, e.node),
        ] {
            writeln!(asm, "    \"{l}\",").expect("write to a String");
        }
    }
    asm.push_str(");\n");
    asm
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = "IBVERBS_1.0 {\n  global:\n    ibv_get_device_list;\n    ibv_free_device_list;\n  local: *;\n};\n\nIBVERBS_1.1 {\n  global:\n    ibv_open_device;\n} IBVERBS_1.0;\n";

    #[test]
    fn exports_are_the_symbols_of_each_node_in_order() {
        let e = exports(MAP);
        let got: Vec<(&str, &str)> = e.iter().map(|e| (e.node.as_str(), e.name.as_str())).collect();
        assert_eq!(
            got,
            [
                ("IBVERBS_1.0", "ibv_get_device_list"),
                ("IBVERBS_1.0", "ibv_free_device_list"),
                ("IBVERBS_1.1", "ibv_open_device")
            ]
        );
    }

    #[test]
    fn a_trampoline_jumps_to_its_target_and_carries_the_version() {
        let e = exports(MAP);
        let asm = trampolines(&e[2..], "t_", |e| format!("softroce_{}", e.name));
        let want = [
            "core::arch::global_asm!(",
            "    \".text\",",
            "    \".globl t_ibv_open_device\",",
            "    \".type t_ibv_open_device, @function\",",
            "    \"t_ibv_open_device:\",",
            "    \"jmp softroce_ibv_open_device@PLT\",",
            "    \".size t_ibv_open_device, . - t_ibv_open_device\",",
            "    \".symver t_ibv_open_device, ibv_open_device@@IBVERBS_1.1\",",
            ");",
        ];
        assert_eq!(asm.lines().collect::<Vec<_>>(), want);
    }
}
