//! Devices (`ibv_get_device_list` and friends) and the queries of an open
//! device: attributes, port, GIDs, P_Keys.

use crate::abi::*;
use crate::context::{ctx_of, Ctx};
use crate::ffi::{copy_cstr, guard, set_errno};
use crate::spec::{self, DeviceLink, DeviceSpec};
use libc::{c_char, c_int, c_uint};
use std::sync::OnceLock;

/// A device of the list: the C struct first, so an `ibv_device *` is one.
#[repr(C)]
pub struct Dev {
    pub c: ibv_device,
    pub spec: DeviceSpec,
    /// The node GUID, in network order as `ibv_get_device_guid` returns it.
    pub guid_be: u64,
    /// RoCE: the active MTU, from the interface's MTU when first asked.
    active_mtu: OnceLock<c_int>,
}

impl Dev {
    /// The active MTU of a RoCE port, as rxe derives it from the MTU of
    /// the interface its address is on (4096 on `lo`, 1024 on a 1500-byte
    /// Ethernet link); 1024 if the interface is not found. Looked up once:
    /// rxe too fixes it when the device is made (and on an MTU change).
    pub fn roce_active_mtu(&self) -> c_int {
        *self.active_mtu.get_or_init(|| match &self.spec.link {
            DeviceLink::RoceV2 { addr, scope_id } => crate::sysfs::interface_of(*addr, *scope_id)
                .and_then(|i| crate::sysfs::netdev_mtu(&i))
                .map_or(ACTIVE_MTU, crate::sysfs::rxe_active_mtu),
            DeviceLink::Ib { .. } => ACTIVE_MTU,
        })
    }
}

static DEVICES: OnceLock<Result<Vec<&'static Dev>, spec::SpecError>> = OnceLock::new();

fn make(spec: DeviceSpec, index: usize) -> &'static Dev {
    // SAFETY: ibv_device is plain data; zero is a valid value of every field.
    let mut c: ibv_device = unsafe { std::mem::zeroed() };
    c.node_type = 1; // IBV_NODE_CA
    c.transport_type = 0; // IBV_TRANSPORT_IB (RoCE reports IB transport)
    copy_cstr(&mut c.name, &spec.name);
    copy_cstr(&mut c.dev_name, &format!("uverbs{index}"));
    copy_cstr(&mut c.dev_path, &format!("/sys/class/infiniband_verbs/uverbs{index}"));
    copy_cstr(&mut c.ibdev_path, &format!("/sys/class/infiniband/{}", spec.name));
    let guid_be = crate::sysfs::guid_be_of(&spec);
    Box::leak(Box::new(Dev { c, spec, guid_be, active_mtu: OnceLock::new() }))
}

/// The devices of this process, made once from the environment and kept
/// for its lifetime (applications hold `ibv_device *` after freeing the list).
pub fn devices() -> Result<&'static [&'static Dev], &'static spec::SpecError> {
    let r = DEVICES.get_or_init(|| {
        crate::init_tracing();
        let specs = spec::from_env().inspect_err(|e| {
            eprintln!("libibverbs (softroce): {}: {e}", spec::ENV);
        })?;
        tracing::info!(devices = %spec::to_list(&specs), "device list");
        Ok(specs.into_iter().enumerate().map(|(i, s)| make(s, i)).collect())
    });
    r.as_ref().map(|v| v.as_slice())
}

/// The device behind `p`, if it is one of ours.
pub fn dev_of(p: *const ibv_device) -> Option<&'static Dev> {
    devices().ok()?.iter().copied().find(|d| std::ptr::eq(&d.c, p))
}

