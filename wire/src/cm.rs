//! Communication Manager messages (IBTA Vol1 ch. 12, as transcribed in
//! Linux `ibta_vol1_c12.h`): the class data of a CM MAD. Offsets below are
//! from the start of the class data (MAD byte 24). Reserved bits are
//! ignored on parse and written as zero; emit masks each field to its width.

use crate::error::check_len;
use crate::field::*;
use crate::mad::{attr, method, Mad, BASE_VERSION, CM_CLASS_VERSION, MAD_DATA_LEN, MGMT_CLASS_CM};
use crate::{Error, Result};
use core::net::Ipv6Addr;

/// Private-data sizes (`enum ib_cm_data_size`).
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
pub const REJ_ARI_LEN: usize = 72;
pub const REP_PRIVATE_DATA_LEN: usize = 196;
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
pub const DREP_PRIVATE_DATA_LEN: usize = 224;
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;
pub const SIDR_REP_INFO_LEN: usize = 72;

/// Values of the 2-bit "message MRAed / rejected" field of MRA and REJ.
pub mod msg {
    pub const REQ: u8 = 0;
    pub const REP: u8 = 1;
    pub const OTHER: u8 = 2;
}

/// Transport service types of a REQ (byte 43 bits 2..1).
pub mod transport_type {
    pub const RC: u8 = 0;
    pub const UC: u8 = 1;
    /// Extended: see the REQ's extended transport type (1 = XRC).
    pub const EXTENDED: u8 = 3;
}

/// Path MTU enum of a REQ (byte 50 bits 7..4).
pub mod mtu {
    pub const MTU_256: u8 = 1;
    pub const MTU_512: u8 = 2;
    pub const MTU_1024: u8 = 3;
    pub const MTU_2048: u8 = 4;
    pub const MTU_4096: u8 = 5;
}

/// SIDR_REP status values.
pub mod sidr_status {
    pub const SUCCESS: u8 = 0;
    pub const UNSUPPORTED_SERVICE_ID: u8 = 1;
    pub const REJECT: u8 = 2;
    pub const NO_QP: u8 = 3;
    pub const REDIRECT: u8 = 4;
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// `PCI_VENDOR_ID_MELLANOX`, the ECE vendor ID librdmacm sends on mlx5.
pub const ECE_VENDOR_MELLANOX: u32 = 0x0015b3;

/// A REJ reason (`enum ib_cm_rej_reason`); any 16-bit value may arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RejReason(pub u16);

impl RejReason {
    pub const NO_QP: RejReason = RejReason(1);
    pub const NO_EEC: RejReason = RejReason(2);
    pub const NO_RESOURCES: RejReason = RejReason(3);
    /// ARI = the sender's CA GUID.
    pub const TIMEOUT: RejReason = RejReason(4);
    pub const UNSUPPORTED: RejReason = RejReason(5);
    pub const INVALID_COMM_ID: RejReason = RejReason(6);
    pub const INVALID_COMM_INSTANCE: RejReason = RejReason(7);
    /// No listener for the service ID.
    pub const INVALID_SERVICE_ID: RejReason = RejReason(8);
    pub const INVALID_TRANSPORT_TYPE: RejReason = RejReason(9);
    pub const STALE_CONN: RejReason = RejReason(10);
    pub const RDC_NOT_EXIST: RejReason = RejReason(11);
    pub const INVALID_GID: RejReason = RejReason(12);
    pub const INVALID_LID: RejReason = RejReason(13);
    pub const INVALID_SL: RejReason = RejReason(14);
    pub const INVALID_TRAFFIC_CLASS: RejReason = RejReason(15);
    pub const INVALID_HOP_LIMIT: RejReason = RejReason(16);
    pub const INVALID_PACKET_RATE: RejReason = RejReason(17);
    pub const INVALID_ALT_GID: RejReason = RejReason(18);
    pub const INVALID_ALT_LID: RejReason = RejReason(19);
    pub const INVALID_ALT_SL: RejReason = RejReason(20);
    pub const INVALID_ALT_TRAFFIC_CLASS: RejReason = RejReason(21);
    pub const INVALID_ALT_HOP_LIMIT: RejReason = RejReason(22);
    pub const INVALID_ALT_PACKET_RATE: RejReason = RejReason(23);
    pub const PORT_CM_REDIRECT: RejReason = RejReason(24);
    pub const PORT_REDIRECT: RejReason = RejReason(25);
    pub const INVALID_MTU: RejReason = RejReason(26);
    pub const INSUFFICIENT_RESP_RESOURCES: RejReason = RejReason(27);
    /// `rdma_reject`, and every internal rdma_cm refusal.
    pub const CONSUMER_DEFINED: RejReason = RejReason(28);
    pub const INVALID_RNR_RETRY: RejReason = RejReason(29);
    pub const DUPLICATE_LOCAL_COMM_ID: RejReason = RejReason(30);
    pub const INVALID_CLASS_VERSION: RejReason = RejReason(31);
    pub const INVALID_FLOW_LABEL: RejReason = RejReason(32);
    pub const INVALID_ALT_FLOW_LABEL: RejReason = RejReason(33);
    pub const VENDOR_OPTION_NOT_SUPPORTED: RejReason = RejReason(35);
}

/// Fails unless the emitter's buffer holds the whole class data.
fn check_out(buf: &[u8]) -> Result<()> {
    if buf.len() < MAD_DATA_LEN {
        Err(Error::BufferTooSmall { needed: MAD_DATA_LEN, available: buf.len() })
    } else {
        Ok(())
    }
}

fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

fn gid_at(b: &[u8], at: usize) -> Ipv6Addr {
    Ipv6Addr::from(array_at::<16>(b, at))
}

/// The `w` bits of byte `v` that end `lsb` bits above bit 0.
fn bits(v: u8, lsb: u32, w: u32) -> u8 {
    (v >> lsb) & ((1u16 << w) - 1) as u8
}

fn put(v: u8, lsb: u32, w: u32) -> u8 {
    (v & ((1u16 << w) - 1) as u8) << lsb
}

/// One path of a REQ: 44 bytes at CM offset 52 (primary) or 96 (alternate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathRepr {
    /// 0xFFFF (permissive) on RoCE v2.
    pub local_lid: u16,
    pub remote_lid: u16,
    /// The active side's GID (`::ffff:a.b.c.d` for IPv4).
    pub local_gid: Ipv6Addr,
    pub remote_gid: Ipv6Addr,
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits; 0 = port current rate.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits, as an exponent of 4.096 µs.
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// An all-zero path: what an absent alternate path looks like.
    pub const ZERO: PathRepr = PathRepr {
        local_lid: 0,
        remote_lid: 0,
        local_gid: Ipv6Addr::UNSPECIFIED,
        remote_gid: Ipv6Addr::UNSPECIFIED,
        flow_label: 0,
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 0,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 0,
    };

