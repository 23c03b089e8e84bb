//! XRC (IBTA annex A14; docs/xrc.md): `ibv_open_xrcd`/`ibv_close_xrcd`,
//! XRC SRQs (`ibv_create_srq_ex` with `IBV_SRQT_XRC`, `ibv_get_srq_num`),
//! `ibv_open_qp`; the XRC QP types themselves are made by
//! `ibv_create_qp_ex` (`qp_ex.rs`, `qp.rs`).
//!
//! A domain opened with fd -1 is private to its `ibv_open_xrcd` call. One
//! opened with a file descriptor is the domain of that file (its device
//! and inode) on this device: opening the same file again in this process
//! gives the same `ibv_xrcd`, counted, and each `ibv_close_xrcd` closes one
//! open (the last one is EBUSY while an XRC SRQ or XRC_RECV QP is in it).
//! Across processes nothing is shared: each process is a device of its own.

use crate::abi::*;
use crate::context::{ctx_of, with_objects, Engine};
use crate::cq::{Cq, CQS};
use crate::ffi::{errno_of, guard, live, set_errno, Held, Registry, Shared, Users};
use crate::pd::pd_use;
use crate::srq::{Srq, SRQS};
use libc::c_int;
use std::sync::{Arc, Mutex};

pub static XRCDS: Registry = Registry::new();

/// Serializes opens and closes (the by-file lookup and the open count).
static OPENING: Mutex<()> = Mutex::new(());

#[repr(C)]
pub struct Xrcd {
    pub c: ibv_xrcd,
    pub(crate) verbs: rdma_core_rs::Xrcd,
    pub(crate) engine: Arc<Engine>,
    /// The file (device, inode) of a shared domain.
    file: Option<(u64, u64)>,
    /// `ibv_open_xrcd` calls not yet closed (under `OPENING`).
    opens: std::sync::atomic::AtomicUsize,
    /// XRC SRQs and XRC_RECV QPs in it (closing then is EBUSY).
    pub(crate) users: Users,
}

// SAFETY: the raw pointer in `c` is the application's context.
unsafe impl Send for Xrcd {}
unsafe impl Sync for Xrcd {}

impl Shared for Xrcd {
    fn users(&self) -> &Users {
        &self.users
    }
}

/// `verbs_context.open_xrcd`.
pub unsafe extern "C" fn open_xrcd(context: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd {
    use std::sync::atomic::Ordering;
    guard("ibv_open_xrcd", std::ptr::null_mut(), || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return std::ptr::null_mut() };
        // SAFETY: the caller's attributes, if any.
        let Some(a) = (unsafe { attr.as_ref() }).copied() else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let known = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & !known != 0 || a.comp_mask & known != known {
            // ibv_open_xrcd(3): fd and oflags are both required.
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        if a.oflags & !(libc::O_CREAT | libc::O_EXCL) != 0 {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        let file = if a.fd == -1 {
            None
        } else {
            // SAFETY: fstat writes into the zeroed struct.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(a.fd, &mut st) } != 0 {
                set_errno(libc::EBADF);
                return std::ptr::null_mut();
            }
            Some((st.st_dev, st.st_ino))
        };
        let _open = OPENING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = file {
            // SAFETY: every object of XRCDS is an Xrcd.
            let found = unsafe { XRCDS.find::<Xrcd>(|x| x.file == Some(f) && Arc::ptr_eq(&x.engine, &ctx.engine)) };
            match found {
                Some(_) if a.oflags & libc::O_CREAT != 0 && a.oflags & libc::O_EXCL != 0 => {
                    set_errno(libc::EEXIST);
                    return std::ptr::null_mut();
                }
                Some(x) => {
                    x.opens.fetch_add(1, Ordering::AcqRel);
                    return (x as *const Xrcd).cast_mut().cast();
                }
                None if a.oflags & libc::O_CREAT == 0 => {
                    set_errno(libc::ENOENT);
                    return std::ptr::null_mut();
                }
                None => {}
            }
        }
        let verbs = match ctx.engine.verbs.open_xrcd() {
            Ok(v) => v,
            Err(e) => {
                set_errno(errno_of(&e));
                return std::ptr::null_mut();
            }
        };
        let x = Box::into_raw(Box::new(Xrcd {
            c: ibv_xrcd { context },
            verbs,
            engine: ctx.engine.clone(),
            file,
            opens: 1.into(),
            users: Users::default(),
        }));
        XRCDS.insert(x);
        tracing::debug!(?file, "XRC domain opened");
        x.cast()
    })
}

/// `verbs_context.close_xrcd`.
pub unsafe extern "C" fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    use std::sync::atomic::Ordering;
    guard("ibv_close_xrcd", libc::EIO, || {
        let p = xrcd.cast::<Xrcd>();
        let _open = OPENING.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `live` checks the registry.
        let Some(x) = (unsafe { live(&XRCDS, p, "ibv_xrcd") }) else { return libc::EINVAL };
        if x.opens.load(Ordering::Acquire) > 1 {
            x.opens.fetch_sub(1, Ordering::AcqRel);
            return 0;
        }
        // SAFETY: retire checks the registry; EBUSY while SRQs or QPs use it.
        if let Err(e) = unsafe { XRCDS.retire(p, "ibv_xrcd") } {
            return e;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let x = unsafe { Box::from_raw(p) };
        if let Err(e) = x.verbs.close() {
            tracing::warn!(error = %e, "XRC domain unused here but busy in the engine");
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
        let id = verbs.id();
        let c = ibv_srq {
            context: p.c.context,
            srq_context: a.srq_context,
            pd: a.pd,
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
            attr: Mutex::new(a.attr),
            xrc: Some((srq, x, cq)),
            users: Default::default(),
        }));
        with_objects(&p.engine, |o| {
            o.srqs.insert(id, s as usize);
        });
        SRQS.insert(s);
        s.cast()
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

/// The XRC domain `xrcd` names, with a use taken (for a QP in it).
///
/// # Safety
/// `xrcd` is the application's pointer, checked against the registry.
pub(crate) unsafe fn xrcd_use(xrcd: *mut ibv_xrcd) -> Option<&'static Xrcd> {
    // SAFETY: acquire checks the registry; registered objects are leaked
    // boxes kept until their uses are given back.
    unsafe { XRCDS.acquire(xrcd.cast::<Xrcd>(), "ibv_xrcd").map(|x| &*(x as *const Xrcd)) }
}

/// `verbs_context.open_qp`: another handle to an XRC_RECV QP of a domain.
pub unsafe extern "C" fn open_qp(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp {
    guard("ibv_open_qp", std::ptr::null_mut(), || {
        use qp_open_attr_mask as m;
        // SAFETY: the caller's attributes.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let need = m::NUM | m::XRCD | m::TYPE;
        if a.comp_mask & need != need || a.comp_mask & !(need | m::CONTEXT) != 0 || a.qp_type != IBV_QPT_XRC_RECV {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: checked against the registry.
        let Some(x) = (unsafe { xrcd_use(a.xrcd) }) else { return std::ptr::null_mut() };
        let qp_context = if a.comp_mask & m::CONTEXT != 0 { a.qp_context } else { std::ptr::null_mut() };
        match crate::qp::create_xrc_recv(x, context, qp_context, Some(a.qp_num)) {
            Ok(q) => q,
            Err(e) => {
                x.users.put();
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    })
}
