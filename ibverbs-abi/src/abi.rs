//! The C layouts of rdma-core 44's `<infiniband/verbs.h>`, field for field.
//!
//! Only what this library reads or writes is typed in detail; function
//! pointer slots it never fills are `Option<unsafe extern "C" fn()>` so the
//! sizes stay right. `tests/header.rs` checks every size and offset here
//! against the system header with a C compiler.

#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t};

/// A function pointer slot this library leaves empty (NULL).
pub type Slot = Option<unsafe extern "C" fn()>;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_global {
    pub subnet_prefix: u64,
    pub interface_id: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    pub raw: [u8; 16],
    pub global: ibv_gid_global,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

pub const IBV_GID_TYPE_IB: u32 = 0;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: Slot,
    pub _dummy2: Slot,
}

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSrqRecvFn = unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSendFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: the inline fast paths of verbs.h call through it.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Slot,
    pub _compat_query_port: Slot,
    pub _compat_alloc_pd: Slot,
    pub _compat_dealloc_pd: Slot,
    pub _compat_reg_mr: Slot,
    pub _compat_rereg_mr: Slot,
    pub _compat_dereg_mr: Slot,
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw>,
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    pub _compat_create_cq: Slot,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyFn>,
    pub _compat_cq_event: Slot,
    pub _compat_resize_cq: Slot,
    pub _compat_destroy_cq: Slot,
    pub _compat_create_srq: Slot,
    pub _compat_modify_srq: Slot,
    pub _compat_query_srq: Slot,
    pub _compat_destroy_srq: Slot,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: Slot,
    pub _compat_query_qp: Slot,
    pub _compat_modify_qp: Slot,
    pub _compat_destroy_qp: Slot,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: Slot,
    pub _compat_destroy_ah: Slot,
    pub _compat_attach_mcast: Slot,
    pub _compat_detach_mcast: Slot,
    pub _compat_async_event: Slot,
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `verbs_get_ctx` finds a `verbs_context` only
/// when `abi_compat` holds this.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

pub type CreateQpExFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
pub type QueryPortFn = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
pub type QueryDeviceExFn =
    unsafe extern "C" fn(*mut ibv_context, *const ibv_query_device_ex_input, *mut ibv_device_attr_ex, usize) -> c_int;

/// `struct verbs_context`: the extended ops, in front of the `ibv_context`
/// (which must be its last field: `verbs_get_ctx` is a container_of).
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortFn>,
    pub advise_mr: Option<unsafe extern "C" fn(*mut ibv_pd, u32, u32, *mut ibv_sge, u32) -> c_int>,
    pub alloc_null_mr: Slot,
    pub read_counters: Slot,
    pub attach_counters_point_flow: Slot,
    pub create_counters: Slot,
    pub destroy_counters: Slot,
    pub reg_dm_mr: Slot,
    pub alloc_dm: Slot,
    pub free_dm: Slot,
    pub modify_flow_action_esp: Slot,
    pub destroy_flow_action: Slot,
    pub create_flow_action_esp: Slot,
    pub modify_qp_rate_limit: Slot,
    pub alloc_parent_domain:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd>,
    pub dealloc_td: Option<unsafe extern "C" fn(*mut ibv_td) -> c_int>,
    pub alloc_td: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td>,
    pub modify_cq: Slot,
    pub post_srq_ops: Slot,
    pub destroy_rwq_ind_table: Slot,
    pub create_rwq_ind_table: Slot,
    pub destroy_wq: Slot,
    pub modify_wq: Slot,
    pub create_wq: Slot,
    pub query_rt_values: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int>,
    pub create_cq_ex: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: Slot,
    pub abi_placeholder2: Slot,
    pub ibv_create_flow: Slot,
    pub abi_placeholder1: Slot,
    pub open_qp: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp>,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: Option<unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int>,
    pub create_srq_ex: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
    pub open_xrcd: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
    pub close_xrcd: Option<unsafe extern "C" fn(*mut ibv_xrcd) -> c_int>,
    pub _abi_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: ibv_tso_caps,
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    pub raw_packet_caps: u32,
    pub tm_caps: ibv_tm_caps,
    pub cq_mod_caps: ibv_cq_moderation_caps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut c_void,
    pub port_num: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_element,
    pub event_type: c_int,
}

