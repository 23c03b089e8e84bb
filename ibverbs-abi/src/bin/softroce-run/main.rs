//! `softroce-run [--device NAME=ADDR]... -- COMMAND [ARGS]`: runs an
//! unmodified RDMA application over this stack.
//!
//! It finds the libibverbs cdylib next to its own executable, makes a
//! private directory in which `libibverbs.so.1` (and the provider sonames
//! perftest links, `libmlx5.so.1` and `libefa.so.1`) point to it, and
//! `librdmacm.so.1` to the rdmacm-abi cdylib beside it, puts
//! that directory first in `LD_LIBRARY_PATH`, sets `SOFTROCE_DEVICES`,
//! presents the devices in sysfs and `/dev` to the command (a private mount
//! namespace, see `present`), and execs the command, which keeps this pid.

mod present;

use ibverbs_abi::spec::{self, DeviceSpec, SpecError};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Names the library to use instead of the one beside this program.
const LIBRARY_ENV: &str = "SOFTROCE_LIBRARY";

/// Names the librdmacm.so.1 to use instead of the one beside the library.
const RDMACM_ENV: &str = "SOFTROCE_RDMACM_LIBRARY";

/// libfabric's default memory monitor on Debian ("memhooks") rewrites
/// libc's `munmap` and its kin in place while the process runs: a thread
/// inside one of them as it is patched returns into half-written code
/// and dies of SIGSEGV (SEGV_ACCERR at `munmap`; this library's own
/// threads, which glibc may give an arena with `munmap` as they start,
/// made it one `fi_pingpong -e msg` run in about 14). The registration
/// cache it serves saves little on a software device, so the command
/// runs with the monitor off unless the user chose one.
const LIBFABRIC_MONITOR: (&str, &str) = ("FI_MR_CACHE_MONITOR", "disabled");

const USAGE: &str = "\
usage: softroce-run [--device NAME=ADDR|NAME=ib:IFNAME[:LID]]... [--no-sysfs] -- COMMAND [ARGS]...

