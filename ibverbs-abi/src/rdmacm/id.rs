//! The C library's CM ID object: the box that holds the C `rdma_cm_id`
//! and the Rust [`CmId`], the registry of live IDs, and what an ID keeps
//! (the groups it joined among them). Below the calls (`mod.rs`) and the
//! multicast calls (`mcast.rs`), which both use it.

use super::abi::*;
use crate::abi::*;
use crate::ffi::{live, Registry};
use libc::c_void;
use rdma_core_rs::cm::CmId;
use rdma_core_rs::Gid;
use std::cell::UnsafeCell;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

pub(super) static IDS: Registry = Registry::new();

/// A CM ID: the C struct first (an `UnsafeCell`, which has its layout), so
/// the application's pointer is the box's. The C fields are written only
/// by the calls on this ID, which librdmacm's rules keep to one thread at a
/// time; the thread that takes events reads only fields that do not change
/// after creation (`qp_type`, `context`, `ps`, a listener's `verbs`).
#[repr(C)]
pub(super) struct Id {
    pub(super) c: UnsafeCell<rdma_cm_id>,
    pub(super) cm: CmId,
    /// `rdma_bind_addr`'s address, used by `rdma_listen` or `rdma_resolve_addr`.
    pub(super) bound: Mutex<Option<SocketAddr>>,
    /// A CONNECT_REQUEST's depths (already from our side), what
    /// `rdma_accept(id, NULL)` answers with.
    pub(super) req_depths: Mutex<(u8, u8)>,
    /// The completion channels and CQs `rdma_create_qp` made because the
    /// application gave none (as librdmacm does), to destroy with the QP.
    pub(super) own_cqs: Mutex<Vec<(*mut ibv_comp_channel, *mut ibv_cq)>>,
    /// Synchronous (librdmacm's `id_priv->sync`): `c.channel` is the ID's
    /// own, and the calls wait for their events (see the module's doc).
    pub(super) sync: AtomicBool,
    /// A passive `rdma_create_ep`'s QP attributes: `rdma_get_request`
    /// makes each new ID's QP with them (librdmacm's `id_priv->qp_init_attr`).
    pub(super) ep_qp_attr: Mutex<Option<ibv_qp_init_attr>>,
    /// The multicast groups joined (`mcast.rs`).
    pub(super) mcast: Mutex<Vec<Joined>>,
}

impl Id {
    pub(super) fn c(&self) -> *mut rdma_cm_id {
        self.c.get()
    }

    pub(super) fn bound(&self) -> Option<SocketAddr> {
        *self.bound.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// SAFETY: the raw pointers in the C structs are the application's or this
// library's registered objects, reached only through the registries.
unsafe impl Send for Id {}
unsafe impl Sync for Id {}

/// A group an ID joined (librdmacm's `struct cma_multicast`).
pub(super) struct Joined {
    pub(super) addr: SocketAddr,
    pub(super) mgid: Gid,
    pub(super) context: *mut c_void,
    pub(super) send_only: bool,
}

/// # Safety
/// `p` may be anything; dereferenced only if it is a live ID.
pub(super) unsafe fn id_of<'a>(p: *mut rdma_cm_id) -> Option<&'a Id> {
    // SAFETY: registered IDs are leaked boxes, freed only after removal.
    unsafe { live(&IDS, p.cast::<Id>(), "rdma_cm_id") }
}
