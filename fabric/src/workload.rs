//! A workload besides flows: something that posts work on the hosts'
//! endpoints and reacts to their completions, as an application (a
//! collective library) would. The fabric hands it every completion that
//! is no flow's, and stops a run that should stop when done once it says
//! it is done.

use crate::host::Host;
use rdma_transport::{Instant, WorkCompletion};
use std::any::Any;

pub trait Workload: std::fmt::Debug + Send {
    /// A completion on host `h`'s CQ that belongs to no flow. It may post
    /// work on host `h` only, which it is given (the fabric is servicing
    /// that host and sends what was posted next). It must touch only state
    /// of its own that belongs to host `h` (and flags that only ever go
    /// one way, such as "failed"): the parallel loop (`--threads`) calls it
    /// from several threads, in an order that is not fixed, and relies on
    /// calls for different hosts commuting.
    fn on_completion(&mut self, h: usize, wc: &WorkCompletion, host: &mut Host, now: Instant);

    /// Whether it has finished (or can make no more progress).
    fn done(&self) -> bool;

    /// Back to the concrete type, for its results after a run.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}
