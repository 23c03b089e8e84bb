//! Shared receive queues.

use crate::abi::*;
use crate::context::with_objects;
use crate::device::{MAX_QP_WR, MAX_SGE};
use crate::ffi::{errno_of, guard, live, set_errno, Held, Registry, Shared, Users};
use crate::pd::{pd_use, Pd};
use libc::c_int;
use rdma_core_rs::SharedReceiveQueue;
use std::sync::Mutex;

pub static SRQS: Registry = Registry::new();

#[repr(C)]
pub struct Srq {
    pub c: ibv_srq,
    pub(crate) verbs: SharedReceiveQueue,
    pub(crate) pd: &'static Pd,
    pub(crate) attr: Mutex<ibv_srq_attr>,
    /// An XRC SRQ: the engine's (destroyed with it), its domain and its
    /// CQ (both held while it lives).
    pub(crate) xrc: Option<(rdma_core_rs::XrcSrq, &'static crate::xrc::Xrcd, &'static crate::cq::Cq)>,
    /// QPs using it (destroying it first is EBUSY).
    pub(crate) users: Users,
}

// SAFETY: the raw pointers in `c` are the application's; this library
// reaches the objects they name only through the registries.
unsafe impl Send for Srq {}

impl Shared for Srq {
    fn users(&self) -> &Users {
        &self.users
    }
}
unsafe impl Sync for Srq {}

#[export_name = "softroce_ibv_create_srq"]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard("ibv_create_srq", std::ptr::null_mut(), || {
        let mut held = Held::new();
        // SAFETY: pd_use checks the registry.
        let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return std::ptr::null_mut() };
        if init.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes.
        let init = unsafe { &mut *init };
        // As rxe's rxe_srq_chk_init: a depth or SGE count above the device's
        // limits (what ibv_query_device says) is EINVAL.
        if init.attr.max_wr == 0 || init.attr.max_wr > MAX_QP_WR || init.attr.max_sge > MAX_SGE {
            tracing::debug!(max_wr = init.attr.max_wr, max_sge = init.attr.max_sge, "ibv_create_srq: out of range");
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // ibv_create_srq(3): srq_limit is ignored at creation (arm it with ibv_modify_srq).
        init.attr.srq_limit = 0;
        let verbs = match p.verbs.create_srq(init.attr.max_wr, 0) {
            Ok(v) => v,
            Err(e) => {
                set_errno(errno_of(&e));
                return std::ptr::null_mut();
            }
        };
        init.attr.max_sge = init.attr.max_sge.max(1);
        let id = verbs.id();
        let c = ibv_srq {
            context: p.c.context,
            srq_context: init.srq_context,
            pd,
            handle: id as u32,
            mutex: mutex_init(),
            cond: cond_init(),
            events_completed: 0,
        };
        held.keep();
        let s = Box::into_raw(Box::new(Srq {
            c,
            verbs,
            pd: p,
            attr: Mutex::new(init.attr),
            xrc: None,
            users: Default::default(),
        }));
        with_objects(&p.engine, |o| {
            o.srqs.insert(id, s as usize);
        });
        SRQS.insert(s);
        s.cast()
    })
}

#[export_name = "softroce_ibv_modify_srq"]
pub unsafe extern "C" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    guard("ibv_modify_srq", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(s) = (unsafe { live(&SRQS, srq.cast::<Srq>(), "ibv_srq") }) else { return libc::EINVAL };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { *attr };
        if mask & IBV_SRQ_MAX_WR != 0 {
            return libc::EOPNOTSUPP; // the engine's SRQs do not resize
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            if let Err(e) = s.verbs.arm_limit(a.srq_limit) {
                return errno_of(&e);
            }
            s.attr.lock().unwrap_or_else(|e| e.into_inner()).srq_limit = a.srq_limit;
        }
        0
    })
}

#[export_name = "softroce_ibv_query_srq"]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard("ibv_query_srq", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(s) = (unsafe { live(&SRQS, srq.cast::<Srq>(), "ibv_srq") }) else { return libc::EINVAL };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's out-parameter.
        unsafe { attr.write(*s.attr.lock().unwrap_or_else(|e| e.into_inner())) };
        0
    })
}

#[export_name = "softroce_ibv_destroy_srq"]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard("ibv_destroy_srq", libc::EIO, || {
        let p = srq.cast::<Srq>();
        // SAFETY: retire checks the registry.
        if let Err(e) = unsafe { SRQS.retire(p, "ibv_srq") } {
            return e;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let s = unsafe { Box::from_raw(p) };
        with_objects(&s.pd.engine, |o| {
            o.srqs.remove(&s.verbs.id());
        });
        let pd = s.pd;
        let xrc = s.xrc.as_ref().map(|(_, x, c)| (*x, *c));
        // The engine's XRC SRQ goes with the box, before its domain is free.
        drop(s);
        pd.users.put();
        if let Some((x, c)) = xrc {
            x.users.put();
            c.users.put();
        }
        0
    })
}