Runs COMMAND with this project's libibverbs.so.1 and librdmacm.so.1 in
place of rdma-core's, so that unmodified RDMA applications (ibv_rc_pingpong,
perftest, rping, your own) run over soft RoCE v2 devices on UDP port 4791,
without a kernel module.

  --device NAME=ADDR   a device NAME bound to the local IP address ADDR
                       (IPv4, or IPv6 with an optional %SCOPE); repeat for
                       more. Default: SOFTROCE_DEVICES if set, else
                       rxe0=127.0.0.1
  --device NAME=ib:IFNAME[:LID]
                       a native InfiniBand device NAME on the network
                       interface IFNAME (raw frames; root), at port LID
                       LID (default: the subnet manager's, else the low
                       14 bits of the interface's MAC)
  --no-sysfs           do not present the devices in /sys/class/infiniband
                       and /dev/infiniband (see below)
  -h, --help           this text

The command sees its devices as a kernel's: /sys/class/infiniband/NAME
(GIDs, ports, device/net/IFNAME) and /dev/infiniband/uverbsN, which UCX,
libfabric and rdma-core's tests look for. They live in a private mount
namespace of the command and its children (a user namespace too when not
run as root: the command keeps its uid); nothing on the host changes.

Environment: SOFTROCE_DEVICES (the device list, NAME=ADDR,NAME=ib:IFNAME...),
SOFTROCE_LOG (a tracing filter such as debug: the library logs to stderr),
SOFTROCE_LIBRARY (the library to use; default: libibverbs_abi.so beside
this program), SOFTROCE_RDMACM_LIBRARY (the librdmacm to use; default:
librdmacm_abi.so beside the library or this program).
It sets FI_MR_CACHE_MONITOR=disabled for the command unless already set:
libfabric's default monitor patches libc while threads run in it.

Example, two devices and a ping-pong between them:
  softroce-run --device rxe0=127.0.0.1 -- ibv_rc_pingpong -d rxe0 -g 0 &
  softroce-run --device rxe1=127.0.0.2 -- ibv_rc_pingpong -d rxe1 -g 0 127.0.0.1
Native IB, addressed by LID (no -g), across a veth pair va/vb:
  ip netns exec a softroce-run --device mlx0=ib:va -- ibv_rc_pingpong -d mlx0 &
  ip netns exec b softroce-run --device mlx0=ib:vb -- ibv_rc_pingpong -d mlx0 ADDR-OF-va";

#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("{0}")]
    Usage(String),
    #[error("--device: {0}")]
    Device(#[from] SpecError),
    #[error("{var}: {source}")]
    Env { var: &'static str, source: SpecError },
    #[error("cannot find this program's own path: {0}")]
    SelfPath(std::io::Error),
    #[error("the library {0} is missing: build it with `cargo build --release` (it sits next to softroce-run)")]
    NoLibrary(PathBuf),
    #[error(
        "the library librdmacm_abi.so (this project's librdmacm.so.1) is missing (looked for {}): build it with \
         `cargo build --release -p rdmacm-abi`, or name one with SOFTROCE_RDMACM_LIBRARY; without it the \
         system's librdmacm.so.1 would be used, which cannot reach these devices",
        .0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoRdmacm(Vec<PathBuf>),
    #[error("cannot make the library directory {path}: {source}")]
    LibDir { path: PathBuf, source: std::io::Error },
    #[error("cannot run {cmd}: {source}")]
    Spawn { cmd: String, source: std::io::Error },
}

struct Args {
    devices: Vec<DeviceSpec>,
    command: Vec<OsString>,
    /// Present the devices in sysfs and /dev (not with --no-sysfs).
    sysfs: bool,
}

fn parse(args: Vec<OsString>) -> Result<Option<Args>, RunError> {
    let mut devices = Vec::new();
    let mut sysfs = true;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy().into_owned();
        match s.as_str() {
            "-h" | "--help" => return Ok(None),
            "--" => {
                let command: Vec<OsString> = it.collect();
                if command.is_empty() {
                    return Err(RunError::Usage("no COMMAND after --".into()));
                }
                return Ok(Some(Args { devices, command, sysfs }));
            }
            "--no-sysfs" => sysfs = false,
            "--device" | "-d" => {
                let v = it.next().ok_or_else(|| RunError::Usage(format!("{s} needs NAME=ADDR or NAME=ib:IFNAME")))?;
                devices.push(spec::parse_entry(&v.to_string_lossy())?);
            }
            _ if s.starts_with("--device=") => devices.push(spec::parse_entry(&s["--device=".len()..])?),
            _ => return Err(RunError::Usage(format!("unexpected argument {s:?} (the command goes after --)"))),
        }
    }
    Err(RunError::Usage("no -- COMMAND given".into()))
}

/// The library: `SOFTROCE_LIBRARY` if set, else the cdylib cargo builds
/// beside this executable (`cargo build`), else in `deps/` there (`cargo
/// test` leaves it only there).
fn library() -> Result<PathBuf, RunError> {
    if let Some(p) = std::env::var_os(LIBRARY_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(RunError::NoLibrary(p)) };
    }
    let exe = std::env::current_exe().map_err(RunError::SelfPath)?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let lib = dir.join("libibverbs_abi.so");
    if lib.is_file() {
        return Ok(lib);
    }
    let deps = dir.join("deps").join("libibverbs_abi.so");
    if deps.is_file() {
        Ok(deps)
    } else {
        Err(RunError::NoLibrary(lib))
    }
}

