//! Completion queues and completion channels.
//!
//! A channel is a real file descriptor (an eventfd in semaphore mode): the
//! engine adds one to it per CQ event, from whichever thread made the
//! progress that raised it (`CompChannel::set_notify_fd`), so `poll`/`epoll`
//! on `channel->fd` and a blocking `ibv_get_cq_event` both work.

use crate::abi::*;
use crate::context::{ctx_of, with_objects, Engine};
use crate::device::MAX_CQE;
use crate::ffi::{errno_of, event_fd, guard, live, set_errno, wait_fd, Held, Registry, Shared, Users};
use libc::{c_int, c_uint, c_void};
use rdma_core_rs::{CompChannel, CompletionQueue, WorkCompletion};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

pub static CQS: Registry = Registry::new();

/// The fewest entries a CQ gets, whatever is asked.
const MIN_CQE: usize = 63;
pub static CHANNELS: Registry = Registry::new();

/// A CQ. `c` then `ex` lay out as `struct ibv_cq_ex` (checked below), so
/// that a CQ made by `ibv_create_cq_ex` is also an `ibv_cq` and the other
/// way round; only those have the polling functions (`cq_ex.rs`).
#[repr(C)]
pub struct Cq {
    pub c: ibv_cq,
    pub(crate) ex: ibv_cq_ex_ops,
    pub verbs: CompletionQueue,
    /// Completions taken from the engine, reused across polls.
    scratch: Mutex<Vec<WorkCompletion>>,
    /// For `ibv_create_cq_ex`'s CQs (None for the others): what the
    /// extended polling took from the engine and has yet to hand out.
    pub(crate) ex_state: Option<crate::cq_ex_state::ExState>,
    /// QPs using this CQ (destroying it before them is EBUSY).
    pub users: Users,
    /// The channel it reports to; its use is held until this CQ goes.
    chan: Option<&'static Chan>,
    engine: Arc<Engine>,
}

const _: () = assert!(std::mem::offset_of!(Cq, ex) == std::mem::offset_of!(ibv_cq_ex, ex));

impl Cq {
    /// Tells the idle-progress thread the application is polling.
    pub(crate) fn engine_called(&self) {
        self.engine.called();
    }
}

impl Shared for Cq {
    fn users(&self) -> &Users {
        &self.users
    }
}

// SAFETY: the raw pointers in `c` are the application's to use; this
// library reaches the objects they name only through the registries.
unsafe impl Send for Cq {}
unsafe impl Sync for Cq {}

#[repr(C)]
pub struct Chan {
    pub c: ibv_comp_channel,
    /// Shared, so that a thread blocked in `ibv_get_cq_event` keeps what it
    /// waits on even if another thread destroys the channel meanwhile.
    inner: Arc<ChanState>,
    /// CQs reporting here (destroying it before them is EBUSY).
    users: Users,
}

impl Shared for Chan {
    fn users(&self) -> &Users {
        &self.users
    }
}

struct ChanState {
    verbs: CompChannel,
    /// The eventfd behind `c.fd`: one count per event.
    fd: OwnedFd,
    /// CQ id to `ibv_cq *` of the CQs reporting here.
    cqs: Mutex<HashMap<usize, usize>>,
    engine: Arc<Engine>,
}

// SAFETY: as for Cq.
unsafe impl Send for Chan {}
unsafe impl Sync for Chan {}

#[export_name = "softroce_ibv_create_comp_channel"]
pub unsafe extern "C" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
    guard("ibv_create_comp_channel", std::ptr::null_mut(), || {
        // SAFETY: ctx_of checks the registry.
        let Some(ctx) = (unsafe { ctx_of(context) }) else { return std::ptr::null_mut() };
        let made = ctx.engine.verbs.create_comp_channel().map_err(|e| errno_of(&e)).and_then(|verbs| {
            let fd = event_fd().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
            verbs.set_notify_fd(Some(fd.as_raw_fd()));
            Ok((verbs, fd))
        });
        match made {
            Ok((verbs, fd)) => {
                let c = ibv_comp_channel { context, fd: fd.as_raw_fd(), refcnt: 0 };
                let engine = ctx.engine.clone();
                let inner = Arc::new(ChanState { verbs, fd, cqs: Mutex::new(HashMap::new()), engine });
                let ch = Box::into_raw(Box::new(Chan { c, inner, users: Users::default() }));
                CHANNELS.insert(ch);
                ch.cast()
            }
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    })
}

#[export_name = "softroce_ibv_destroy_comp_channel"]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard("ibv_destroy_comp_channel", -1, || {
        let p = channel.cast::<Chan>();
        // SAFETY: retire checks the registry.
        if unsafe { CHANNELS.retire(p, "ibv_comp_channel") }.is_err() {
            return -1;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let ch = unsafe { Box::from_raw(p) };
        ch.inner.verbs.set_notify_fd(None); // no more events; the fd closes with the last holder
        0
    })
}

