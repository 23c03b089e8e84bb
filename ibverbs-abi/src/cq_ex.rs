//! The extended CQ: `ibv_create_cq_ex` (through
//! `verbs_context.create_cq_ex`), its polling API (`ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll` and the `ibv_wc_read_*` calls through
//! the `ibv_cq_ex` function pointers), completion timestamps, and
//! `ibv_query_rt_values_ex`.
//!
//! The CQ is the same object as a plain one (`cq.rs`): QPs, completion
//! channels, `ibv_req_notify_cq`, `ibv_poll_cq` and `ibv_destroy_cq` work
//! on it unchanged. `ibv_start_poll`/`ibv_next_poll` take completions from
//! the engine a few at a time into the CQ's pending queue and hand them out
//! one by one; `ibv_poll_cq` on the same CQ takes the pending ones first,
//! so none is lost or reordered.
//!
//! Timestamps: the device's "HCA clock" is the host's `CLOCK_MONOTONIC` in
//! nanoseconds (`hca_core_clock` 1,000,000 kHz, `completion_timestamp_mask`
//! all ones, `ibv_query_rt_values_ex` reads the same clock), and the
//! wall-clock timestamp is `CLOCK_REALTIME` in nanoseconds. A completion
//! is stamped when the library takes it from the engine, which is the
//! poll that made it in the busy-polling case, and at most one poll later
//! when the idle-progress thread made it. rxe has no completion timestamps.
//!
//! Between `ibv_start_poll` and `ibv_end_poll` the CQ is the polling
//! thread's, as libibverbs requires; the `read_*` calls read the current
//! completion without taking a lock.

use crate::abi::*;
use crate::context::ctx_of;
use crate::cq::{no_ops, to_c, Cq};
use crate::cq_ex_state::{ExState, Stamped, REFILL};
use crate::device::MAX_CQE;
use crate::ffi::{errno_of, guard, set_errno};
use libc::{c_int, c_uint};

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-parameter.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The work-completion fields an extended CQ can report: rxe's standard
/// ones and both timestamps.
const SUPPORTED_WC: u64 = wc_ex::STANDARD | wc_ex::COMPLETION_TIMESTAMP | wc_ex::COMPLETION_TIMESTAMP_WALLCLOCK;

/// `verbs_context.create_cq_ex`, what the inline `ibv_create_cq_ex` calls.
pub unsafe extern "C" fn create_cq_ex(context: *mut ibv_context, attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex {
    guard("ibv_create_cq_ex", std::ptr::null_mut(), || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &*attr };
        let refuse = |errno: c_int, why: &str| {
            tracing::warn!(errno, why, wc_flags = a.wc_flags, comp_mask = a.comp_mask, "ibv_create_cq_ex refused");
            set_errno(errno);
            std::ptr::null_mut()
        };
        if a.wc_flags & !SUPPORTED_WC != 0 {
            return refuse(libc::EOPNOTSUPP, "wc_flags beyond the standard ones and the timestamps");
        }
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
            return refuse(libc::EINVAL, "an unknown comp_mask bit");
        }

        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
            // Single-threaded use needs nothing; ignoring overruns (a CQ
            // that never errors) is not what this engine does.
            if a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0 {
                return refuse(libc::EOPNOTSUPP, "create flags other than SINGLE_THREADED");
            }
        }
        if a.cqe == 0 || a.cqe > MAX_CQE || a.comp_vector > i32::MAX as u32 {
            return refuse(libc::EINVAL, "cqe or comp_vector out of range");
        }
        // SAFETY: ctx_of checks the registry (create does it again).
        if unsafe { ctx_of(context) }.is_none() {
            return std::ptr::null_mut();
        }
        // A CQ in a parent domain: it must be one, of this context.
        let mut held = crate::ffi::Held::new();
        let parent_domain = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
            // SAFETY: pd_use checks the registry.
            let Some(p) = (unsafe { crate::pd::pd_use(a.parent_domain, &mut held) }) else {
                return std::ptr::null_mut();
            };
            if !p.is_parent_domain() || !p.of_device(context) {
                return refuse(libc::EINVAL, "parent_domain is not a parent domain of this context");
            }
            Some(p)
        } else {
            None
        };
        let state = ExState::new(parent_domain);
        // SAFETY: create checks every pointer against its registry.
        let cq = unsafe {
            crate::cq::create(
                context,
                a.cqe as c_int,
                a.cq_context,
                a.channel,
                a.comp_vector as c_int,
                Some((ops(a.wc_flags), state)),
            )
        };
        if !cq.is_null() {
            held.keep();
        }
        cq.cast()
    })
}

