//! Devices (`ibv_get_device_list` and friends) and their limits. The
//! queries of an open device are in `query.rs`, above the contexts.

use crate::abi::*;
use crate::ffi::{copy_cstr, guard, set_errno};
use crate::spec::{self, DeviceLink, DeviceSpec};
use libc::{c_char, c_int};
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

/// IBV_MTU_1024: what rxe reports on a 1500-byte Ethernet link; the
/// active MTU of a RoCE device whose interface is not found.
pub const ACTIVE_MTU: c_int = 3;