    fn parse(b: &[u8], at: usize) -> PathRepr {
        PathRepr {
            local_lid: u16_at(b, at),
            remote_lid: u16_at(b, at + 2),
            local_gid: gid_at(b, at + 4),
            remote_gid: gid_at(b, at + 20),
            flow_label: u32_at(b, at + 36) >> 12,
            packet_rate: bits(b[at + 39], 0, 6),
            traffic_class: b[at + 40],
            hop_limit: b[at + 41],
            sl: bits(b[at + 42], 4, 4),
            subnet_local: b[at + 42] & 0x08 != 0,
            local_ack_timeout: bits(b[at + 43], 3, 5),
        }
    }

    /// Writes all 44 bytes except bits 2..0 of the last one (SAP Supported in the alternate path).
    fn emit(&self, b: &mut [u8], at: usize) {
        set_u16(b, at, self.local_lid);
        set_u16(b, at + 2, self.remote_lid);
        b[at + 4..at + 20].copy_from_slice(&self.local_gid.octets());
        b[at + 20..at + 36].copy_from_slice(&self.remote_gid.octets());
        set_u32(b, at + 36, (self.flow_label & 0xf_ffff) << 12);
        b[at + 39] = put(self.packet_rate, 0, 6);
        b[at + 40] = self.traffic_class;
        b[at + 41] = self.hop_limit;
        b[at + 42] = put(self.sl, 4, 4) | put(self.subnet_local as u8, 3, 1);
        b[at + 43] = put(self.local_ack_timeout, 3, 5) | (b[at + 43] & 0x07);
    }
}

