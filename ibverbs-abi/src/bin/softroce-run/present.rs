//! Presents the devices as the kernel would, to the command only: in a
//! private mount namespace, `/sys/class` gains `infiniband/` and
//! `infiniband_verbs/` (the tree of `ibverbs_abi::sysfs`) and `/dev` gains
//! `infiniband/uverbsN` and `infiniband/rdma_cm`.
//!
//! Why: UCX keeps a device only if `/dev/infiniband/uverbsN` exists;
//! rdma-core's tests and libfabric look for the device's network
//! interface under `/sys/class/infiniband/NAME/device/net/`. Neither can
//! be created on the host without a kernel module (sysfs takes no new
//! files, even from root), and should not be: the view belongs to the
//! command and its children, and vanishes with them.
//!
//! How: `unshare(CLONE_NEWNS)` (as root) or `unshare(CLONE_NEWUSER |
//! CLONE_NEWNS)` (as anyone else, mapping the user to itself, so the
//! command keeps its uid and gains nothing); mounts made private; then each
//! of the two directories is covered by a tmpfs into which every original
//! entry is bind-mounted back (through an fd opened before covering) and
//! our entries are added. Nothing on the host changes.

use ibverbs_abi::spec::DeviceSpec;
use ibverbs_abi::sysfs::{class_tree, port_view, Node};
use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PresentError {
    #[error("cannot make a private mount namespace ({call}: {source}); unprivileged user namespaces may be disabled here (sysctl kernel.unprivileged_userns_clone or user.max_user_namespaces)")]
    Unshare { call: &'static str, source: std::io::Error },
    #[error("cannot map the user into its namespace ({path}: {source})")]
    IdMap { path: &'static str, source: std::io::Error },
    #[error("cannot {what} {path}: {source}")]
    Mount { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Enters a private mount namespace in which `devices` appear in sysfs and
/// `/dev` as kernel devices would. Must run while this process has one
/// thread (unshare of a user namespace requires it), before exec.
pub fn present(devices: &[DeviceSpec]) -> Result<(), PresentError> {
    enter_namespace()?;
    let tree = class_tree(devices, port_view);
    cover("/sys/class", &["infiniband", "infiniband_verbs"], |root| {
        for e in &tree {
            let path = root.join(&e.path);
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir).map_err(|source| PresentError::Write { path: dir.into(), source })?;
            }
            let r = match &e.node {
                Node::File(text) => fs::write(&path, text),
                Node::Link(to) => std::os::unix::fs::symlink(to, &path),
            };
            r.map_err(|source| PresentError::Write { path: path.clone(), source })?;
        }
        Ok(())
    })?;
    read_only("/sys/class")?;
    cover("/dev", &["infiniband"], |root| {
        let dir = root.join("infiniband");
        fs::create_dir_all(&dir).map_err(|source| PresentError::Write { path: dir.clone(), source })?;
        // Character devices cannot be made here (mknod needs privilege, and
        // a user namespace's tmpfs is nodev): each node is /dev/null bound
        // in place, a character device that opens, reads empty, and takes
        // writes. Our libraries never open them; UCX only checks they exist.
        let names = (0..devices.len()).map(|i| format!("uverbs{i}")).chain(["rdma_cm".to_string()]);
        for name in names {
            let node = dir.join(name);
            fs::write(&node, b"").map_err(|source| PresentError::Write { path: node.clone(), source })?;
            bind(Path::new("/dev/null"), &node)?;
        }
        Ok(())
    })
}

fn errno(call: &'static str) -> PresentError {
    PresentError::Unshare { call, source: std::io::Error::last_os_error() }
}

fn enter_namespace() -> Result<(), PresentError> {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // Root needs no user namespace, and keeps its privileges in the new
    // mount namespace (a user namespace would leave root's files owned by
    // an unmapped user).
    let flags = if uid == 0 { libc::CLONE_NEWNS } else { libc::CLONE_NEWUSER | libc::CLONE_NEWNS };
    // SAFETY: unshare has no memory preconditions.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(errno("unshare"));
    }
    if uid != 0 {
        let write = |path: &'static str, text: String| {
            fs::write(path, text).map_err(|source| PresentError::IdMap { path, source })
        };
        write("/proc/self/setgroups", "deny".into())?;
        write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    // Private: nothing mounted below reaches the host's namespace.
    mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE, None, "make private")
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// mount(2) with the filesystem's options `data` (or none).
fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
    what: &'static str,
) -> Result<(), PresentError> {
    let src = source.map(cstr);
    let ty = fstype.map(|t| CString::new(t).unwrap_or_default());
    let data = data.map(|d| CString::new(d).unwrap_or_default());
    let tgt = cstr(target);
    // SAFETY: NUL-terminated strings that outlive the call, or NULL.
    let r = unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            tgt.as_ptr(),
            ty.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref().map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(PresentError::Mount { what, path: target.into(), source: std::io::Error::last_os_error() })
    }
}

