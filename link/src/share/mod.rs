//! One device, many processes: every process of a host may open the same
//! soft RoCE v2 device (one address, one GID, UDP port 4791), as every
//! process may open a NIC, and each packet reaches the process that owns
//! its destination.
//!
//! Each process binds its own receive socket to the port with
//! `SO_REUSEPORT`; the kernel keeps the group's sockets in an array, and a
//! classic BPF program ([`steer`]) that any member attaches picks the
//! index each datagram goes to, from its destination QPN (a process makes
//! its QPs in a range of its own: its *slot*), or for QP1's CM messages
//! from their service ID or communication ID. No privilege is needed.
//!
//! The program needs each slot's index in the kernel's array, and the
//! kernel moves the last socket into the place of one that closes. A
//! record of the host ([`registry`]) mirrors that array under a lock: a
//! joining process appends itself (the kernel appends its socket on
//! bind), a leaving one takes itself out as the kernel does, and a
//! process that died (its slot's lock is gone with it) is taken out by the
//! next member that notices: at a join or leave, or by each member's
//! keeper thread ([`keeper`]), which wakes when another member's process
//! ends. After each change the member that made it attaches the program
//! anew.
//!
//! What does not reach the right process is counted and dropped where it
//! lands (an unknown QPN, like any other): RC retransmits it. That
//! happens in the moments between a change of the group and the new
//! program (a crash; the microseconds of a leave), and when two members
//! die between two looks in an order that moves sockets differently
//! (warned about: the next join or leave fixes it only if it knows;
//! see `docs/shared-device.md`).

mod error;
pub mod fork;
mod keeper;
mod member;
mod registry;
pub mod steer;

pub use error::ShareError;
pub use member::{Member, Services};
pub use steer::SteerError;

#[cfg(test)]
mod tests;
