//! The rest of the exported ABI: names of enums, rate conversions, fork
//! support, sysfs helpers, and the calls this stack does not support
//! (they fail the way libibverbs fails on a device without the feature).

use crate::abi::*;
use crate::ffi::{guard, set_errno};
use libc::{c_char, c_int, c_void};

macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

#[export_name = "softroce_ibv_wc_status_str"]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    match status {
        0 => cstr!("success"),
        1 => cstr!("local length error"),
        2 => cstr!("local QP operation error"),
        3 => cstr!("local EE context operation error"),
        4 => cstr!("local protection error"),
        5 => cstr!("Work Request Flushed Error"),
        6 => cstr!("memory management operation error"),
        7 => cstr!("bad response error"),
        8 => cstr!("local access error"),
        9 => cstr!("remote invalid request error"),
        10 => cstr!("remote access error"),
        11 => cstr!("remote operation error"),
        12 => cstr!("transport retry counter exceeded"),
        13 => cstr!("RNR retry counter exceeded"),
        14 => cstr!("local RDD violation error"),
        15 => cstr!("remote invalid RD request"),
        16 => cstr!("aborted error"),
        17 => cstr!("invalid EE context number"),
        18 => cstr!("invalid EE context state"),
        19 => cstr!("fatal error"),
        20 => cstr!("response timeout error"),
        21 => cstr!("general error"),
        22 => cstr!("TM error"),
        23 => cstr!("TM software rendezvous"),
        _ => cstr!("unknown"),
    }
}

#[export_name = "softroce_ibv_event_type_str"]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const NAMES: [&str; 20] = [
        "CQ error\0",
        "local work queue catastrophic error\0",
        "invalid request local work queue error\0",
        "local access violation work queue error\0",
        "communication established\0",
        "send queue drained\0",
        "path migrated\0",
        "path migration request error\0",
        "local catastrophic error\0",
        "port active\0",
        "port error\0",
        "LID change\0",
        "P_Key change\0",
        "SM change\0",
        "SRQ catastrophic error\0",
        "SRQ limit reached\0",
        "last WQE reached\0",
        "client reregistration\0",
        "GID table change\0",
        "WQ fatal\0",
    ];
    usize::try_from(event).ok().and_then(|i| NAMES.get(i)).map_or(cstr!("unknown"), |s| s.as_ptr().cast())
}

#[export_name = "softroce_ibv_node_type_str"]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    match node_type {
        1 => cstr!("InfiniBand channel adapter"),
        2 => cstr!("InfiniBand switch"),
        3 => cstr!("InfiniBand router"),
        4 => cstr!("iWARP NIC"),
        5 => cstr!("usNIC"),
        6 => cstr!("usNIC UDP"),
        7 => cstr!("unspecified"),
        _ => cstr!("unknown"),
    }
}

#[export_name = "softroce_ibv_port_state_str"]
pub extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    match state {
        0 => cstr!("PORT_NOP"),
        1 => cstr!("PORT_DOWN"),
        2 => cstr!("PORT_INIT"),
        3 => cstr!("PORT_ARMED"),
        4 => cstr!("PORT_ACTIVE"),
        5 => cstr!("PORT_ACTIVE_DEFER"),
        _ => cstr!("invalid state"),
    }
}

/// `enum ibv_rate` and its multiple of 2.5 Gb/s and its Mb/s, as verbs.c has them.
const RATES: [(c_int, c_int, c_int); 22] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (7, 12, 30000),
    (8, 16, 40000),
    (9, 24, 60000),
    (10, 32, 80000),
    (4, 48, 120000),
    (11, 6, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25781),
    (16, 40, 103125),
    (17, 80, 206250),
    (18, 120, 309375),
    (19, 20, 50000),
    (20, 160, 400000),
    (21, 240, 600000),
    (22, 320, 800000),
    (23, 480, 1200000),
];

#[export_name = "softroce_ibv_rate_to_mult"]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

#[export_name = "softroce_mult_to_ibv_rate"]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES.iter().find(|r| r.1 == mult).map_or(0, |r| r.0)
}

#[export_name = "softroce_ibv_rate_to_mbps"]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

#[export_name = "softroce_mbps_to_ibv_rate"]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