/// The function table of an extended CQ with `wc_flags`: the readers of
/// the fields asked for, and those libibverbs says are always there
/// (opcode, vendor error, flags); the others stay NULL, as providers leave them.
fn ops(wc_flags: u64) -> ibv_cq_ex_ops {
    let has = |f: u64| wc_flags & f != 0;
    ibv_cq_ex_ops {
        start_poll: Some(start_poll),
        next_poll: Some(next_poll),
        end_poll: Some(end_poll),
        read_opcode: Some(read_opcode),
        read_vendor_err: Some(read_vendor_err),
        read_wc_flags: Some(read_wc_flags),
        read_byte_len: has(wc_ex::BYTE_LEN).then_some(read_byte_len),
        read_imm_data: has(wc_ex::IMM).then_some(read_imm_data),
        read_qp_num: has(wc_ex::QP_NUM).then_some(read_qp_num),
        read_src_qp: has(wc_ex::SRC_QP).then_some(read_src_qp),
        read_slid: has(wc_ex::SLID).then_some(read_slid),
        read_sl: has(wc_ex::SL).then_some(read_sl),
        read_dlid_path_bits: has(wc_ex::DLID_PATH_BITS).then_some(read_dlid_path_bits),
        read_completion_ts: has(wc_ex::COMPLETION_TIMESTAMP).then_some(read_completion_ts),
        read_completion_wallclock_ns: has(wc_ex::COMPLETION_TIMESTAMP_WALLCLOCK)
            .then_some(read_completion_wallclock_ns),
        ..no_ops()
    }
}

/// The CQ behind an `ibv_cq_ex` of this library, with its extended state.
///
/// # Safety
/// `cq` must be an extended CQ the library made and has not destroyed.
unsafe fn cq_of<'a>(cq: CqEx) -> (&'a Cq, &'a ExState) {
    // SAFETY: the caller's contract; a Cq begins with its ibv_cq_ex.
    let c = unsafe { &*cq.cast::<Cq>() };
    let st = c.ex_state.as_ref().expect("only extended CQs have the polling functions");
    (c, st)
}

/// Makes the next completion the current one: 0, ENOENT when there is
/// none, or an errno.
fn advance(c: &Cq, st: &ExState) -> c_int {
    let mut p = st.pending.lock().unwrap_or_else(|e| e.into_inner());
    if p.is_empty() {
        c.engine_called();
        let mut scratch = st.scratch.lock().unwrap_or_else(|e| e.into_inner());
        scratch.clear();
        if let Err(e) = c.verbs.poll(&mut scratch, REFILL) {
            tracing::warn!(error = %e, "ibv_start_poll/ibv_next_poll failed");
            return errno_of(&e);
        }
        let (monotonic_ns, wallclock_ns) = (clock_ns(libc::CLOCK_MONOTONIC), clock_ns(libc::CLOCK_REALTIME));
        p.extend(scratch.iter().map(|&wc| Stamped { wc, monotonic_ns, wallclock_ns }));
    }
    let Some(s) = p.pop_front() else { return libc::ENOENT };
    let s = Stamped { wc: to_c(&s.wc), monotonic_ns: s.monotonic_ns, wallclock_ns: s.wallclock_ns };
    // SAFETY: the CQ is this thread's until ibv_end_poll (module comment).
    unsafe {
        *st.current.get() = s;
        *c.ex.status.get() = s.wc.status;
        *c.ex.wr_id.get() = s.wc.wr_id;
    }
    0
}

