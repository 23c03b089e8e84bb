//! Stand-ins for the provider calls perftest links (`libmlx5.so.1`,
//! `libefa.so.1`). `softroce-run` points those sonames at this library, so
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
    mlx5dv_open_device,
    mlx5dv_qp_ex_from_ibv_qp_ex,
    mlx5dv_create_mkey,
    mlx5dv_dek_create,
    efadv_create_qp_ex
);

unsupported_int!(
    mlx5dv_devx_general_cmd,
    mlx5dv_destroy_mkey,
    mlx5dv_dek_destroy,
    mlx5dv_crypto_login,
    efadv_query_device
);