/// The size a CQ asked for `cqe` (1 ..= MAX_CQE) is made with. Providers
/// give at least what was asked, rounded up (rxe and mlx5 to a power of
/// two), and applications count on the slack: perftest asks for one entry
/// for a one-deep send queue it polls only after events. The size made is
/// what `cq->cqe` says, as libibverbs does.
fn rounded_depth(cqe: c_int) -> usize {
    ((cqe as usize).max(MIN_CQE) + 1).next_power_of_two() - 1
}

#[export_name = "softroce_ibv_create_cq"]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard("ibv_create_cq", std::ptr::null_mut(), || {
        // SAFETY: create checks every pointer against its registry.
        unsafe { create(context, cqe, cq_context, channel, comp_vector, None) }
    })
}

/// `ibv_create_cq`, and `ibv_create_cq_ex` once its extended attributes
/// are checked (`ex`: the polling functions and state of an extended CQ).
///
/// # Safety
/// The pointers are the application's, checked against the registries.
pub(crate) unsafe fn create(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    ex: Option<(ibv_cq_ex_ops, crate::cq_ex_state::ExState)>,
) -> *mut ibv_cq {
    // SAFETY: ctx_of checks the registry.
    let Some(ctx) = (unsafe { ctx_of(context) }) else { return std::ptr::null_mut() };
    if cqe <= 0 || cqe as u32 > MAX_CQE || comp_vector < 0 || comp_vector >= ctx.v.context.num_comp_vectors {
        tracing::debug!(cqe, comp_vector, max_cqe = MAX_CQE, "ibv_create_cq: cqe or comp_vector out of range");
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // The channel's use is taken with its lookup, so it cannot be
    // destroyed from here on (EBUSY); given back if this call fails.
    let mut held = Held::new();
    let ch: Option<&'static Chan> = if channel.is_null() {
        None
    } else {
        // SAFETY: acquire checks the registry.
        match unsafe { CHANNELS.acquire(channel.cast::<Chan>(), "ibv_comp_channel") } {
            Some(ch) => {
                held.push(&ch.users);
                if ch.c.context != context {
                    set_errno(libc::EINVAL);
                    return std::ptr::null_mut();
                }
                Some(ch)
            }
            None => return std::ptr::null_mut(),
        }
    };
    let depth = rounded_depth(cqe);
    let verbs = match ctx.engine.verbs.create_cq(depth, ch.map(|c| &c.inner.verbs)) {
        Ok(v) => v,
        Err(e) => {
            set_errno(errno_of(&e));
            return std::ptr::null_mut();
        }
    };
    let id = verbs.id();
    let c = ibv_cq {
        context,
        channel,
        cq_context,
        handle: id as u32,
        cqe: (depth as c_int).into(),
        mutex: mutex_init(),
        cond: cond_init(),
        comp_events_completed: 0.into(),
        async_events_completed: 0,
    };
    held.keep();
    let (ex, ex_state) = match ex {
        Some((ops, state)) => (ops, Some(state)),
        None => (no_ops(), None),
    };
    let cq = Box::into_raw(Box::new(Cq {
        c,
        ex,
        ex_state,
        verbs,
        scratch: Mutex::new(Vec::with_capacity(64)),
        users: Users::default(),
        chan: ch,
        engine: ctx.engine.clone(),
    }));
    if let Some(ch) = ch {
        ch.inner.cqs.lock().unwrap_or_else(|e| e.into_inner()).insert(id, cq as usize);
    }
    with_objects(&ctx.engine, |o| {
        o.cqs.insert(id, cq as usize);
    });
    CQS.insert(cq);
    tracing::debug!(cq = id, cqe, depth, channel = !channel.is_null(), "CQ created");
    cq.cast()
}

#[export_name = "softroce_ibv_destroy_cq"]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard("ibv_destroy_cq", libc::EIO, || {
        let p = cq.cast::<Cq>();
        // SAFETY: retire checks the registry.
        if let Err(e) = unsafe { CQS.retire(p, "ibv_cq") } {
            return e;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let c = unsafe { Box::from_raw(p) };
        let id = c.verbs.id();
        if let Some(ch) = c.chan {
            ch.inner.cqs.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            ch.users.put();
        }
        with_objects(&c.engine, |o| {
            o.cqs.remove(&id);
        });
        if let Some(pd) = c.ex_state.as_ref().and_then(|s| s.parent_domain) {
            pd.users.put();
        }
        0
    })
}

