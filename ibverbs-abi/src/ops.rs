//! The verbs this library puts in every `ibv_context` it opens: the
//! `ibv_context_ops` table and the extended verbs of `verbs_context`. Above
//! the objects whose calls it names, and below `open.rs`, the one user, so
//! that no object module depends on it.

use crate::abi::*;

/// The verbs called through `context->ops`.
pub(crate) fn context_ops() -> ibv_context_ops {
    // SAFETY: all-NULL function pointers are valid Options.
    let mut o: ibv_context_ops = unsafe { std::mem::zeroed() };
    o.poll_cq = Some(crate::cq::poll_cq);
    o.req_notify_cq = Some(crate::cq::req_notify_cq);
    o.post_send = Some(crate::post::post_send);
    o.post_recv = Some(crate::post::post_recv);
    o.post_srq_recv = Some(crate::post::post_srq_recv);
    o.alloc_mw = Some(crate::mw::alloc_mw);
    o.bind_mw = Some(crate::post::bind_mw);
    o.dealloc_mw = Some(crate::mw::dealloc_mw);
    o
}

/// A `verbs_context` with the extended verbs and its size filled in; its
/// `context` is the opener's to fill.
pub(crate) fn extended_verbs() -> verbs_context {
    // SAFETY: all-NULL pointers and zero sizes are valid for verbs_context.
    let mut v: verbs_context = unsafe { std::mem::zeroed() };
    v.query_port = Some(crate::query::query_port);
    v.query_device_ex = Some(crate::query::query_device_ex);
    v.create_qp_ex = Some(crate::qp_ex::create_qp_ex);
    v.open_xrcd = Some(crate::xrc::open_xrcd);
    v.close_xrcd = Some(crate::xrc::close_xrcd);
    v.create_srq_ex = Some(crate::srq::create_srq_ex);
    v.get_srq_num = Some(crate::srq::get_srq_num);
    v.open_qp = Some(crate::qp::open_qp);
    v.advise_mr = Some(crate::pd::advise_mr);
    v.create_cq_ex = Some(crate::cq_ex::create_cq_ex);
    v.query_rt_values = Some(crate::cq_ex::query_rt_values);
    v.alloc_td = Some(crate::pd::alloc_td);
    v.dealloc_td = Some(crate::pd::dealloc_td);
    v.alloc_parent_domain = Some(crate::pd::alloc_parent_domain);
    v.sz = std::mem::size_of::<verbs_context>();
    v
}
