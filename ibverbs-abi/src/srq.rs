//! Shared receive queues.

use crate::abi::*;
use crate::context::with_objects;
use crate::cq::{Cq, CQS};
use crate::device::{MAX_QP_WR, MAX_SGE};
use crate::ffi::{errno_of, guard, live, set_errno, Held, Registry, Shared, Users};
use crate::pd::{pd_use, Pd};
use crate::xrc::{Xrcd, XRCDS};
use libc::c_int;
use rdma_core_rs::SharedReceiveQueue;
use std::sync::{Arc, Mutex};

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
        register(p, (pd, init.srq_context), verbs, init.attr, None, held)
    })
}

/// Registers an SRQ the engine made on `p` (the application's `pd` and
/// `srq_context` go into its `ibv_srq`), XRC's or not, and keeps the uses
/// `held` took on the way.
fn register(
    p: &'static Pd,
    (pd, srq_context): (*mut ibv_pd, *mut libc::c_void),
    verbs: SharedReceiveQueue,
    attr: ibv_srq_attr,
    xrc: Option<(rdma_core_rs::XrcSrq, &'static Xrcd, &'static Cq)>,
    held: Held,
) -> *mut ibv_srq {
    let id = verbs.id();
    let c = ibv_srq {
        context: p.c.context,
        srq_context,
        pd,
        handle: id as u32,
        mutex: mutex_init(),
        cond: cond_init(),
        events_completed: 0,
    };
    held.keep();
    let s = Box::into_raw(Box::new(Srq { c, verbs, pd: p, attr: Mutex::new(attr), xrc, users: Default::default() }));
    with_objects(&p.engine, |o| {
        o.srqs.insert(id, s as usize);
    });
    SRQS.insert(s);
    s.cast()
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

/// `verbs_context.create_srq_ex`: a basic SRQ as `ibv_create_srq`, or an
/// XRC SRQ (PD, XRCD and CQ required). Tag matching SRQs are not supported.
pub unsafe extern "C" fn create_srq_ex(context: *mut ibv_context, attr: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq {
    guard("ibv_create_srq_ex", std::ptr::null_mut(), || {
        use srq_init_attr_mask as m;
        // SAFETY: the caller's attributes.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let refuse = |errno: c_int, why: &str| {
            tracing::warn!(errno, why, comp_mask = a.comp_mask, "ibv_create_srq_ex refused");
            set_errno(errno);
            std::ptr::null_mut()
        };
        if a.comp_mask & !(m::TYPE | m::PD | m::CQ | m::XRCD | m::TM) != 0 {
            return refuse(libc::EINVAL, "unknown comp_mask bits");
        }
        let srq_type = if a.comp_mask & m::TYPE != 0 { a.srq_type } else { IBV_SRQT_BASIC };
        if a.comp_mask & m::PD == 0 {
            return refuse(libc::EINVAL, "no PD");
        }
        match srq_type {
            IBV_SRQT_BASIC => {
                // SAFETY: `ibv_srq_init_attr_ex` begins with `ibv_srq_init_attr`.
                return unsafe { crate::srq::ibv_create_srq(a.pd, attr.cast()) };
            }
            IBV_SRQT_XRC => {}
            IBV_SRQT_TM => return refuse(libc::EOPNOTSUPP, "tag matching SRQs are not supported"),
            _ => return refuse(libc::EINVAL, "unknown srq_type"),
        }
        if a.comp_mask & (m::XRCD | m::CQ) != (m::XRCD | m::CQ) {
            return refuse(libc::EINVAL, "an XRC SRQ needs an XRCD and a CQ");
        }
        if a.attr.max_wr == 0 || a.attr.max_wr > crate::device::MAX_QP_WR || a.attr.max_sge > crate::device::MAX_SGE {
            return refuse(libc::EINVAL, "max_wr or max_sge out of range");
        }
        let mut held = Held::new();
        // SAFETY: the lookups check their registries.
        let Some(p) = (unsafe { pd_use(a.pd, &mut held) }) else { return std::ptr::null_mut() };
        let Some(x) = (unsafe { XRCDS.acquire(a.xrcd.cast::<Xrcd>(), "ibv_xrcd") }) else {
            return std::ptr::null_mut();
        };
        held.push(&x.users);
        let Some(cq) = (unsafe { CQS.acquire(a.cq.cast::<Cq>(), "ibv_cq") }) else {
            return std::ptr::null_mut();
        };
        held.push(&cq.users);
        // SAFETY: registered objects are leaked boxes, 'static until
        // destroyed, which the uses taken above prevent (EBUSY).
        let (x, cq): (&'static Xrcd, &'static Cq) = unsafe { (&*(x as *const Xrcd), &*(cq as *const Cq)) };
        if !p.of_device(context) || !Arc::ptr_eq(&x.engine, &p.engine) {
            return refuse(libc::EINVAL, "the PD, XRCD and CQ must be of this device");
        }
        let srq = match p.verbs.create_xrc_srq(&x.verbs, &cq.verbs, a.attr.max_wr, 0) {
            Ok(s) => s,
            Err(e) => return refuse(errno_of(&e), "refused by the engine"),
        };
        a.attr.srq_limit = 0;
        a.attr.max_sge = a.attr.max_sge.max(1);
        let verbs = srq.srq().clone();
        register(p, (a.pd, a.srq_context), verbs, a.attr, Some((srq, x, cq)), held)
    })
}

/// `verbs_context.get_srq_num`.
pub unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    guard("ibv_get_srq_num", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(s) = (unsafe { live(&SRQS, srq.cast::<Srq>(), "ibv_srq") }) else { return libc::EINVAL };
        let Some((x, _, _)) = &s.xrc else { return libc::EINVAL };
        if srq_num.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's out-parameter.
        unsafe { srq_num.write(x.srq_num()) };
        0
    })
}