#[export_name = "softroce_ibv_get_device_list"]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    guard("ibv_get_device_list", std::ptr::null_mut(), || {
        let devs = match devices() {
            Ok(d) => d,
            Err(_) => {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            }
        };
        // malloc'd, NULL-terminated: ibv_free_device_list frees it.
        // SAFETY: a fresh allocation of devs.len()+1 pointers, all written below.
        let arr =
            unsafe { libc::calloc(devs.len() + 1, std::mem::size_of::<*mut ibv_device>()) } as *mut *mut ibv_device;
        if arr.is_null() {
            set_errno(libc::ENOMEM);
            return arr;
        }
        for (i, d) in devs.iter().enumerate() {
            // SAFETY: i < len+1; the device is 'static and never written through this pointer by us.
            unsafe { *arr.add(i) = &d.c as *const ibv_device as *mut ibv_device };
        }
        if !num.is_null() {
            // SAFETY: the caller's out-parameter.
            unsafe { *num = devs.len() as c_int };
        }
        arr
    })
}

#[export_name = "softroce_ibv_free_device_list"]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard("ibv_free_device_list", (), || {
        // SAFETY: the array ibv_get_device_list calloc'd (or NULL).
        unsafe { libc::free(list.cast()) }
    })
}

#[export_name = "softroce_ibv_get_device_name"]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    guard("ibv_get_device_name", std::ptr::null(), || match dev_of(dev) {
        Some(d) => d.c.name.as_ptr(),
        None => {
            set_errno(libc::EINVAL);
            std::ptr::null()
        }
    })
}

#[export_name = "softroce_ibv_get_device_guid"]
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    guard("ibv_get_device_guid", 0, || dev_of(dev).map_or(0, |d| d.guid_be))
}

#[export_name = "softroce_ibv_get_device_index"]
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    guard("ibv_get_device_index", -1, || {
        let Ok(devs) = devices() else { return -1 };
        devs.iter().position(|d| std::ptr::eq(&d.c, dev)).map_or(-1, |i| i as c_int)
    })
}

/// The device's limits that the create calls enforce (EINVAL above them,
/// as rxe's `rxe_qp_chk_cap`/`rxe_cq_chk_attr`), reported by `ibv_query_device`.
pub const MAX_QP_WR: u32 = 1 << 14;
pub const MAX_SGE: u32 = 32;
/// CQ entries: mlx5's limit (2^22 - 1) rather than rxe's, because libfabric's
/// ofi_rxm asks for 2^18-entry CQs and does not clamp to the device's
/// limit; a CQ grows its storage only as completions wait in it.
pub const MAX_CQE: u32 = (1 << 22) - 1;
/// Bytes of inline data a send may carry (rxe's `RXE_MAX_INLINE_DATA`).
pub const MAX_INLINE_DATA: u32 = 400;

/// What the device reports: limits of the engine (generous where the
/// engine has none), one port, RC atomics.
fn device_attr(ctx: &Ctx) -> ibv_device_attr {
    // SAFETY: plain data, zero is valid.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    copy_cstr(&mut a.fw_ver, env!("CARGO_PKG_VERSION"));
    a.node_guid = ctx.dev.guid_be;
    a.sys_image_guid = ctx.dev.guid_be;
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = 0xffffff; // as rxe
    a.vendor_part_id = 0;
    a.max_qp = 1 << 16;
    a.max_qp_wr = MAX_QP_WR as c_int;
    // RESIZE_MAX_WR, PORT_ACTIVE_EVENT, SYS_IMAGE_GUID, RC_RNR_NAK_GEN, and the
    // memory windows the engine has (MEM_WINDOW, TYPE_2B, as rxe)
    // IBV_DEVICE_XRC (1 << 20): XRC domains, SRQs and QPs (docs/xrc.md).
    a.device_cap_flags = 1 | (1 << 10) | (1 << 11) | (1 << 12) | (1 << 20) | ctx.engine.verbs.device_cap_flags();
    a.max_mw = ctx.engine.verbs.max_mw() as c_int;
    a.max_sge = MAX_SGE as c_int;
    a.max_sge_rd = MAX_SGE as c_int;
    a.max_cq = 1 << 14;
    a.max_cqe = MAX_CQE as c_int;
    a.max_mr = 1 << 18;
    a.max_pd = 1 << 16;
    a.max_qp_rd_atom = 128;
    a.max_res_rd_atom = 1 << 16;
    a.max_qp_init_rd_atom = 128;
    a.atomic_cap = 1; // IBV_ATOMIC_HCA
    a.max_ah = 1 << 16;
    a.max_srq = 1 << 14;
    a.max_srq_wr = MAX_QP_WR as c_int;
    a.max_srq_sge = MAX_SGE as c_int;
    a.max_pkeys = 1;
    // UD multicast, with rxe's limits (docs/multicast.md).
    a.max_mcast_grp = rdma_core_rs::MAX_MCAST_GRP as c_int;
    a.max_mcast_qp_attach = rdma_core_rs::MAX_MCAST_QP_ATTACH as c_int;
    a.max_total_mcast_qp_attach = rdma_core_rs::MAX_TOTAL_MCAST_QP_ATTACH as c_int;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

#[export_name = "softroce_ibv_query_device"]
pub unsafe extern "C" fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    guard("ibv_query_device", libc::EIO, || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return libc::EINVAL };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's out-parameter.
        unsafe { attr.write(device_attr(ctx)) };
        0
    })
}

