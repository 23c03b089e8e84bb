//! softroce-run itself: its help, its typed errors, and the environment it
//! hands the command (the device list, and a library directory first in
//! LD_LIBRARY_PATH whose sonames point at the library).

mod common;

use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(common::launcher())
        .args(args)
        .env_remove("SOFTROCE_DEVICES")
        .env("SOFTROCE_LIBRARY", common::library())
        .env("SOFTROCE_RDMACM_LIBRARY", common::rdmacm())
        .output()
        .expect("run softroce-run")
}

#[test]
fn help_names_the_syntax() {
    let o = run(&["--help"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(
        text.contains(
            "usage: softroce-run [--device NAME=ADDR|NAME=ib:IFNAME[:LID]]... [--no-sysfs] -- COMMAND [ARGS]..."
        ),
        "{text}"
    );
    assert!(text.contains("SOFTROCE_DEVICES"), "{text}");
}

#[test]
fn errors_say_what_was_wrong_and_exit_125() {
    for (args, want) in [
        (&["--device", "rxe0", "--", "true"][..], "--device: device entry \"rxe0\" is not NAME=ADDRESS"),
        (&["--device", "a=1.2.3.400", "--", "true"][..], "is not an IPv4 or IPv6 address"),
        (&["--device", "a=127.0.0.1", "--device", "a=127.0.0.2", "--", "true"][..], "given twice"),
        (&["--device", "m=ib:", "--", "true"][..], "device m: \"\" is not a network interface name"),
        (&["--device", "m=ib:veth0:0", "--", "true"][..], "device m: LID \"0\" is not a unicast LID (1 to 0xBFFF"),
        (&["--device", "m=roce1:veth0", "--", "true"][..], "device m: unknown link kind \"roce1\""),
        (&["true"][..], "unexpected argument \"true\""),
        (&["--"][..], "no COMMAND after --"),
        (&["--", "/nonexistent/program"][..], "cannot run /nonexistent/program"),
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: wanted {want:?} in {err}");
    }
}

#[test]
fn a_missing_library_is_named() {
    let o = Command::new(common::launcher())
        .args(["--", "true"])
        .env("SOFTROCE_LIBRARY", "/nonexistent/libibverbs_abi.so")
        .output()
        .expect("run softroce-run");
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/libibverbs_abi.so is missing"));
}

#[test]
fn the_command_gets_the_devices_and_the_library() {
    let o = run(&[
        "--device",
        "a=127.0.0.1",
        "--device",
        "b=::1",
        "--device",
        "m=ib:lo:0x0a01",
        "--",
        "sh",
        "-c",
        "echo $SOFTROCE_DEVICES; echo $LD_LIBRARY_PATH; exit 7",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    // The command's exit status is softroce-run's: it replaced the launcher.
    assert_eq!(o.status.code(), Some(7), "{}", common::show(&o));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("a=127.0.0.1,b=::1,m=ib:lo:0xa01"));
    let dir = lines.next().expect("LD_LIBRARY_PATH").split(':').next().expect("a first entry").to_string();
    let lib = common::library().canonicalize().expect("the library exists");
    for name in ["libibverbs.so.1", "libmlx5.so.1", "libefa.so.1"] {
        let target = std::fs::read_link(std::path::Path::new(&dir).join(name)).expect("a link");
        assert_eq!(target, lib, "{name}");
    }
    // Unset: the default device.
    let o = run(&["--", "sh", "-c", "echo $SOFTROCE_DEVICES"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "rxe0=127.0.0.1");
}

/// libfabric's patching memory monitor is off for the command (it raced
/// this library's threads), unless the user chose a monitor.
#[test]
fn libfabric_runs_without_its_patching_memory_monitor_unless_one_is_chosen() {
    let o = run(&["--", "sh", "-c", "echo $FI_MR_CACHE_MONITOR"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "disabled", "{}", common::show(&o));
    let o = Command::new(common::launcher())
        .args(["--", "sh", "-c", "echo $FI_MR_CACHE_MONITOR"])
        .env("FI_MR_CACHE_MONITOR", "userfaultfd")
        .env("SOFTROCE_LIBRARY", common::library())
        .env("SOFTROCE_RDMACM_LIBRARY", common::rdmacm())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "userfaultfd", "{}", common::show(&o));
}

#[test]
fn librdmacm_is_linked_when_there_is_one() {
    // Any file stands in for rdmacm-abi's cdylib here: only the link is checked.
    let stand_in = common::library().canonicalize().expect("the library exists");
    let o = Command::new(common::launcher())
        .args(["--", "sh", "-c", "echo $LD_LIBRARY_PATH"])
        .env("SOFTROCE_LIBRARY", common::library())
        .env("SOFTROCE_RDMACM_LIBRARY", &stand_in)
        .output()
        .expect("run softroce-run");
    assert!(o.status.success(), "{}", common::show(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let dir = text.trim().split(':').next().expect("a first entry").to_string();
    let target = std::fs::read_link(std::path::Path::new(&dir).join("librdmacm.so.1")).expect("a librdmacm.so.1 link");
    assert_eq!(target, stand_in);
    // Named but missing: said so, exit 125.
    let o = Command::new(common::launcher())
        .args(["--", "true"])
        .env("SOFTROCE_LIBRARY", common::library())
        .env("SOFTROCE_RDMACM_LIBRARY", "/nonexistent/librdmacm_abi.so")
        .output()
        .expect("run softroce-run");
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/librdmacm_abi.so is missing"));
}

#[test]
fn a_missing_librdmacm_is_named_with_the_command_that_builds_it() {
    // The launcher and the library alone in a directory: no librdmacm_abi.so
    // beside either. softroce-run must not run the command with the
    // system's librdmacm.so.1 in front (it would fail without saying why).
    let dir = std::env::temp_dir().join(format!("softroce-run-no-rdmacm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make a temporary directory");
    std::fs::copy(common::launcher(), dir.join("softroce-run")).expect("copy the launcher");
    std::fs::copy(common::library(), dir.join("libibverbs_abi.so")).expect("copy the library");
    let o = Command::new(dir.join("softroce-run"))
        .args(["--", "true"])
        .env_remove("SOFTROCE_LIBRARY")
        .env_remove("SOFTROCE_RDMACM_LIBRARY")
        .output()
        .expect("run softroce-run");
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{}", common::show(&o));
    assert!(err.contains("librdmacm_abi.so"), "{err}");
    assert!(err.contains("is missing"), "{err}");
    assert!(err.contains("cargo build --release -p rdmacm-abi"), "{err}");
}

/// What the command sees of its devices in /sys/class and /dev, run as
/// `prefix` (empty: as this test runs).
fn presented(prefix: &[&str], extra: &[&str]) -> String {
    let script = "cat /sys/class/infiniband/rxe1/ports/1/gids/0 /sys/class/infiniband_verbs/uverbs1/ibdev; \
                  ls /sys/class/infiniband/rxe0/device/net/; ls /dev/infiniband; \
                  test -d /sys/class/net/lo && echo net-kept; echo x > /dev/null && echo null-kept; \
                  touch /sys/class/infiniband/x 2>/dev/null || echo read-only";
    let mut args: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
    args.push(common::launcher().display().to_string());
    args.extend(["--device", "rxe0=127.0.0.1", "--device", "rxe1=127.0.0.2"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["--", "sh", "-c", script].map(String::from));
    let o = Command::new(&args[0])
        .args(&args[1..])
        .env("SOFTROCE_LIBRARY", common::library())
        .env("SOFTROCE_RDMACM_LIBRARY", common::rdmacm())
        .output()
        .expect("run softroce-run");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() || extra.contains(&"--no-sysfs"), "{args:?}: {out}{err}");
    assert!(!err.contains("warning"), "{args:?}: {err}");
    out.into_owned()
}

const PRESENTED: &str =
    "0000:0000:0000:0000:0000:ffff:7f00:0002\nrxe1\nlo\nrdma_cm\nuverbs0\nuverbs1\nnet-kept\nnull-kept\nread-only\n";

#[test]
fn the_command_sees_its_devices_in_sysfs_and_dev() {
    assert_eq!(presented(&[], &[]), PRESENTED);
    // Only the command sees them: the host's /sys/class is as it was.
    assert!(!std::path::Path::new("/sys/class/infiniband_verbs/uverbs1/ibdev").exists());
}

#[test]
fn an_unprivileged_user_sees_them_too() {
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    let nobody_reads = Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "test", "-x"])
        .arg(common::launcher())
        .status()
        .is_ok_and(|s| s.success());
    if !root || !setpriv.exists() || !nobody_reads {
        eprintln!("skipped: needs root, setpriv, and a build nobody can read, to become nobody");
        return;
    }
    let user = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"];
    assert_eq!(presented(&user, &[]), PRESENTED);
}

#[test]
fn no_sysfs_presents_nothing() {
    let out = presented(&[], &["--no-sysfs"]);
    assert!(!out.contains("uverbs1"), "{out}");
}