pub const IBV_EVENT_CQ_ERR: c_int = 0;
pub const IBV_EVENT_QP_FATAL: c_int = 1;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: c_int = 15;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network order) or `invalidated_rkey`: one union.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

pub const IBV_SRQ_MAX_WR: c_int = 1;
pub const IBV_SRQ_LIMIT: c_int = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// Copy: librdmacm keeps a passive endpoint's attributes for each new ID.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UC: c_int = 3;
pub const IBV_QPT_UD: c_int = 4;
pub const IBV_QPT_XRC_SEND: c_int = 9;
pub const IBV_QPT_XRC_RECV: c_int = 10;

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

/// `enum ibv_xrcd_init_attr_mask`.
pub const IBV_XRCD_INIT_ATTR_FD: u32 = 1 << 0;
pub const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;

/// `struct ibv_xrcd`.
#[repr(C)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`: `ibv_srq_init_attr` and then the
/// extended fields.
#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: c_int,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

/// `enum ibv_srq_init_attr_mask`.
pub mod srq_init_attr_mask {
    pub const TYPE: u32 = 1 << 0;
    pub const PD: u32 = 1 << 1;
    pub const CQ: u32 = 1 << 2;
    pub const XRCD: u32 = 1 << 3;
    pub const TM: u32 = 1 << 4;
}

/// `enum ibv_srq_type`.
pub const IBV_SRQT_BASIC: c_int = 0;
pub const IBV_SRQT_XRC: c_int = 1;
pub const IBV_SRQT_TM: c_int = 2;

/// `struct ibv_qp_open_attr`.
#[repr(C)]
pub struct ibv_qp_open_attr {
    pub comp_mask: u32,
    pub qp_num: u32,
    pub xrcd: *mut ibv_xrcd,
    pub qp_context: *mut c_void,
    pub qp_type: c_int,
}

/// `enum ibv_qp_open_attr_mask`.
pub mod qp_open_attr_mask {
    pub const NUM: u32 = 1 << 0;
    pub const XRCD: u32 = 1 << 1;
    pub const CONTEXT: u32 = 1 << 2;
    pub const TYPE: u32 = 1 << 3;
}

