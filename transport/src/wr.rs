//! Work requests and work completions, with the names, values and meaning
//! of libibverbs' `ibv_send_wr`, `ibv_recv_wr` and `ibv_wc`.

use core::net::IpAddr;

/// A scatter/gather element: `length` bytes at `addr` in the region of `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// Where a UD send goes (the address handle, remote QPN and Q_Key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    pub dest: IpAddr,
    /// IPv4 TTL / IPv6 hop limit of the address handle.
    pub hop_limit: u8,
    /// DSCP and ECN bits of the address handle.
    pub traffic_class: u8,
    /// The destination port's LID and service level (native IB only).
    pub dlid: u16,
    pub sl: u8,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

impl UdDest {
    /// A destination with the default hop limit (64) and traffic class (0).
    pub fn new(dest: IpAddr, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest { dest, hop_limit: 64, traffic_class: 0, dlid: 0, sl: 0, remote_qpn, remote_qkey }
    }
}

/// What a send work request does (`ibv_wr_opcode` with its operands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send,
    SendWithImm {
        imm: u32,
    },
    SendWithInv {
        invalidate_rkey: u32,
    },
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    CompareSwap {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
    /// `IBV_WR_FLUSH` (`ibv_wr_flush`, IBTA 1.5 annex A19): the responder
    /// makes what was written to `len` bytes at `remote_addr` (or, with
    /// [`flush::SELECTIVITY_MR`], to the whole region of `rkey`) globally
    /// visible or persistent, as `placement` says ([`flush::GLOBAL`],
    /// [`flush::PERSISTENT`]). RC only; no local buffers (`sg_list` empty).
    Flush {
        remote_addr: u64,
        rkey: u32,
        len: u64,
        placement: u8,
        selectivity: u8,
    },
    /// `IBV_WR_ATOMIC_WRITE` (`ibv_wr_atomic_write`, IBTA 1.5 annex A19):
    /// the 8 bytes of `value`, copied at post time as libibverbs copies
    /// `atomic_wr`, land at the 8-byte aligned `remote_addr` as one write,
    /// byte for byte (no byte-order conversion). RC only; no local buffers.
    AtomicWrite {
        remote_addr: u64,
        rkey: u32,
        value: [u8; 8],
    },
    /// `IBV_WR_LOCAL_INV`: invalidates the type 2 memory window of
    /// `invalidate_rkey` (its rkey stops reaching memory). A local
    /// operation: no packet; it runs once every earlier request has
    /// completed (rxe's mandatory local invalidate fence) and completes
    /// with [`WcOpcode::LocalInv`]. RC and UC; no local buffers.
    LocalInv {
        invalidate_rkey: u32,
    },
    /// `IBV_WR_BIND_MW` (and `ibv_bind_mw`, which posts one for a type 1
    /// window): binds the window whose current rkey is `mw_rkey` to
    /// `length` bytes at `addr` of the region of `mr_lkey` with the remote
    /// rights `access`; its rkey becomes `mw_rkey` with the low byte of
    /// `rkey` (`ibv_inc_rkey`). Length 0 unbinds a type 1 window. A local
    /// operation, executed in order with the send queue, completing with
    /// [`WcOpcode::BindMw`] (or `MW_BIND_ERR`). RC and UC; no local buffers.
    BindMw {
        mw_rkey: u32,
        rkey: u32,
        mr_lkey: u32,
        addr: u64,
        length: u64,
        access: crate::memory::Access,
    },
}

/// The operands of [`SendOp::Flush`], with libibverbs' values
/// (`enum ibv_placement_type`, `enum ibv_selectivity_level`).
pub mod flush {
    /// `IBV_FLUSH_GLOBAL`: placement type "global visibility".
    pub const GLOBAL: u8 = rdma_wire::feth::PLACEMENT_GLOBAL;
    /// `IBV_FLUSH_PERSISTENT`: placement type "persistence".
    pub const PERSISTENT: u8 = rdma_wire::feth::PLACEMENT_PERSISTENT;
    /// `IBV_FLUSH_RANGE`: flush the range the request names.
    pub const SELECTIVITY_RANGE: u8 = rdma_wire::feth::SELECTIVITY_RANGE;
    /// `IBV_FLUSH_MR`: flush the whole memory region of the rkey.
    pub const SELECTIVITY_MR: u8 = rdma_wire::feth::SELECTIVITY_MR;
}

