//! The symbol versions: everything Debian's binaries and libraries that
//! use libibverbs import from it (and, through the stand-ins softroce-run
//! links, from libmlx5.so.1 and libefa.so.1) is exported by this library
//! with the same version, so that they load: ibverbs-utils, perftest, and
//! UCX's InfiniBand transport (`libuct_ib`, which imports mlx5dv calls).

mod common;

use testkit::dyn_syms;

#[test]
fn debians_users_of_libibverbs_find_every_symbol_with_its_version() {
    let ours = dyn_syms(&common::library(), true).expect("readelf (binutils) reads the library");
    let mut checked = 0;
    let users: [(&str, &str); 6] = [
        ("ibv_devinfo", "ibverbs-utils"),
        ("ibv_rc_pingpong", "ibverbs-utils"),
        ("ib_write_bw", "perftest"),
        ("ib_send_lat", "perftest"),
        ("/usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0", "ucx-utils"),
        ("/usr/lib/x86_64-linux-gnu/libucp.so.0", "ucx-utils"),
    ];
    for (user, package) in users {
        let path = if user.starts_with('/') {
            let p = std::path::PathBuf::from(user);
            if !p.exists() {
                testkit::skip(format!("{user} is not installed (apt-get install {package})"));
                continue;
            }
            p
        } else {
            let Some(p) = common::need(user, package) else { continue };
            p
        };
        let imports = dyn_syms(&path, false).expect("readelf reads it");
        for (name, ver) in
            imports.iter().filter(|(_, v)| ["IBVERBS_", "MLX5_", "EFA_"].iter().any(|p| v.starts_with(p)))
        {
            assert!(ours.contains(&(name.clone(), ver.clone())), "{user} needs {name}@{ver}, which is not exported");
            checked += 1;
        }
    }
    println!("{checked} imports checked");
    assert!(checked > 50 || !testkit::tools_required(), "only {checked} imports checked");
}