/// `verbs_context.query_device_ex`, what the inline `ibv_query_device_ex` calls.
pub unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    _input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    size: usize,
) -> c_int {
    guard("ibv_query_device_ex", libc::EIO, || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return libc::EINVAL };
        if attr.is_null() || size < std::mem::size_of::<ibv_device_attr>() {
            return libc::EINVAL;
        }
        // SAFETY: plain data, zero is valid.
        let mut x: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        x.orig_attr = device_attr(ctx);
        x.phys_port_cnt_ex = 1;
        // Completion timestamps count CLOCK_MONOTONIC nanoseconds (cq_ex.rs):
        // a 1 GHz clock that does not wrap.
        x.completion_timestamp_mask = u64::MAX;
        x.hca_core_clock = 1_000_000; // kHz
                                      // On-demand paging (docs/odp.md): implicit, and per transport.
        let odp = ctx.engine.verbs.odp_caps();
        x.odp_caps = ibv_odp_caps {
            general_caps: odp.general_caps,
            rc_odp_caps: odp.rc_odp_caps,
            uc_odp_caps: odp.uc_odp_caps,
            ud_odp_caps: odp.ud_odp_caps,
        };
        x.xrc_odp_caps = odp.xrc_odp_caps;
        // FLUSH (global and persistent placement) and ATOMIC_WRITE, as rxe.
        // The full 64 bits, the 32 of device_cap_flags included, as the kernel gives them.
        x.device_cap_flags_ex = u64::from(x.orig_attr.device_cap_flags) | ctx.engine.verbs.device_cap_flags_ex();
        let n = size.min(std::mem::size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's buffer holds `size` bytes; we write at most that.
        unsafe {
            std::ptr::write_bytes(attr.cast::<u8>(), 0, size);
            std::ptr::copy_nonoverlapping((&x as *const ibv_device_attr_ex).cast::<u8>(), attr.cast::<u8>(), n);
        }
        0
    })
}

/// IBV_MTU_1024: what rxe reports on a 1500-byte Ethernet link; the
/// active MTU of a RoCE device whose interface is not found.
pub const ACTIVE_MTU: c_int = 3;

/// `IBV_LINK_LAYER_INFINIBAND`.
pub const LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;