impl SendOp {
    /// The completion opcode this request completes with.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => WcOpcode::Send,
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::Flush { .. } => WcOpcode::Flush,
            SendOp::AtomicWrite { .. } => WcOpcode::AtomicWrite,
            SendOp::LocalInv { .. } => WcOpcode::LocalInv,
            SendOp::BindMw { .. } => WcOpcode::BindMw,
        }
    }

    /// Whether the request is a local operation (LOCAL_INV, BIND_MW): it
    /// sends no packet and takes no PSN.
    pub fn is_local(&self) -> bool {
        matches!(self, SendOp::LocalInv { .. } | SendOp::BindMw { .. })
    }

    /// Whether the request is answered by a response (READ response or
    /// atomic ACK) rather than an ACK: a READ, an atomic, a FLUSH or an
    /// ATOMIC WRITE (the last two by a READ response without payload).
    pub fn expects_response(&self) -> bool {
        self.writes_local() || matches!(self, SendOp::Flush { .. } | SendOp::AtomicWrite { .. })
    }

    /// Whether the request takes one of the `max_rd_atomic` outstanding
    /// READ/atomic slots: READs, atomics and ATOMIC WRITE, as rxe's
    /// requester counts them (rxe_req.c: `RXE_READ_OR_ATOMIC_MASK |
    /// RXE_ATOMIC_WRITE_MASK`); a FLUSH does not.
    pub fn uses_rd_atomic(&self) -> bool {
        self.writes_local() || matches!(self, SendOp::AtomicWrite { .. })
    }

    /// Whether the local buffers are written (READ and atomics) rather than read.
    pub fn writes_local(&self) -> bool {
        matches!(self, SendOp::RdmaRead { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }

    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    pub sg_list: Vec<Sge>,
    /// Generate a completion (`IBV_SEND_SIGNALED`); QPs created with
    /// `sq_sig_all` complete every request.
    pub signaled: bool,
    /// Ask for a solicited event at the receiver (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
    /// Data carried in the request itself (`IBV_SEND_INLINE`), copied at post time.
    pub inline_data: Option<Vec<u8>>,
    /// For UD QPs: the destination.
    pub ud: Option<UdDest>,
    /// For XRC_SEND QPs: the remote XRC SRQ number
    /// (`wr.qp_type.xrc.remote_srqn`, `ibv_wr_set_xrc_srqn`).
    pub xrc_srqn: u32,
}

impl SendWr {
    /// A signaled request with no solicited event, inline data or UD destination.
    pub fn new(wr_id: u64, op: SendOp, sg_list: Vec<Sge>) -> SendWr {
        SendWr { wr_id, op, sg_list, signaled: true, solicited: false, inline_data: None, ud: None, xrc_srqn: 0 }
    }

    /// Total bytes of the scatter/gather list (or of the inline data).
    pub fn length(&self) -> u64 {
        match &self.inline_data {
            Some(d) => d.len() as u64,
            None => self.sg_list.iter().map(|s| u64::from(s.length)).sum(),
        }
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sg_list: Vec<Sge>,
}

/// `ibv_wc_status`, with its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocProtErr = 4,
    WrFlushErr = 5,
    /// `IBV_WC_MW_BIND_ERR`: a memory window bind was refused.
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    GeneralErr = 21,
}

impl WcStatus {
    /// The name `ibv_wc_status_str` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// `ibv_wc_opcode`, with its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    /// `IBV_WC_BIND_MW`.
    BindMw = 5,
    /// `IBV_WC_LOCAL_INV`.
    LocalInv = 6,
    /// `IBV_WC_FLUSH`.
    Flush = 8,
    /// `IBV_WC_ATOMIC_WRITE`.
    AtomicWrite = 9,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

/// `ibv_wc_flags` bits.
pub mod wc_flags {
    /// The first 40 bytes of the receive buffer hold a GRH (UD).
    pub const GRH: u32 = 1 << 0;
    pub const WITH_IMM: u32 = 1 << 1;
    pub const WITH_INV: u32 = 1 << 3;
}

/// What a UD receive completion's `sl` says on RoCE, where a packet
/// carries no service level: the packet's network header type, as
/// ConnectX (mlx5) reports it in the CQE (its PRM, quoted by UCX: bit 3
/// set when the frame has a UDP header, that is RoCE v2; bits 2:0 the L3
/// header, 0 a GRH, 1 IPv6, 2 IPv4). UCX's `ud_verbs` before 1.19 reads it
/// so to know how many bytes of the GRH area's destination GID to check
/// (4 for IPv4, else 16) and drops every packet whose check fails; kernel
/// rxe reports 0 there (so UCX 1.13's `ud_verbs` over rxe and IPv4 drops
/// everything).
pub mod roce_packet_type {
    /// RoCE v1: a GRH, no UDP header.
    pub const ROCE_V1: u8 = 0x0;
    /// RoCE v2 over IPv6.
    pub const ROCE_V2_IPV6: u8 = 0x8 | 0x1;
    /// RoCE v2 over IPv4.
    pub const ROCE_V2_IPV4: u8 = 0x8 | 0x2;
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// The QP the request was posted to.
    pub qp_num: u32,
    /// Bytes received (receive completions) or transferred.
    pub byte_len: u32,
    /// Immediate data, in network order as libibverbs gives it.
    pub imm_data: Option<u32>,
    /// The rkey a SEND with invalidate invalidated.
    pub invalidated_rkey: Option<u32>,
    /// Source QP (UD receives).
    pub src_qp: u32,
    pub wc_flags: u32,
    /// `wc.sl` of a UD receive: on native IB the LRH's service level, on
    /// RoCE the packet's [`roce_packet_type`]; 0 otherwise.
    pub sl: u8,
    /// A receive whose message asked for a solicited event (the BTH's SE
    /// bit on its last packet): with errors, what wakes a CQ armed for
    /// solicited completions only (`ibv_req_notify_cq(cq, 1)`).
    pub solicited: bool,
}

impl WorkCompletion {
    /// A completion with no byte count, immediate data, source QP, flags or SL.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            qp_num,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            src_qp: 0,
            wc_flags: 0,
            solicited: false,
            sl: 0,
        }
    }
}