/// The librdmacm.so.1 (rdmacm-abi's cdylib): `SOFTROCE_RDMACM_LIBRARY`
/// if set, else `librdmacm_abi.so` beside the library, beside this program
/// or in `deps/` there. None found is an error, not a run without it: the
/// command would then load the system's librdmacm.so.1, which talks to the
/// kernel's RDMA CM and fails in ways that do not say why (rping: "failed
/// to create RDMA CM event channel: No such file or directory").
fn rdmacm_library(lib: &Path) -> Result<PathBuf, RunError> {
    if let Some(p) = std::env::var_os(RDMACM_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(RunError::NoLibrary(p)) };
    }
    let name = "librdmacm_abi.so";
    let exe = std::env::current_exe().ok();
    let exe_dir = exe.as_deref().and_then(Path::parent);
    let looked: Vec<PathBuf> =
        [lib.parent().map(|d| d.join(name)), exe_dir.map(|d| d.join(name)), exe_dir.map(|d| d.join("deps").join(name))]
            .into_iter()
            .flatten()
            .collect();
    looked.iter().find(|p| p.is_file()).cloned().ok_or(RunError::NoRdmacm(looked))
}

/// The private directory whose sonames point at `lib` (and `rdmacm`): one
/// per user and library paths, made once and reused, so that nothing is
/// left to clean up after the command (which replaces this process).
fn lib_dir(lib: &Path, rdmacm: &Path) -> Result<PathBuf, RunError> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    lib.hash(&mut h);
    rdmacm.hash(&mut h);
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("softroce-run-{uid}")).join(format!("{:016x}", h.finish()));
    let err = |source| RunError::LibDir { path: dir.clone(), source };
    std::fs::create_dir_all(&dir).map_err(err)?;
    let links = ["libibverbs.so.1", "libmlx5.so.1", "libefa.so.1"].map(|n| (n, lib));
    for (name, lib) in links.into_iter().chain([("librdmacm.so.1", rdmacm)]) {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() == Some(lib) {
            continue;
        }
        // A new link under a private name, renamed over the old one: never
        // a moment without the soname for a command starting meanwhile.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(lib, &tmp).map_err(err)?;
        std::fs::rename(&tmp, &link).map_err(err)?;
    }
    Ok(dir)
}

fn run(args: Args) -> Result<ExitCode, RunError> {
    use std::os::unix::process::CommandExt;
    let devices = if args.devices.is_empty() {
        spec::from_env().map_err(|source| RunError::Env { var: spec::ENV, source })?
    } else {
        let mut seen = Vec::new();
        for d in &args.devices {
            if seen.contains(&&d.name) {
                return Err(SpecError::Duplicate(d.name.clone()).into());
            }
            seen.push(&d.name);
        }
        args.devices
    };
    let lib = library()?;
    let lib = lib.canonicalize().unwrap_or(lib);
    let rdmacm = rdmacm_library(&lib)?;
    let rdmacm = rdmacm.canonicalize().unwrap_or(rdmacm);
    let dir = lib_dir(&lib, &rdmacm)?;
    let mut path = OsString::from(&dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    if args.sysfs {
        if let Err(e) = present::present(&devices) {
            eprintln!(
                "softroce-run: warning: {e}; the command runs without /sys/class/infiniband and /dev/infiniband \
                 (UCX, libfabric and rdma-core's rdmacm tests will not find the devices; --no-sysfs skips this)"
            );
        }
    }
    let cmd = args.command[0].to_string_lossy().into_owned();
    // exec: the command takes this process over (its pid, its signals,
    // its exit status), as if it had been started directly.
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]).env("LD_LIBRARY_PATH", path).env(spec::ENV, spec::to_list(&devices));
    if std::env::var_os(LIBFABRIC_MONITOR.0).is_none() {
        command.env(LIBFABRIC_MONITOR.0, LIBFABRIC_MONITOR.1);
    }
    let source = command.exec();
    Err(RunError::Spawn { cmd, source })
}

fn main() -> ExitCode {
    let parsed = parse(std::env::args_os().skip(1).collect());
    let result = match parsed {
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Some(args)) => run(args),
        Err(e) => Err(e),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("softroce-run: {e}");
            if matches!(e, RunError::Usage(_)) {
                eprintln!("{USAGE}");
            }
            ExitCode::from(125)
        }
    }
}
