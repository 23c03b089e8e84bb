//! A value on cache lines of its own.
//!
//! The fabric's slabs and queues hold packets (about 110 bytes with their
//! headers inline) written when scheduled or queued and read when they run
//! or leave, by then long cold. At the allocator's 16-byte alignment a
//! 128-byte entry spans three lines unless its start happens to fall on a
//! line (every slot of one buffer has the same offset, and large buffers
//! usually start 16 bytes past one); on a line boundary it takes two, one
//! miss fewer on the read (docs/performance.md).

/// `T` starting on a 64-byte line.
#[derive(Debug, Default, Clone)]
#[repr(align(64))]
pub struct Lined<T>(pub T);
