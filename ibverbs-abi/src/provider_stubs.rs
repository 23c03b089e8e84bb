//! Stand-ins for the provider calls perftest and UCX's `libuct_ib` link
//! (`libmlx5.so.1`, `libefa.so.1`). `softroce-run` points those sonames at this library, so
//! that perftest's binaries load without the real providers (which bind
//! rdma-core's private libibverbs symbols that this library does not
//! have); no mlx5 or EFA device exists here, so every call reports
//! "not supported", which perftest takes as "not that kind of device".

use libc::{c_int, c_void};

macro_rules! unsupported_ptr {
    ($($name:ident),*) => {$(
        #[export_name = concat!("softroce_", stringify!($name))]
        pub extern "C" fn $name() -> *mut c_void {
            crate::ffi::set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    )*};
}

macro_rules! unsupported_int {
    ($($name:ident),*) => {$(
        #[export_name = concat!("softroce_", stringify!($name))]
        pub extern "C" fn $name() -> c_int {
            crate::ffi::set_errno(libc::EOPNOTSUPP);
            libc::EOPNOTSUPP
        }
    )*};
}

unsupported_ptr!(
    mlx5dv_create_qp,
    mlx5dv_create_cq,
    mlx5dv_open_device,
    mlx5dv_qp_ex_from_ibv_qp_ex,
    mlx5dv_create_mkey,
    mlx5dv_dek_create,
    mlx5dv_devx_alloc_uar,
    mlx5dv_devx_obj_create,
    mlx5dv_devx_umem_reg,
    mlx5dv_devx_create_event_channel,
    efadv_create_qp_ex
);

unsupported_int!(
    mlx5dv_init_obj,
    mlx5dv_devx_general_cmd,
    mlx5dv_devx_obj_destroy,
    mlx5dv_devx_obj_modify,
    mlx5dv_devx_obj_query,
    mlx5dv_devx_qp_modify,
    mlx5dv_devx_qp_query,
    mlx5dv_devx_umem_dereg,
    mlx5dv_devx_subscribe_devx_event,
    mlx5dv_destroy_mkey,
    mlx5dv_dek_destroy,
    mlx5dv_crypto_login,
    efadv_query_device
);

/// `mlx5dv_is_supported`: no device of this library is an mlx5 one
/// (UCX asks before it takes its mlx5 paths).
#[export_name = "softroce_mlx5dv_is_supported"]
pub extern "C" fn mlx5dv_is_supported(_device: *mut c_void) -> bool {
    false
}

/// `mlx5dv_devx_get_event`: -1 (a `ssize_t`), errno EOPNOTSUPP.
#[export_name = "softroce_mlx5dv_devx_get_event"]
pub extern "C" fn mlx5dv_devx_get_event(_channel: *mut c_void, _out: *mut c_void, _len: usize) -> isize {
    crate::ffi::set_errno(libc::EOPNOTSUPP);
    -1
}

/// The `void` ones: nothing was made, so nothing to free.
#[export_name = "softroce_mlx5dv_devx_free_uar"]
pub extern "C" fn mlx5dv_devx_free_uar(_uar: *mut c_void) {}

#[export_name = "softroce_mlx5dv_devx_destroy_event_channel"]
pub extern "C" fn mlx5dv_devx_destroy_event_channel(_channel: *mut c_void) {}