/// `ops.poll_cq`, what the inline `ibv_poll_cq` calls.
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard("ibv_poll_cq", -1, || {
        // SAFETY: `live` checks the registry.
        let Some(c) = (unsafe { live(&CQS, cq.cast::<Cq>(), "ibv_cq") }) else { return -libc::EINVAL };
        if n <= 0 {
            return 0;
        }
        if wc.is_null() {
            return -libc::EINVAL;
        }
        c.engine.called();
        let mut scratch = c.scratch.lock().unwrap_or_else(|e| e.into_inner());
        scratch.clear();
        // An extended CQ's completions already taken by ibv_start_poll come first.
        if let Some(st) = &c.ex_state {
            st.take_pending(&mut scratch, n as usize);
        }
        let more = n as usize - scratch.len();
        if more > 0 {
            if let Err(e) = c.verbs.poll(&mut scratch, more) {
                tracing::warn!(error = %e, "poll_cq failed");
                return -errno_of(&e);
            }
        }
        for (i, w) in scratch.iter().enumerate() {
            // SAFETY: the caller's array holds `n` entries; i < n.
            unsafe { wc.add(i).write(to_c(w)) };
        }
        scratch.len() as c_int
    })
}

pub(crate) fn to_c(w: &WorkCompletion) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_int,
        opcode: w.opcode as c_int,
        vendor_err: 0,
        byte_len: w.byte_len,
        // __be32 (the wire's bytes); the invalidated rkey is host order.
        imm_data: w.imm_data.map(u32::to_be).or(w.invalidated_rkey).unwrap_or(0),
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags,
        pkey_index: 0,
        slid: 0,
        sl: w.sl,
        dlid_path_bits: 0,
    }
}

/// `ops.req_notify_cq`, what the inline `ibv_req_notify_cq` calls.
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard("ibv_req_notify_cq", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(c) = (unsafe { live(&CQS, cq.cast::<Cq>(), "ibv_cq") }) else { return libc::EINVAL };
        match c.verbs.req_notify(solicited_only != 0) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

#[export_name = "softroce_ibv_get_cq_event"]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard("ibv_get_cq_event", -1, || {
        // SAFETY: `live` checks the registry.
        let Some(ch) = (unsafe { live(&CHANNELS, channel.cast::<Chan>(), "ibv_comp_channel") }) else { return -1 };
        if cq.is_null() || cq_context.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let ch = ch.inner.clone(); // owned: the wait may outlast the channel
        loop {
            let taken = ch.engine.blocked(|| wait_fd(ch.fd.as_raw_fd()));
            if let Err(e) = taken {
                set_errno(e);
                return -1;
            }
            // The event the count stands for: taken without waiting.
            let id = match ch.verbs.get_cq_event(Some(std::time::Duration::ZERO)) {
                Ok(Some(id)) => id,
                Ok(None) => continue,
                Err(e) => {
                    set_errno(errno_of(&e));
                    return -1;
                }
            };
            // An event of a CQ destroyed since is dropped.
            let Some(&p) = ch.cqs.lock().unwrap_or_else(|e| e.into_inner()).get(&id) else { continue };
            let p = p as *mut ibv_cq;
            // SAFETY: p is in the channel's table, so it is a live CQ; the out-parameters are the caller's.
            unsafe {
                *cq = p;
                *cq_context = (*p).cq_context;
            }
            return 0;
        }
    })
}

#[export_name = "softroce_ibv_ack_cq_events"]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    guard("ibv_ack_cq_events", (), || {
        // SAFETY: `live` checks the registry.
        if let Some(c) = unsafe { live(&CQS, cq.cast::<Cq>(), "ibv_cq") } {
            // Bookkeeping only: destroying a CQ does not wait for acks here.
            c.c.comp_events_completed.fetch_add(nevents, Ordering::Relaxed);
        }
    })
}

#[export_name = "softroce_ibv_resize_cq"]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard("ibv_resize_cq", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        let Some(c) = (unsafe { live(&CQS, cq.cast::<Cq>(), "ibv_cq") }) else { return libc::EINVAL };
        // As rxe: a size out of range, or below the completions waiting in
        // the CQ, is EINVAL and changes nothing.
        if cqe <= 0 || cqe as u32 > MAX_CQE {
            return libc::EINVAL;
        }
        let depth = rounded_depth(cqe);
        if let Err(e) = c.verbs.resize(depth, cqe as usize) {
            tracing::debug!(error = %e, cqe, "ibv_resize_cq refused");
            return errno_of(&e);
        }
        // What the application reads as the size, as libibverbs' providers write it.
        c.c.cqe.store(depth as c_int, Ordering::Release);
        0
    })
}

/// The function table of a plain CQ: none.
pub(crate) fn no_ops() -> ibv_cq_ex_ops {
    ibv_cq_ex_ops {
        comp_mask: 0,
        status: 0.into(),
        wr_id: 0.into(),
        start_poll: None,
        next_poll: None,
        end_poll: None,
        read_opcode: None,
        read_vendor_err: None,
        read_byte_len: None,
        read_imm_data: None,
        read_qp_num: None,
        read_src_qp: None,
        read_wc_flags: None,
        read_slid: None,
        read_sl: None,
        read_dlid_path_bits: None,
        read_completion_ts: None,
        read_cvlan: None,
        read_flow_tag: None,
        read_tm_info: None,
        read_completion_wallclock_ns: None,
    }
}
