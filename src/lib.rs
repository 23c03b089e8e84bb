//! The tools of the softroce workspace: capture reading and RDMA packet
//! decoding shared by `rdma-dump` and the tests.

pub mod backend;
pub mod capture;
pub mod cm_tools;
pub mod decode;
pub mod dump;
/// Fuzz target bodies (`fuzz/` wraps them); not an API.
#[doc(hidden)]
pub mod fuzzing;
pub mod perf;
pub mod pingpong;