/// Binds `source` onto `target` (recursively: what is mounted below the
/// source comes along, and a user namespace allows no other bind of a
/// tree holding mounts it did not make).
fn bind(source: &Path, target: &Path) -> Result<(), PresentError> {
    mount(Some(source), target, None, libc::MS_BIND | libc::MS_REC, None, "bind onto")
}

/// Covers `dir` with a tmpfs holding every entry it had (bound back in
/// place, except those named in `replace`) plus what `fill` adds.
fn cover(
    dir: &str,
    replace: &[&str],
    fill: impl FnOnce(&Path) -> Result<(), PresentError>,
) -> Result<(), PresentError> {
    let root = Path::new(dir);
    let read_err = |source| PresentError::Mount { what: "read", path: root.into(), source };
    let entries: Vec<(std::ffi::OsString, fs::FileType)> = fs::read_dir(root)
        .map_err(read_err)?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name(), e.file_type().ok()?)))
        .filter(|(n, _)| !replace.iter().any(|r| n.as_bytes() == r.as_bytes()))
        .collect();
    // The original directory stays reachable through this descriptor once
    // covered: /proc/self/fd/N/NAME walks the covered tree.
    let held: OwnedFd = fs::File::open(root).map_err(read_err)?.into();
    let via = PathBuf::from(format!("/proc/self/fd/{}", held.as_raw_fd()));
    let tmpfs = Path::new("tmpfs");
    mount(Some(tmpfs), root, Some("tmpfs"), libc::MS_NOSUID, Some("mode=755"), "mount a tmpfs on")?;
    let filled = refill(root, &via, entries).and_then(|()| fill(root));
    drop(held);
    if filled.is_err() {
        // Never leave a half-made directory: uncover it, the original returns.
        let _ = umount_detach(root);
    }
    filled
}

fn umount_detach(dir: &Path) -> std::io::Result<()> {
    let d = cstr(dir);
    // SAFETY: a NUL-terminated path.
    match unsafe { libc::umount2(d.as_ptr(), libc::MNT_DETACH) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Puts every original entry back in place under the covering tmpfs:
/// directories and files bound from `via` (the covered directory), links
/// copied.
fn refill(root: &Path, via: &Path, entries: Vec<(std::ffi::OsString, fs::FileType)>) -> Result<(), PresentError> {
    for (name, ty) in entries {
        let target = root.join(&name);
        let source = via.join(&name);
        let made = if ty.is_symlink() {
            fs::read_link(&source).and_then(|to| std::os::unix::fs::symlink(to, &target))
        } else if ty.is_dir() {
            fs::create_dir(&target)
        } else {
            fs::write(&target, b"")
        };
        made.map_err(|source| PresentError::Write { path: target.clone(), source })?;
        if !ty.is_symlink() {
            bind(&source, &target)?;
        }
    }
    Ok(())
}

/// Makes the covering tmpfs of `dir` read-only, as sysfs is to a user.
fn read_only(dir: &str) -> Result<(), PresentError> {
    mount(None, Path::new(dir), None, libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY, None, "make read-only")
}
