//! A drop-in `libibverbs.so.1`: the libibverbs ABI of rdma-core 44 over
//! this project's verbs (`rdma-core-rs`), so that binaries built against
//! rdma-core run unmodified on soft RoCE v2 devices. See
//! `docs/ibverbs-abi.md`.
//!
//! - [`abi`]: the C layouts of `<infiniband/verbs.h>`.
//! - [`spec`]: the device list of `SOFTROCE_DEVICES`.
//! - [`sysfs`]: what sysfs says about the devices (the tree `softroce-run`
//!   mounts, and `ibv_read_sysfs_file`'s answers).
//! - `device`, `context`, `pd`, `cq`, `qp`, `srq`, `ah`, `misc`: the
//!   exported calls, by object; `post`: the posting fast paths; `qp_ex`:
//!   `ibv_create_qp_ex` and the `ibv_wr_*` posting API; `cq_ex`:
//!   `ibv_create_cq_ex`, its polling API and timestamps. Every C object is a
//!   Rust box whose first field is the C struct, so the application's
//!   pointer is the box's.
//! - `ffi`: panics stop at the boundary, errno, and the registries that
//!   tell live objects from NULL or destroyed ones.
//! - `provider_stubs`: the answers of every `mlx5dv_*`/`efadv_*` call.
//! - `polls`: whether the application polls steadily, for the
//!   idle-progress thread of `context`.
//!
//! Every exported function is `unsafe extern "C"`: its safety contract is
//! libibverbs' (pointers the application got from this library, buffers of
//! the sizes verbs.h documents), checked where it can be.

#![allow(clippy::missing_safety_doc)] // the contract of every export is libibverbs' own, see above

pub mod abi;
mod ah;
mod context;
mod cq;
mod cq_ex;
mod cq_ex_state;
mod device;
mod ffi;
mod mcast;
mod misc;
mod mw;
mod open;
mod ops;
mod pd;
mod polls;
mod post;
mod provider_stubs;
mod qp;
mod qp_ex;
mod query;
pub mod rdmacm;
pub mod spec;
mod srq;
pub mod sysfs;
mod wr_batch;
mod xrc;

/// Logs to stderr when `SOFTROCE_LOG` is set (an `EnvFilter`, e.g. `debug`).
pub(crate) fn init_tracing() {
    if let Ok(filter) = std::env::var("SOFTROCE_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

// `NAME@@VERSION` for every export (see build.rs).
include!(concat!(env!("OUT_DIR"), "/symver.rs"));