/// The one port, one GID and one P_Key. RoCE v2: active, Ethernet link
/// layer, LID 0. Native IB: InfiniBand link layer, the port's LID, SM
/// LID, LMC and state (a subnet manager's, when one manages the port),
/// and the largest MTU the interface carries (or the SM's, if smaller).
fn port_attr(ctx: &Ctx) -> ibv_port_attr {
    // SAFETY: plain data, zero is valid.
    let mut p: ibv_port_attr = unsafe { std::mem::zeroed() };
    p.state = 4; // IBV_PORT_ACTIVE
    p.max_mtu = 5; // 4096
    p.active_mtu = ctx.dev.roce_active_mtu();
    p.gid_tbl_len = GID_TABLE_LEN as c_int;
    p.port_cap_flags = crate::sysfs::port_cap_flags(ctx.dev.spec.is_ib());
    p.max_msg_sz = 1 << 31;
    p.pkey_tbl_len = 1;
    p.max_vl_num = 1;
    p.active_width = 1; // 1X
    p.active_speed = 1 << 5; // EDR-like; only printed
    p.phys_state = 5; // LinkUp
    p.link_layer = LINK_LAYER_ETHERNET;
    if ctx.dev.spec.is_ib() {
        let v = &ctx.engine.verbs;
        let port = v.query_port();
        p.link_layer = LINK_LAYER_INFINIBAND;
        p.lid = port.lid;
        p.sm_lid = port.sm_lid;
        p.lmc = port.lmc;
        p.state = c_int::from(port.state.code());
        // What the link carries whole (modify_qp refuses more).
        let link = v.max_path_mtu().map_or(5, |m| m as c_int);
        p.max_mtu = link;
        p.active_mtu = port.active_mtu.map_or(link, |m| (m as c_int).min(link));
        // The P_Keys a subnet manager put in the port's table (at most 16).
        p.pkey_tbl_len = (0..16u16).take_while(|&i| v.query_pkey(i).is_some()).count().max(1) as u16;
    }
    p
}

fn check_port(port: u8) -> Result<(), c_int> {
    if port == 1 {
        Ok(())
    } else {
        tracing::debug!(port, "no such port (the device has port 1 only)");
        Err(libc::EINVAL)
    }
}

/// `verbs_context.query_port`, what the inline `ibv_query_port` calls.
pub unsafe extern "C" fn query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    size: usize,
) -> c_int {
    guard("ibv_query_port", libc::EIO, || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return libc::EINVAL };
        if let Err(e) = check_port(port) {
            return e;
        }
        if attr.is_null() {
            return libc::EINVAL;
        }
        let p = port_attr(ctx);
        let n = size.min(std::mem::size_of::<ibv_port_attr>());
        // SAFETY: the caller's buffer holds `size` bytes; we write at most that.
        unsafe { std::ptr::copy_nonoverlapping((&p as *const ibv_port_attr).cast::<u8>(), attr.cast::<u8>(), n) };
        0
    })
}

/// The exported `ibv_query_port` (old binaries, and the inline one's
/// fallback): fills the legacy struct, which ends at `link_layer`.
#[export_name = "softroce_ibv_query_port"]
pub unsafe extern "C" fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int {
    // SAFETY: forwarded.
    unsafe { query_port(context, port, attr, std::mem::offset_of!(ibv_port_attr, flags)) }
}

pub use crate::sysfs::GID_TABLE_LEN;

/// The GID at `index` of `port`: EINVAL past the table or on another
/// port, ENODATA for an empty entry (as the kernel answers).
fn gid_of(ctx: &Ctx, port: u32, index: c_int) -> Result<[u8; 16], c_int> {
    if port != 1 {
        return Err(libc::EINVAL);
    }
    let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
    if index >= GID_TABLE_LEN {
        return Err(libc::EINVAL);
    }
    ctx.engine.verbs.query_gid(index).map(|g| g.0).map_err(|_| libc::ENODATA)
}