pub mod qp_mask {
    pub const STATE: i32 = 1 << 0;
    pub const CUR_STATE: i32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: i32 = 1 << 2;
    pub const ACCESS_FLAGS: i32 = 1 << 3;
    pub const PKEY_INDEX: i32 = 1 << 4;
    pub const PORT: i32 = 1 << 5;
    pub const QKEY: i32 = 1 << 6;
    pub const AV: i32 = 1 << 7;
    pub const PATH_MTU: i32 = 1 << 8;
    pub const TIMEOUT: i32 = 1 << 9;
    pub const RETRY_CNT: i32 = 1 << 10;
    pub const RNR_RETRY: i32 = 1 << 11;
    pub const RQ_PSN: i32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    pub const ALT_PATH: i32 = 1 << 14;
    pub const MIN_RNR_TIMER: i32 = 1 << 15;
    pub const SQ_PSN: i32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    pub const PATH_MIG_STATE: i32 = 1 << 18;
    pub const CAP: i32 = 1 << 19;
    pub const DEST_QPN: i32 = 1 << 20;
    pub const RATE_LIMIT: i32 = 1 << 25;
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

pub mod wr_opcode {
    pub const RDMA_WRITE: i32 = 0;
    pub const RDMA_WRITE_WITH_IMM: i32 = 1;
    pub const SEND: i32 = 2;
    pub const SEND_WITH_IMM: i32 = 3;
    pub const RDMA_READ: i32 = 4;
    pub const ATOMIC_CMP_AND_SWP: i32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: i32 = 6;
    pub const LOCAL_INV: i32 = 7;
    pub const BIND_MW: i32 = 8;
    pub const SEND_WITH_INV: i32 = 9;
}

pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
pub const IBV_SEND_SOLICITED: c_uint = 1 << 2;
pub const IBV_SEND_INLINE: c_uint = 1 << 3;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_wr_rdma,
    pub atomic: ibv_wr_atomic,
    pub ud: ibv_wr_ud,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut c_void,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_ext {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// `imm_data` (network order) or `invalidate_rkey`: one union.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    pub ext: ibv_send_wr_ext,
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    /// Updated by ibv_modify_qp while other threads may read the QP.
    pub state: std::sync::atomic::AtomicI32,
    pub qp_type: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    /// Written again by ibv_resize_cq (the application reads it).
    pub cqe: std::sync::atomic::AtomicI32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    /// Counted by ibv_ack_cq_events, from any thread.
    pub comp_events_completed: std::sync::atomic::AtomicU32,
    pub async_events_completed: u32,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// A zeroed pthread mutex: `PTHREAD_MUTEX_INITIALIZER` on glibc.
pub fn mutex_init() -> pthread_mutex_t {
    // SAFETY: all-zero is a valid (and the statically initialised) pthread_mutex_t on glibc.
    unsafe { std::mem::zeroed() }
}

/// A zeroed pthread condition variable: `PTHREAD_COND_INITIALIZER` on glibc.
pub fn cond_init() -> pthread_cond_t {
    // SAFETY: as for `mutex_init`.
    unsafe { std::mem::zeroed() }
}

/// `struct ibv_rx_hash_conf` (RSS; only its size matters here).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`: `ibv_qp_init_attr` and then the extended
/// fields, as `ibv_create_qp_ex` takes them.
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `enum ibv_qp_init_attr_mask`.
pub mod qp_init_attr_mask {
    pub const PD: u32 = 1 << 0;
    pub const XRCD: u32 = 1 << 1;
    pub const CREATE_FLAGS: u32 = 1 << 2;
    pub const MAX_TSO_HEADER: u32 = 1 << 3;
    pub const IND_TABLE: u32 = 1 << 4;
    pub const RX_HASH: u32 = 1 << 5;
    pub const SEND_OPS_FLAGS: u32 = 1 << 6;
}

/// `enum ibv_qp_create_send_ops_flags`: the `ibv_wr_*` calls a QP made by
/// `ibv_create_qp_ex` may use (FLUSH is rdma-core 45's).
pub mod send_ops {
    pub const RDMA_WRITE: u64 = 1 << 0;
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    pub const SEND: u64 = 1 << 2;
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    pub const RDMA_READ: u64 = 1 << 4;
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    pub const LOCAL_INV: u64 = 1 << 7;
    pub const BIND_MW: u64 = 1 << 8;
    pub const SEND_WITH_INV: u64 = 1 << 9;
    pub const TSO: u64 = 1 << 10;
    pub const FLUSH: u64 = 1 << 11;
    pub const ATOMIC_WRITE: u64 = 1 << 12;
}

/// `struct ibv_data_buf`, one buffer of `ibv_wr_set_inline_data_list`.
#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

pub type WrQp = *mut ibv_qp_ex;

/// The fields of `struct ibv_qp_ex` after its `qp_base` (an `ibv_qp`): the
/// application writes `wr_id` and `wr_flags` before each `ibv_wr_*` call
/// (hence the cells), and calls the posting functions through the
/// pointers. `wr_flush` is rdma-core 45's addition at the end: rdma-core
/// 44's header does not have it, a newer one finds it filled. The default
/// has no functions: a QP made without `ibv_wr_*` operations.
#[repr(C)]
#[derive(Default)]
pub struct ibv_qp_ex_ops {
    pub comp_mask: u64,
    pub wr_id: std::cell::UnsafeCell<u64>,
    pub wr_flags: std::cell::UnsafeCell<c_uint>,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(WrQp, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(WrQp, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn(WrQp, *mut c_void, u32, *const ibv_mw_bind_info)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(WrQp, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(WrQp, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(WrQp, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(WrQp, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(WrQp)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(WrQp, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(WrQp, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn(WrQp, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(WrQp, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(WrQp, u32)>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(WrQp, *mut c_void, usize)>,
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(WrQp, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(WrQp, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(WrQp, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(WrQp)>,
    pub wr_complete: Option<unsafe extern "C" fn(WrQp) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(WrQp)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(WrQp, u32, u64, *const c_void)>,
    pub wr_flush: Option<unsafe extern "C" fn(WrQp, u32, u64, usize, u8, u8)>,
}

/// `struct ibv_qp_ex`: what `ibv_qp_to_qp_ex` returns, the same address as
/// the QP's `ibv_qp`.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub ex: ibv_qp_ex_ops,
}

/// `struct ibv_cq_init_attr_ex`, what `ibv_create_cq_ex` takes.
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `enum ibv_cq_init_attr_mask`.
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
/// `enum ibv_create_cq_attr_flags`.
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;

/// `enum ibv_create_cq_wc_flags`.
pub mod wc_ex {
    pub const BYTE_LEN: u64 = 1 << 0;
    pub const IMM: u64 = 1 << 1;
    pub const QP_NUM: u64 = 1 << 2;
    pub const SRC_QP: u64 = 1 << 3;
    pub const SLID: u64 = 1 << 4;
    pub const SL: u64 = 1 << 5;
    pub const DLID_PATH_BITS: u64 = 1 << 6;
    pub const COMPLETION_TIMESTAMP: u64 = 1 << 7;
    pub const CVLAN: u64 = 1 << 8;
    pub const FLOW_TAG: u64 = 1 << 9;
    pub const TM_INFO: u64 = 1 << 10;
    pub const COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
    /// IBV_WC_STANDARD_FLAGS: what rxe offers.
    pub const STANDARD: u64 = BYTE_LEN | IMM | QP_NUM | SRC_QP | SLID | SL | DLID_PATH_BITS;
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `struct ibv_wc_tm_info`.
#[repr(C)]
pub struct ibv_wc_tm_info {
    pub tag: u64,
    pub priv_: u32,
}

pub type CqEx = *mut ibv_cq_ex;

/// The fields of `struct ibv_cq_ex` after those it shares with `ibv_cq`:
/// the current completion's status and wr_id (fields the application
/// reads) and the polling functions.
#[repr(C)]
pub struct ibv_cq_ex_ops {
    pub comp_mask: u32,
    pub status: std::cell::UnsafeCell<c_int>,
    pub wr_id: std::cell::UnsafeCell<u64>,
    pub start_poll: Option<unsafe extern "C" fn(CqEx, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(CqEx) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(CqEx)>,
    pub read_opcode: Option<unsafe extern "C" fn(CqEx) -> c_int>,
    pub read_vendor_err: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(CqEx) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(CqEx) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(CqEx) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(CqEx) -> u64>,
    pub read_cvlan: Option<unsafe extern "C" fn(CqEx) -> u16>,
    pub read_flow_tag: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_tm_info: Option<unsafe extern "C" fn(CqEx, *mut ibv_wc_tm_info)>,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(CqEx) -> u64>,
}

/// `struct ibv_cq_ex`: an `ibv_cq` (the same address: `ibv_cq_ex_to_cq`)
/// followed by the extended fields.
#[repr(C)]
pub struct ibv_cq_ex {
    pub cq_base: ibv_cq,
    pub ex: ibv_cq_ex_ops,
}

/// `struct ibv_values_ex`, what `ibv_query_rt_values_ex` fills.
#[repr(C)]
pub struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}
pub const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;

/// `struct ibv_td_init_attr` and `struct ibv_td` (thread domains).
#[repr(C)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

#[repr(C)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void>,
    pub free: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64)>,
    pub pd_context: *mut c_void,
}

/// `enum ibv_parent_domain_init_attr_mask`.
pub const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: u32 = 1 << 0;
pub const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: u32 = 1 << 1;

/// `struct ibv_mw`. `rkey` is rewritten by `ibv_bind_mw` (the application
/// reads it), hence the atomic.
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: std::sync::atomic::AtomicU32,
    pub handle: u32,
    pub mw_type: c_int,
}

/// `struct ibv_mw_bind`, what `ibv_bind_mw` takes.
#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `enum ibv_mw_type`.
pub const IBV_MW_TYPE_1: c_int = 1;
pub const IBV_MW_TYPE_2: c_int = 2;