unsafe extern "C" fn start_poll(cq: CqEx, attr: *mut ibv_poll_cq_attr) -> c_int {
    guard("ibv_start_poll", libc::EIO, || {
        // SAFETY: `live` checks the registry.
        if unsafe { crate::ffi::live(&crate::cq::CQS, cq.cast::<Cq>(), "ibv_cq_ex") }.is_none() {
            return libc::EINVAL;
        }
        // SAFETY: checked live just above; the caller's attributes.
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return libc::EINVAL;
        }
        // SAFETY: live, and made by create_cq_ex (the only CQs with this pointer).
        let (c, st) = unsafe { cq_of(cq) };
        advance(c, st)
    })
}

unsafe extern "C" fn next_poll(cq: CqEx) -> c_int {
    guard("ibv_next_poll", libc::EIO, || {
        // SAFETY: the caller holds the CQ since ibv_start_poll.
        let (c, st) = unsafe { cq_of(cq) };
        advance(c, st)
    })
}

unsafe extern "C" fn end_poll(_cq: CqEx) {
    // Nothing is held between the calls: each takes the pending queue's
    // lock for itself.
}

/// The current completion.
///
/// # Safety
/// Called between a successful start/next_poll and end_poll.
unsafe fn current<'a>(cq: CqEx) -> &'a Stamped<ibv_wc> {
    // SAFETY: the caller's contract.
    unsafe { &*cq_of(cq).1.current.get() }
}

unsafe extern "C" fn read_opcode(cq: CqEx) -> c_int {
    unsafe { current(cq) }.wc.opcode
}
unsafe extern "C" fn read_vendor_err(cq: CqEx) -> u32 {
    unsafe { current(cq) }.wc.vendor_err
}
unsafe extern "C" fn read_byte_len(cq: CqEx) -> u32 {
    unsafe { current(cq) }.wc.byte_len
}
unsafe extern "C" fn read_imm_data(cq: CqEx) -> u32 {
    unsafe { current(cq) }.wc.imm_data
}
unsafe extern "C" fn read_qp_num(cq: CqEx) -> u32 {
    unsafe { current(cq) }.wc.qp_num
}
unsafe extern "C" fn read_src_qp(cq: CqEx) -> u32 {
    unsafe { current(cq) }.wc.src_qp
}
unsafe extern "C" fn read_wc_flags(cq: CqEx) -> c_uint {
    unsafe { current(cq) }.wc.wc_flags
}
unsafe extern "C" fn read_slid(cq: CqEx) -> u32 {
    u32::from(unsafe { current(cq) }.wc.slid)
}
unsafe extern "C" fn read_sl(cq: CqEx) -> u8 {
    unsafe { current(cq) }.wc.sl
}
unsafe extern "C" fn read_dlid_path_bits(cq: CqEx) -> u8 {
    unsafe { current(cq) }.wc.dlid_path_bits
}
unsafe extern "C" fn read_completion_ts(cq: CqEx) -> u64 {
    unsafe { current(cq) }.monotonic_ns
}
unsafe extern "C" fn read_completion_wallclock_ns(cq: CqEx) -> u64 {
    unsafe { current(cq) }.wallclock_ns
}

/// `verbs_context.query_rt_values`, what the inline
/// `ibv_query_rt_values_ex` calls: the device clock (`CLOCK_MONOTONIC`).
pub unsafe extern "C" fn query_rt_values(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int {
    guard("ibv_query_rt_values_ex", libc::EIO, || {
        // SAFETY: ctx_of checks the registry.
        if unsafe { ctx_of(context) }.is_none() || values.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's out-parameter.
        let v = unsafe { &mut *values };
        if v.comp_mask & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
            return libc::EINVAL;
        }
        if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
            // SAFETY: a valid out-parameter.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut v.raw_clock) };
        }
        0
    })
}