/// ConnectRequest (attribute 0x0010).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqRepr {
    pub local_comm_id: u32,
    /// ECE vendor ID, 24 bits (0 without ECE).
    pub vendor_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    /// 24 bits.
    pub local_eecn: u32,
    pub initiator_depth: u8,
    /// 24 bits.
    pub remote_eecn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    /// 2 bits, see [`transport_type`].
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub pkey: u16,
    /// 4 bits, see [`mtu`].
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits (1 = XRC).
    pub extended_transport_type: u8,
    pub primary_path: PathRepr,
    /// All zero on RoCE.
    pub alternate_path: PathRepr,
    pub sap_supported: bool,
    /// On RDMA CM: a 36-byte [`crate::cma::CmaHdr`], then user data.
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl ReqRepr {
    pub const LEN: usize = 140 + REQ_PRIVATE_DATA_LEN;

    pub fn parse(b: &[u8]) -> Result<ReqRepr> {
        check_len("CM REQ", b, Self::LEN)?;
        Ok(ReqRepr {
            local_comm_id: u32_at(b, 0),
            vendor_id: u24_at(b, 5),
            service_id: u64_at(b, 8),
            local_ca_guid: u64_at(b, 16),
            local_qkey: u32_at(b, 28),
            local_qpn: u24_at(b, 32),
            responder_resources: b[35],
            local_eecn: u24_at(b, 36),
            initiator_depth: b[39],
            remote_eecn: u24_at(b, 40),
            remote_cm_response_timeout: bits(b[43], 3, 5),
            transport_service_type: bits(b[43], 1, 2),
            end_to_end_flow_control: b[43] & 1 != 0,
            starting_psn: u24_at(b, 44),
            local_cm_response_timeout: bits(b[47], 3, 5),
            retry_count: bits(b[47], 0, 3),
            pkey: u16_at(b, 48),
            path_mtu: bits(b[50], 4, 4),
            rdc_exists: b[50] & 0x08 != 0,
            rnr_retry_count: bits(b[50], 0, 3),
            max_cm_retries: bits(b[51], 4, 4),
            srq: b[51] & 0x08 != 0,
            extended_transport_type: bits(b[51], 0, 3),
            primary_path: PathRepr::parse(b, 52),
            alternate_path: PathRepr::parse(b, 96),
            sap_supported: b[139] & 0x04 != 0,
            private_data: array_at(b, 140),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_out(b)?;
        set_u32(b, 0, self.local_comm_id);
        b[4] = 0;
        set_u24(b, 5, self.vendor_id);
        set_u64(b, 8, self.service_id);
        set_u64(b, 16, self.local_ca_guid);
        set_u32(b, 24, 0);
        set_u32(b, 28, self.local_qkey);
        set_u24(b, 32, self.local_qpn);
        b[35] = self.responder_resources;
        set_u24(b, 36, self.local_eecn);
        b[39] = self.initiator_depth;
        set_u24(b, 40, self.remote_eecn);
        b[43] = put(self.remote_cm_response_timeout, 3, 5)
            | put(self.transport_service_type, 1, 2)
            | self.end_to_end_flow_control as u8;
        set_u24(b, 44, self.starting_psn);
        b[47] = put(self.local_cm_response_timeout, 3, 5) | put(self.retry_count, 0, 3);
        set_u16(b, 48, self.pkey);
        b[50] = put(self.path_mtu, 4, 4) | put(self.rdc_exists as u8, 3, 1) | put(self.rnr_retry_count, 0, 3);
        b[51] = put(self.max_cm_retries, 4, 4) | put(self.srq as u8, 3, 1) | put(self.extended_transport_type, 0, 3);
        b[95] = 0;
        self.primary_path.emit(b, 52);
        b[139] = put(self.sap_supported as u8, 2, 1);
        self.alternate_path.emit(b, 96);
        b[140..Self::LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// MessageReceiptAcknowledgement (0x0011).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MraRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits, see [`msg`].
    pub message_mraed: u8,
    /// 5 bits; Linux sends 24.
    pub service_timeout: u8,
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

impl MraRepr {
    pub const LEN: usize = 10 + MRA_PRIVATE_DATA_LEN;

    pub fn parse(b: &[u8]) -> Result<MraRepr> {
        check_len("CM MRA", b, Self::LEN)?;
        Ok(MraRepr {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            message_mraed: bits(b[8], 6, 2),
            service_timeout: bits(b[9], 3, 5),
            private_data: array_at(b, 10),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_out(b)?;
        set_u32(b, 0, self.local_comm_id);
        set_u32(b, 4, self.remote_comm_id);
        b[8] = put(self.message_mraed, 6, 2);
        b[9] = put(self.service_timeout, 3, 5);
        b[10..Self::LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// ConnectReject (0x0012).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits, see [`msg`].
    pub message_rejected: u8,
    /// 7 bits; kept as sent even if larger than the 72-byte ARI field.
    pub ari_length: u8,
    pub reason: RejReason,
    pub ari: [u8; REJ_ARI_LEN],
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

impl RejRepr {
    pub const LEN: usize = 84 + REJ_PRIVATE_DATA_LEN;

    /// The meaningful part of the ARI (clamped to the field).
    pub fn ari(&self) -> &[u8] {
        &self.ari[..(self.ari_length as usize).min(REJ_ARI_LEN)]
    }

    pub fn parse(b: &[u8]) -> Result<RejRepr> {
        check_len("CM REJ", b, Self::LEN)?;
        Ok(RejRepr {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            message_rejected: bits(b[8], 6, 2),
            ari_length: bits(b[9], 1, 7),
            reason: RejReason(u16_at(b, 10)),
            ari: array_at(b, 12),
            private_data: array_at(b, 84),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_out(b)?;
        set_u32(b, 0, self.local_comm_id);
        set_u32(b, 4, self.remote_comm_id);
        b[8] = put(self.message_rejected, 6, 2);
        b[9] = put(self.ari_length, 1, 7);
        set_u16(b, 10, self.reason.0);
        b[12..84].copy_from_slice(&self.ari);
        b[84..Self::LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// ConnectReply (0x0013).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RepRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// ECE vendor ID, 24 bits, split over bytes 15, 19 and 23.
    pub vendor_id: u32,
    /// 24 bits.
    pub local_eecn: u32,
    /// 24 bits.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl RepRepr {
    pub const LEN: usize = 36 + REP_PRIVATE_DATA_LEN;

    pub fn parse(b: &[u8]) -> Result<RepRepr> {
        check_len("CM REP", b, Self::LEN)?;
        Ok(RepRepr {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            local_qkey: u32_at(b, 8),
            local_qpn: u24_at(b, 12),
            vendor_id: u32::from_be_bytes([0, b[15], b[19], b[23]]),
            local_eecn: u24_at(b, 16),
            starting_psn: u24_at(b, 20),
            responder_resources: b[24],
            initiator_depth: b[25],
            target_ack_delay: bits(b[26], 3, 5),
            failover_accepted: bits(b[26], 1, 2),
            end_to_end_flow_control: b[26] & 1 != 0,
            rnr_retry_count: bits(b[27], 5, 3),
            srq: b[27] & 0x10 != 0,
            local_ca_guid: u64_at(b, 28),
            private_data: array_at(b, 36),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_out(b)?;
        let v = self.vendor_id.to_be_bytes();
        set_u32(b, 0, self.local_comm_id);
        set_u32(b, 4, self.remote_comm_id);
        set_u32(b, 8, self.local_qkey);
        set_u24(b, 12, self.local_qpn);
        b[15] = v[1];
        set_u24(b, 16, self.local_eecn);
        b[19] = v[2];
        set_u24(b, 20, self.starting_psn);
        b[23] = v[3];
        b[24] = self.responder_resources;
        b[25] = self.initiator_depth;
        b[26] =
            put(self.target_ack_delay, 3, 5) | put(self.failover_accepted, 1, 2) | self.end_to_end_flow_control as u8;
        b[27] = put(self.rnr_retry_count, 5, 3) | put(self.srq as u8, 4, 1);
        set_u64(b, 28, self.local_ca_guid);
        b[36..Self::LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// ReadyToUse (0x0014).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RtuRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

/// DisconnectReply (0x0016): the same layout as an RTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DrepRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

macro_rules! ids_and_data {
    ($repr:ident, $label:expr) => {
        impl $repr {
            pub const LEN: usize = 8 + 224;

            pub fn parse(b: &[u8]) -> Result<$repr> {
                check_len($label, b, Self::LEN)?;
                Ok($repr { local_comm_id: u32_at(b, 0), remote_comm_id: u32_at(b, 4), private_data: array_at(b, 8) })
            }

            pub fn emit(&self, b: &mut [u8]) -> Result<()> {
                check_out(b)?;
                set_u32(b, 0, self.local_comm_id);
                set_u32(b, 4, self.remote_comm_id);
                b[8..Self::LEN].copy_from_slice(&self.private_data);
                Ok(())
            }
        }
    };
}
ids_and_data!(RtuRepr, "CM RTU");
ids_and_data!(DrepRepr, "CM DREP");

/// DisconnectRequest (0x0015).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DreqRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits; must be the receiver's QPN or Linux ignores the DREQ.
    pub remote_qpn: u32,
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

impl DreqRepr {
    pub const LEN: usize = 12 + DREQ_PRIVATE_DATA_LEN;

    pub fn parse(b: &[u8]) -> Result<DreqRepr> {
        check_len("CM DREQ", b, Self::LEN)?;
        Ok(DreqRepr {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            remote_qpn: u24_at(b, 8),
            private_data: array_at(b, 12),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_out(b)?;
        set_u32(b, 0, self.local_comm_id);
        set_u32(b, 4, self.remote_comm_id);
        set_u24(b, 8, self.remote_qpn);
        b[11] = 0;
        b[12..Self::LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// ServiceIDResolutionRequest (0x0017).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrReqRepr {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    /// On RDMA CM: a 36-byte [`crate::cma::CmaHdr`], then user data.
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

impl SidrReqRepr {
    pub const LEN: usize = 16 + SIDR_REQ_PRIVATE_DATA_LEN;

    pub fn parse(b: &[u8]) -> Result<SidrReqRepr> {
        check_len("CM SIDR_REQ", b, Self::LEN)?;
        Ok(SidrReqRepr {
            request_id: u32_at(b, 0),
            pkey: u16_at(b, 4),
            service_id: u64_at(b, 8),
            private_data: array_at(b, 16),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_out(b)?;
        set_u32(b, 0, self.request_id);
        set_u16(b, 4, self.pkey);
        set_u16(b, 6, 0);
        set_u64(b, 8, self.service_id);
        b[16..Self::LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// ServiceIDResolutionResponse (0x0018).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrRepRepr {
    pub request_id: u32,
    /// See [`sidr_status`].
    pub status: u8,
    pub additional_info_length: u8,
    /// ECE vendor ID, 24 bits: 23..8 at byte 6, 7..0 at byte 11.
    pub vendor_id: u32,
    /// 24 bits.
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    pub additional_info: [u8; SIDR_REP_INFO_LEN],
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

impl SidrRepRepr {
    pub const LEN: usize = 96 + SIDR_REP_PRIVATE_DATA_LEN;

    pub fn parse(b: &[u8]) -> Result<SidrRepRepr> {
        check_len("CM SIDR_REP", b, Self::LEN)?;
        Ok(SidrRepRepr {
            request_id: u32_at(b, 0),
            status: b[4],
            additional_info_length: b[5],
            vendor_id: u32::from_be_bytes([0, b[6], b[7], b[11]]),
            qpn: u24_at(b, 8),
            service_id: u64_at(b, 12),
            qkey: u32_at(b, 20),
            additional_info: array_at(b, 24),
            private_data: array_at(b, 96),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_out(b)?;
        let v = self.vendor_id.to_be_bytes();
        set_u32(b, 0, self.request_id);
        b[4] = self.status;
        b[5] = self.additional_info_length;
        b[6] = v[1];
        b[7] = v[2];
        set_u24(b, 8, self.qpn);
        b[11] = v[3];
        set_u64(b, 12, self.service_id);
        set_u32(b, 20, self.qkey);
        b[24..96].copy_from_slice(&self.additional_info);
        b[96..Self::LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// Any CM message this crate speaks (LAP and APR are not: Linux drops them on RoCE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    Req(ReqRepr),
    Mra(MraRepr),
    Rej(RejRepr),
    Rep(RepRepr),
    Rtu(RtuRepr),
    Dreq(DreqRepr),
    Drep(DrepRepr),
    SidrReq(SidrReqRepr),
    SidrRep(SidrRepRepr),
}

impl CmMessage {
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// Parses the class data `b` (MAD bytes 24..256) of attribute `attribute_id`.
    pub fn parse(attribute_id: u16, b: &[u8]) -> Result<CmMessage> {
        Ok(match attribute_id {
            attr::REQ => CmMessage::Req(ReqRepr::parse(b)?),
            attr::MRA => CmMessage::Mra(MraRepr::parse(b)?),
            attr::REJ => CmMessage::Rej(RejRepr::parse(b)?),
            attr::REP => CmMessage::Rep(RepRepr::parse(b)?),
            attr::RTU => CmMessage::Rtu(RtuRepr::parse(b)?),
            attr::DREQ => CmMessage::Dreq(DreqRepr::parse(b)?),
            attr::DREP => CmMessage::Drep(DrepRepr::parse(b)?),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReqRepr::parse(b)?),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRepRepr::parse(b)?),
            other => return Err(Error::UnknownAttribute { class: MGMT_CLASS_CM, attribute: other }),
        })
    }

    /// Writes the 232 bytes of class data.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        match self {
            CmMessage::Req(m) => m.emit(b),
            CmMessage::Mra(m) => m.emit(b),
            CmMessage::Rej(m) => m.emit(b),
            CmMessage::Rep(m) => m.emit(b),
            CmMessage::Rtu(m) => m.emit(b),
            CmMessage::Dreq(m) => m.emit(b),
            CmMessage::Drep(m) => m.emit(b),
            CmMessage::SidrReq(m) => m.emit(b),
            CmMessage::SidrRep(m) => m.emit(b),
        }
    }
}

/// A whole CM MAD: the header fields a CM uses, and the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMadRepr {
    pub transaction_id: u64,
    /// ECE options on REQ and REP, otherwise 0.
    pub attribute_modifier: u32,
    pub message: CmMessage,
}

impl CmMadRepr {
    /// Accepts what the Linux MAD layer would hand to the CM: base version 1,
    /// class 0x07, class version 2, method SEND. Status is ignored, as Linux does.
    pub fn parse<T: AsRef<[u8]>>(m: &Mad<T>) -> Result<CmMadRepr> {
        if m.base_version() != BASE_VERSION {
            return Err(Error::BadVersion { header: "MAD", version: m.base_version() });
        }
        if m.mgmt_class() != MGMT_CLASS_CM {
            return Err(Error::InvalidField { header: "MAD", field: "management class", value: m.mgmt_class().into() });
        }
        if m.class_version() != CM_CLASS_VERSION {
            return Err(Error::BadVersion { header: "CM MAD", version: m.class_version() });
        }
        if m.method() != method::SEND {
            return Err(Error::InvalidField { header: "CM MAD", field: "method", value: m.method().into() });
        }
        Ok(CmMadRepr {
            transaction_id: m.transaction_id(),
            attribute_modifier: m.attribute_modifier(),
            message: CmMessage::parse(m.attribute_id(), m.data())?,
        })
    }

    /// Writes the whole 256-byte MAD (any bytes past 256 are left alone).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut Mad<T>) -> Result<()> {
        let mut h = crate::mad::MadHeaderRepr::cm(self.message.attribute_id(), self.transaction_id);
        h.attribute_modifier = self.attribute_modifier;
        h.emit(m);
        self.message.emit(m.data_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cma::{service_id, CmaHdr, CmaHdrRepr, RdmaPs};
    use crate::mad::MAD_LEN;
    use core::net::{IpAddr, Ipv4Addr};

    /// The REQ `rping -c -a 192.168.1.2` would send from 192.168.1.1 (with
    /// ECE, a 7-bit packet rate and SL 5 so that no field is zero).
    fn rping_req() -> ReqRepr {
        let mut private_data = [0u8; REQ_PRIVATE_DATA_LEN];
        let cma = CmaHdrRepr {
            src_port: 0xc123,
            src: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2)),
        };
        cma.emit(&mut CmaHdr::new_checked(&mut private_data[..]).unwrap()).unwrap();
        private_data[36..40].copy_from_slice(b"user");
        ReqRepr {
            local_comm_id: 0x1122_3344,
            vendor_id: ECE_VENDOR_MELLANOX,
            service_id: service_id(RdmaPs::TCP, 7174),
            local_ca_guid: 0x0202_c9ff_fe12_3456,
            local_qkey: 0,
            local_qpn: 0xab_cdef,
            responder_resources: 0x80,
            local_eecn: 0,
            initiator_depth: 0x7f,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport_service_type: transport_type::RC,
            end_to_end_flow_control: true,
            starting_psn: 0x12_3456,
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: mtu::MTU_1024,
            rdc_exists: false,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            srq: true,
            extended_transport_type: 0,
            primary_path: PathRepr {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: Ipv4Addr::new(192, 168, 1, 1).to_ipv6_mapped(),
                remote_gid: Ipv4Addr::new(192, 168, 1, 2).to_ipv6_mapped(),
                flow_label: 0xa_bcde,
                packet_rate: 7,
                traffic_class: 0x20,
                hop_limit: 64,
                sl: 5,
                subnet_local: false,
                local_ack_timeout: 17,
            },
            alternate_path: PathRepr::ZERO,
            sap_supported: false,
            private_data,
        }
    }

    fn emit_mad(message: CmMessage, tid: u64, attr_mod: u32) -> [u8; MAD_LEN] {
        let mut buf = [0x5au8; MAD_LEN];
        let repr = CmMadRepr { transaction_id: tid, attribute_modifier: attr_mod, message };
        repr.emit(&mut Mad::new_checked(&mut buf[..]).unwrap()).unwrap();
        let back = CmMadRepr::parse(&Mad::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(back, repr);
        buf
    }

    /// The whole 256-byte REQ, byte for byte, from the §2.1 and §3.2 tables (Abs offsets).
    #[test]
    fn req_golden_bytes() {
        let buf = emit_mad(CmMessage::Req(rping_req()), 0x0000_0001_1122_3344, 0x0000_0001);
        let mut want = [0u8; MAD_LEN];
        want[..24]
            .copy_from_slice(&[1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0x11, 0x22, 0x33, 0x44, 0, 0x10, 0, 0, 0, 0, 0, 1]);
        want[24..28].copy_from_slice(&[0x11, 0x22, 0x33, 0x44]);
        want[29..32].copy_from_slice(&[0x00, 0x15, 0xb3]); // ECE vendor
        want[32..40].copy_from_slice(&[0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06]); // rping :7174
        want[40..48].copy_from_slice(&[0x02, 0x02, 0xc9, 0xff, 0xfe, 0x12, 0x34, 0x56]);
        want[56..60].copy_from_slice(&[0xab, 0xcd, 0xef, 0x80]); // QPN, responder resources
        want[63] = 0x7f; // initiator depth
        want[67] = 20 << 3 | 1; // remote CM timeout, RC, flow control
        want[68..72].copy_from_slice(&[0x12, 0x34, 0x56, 20 << 3 | 7]);
        want[72..74].copy_from_slice(&[0xff, 0xff]);
        want[74] = 0x37; // MTU 1024, RNR retry 7
        want[75] = 0xf8; // max CM retries 15, SRQ
        want[76..80].copy_from_slice(&[0xff; 4]);
        want[90..96].copy_from_slice(&[0xff, 0xff, 192, 168, 1, 1]);
        want[106..112].copy_from_slice(&[0xff, 0xff, 192, 168, 1, 2]);
        want[112..116].copy_from_slice(&[0xab, 0xcd, 0xe0, 0x07]); // flow label, rate
        want[116..120].copy_from_slice(&[0x20, 64, 0x50, 17 << 3]);
        // cma_hdr at Abs 164: version 0, IPv4 in the high nibble, port, raw IPv4 addresses.
        want[164..168].copy_from_slice(&[0x00, 0x40, 0xc1, 0x23]);
        want[180..184].copy_from_slice(&[192, 168, 1, 1]);
        want[196..200].copy_from_slice(&[192, 168, 1, 2]);
        want[200..204].copy_from_slice(b"user");
        assert_eq!(buf[..], want[..]);
    }

    /// Fields at their widths do not spill into their neighbours, and
    /// over-wide values are masked.
    #[test]
    fn req_packed_bits() {
        let mut r = rping_req();
        let data = |r: &ReqRepr| {
            let mut b = [0u8; MAD_DATA_LEN];
            r.emit(&mut b).unwrap();
            b
        };
        r.remote_cm_response_timeout = 0xff;
        r.transport_service_type = 0;
        r.end_to_end_flow_control = false;
        assert_eq!(data(&r)[43], 0xf8);
        r.transport_service_type = transport_type::EXTENDED;
        assert_eq!(data(&r)[43], 0xfe);
        r.local_cm_response_timeout = 0;
        r.retry_count = 0xff;
        assert_eq!(data(&r)[47], 0x07);
        r.path_mtu = 0xff;
        r.rdc_exists = true;
        r.rnr_retry_count = 0;
        assert_eq!(data(&r)[50], 0xf8);
        r.max_cm_retries = 0;
        r.srq = false;
        r.extended_transport_type = 1;
        assert_eq!(data(&r)[51], 0x01);
        r.local_qpn = 0xffff_ffff;
        assert_eq!(data(&r)[31..36], [0, 0xff, 0xff, 0xff, 0x80], "24-bit QPN at 32..35, responder resources at 35");
        r.primary_path.flow_label = 0xfff_ffff;
        r.primary_path.packet_rate = 0xff;
        r.primary_path.sl = 0xff;
        r.primary_path.subnet_local = true;
        r.primary_path.local_ack_timeout = 0xff;
        assert_eq!(data(&r)[88..96], [0xff, 0xff, 0xf0, 0x3f, 0x20, 64, 0xf8, 0xf8]);
        r.alternate_path.local_ack_timeout = 1;
        r.sap_supported = true;
        r.alternate_path.local_lid = 0x1234;
        let b = data(&r);
        assert_eq!((b[96], b[97], b[139]), (0x12, 0x34, 0x0c));
        assert_eq!(ReqRepr::parse(&b).unwrap().alternate_path.local_lid, 0x1234);
        assert!(ReqRepr::parse(&b).unwrap().sap_supported);
    }

    #[test]
    fn rep_offsets() {
        let mut private_data = [0u8; REP_PRIVATE_DATA_LEN];
        private_data[0] = 0xee;
        private_data[195] = 0xdd;
        let rep = RepRepr {
            local_comm_id: 0x0a0a_0a0a,
            remote_comm_id: 0x1122_3344,
            local_qkey: 0x0102_0304,
            local_qpn: 0x34_5678,
            vendor_id: ECE_VENDOR_MELLANOX,
            local_eecn: 0x65_4321,
            starting_psn: 0x9a_bcde,
            responder_resources: 4,
            initiator_depth: 5,
            target_ack_delay: 15,
            failover_accepted: 0,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: 0x0102_0304_0506_0708,
            private_data,
        };
        let b = emit_mad(CmMessage::Rep(rep), 7, 0);
        assert_eq!(b[16..18], [0x00, 0x13]);
        assert_eq!(b[24..36], [0x0a, 0x0a, 0x0a, 0x0a, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4]);
        assert_eq!(b[36..48], [0x34, 0x56, 0x78, 0x00, 0x65, 0x43, 0x21, 0x15, 0x9a, 0xbc, 0xde, 0xb3]);
        assert_eq!(b[48..52], [4, 5, 15 << 3 | 1, 0xf0]);
        assert_eq!(b[52..60], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((b[60], b[255]), (0xee, 0xdd));
    }

    #[test]
    fn rej_mra_offsets() {
        let mut ari = [0u8; REJ_ARI_LEN];
        ari[..8].copy_from_slice(&0x0202_c9ff_fe12_3456u64.to_be_bytes());
        let mut private_data = [0u8; REJ_PRIVATE_DATA_LEN];
        private_data[0] = 0x99;
        let rej = RejRepr {
            local_comm_id: 0,
            remote_comm_id: 0x1122_3344,
            message_rejected: msg::REP,
            ari_length: 8,
            reason: RejReason::TIMEOUT,
            ari,
            private_data,
        };
        assert_eq!(rej.ari(), &ari[..8]);
        let b = emit_mad(CmMessage::Rej(rej), 7, 0);
        assert_eq!(b[16..18], [0x00, 0x12]);
        assert_eq!(b[28..40], [0x11, 0x22, 0x33, 0x44, 0x40, 0x10, 0x00, 0x04, 0x02, 0x02, 0xc9, 0xff]);
        assert_eq!((b[107], b[108]), (0, 0x99));

        let mra = MraRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_mraed: msg::OTHER,
            service_timeout: 24,
            private_data: [0x77; MRA_PRIVATE_DATA_LEN],
        };
        let b = emit_mad(CmMessage::Mra(mra), 7, 0);
        assert_eq!(b[16..18], [0x00, 0x11]);
        assert_eq!(b[24..35], [0, 0, 0, 1, 0, 0, 0, 2, 0x80, 0xc0, 0x77]);
    }

    #[test]
    fn rtu_dreq_drep_offsets() {
        let rtu = RtuRepr { local_comm_id: 1, remote_comm_id: 2, private_data: [3; RTU_PRIVATE_DATA_LEN] };
        let b = emit_mad(CmMessage::Rtu(rtu), 0, 0);
        assert_eq!((b[17], &b[24..33]), (0x14, &[0, 0, 0, 1, 0, 0, 0, 2, 3][..]));
        let dreq = DreqRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn: 0x12_3456,
            private_data: [4; DREQ_PRIVATE_DATA_LEN],
        };
        let b = emit_mad(CmMessage::Dreq(dreq), 0, 0);
        assert_eq!((b[17], &b[32..37]), (0x15, &[0x12, 0x34, 0x56, 0, 4][..]));
        let drep = DrepRepr { local_comm_id: 1, remote_comm_id: 2, private_data: [5; DREP_PRIVATE_DATA_LEN] };
        let b = emit_mad(CmMessage::Drep(drep), 0, 0);
        assert_eq!((b[17], b[31], b[32], b[255]), (0x16, 2, 5, 5));
    }

    #[test]
    fn sidr_offsets() {
        let mut private_data = [0u8; SIDR_REQ_PRIVATE_DATA_LEN];
        let cma = CmaHdrRepr {
            src_port: 7,
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        };
        cma.emit(&mut CmaHdr::new_checked(&mut private_data[..]).unwrap()).unwrap();
        let req = SidrReqRepr {
            request_id: 0xcafe_f00d,
            pkey: 0xffff,
            service_id: service_id(RdmaPs::UDP, 7174),
            private_data,
        };
        let b = emit_mad(CmMessage::SidrReq(req), 0, 0);
        assert_eq!(b[16..18], [0x00, 0x17]);
        assert_eq!(b[24..40], [0xca, 0xfe, 0xf0, 0x0d, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06]);
        assert_eq!(b[40..44], [0x00, 0x40, 0x00, 0x07]);
        assert_eq!((&b[56..60], &b[72..76]), (&[10, 0, 0, 1][..], &[10, 0, 0, 2][..]));

        let rep = SidrRepRepr {
            request_id: 0xcafe_f00d,
            status: sidr_status::SUCCESS,
            additional_info_length: 0,
            vendor_id: 0x12_3456,
            qpn: 0xab_cdef,
            service_id: service_id(RdmaPs::UDP, 7174),
            qkey: 0x0123_4567,
            additional_info: [0x11; SIDR_REP_INFO_LEN],
            private_data: [0x22; SIDR_REP_PRIVATE_DATA_LEN],
        };
        let b = emit_mad(CmMessage::SidrRep(rep), 0, 0);
        assert_eq!(b[16..18], [0x00, 0x18]);
        assert_eq!(b[24..36], [0xca, 0xfe, 0xf0, 0x0d, 0, 0, 0x12, 0x34, 0xab, 0xcd, 0xef, 0x56]);
        assert_eq!(b[36..48], [0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 0x01, 0x23, 0x45, 0x67]);
        assert_eq!((b[47], b[48], b[119], b[120]), (0x67, 0x11, 0x11, 0x22));
    }

    /// A REQ framed as §1.2 says: IPv4/UDP 4791/BTH/DETH/MAD/ICRC, parsed back whole.
    #[test]
    fn req_over_roce_v2() {
        use crate::*;
        let mad = emit_mad(CmMessage::Req(rping_req()), 1, 0);
        let repr = RoceV2Repr {
            ip: IpRepr::V4(Ipv4Repr {
                dscp: 0,
                ecn: 0,
                ident: 0,
                dont_frag: true,
                ttl: 64,
                protocol: 17,
                src: Ipv4Addr::new(192, 168, 1, 1),
                dst: Ipv4Addr::new(192, 168, 1, 2),
            }),
            udp: UdpRepr { src_port: 0xc001, dst_port: ROCE_V2_PORT, checksum: 0 },
            transport: crate::mad::gsi_send_transport(Psn::new(0)),
        };
        let mut buf = [0u8; 512];
        let n = repr.emit(&mut buf, &mad).unwrap();
        assert_eq!(n, 20 + 8 + 12 + 8 + MAD_LEN + 4);
        let p = RoceV2Packet::new_checked(&buf[..n]).unwrap();
        assert!(p.icrc_ok());
        let t = p.transport();
        assert_eq!((t.bth().dest_qp(), t.deth().unwrap().qkey()), (1, 0x8001_0000));
        let back = CmMadRepr::parse(&Mad::new_checked(t.payload()).unwrap()).unwrap();
        assert_eq!(back.message, CmMessage::Req(rping_req()));
    }

    #[test]
    fn errors() {
        let good = emit_mad(CmMessage::Req(rping_req()), 1, 0);
        let parse = |b: &[u8]| CmMadRepr::parse(&Mad::new_checked(b)?);
        assert_eq!(parse(&good[..255]), Err(Error::Truncated { header: "MAD", needed: 256, available: 255 }));
        let with = |at: usize, v: u8| {
            let mut b = good;
            b[at] = v;
            parse(&b)
        };
        assert_eq!(with(0, 2), Err(Error::BadVersion { header: "MAD", version: 2 }));
        assert_eq!(with(1, 0x03), Err(Error::InvalidField { header: "MAD", field: "management class", value: 3 }));
        assert_eq!(with(2, 1), Err(Error::BadVersion { header: "CM MAD", version: 1 }));
        assert_eq!(with(3, 0x83), Err(Error::InvalidField { header: "CM MAD", field: "method", value: 0x83 }));
        assert_eq!(with(17, 0x19), Err(Error::UnknownAttribute { class: 7, attribute: 0x19 }));
        assert_eq!(with(17, 0x01), Err(Error::UnknownAttribute { class: 7, attribute: 0x01 }));
        assert!(with(4, 0xff).is_ok(), "status is ignored");
        assert_eq!(
            CmMessage::parse(attr::REQ, &good[24..255]),
            Err(Error::Truncated { header: "CM REQ", needed: 232, available: 231 })
        );
        assert_eq!(
            CmMessage::parse(attr::SIDR_REP, &[]),
            Err(Error::Truncated { header: "CM SIDR_REP", needed: 232, available: 0 })
        );
        let mut small = [0u8; 100];
        assert_eq!(rping_req().emit(&mut small), Err(Error::BufferTooSmall { needed: 232, available: 100 }));
        let rtu = RtuRepr { local_comm_id: 0, remote_comm_id: 0, private_data: [0; 224] };
        assert_eq!(CmMessage::Rtu(rtu).emit(&mut small), Err(Error::BufferTooSmall { needed: 232, available: 100 }));
    }
}