#[export_name = "softroce_ibv_query_gid"]
pub unsafe extern "C" fn ibv_query_gid(context: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int {
    guard("ibv_query_gid", -1, || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return -1 };
        if gid.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        match gid_of(ctx, port.into(), index) {
            Ok(raw) => {
                // SAFETY: the caller's out-parameter.
                unsafe { gid.write(ibv_gid { raw }) };
                0
            }
            // An empty entry reads as the zero GID, as libibverbs gives it.
            Err(libc::ENODATA) => {
                // SAFETY: the caller's out-parameter.
                unsafe { gid.write(ibv_gid { raw: [0; 16] }) };
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

#[export_name = "softroce__ibv_query_gid_ex"]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    size: usize,
) -> c_int {
    guard("ibv_query_gid_ex", libc::EIO, || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return libc::EINVAL };
        if entry.is_null() || flags != 0 || size < std::mem::size_of::<ibv_gid_entry>() {
            return libc::EINVAL;
        }
        let Ok(idx) = c_int::try_from(index) else { return libc::EINVAL };
        match gid_of(ctx, port, idx) {
            Ok(raw) => {
                let e = ibv_gid_entry {
                    gid: ibv_gid { raw },
                    gid_index: index,
                    port_num: port,
                    gid_type: if ctx.dev.spec.is_ib() { IBV_GID_TYPE_IB } else { IBV_GID_TYPE_ROCE_V2 },
                    ndev_ifindex: 0,
                };
                // SAFETY: the caller's out-parameter, at least this large.
                unsafe { entry.write(e) };
                0
            }
            Err(e) => e,
        }
    })
}

#[export_name = "softroce__ibv_query_gid_table"]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max: usize,
    flags: u32,
    size: usize,
) -> isize {
    guard("ibv_query_gid_table", -(libc::EIO as isize), || {
        if entries.is_null() || max == 0 || flags != 0 || size < std::mem::size_of::<ibv_gid_entry>() {
            return -(libc::EINVAL as isize);
        }
        // SAFETY: forwarded; one entry of `size` bytes is there.
        match unsafe { _ibv_query_gid_ex(context, 1, 0, entries, 0, size) } {
            0 => 1,
            e => -(e as isize),
        }
    })
}

/// rdma-core's private `ibv_query_gid_type` (ibv_devinfo uses it):
/// IBV_GID_TYPE_SYSFS_ROCE_V2 (1) for our one GID, or on native IB
/// IBV_GID_TYPE_SYSFS_IB_ROCE_V1 (0).
#[export_name = "softroce_ibv_query_gid_type"]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_int,
) -> c_int {
    guard("ibv_query_gid_type", -1, || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return -1 };
        if ty.is_null() || gid_of(ctx, port.into(), index.min(i32::MAX as c_uint) as c_int).is_err() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's out-parameter.
        unsafe { *ty = if ctx.dev.spec.is_ib() { 0 } else { 1 } };
        0
    })
}

#[export_name = "softroce_ibv_query_pkey"]
pub unsafe extern "C" fn ibv_query_pkey(context: *mut ibv_context, port: u8, index: c_int, pkey: *mut u16) -> c_int {
    guard("ibv_query_pkey", -1, || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return -1 };
        // The port's table: 0xFFFF alone, or what a subnet manager set
        // (native IB on a managed port).
        let key = u16::try_from(index).ok().and_then(|i| ctx.engine.verbs.query_pkey(i));
        let Some(key) = key.filter(|_| port == 1 && !pkey.is_null()) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        // SAFETY: the caller's out-parameter.
        unsafe { *pkey = key.to_be() };
        0
    })
}

#[export_name = "softroce_ibv_get_pkey_index"]
pub unsafe extern "C" fn ibv_get_pkey_index(context: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    guard("ibv_get_pkey_index", -1, || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return -1 };
        let want = u16::from_be(pkey);
        let at = (0..16u16).map_while(|i| ctx.engine.verbs.query_pkey(i)).position(|k| k == want);
        match at.filter(|_| port == 1) {
            Some(i) => i as c_int,
            None => {
                set_errno(libc::EINVAL);
                -1
            }
        }
    })
}