/// Registered memory is ordinary memory here (nothing is pinned for DMA),
/// so fork needs no preparation.
#[export_name = "softroce_ibv_fork_init"]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// IBV_FORK_UNNEEDED.
#[export_name = "softroce_ibv_is_fork_initialized"]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

#[export_name = "softroce_ibv_dontfork_range"]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[export_name = "softroce_ibv_dofork_range"]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[export_name = "softroce_ibv_get_sysfs_path"]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    cstr!("/sys")
}

/// Reads `dir/file` into `buf` (NUL-terminated, a trailing newline
/// dropped), as libibverbs does. Our devices' files (`/sys/class/infiniband/NAME/...`)
/// are answered from the same tree `softroce-run` mounts (`sysfs`), so
/// they read the same with or without its mount namespace.
#[export_name = "softroce_ibv_read_sysfs_file"]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard("ibv_read_sysfs_file", -1, || {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: NUL-terminated strings from the caller.
        let (d, f) = unsafe { (std::ffi::CStr::from_ptr(dir), std::ffi::CStr::from_ptr(file)) };
        let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
        let ours = path.strip_prefix("/sys/class/").and_then(our_sysfs_file);
        let Some(mut data) = ours.or_else(|| std::fs::read(&path).ok()) else {
            set_errno(libc::ENOENT);
            return -1;
        };
        data.truncate(size - 1);
        if data.last() == Some(&b'\n') {
            data.pop();
        }
        // SAFETY: `buf` holds `size` bytes; we write at most size-1 and a NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len());
            *buf.add(data.len()) = 0;
        }
        data.len() as c_int
    })
}

/// The contents of `/sys/class/REL` in the tree of this process's devices.
fn our_sysfs_file(rel: &str) -> Option<Vec<u8>> {
    use crate::sysfs::{class_tree, port_view, Node};
    let specs: Vec<_> = crate::device::devices().ok()?.iter().map(|d| d.spec.clone()).collect();
    let rel = rel.trim_end_matches('/');
    class_tree(&specs, port_view).into_iter().find_map(|e| match e.node {
        Node::File(text) if e.path.as_os_str() == rel => Some(text.into_bytes()),
        _ => None,
    })
}

#[export_name = "softroce_ibv_resolve_eth_l2_from_gid"]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    libc::EOPNOTSUPP
}

#[export_name = "softroce_ibv_set_ece"]
pub extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

#[export_name = "softroce_ibv_query_ece"]
pub extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// Data arrives in order here: every packet is placed as it is accepted.
#[export_name = "softroce_ibv_query_qp_data_in_order"]
pub extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: c_int, _flags: u32) -> c_int {
    0
}

/// Providers register with the real libibverbs; none is loaded here.
#[export_name = "softroce_ibv_register_driver"]
pub extern "C" fn ibv_register_driver(_name: *const c_char, _init: *mut c_void) {}

#[export_name = "softroce_ibv_import_dm"]
pub extern "C" fn ibv_import_dm(_context: *mut ibv_context, _handle: u32) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

#[export_name = "softroce_ibv_unimport_dm"]
pub extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

#[export_name = "softroce_ibv_reg_dmabuf_mr"]
pub extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

// The kernel-ABI copy helpers librdmacm links against: with no kernel
// uverbs there is no kernel structure to copy from, and librdmacm only
// calls them on paths that went through the kernel first.
#[export_name = "softroce_ibv_copy_ah_attr_from_kern"]
pub extern "C" fn ibv_copy_ah_attr_from_kern(_dst: *mut c_void, _src: *const c_void) {}
#[export_name = "softroce_ibv_copy_qp_attr_from_kern"]
pub extern "C" fn ibv_copy_qp_attr_from_kern(_dst: *mut c_void, _src: *const c_void) {}
#[export_name = "softroce_ibv_copy_path_rec_from_kern"]
pub extern "C" fn ibv_copy_path_rec_from_kern(_dst: *mut c_void, _src: *const c_void) {}
#[export_name = "softroce_ibv_copy_path_rec_to_kern"]
pub extern "C" fn ibv_copy_path_rec_to_kern(_dst: *mut c_void, _src: *const c_void) {}
