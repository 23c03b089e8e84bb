//! The C layouts of `<rdma/rdma_cma.h>` (rdma-core 44) that applications
//! see: the CM ID, the event channel, events and their parameters, and
//! `rdma_addrinfo`. The rdmacm-abi crate's header test checks every size
//! and offset against the system's header.

#![allow(non_camel_case_types)]

use crate::abi::{ibv_ah_attr, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp};
use libc::{c_char, c_int, c_void, sockaddr, sockaddr_storage, socklen_t};

pub const RDMA_PS_IPOIB: c_int = 0x0002;
pub const RDMA_PS_TCP: c_int = 0x0106;
pub const RDMA_PS_UDP: c_int = 0x0111;
pub const RDMA_PS_IB: c_int = 0x013F;

pub const RAI_PASSIVE: c_int = 1;
pub const RAI_NUMERICHOST: c_int = 2;

pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src: sockaddr_storage,
    pub dst: sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
}

#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut c_void,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub pd: *mut ibv_pd,
    pub qp_type: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub param: rdma_event_param,
}

#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// Sizes and offsets the header test compares with `<rdma/rdma_cma.h>`:
/// (name, value).
pub fn layout() -> Vec<(&'static str, usize)> {
    use std::mem::{offset_of, size_of};
    vec![
        ("sizeof(struct rdma_event_channel)", size_of::<rdma_event_channel>()),
        ("sizeof(struct rdma_ib_addr)", size_of::<rdma_ib_addr>()),
        ("sizeof(struct rdma_addr)", size_of::<rdma_addr>()),
        ("offsetof(struct rdma_addr, dst_addr)", offset_of!(rdma_addr, dst)),
        (
            "offsetof(struct rdma_addr, addr.ibaddr.pkey)",
            offset_of!(rdma_addr, ibaddr) + offset_of!(rdma_ib_addr, pkey),
        ),
        ("sizeof(struct rdma_route)", size_of::<rdma_route>()),
        ("offsetof(struct rdma_route, path_rec)", offset_of!(rdma_route, path_rec)),
        ("offsetof(struct rdma_route, num_paths)", offset_of!(rdma_route, num_paths)),
        ("sizeof(struct rdma_cm_id)", size_of::<rdma_cm_id>()),
        ("offsetof(struct rdma_cm_id, verbs)", offset_of!(rdma_cm_id, verbs)),
        ("offsetof(struct rdma_cm_id, channel)", offset_of!(rdma_cm_id, channel)),
        ("offsetof(struct rdma_cm_id, context)", offset_of!(rdma_cm_id, context)),
        ("offsetof(struct rdma_cm_id, qp)", offset_of!(rdma_cm_id, qp)),
        ("offsetof(struct rdma_cm_id, route)", offset_of!(rdma_cm_id, route)),
        ("offsetof(struct rdma_cm_id, ps)", offset_of!(rdma_cm_id, ps)),
        ("offsetof(struct rdma_cm_id, port_num)", offset_of!(rdma_cm_id, port_num)),
        ("offsetof(struct rdma_cm_id, event)", offset_of!(rdma_cm_id, event)),
        ("offsetof(struct rdma_cm_id, send_cq_channel)", offset_of!(rdma_cm_id, send_cq_channel)),
        ("offsetof(struct rdma_cm_id, send_cq)", offset_of!(rdma_cm_id, send_cq)),
        ("offsetof(struct rdma_cm_id, recv_cq_channel)", offset_of!(rdma_cm_id, recv_cq_channel)),
        ("offsetof(struct rdma_cm_id, recv_cq)", offset_of!(rdma_cm_id, recv_cq)),
        ("offsetof(struct rdma_cm_id, srq)", offset_of!(rdma_cm_id, srq)),
        ("offsetof(struct rdma_cm_id, pd)", offset_of!(rdma_cm_id, pd)),
        ("offsetof(struct rdma_cm_id, qp_type)", offset_of!(rdma_cm_id, qp_type)),
        ("sizeof(struct rdma_conn_param)", size_of::<rdma_conn_param>()),
        ("offsetof(struct rdma_conn_param, private_data_len)", offset_of!(rdma_conn_param, private_data_len)),
        ("offsetof(struct rdma_conn_param, responder_resources)", offset_of!(rdma_conn_param, responder_resources)),
        ("offsetof(struct rdma_conn_param, initiator_depth)", offset_of!(rdma_conn_param, initiator_depth)),
        ("offsetof(struct rdma_conn_param, flow_control)", offset_of!(rdma_conn_param, flow_control)),
        ("offsetof(struct rdma_conn_param, retry_count)", offset_of!(rdma_conn_param, retry_count)),
        ("offsetof(struct rdma_conn_param, rnr_retry_count)", offset_of!(rdma_conn_param, rnr_retry_count)),
        ("offsetof(struct rdma_conn_param, srq)", offset_of!(rdma_conn_param, srq)),
        ("offsetof(struct rdma_conn_param, qp_num)", offset_of!(rdma_conn_param, qp_num)),
        ("sizeof(struct rdma_ud_param)", size_of::<rdma_ud_param>()),
        ("offsetof(struct rdma_ud_param, private_data_len)", offset_of!(rdma_ud_param, private_data_len)),
        ("offsetof(struct rdma_ud_param, ah_attr)", offset_of!(rdma_ud_param, ah_attr)),
        ("offsetof(struct rdma_ud_param, qp_num)", offset_of!(rdma_ud_param, qp_num)),
        ("offsetof(struct rdma_ud_param, qkey)", offset_of!(rdma_ud_param, qkey)),
        ("sizeof(struct rdma_cm_event)", size_of::<rdma_cm_event>()),
        ("offsetof(struct rdma_cm_event, id)", offset_of!(rdma_cm_event, id)),
        ("offsetof(struct rdma_cm_event, listen_id)", offset_of!(rdma_cm_event, listen_id)),
        ("offsetof(struct rdma_cm_event, event)", offset_of!(rdma_cm_event, event)),
        ("offsetof(struct rdma_cm_event, status)", offset_of!(rdma_cm_event, status)),
        ("offsetof(struct rdma_cm_event, param)", offset_of!(rdma_cm_event, param)),
        ("sizeof(struct rdma_addrinfo)", size_of::<rdma_addrinfo>()),
        ("offsetof(struct rdma_addrinfo, ai_qp_type)", offset_of!(rdma_addrinfo, ai_qp_type)),
        ("offsetof(struct rdma_addrinfo, ai_port_space)", offset_of!(rdma_addrinfo, ai_port_space)),
        ("offsetof(struct rdma_addrinfo, ai_src_len)", offset_of!(rdma_addrinfo, ai_src_len)),
        ("offsetof(struct rdma_addrinfo, ai_dst_len)", offset_of!(rdma_addrinfo, ai_dst_len)),
        ("offsetof(struct rdma_addrinfo, ai_src_addr)", offset_of!(rdma_addrinfo, ai_src_addr)),
        ("offsetof(struct rdma_addrinfo, ai_dst_addr)", offset_of!(rdma_addrinfo, ai_dst_addr)),
        ("offsetof(struct rdma_addrinfo, ai_src_canonname)", offset_of!(rdma_addrinfo, ai_src_canonname)),
        ("offsetof(struct rdma_addrinfo, ai_dst_canonname)", offset_of!(rdma_addrinfo, ai_dst_canonname)),
        ("offsetof(struct rdma_addrinfo, ai_route_len)", offset_of!(rdma_addrinfo, ai_route_len)),
        ("offsetof(struct rdma_addrinfo, ai_route)", offset_of!(rdma_addrinfo, ai_route)),
        ("offsetof(struct rdma_addrinfo, ai_connect_len)", offset_of!(rdma_addrinfo, ai_connect_len)),
        ("offsetof(struct rdma_addrinfo, ai_connect)", offset_of!(rdma_addrinfo, ai_connect)),
        ("offsetof(struct rdma_addrinfo, ai_next)", offset_of!(rdma_addrinfo, ai_next)),
    ]
}
