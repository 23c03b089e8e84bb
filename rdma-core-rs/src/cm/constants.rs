//! The numbers librdmacm's users see: the CM's UD Q_Key and how much
//! private data a request carries after the RDMA CM's own header.

/// `RDMA_UDP_QKEY`: the Q_Key of every UD QP the RDMA CM sets up.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// User private data a REQ carries after the 36-byte `cma_hdr`.
pub const REQ_USER_DATA_LEN: usize = rdma_wire::cm::REQ_PRIVATE_DATA_LEN - rdma_wire::cma::CMA_HDR_LEN;

/// User private data a SIDR_REQ (RDMA_PS_UDP connect) carries after the `cma_hdr`.
pub const SIDR_USER_DATA_LEN: usize = rdma_wire::cm::SIDR_REQ_PRIVATE_DATA_LEN - rdma_wire::cma::CMA_HDR_LEN;
