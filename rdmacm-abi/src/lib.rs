//! A drop-in `librdmacm.so.1`: rdma-core 44's symbols and versions, each a
//! trampoline to the RDMA CM calls that this project's `libibverbs.so.1`
//! implements (ibverbs-abi's `rdmacm` module, over `rdma_core_rs::cm`).
//! Why the calls live there, and how the two libraries share their
//! objects: `build.rs` and docs/ibverbs-abi.md. `softroce-run` puts this
//! library beside its libibverbs.so.1.

// `rdma_X@@RDMACM_1.x` for every call of librdmacm.map (see build.rs).
include!(concat!(env!("OUT_DIR"), "/trampolines.rs"));
