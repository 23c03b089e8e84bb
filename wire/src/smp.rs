//! Subnet management packets (IBTA 14.2; reference §3.1): the 256-byte
//! SMP, LID-routed (class 0x01) or directed-route (class 0x81), and the
//! attributes a subnet manager reads and writes: NodeInfo, PortInfo,
//! SwitchInfo, LinearForwardingTable, P_KeyTable, SLtoVLMappingTable,
//! VLArbitrationTable (and NodeDescription). Layouts as Linux's
//! `struct ib_smp`, `ib_node_info`, `ib_port_info` and opensm's
//! `ib_switch_info_t`.
//!
//! Each attribute has a zero-copy view over its 64 data bytes and an owned
//! `…Repr` whose `emit` writes every field it parses (reserved bytes zero),
//! so `parse(emit(x)) == x`.

use crate::error::check_len;
use crate::field::*;
use crate::mad::{Mad, MadHeaderRepr, BASE_VERSION};
use crate::{Error, Result};

pub const SMP_LEN: usize = 256;
pub const SMP_DATA_LEN: usize = 64;
pub const CLASS_LID_ROUTED: u8 = 0x01;
pub const CLASS_DIRECTED_ROUTE: u8 = 0x81;
pub const SMP_CLASS_VERSION: u8 = 1;
/// Status bit 15 of a directed-route SMP: the return trip.
pub const DIRECTION: u16 = 0x8000;
pub const PERMISSIVE_LID: u16 = 0xffff;
/// QP0 carries SMPs, on VL15.
pub const SMI_QPN: u32 = 0;

/// MAD status codes an SMA answers with (IBTA 13.4.7).
pub mod status {
    pub const BAD_VERSION: u16 = 0x0004;
    pub const UNSUPPORTED_METHOD: u16 = 0x0008;
    pub const UNSUPPORTED_ATTRIBUTE: u16 = 0x000c;
    pub const INVALID_VALUE: u16 = 0x001c;
}

/// SMP attribute IDs.
pub mod attr {
    pub const NODE_DESCRIPTION: u16 = 0x0010;
    pub const NODE_INFO: u16 = 0x0011;
    pub const SWITCH_INFO: u16 = 0x0012;
    pub const PORT_INFO: u16 = 0x0015;
    pub const P_KEY_TABLE: u16 = 0x0016;
    pub const SL_TO_VL_TABLE: u16 = 0x0017;
    pub const VL_ARB_TABLE: u16 = 0x0018;
    pub const LINEAR_FORWARDING_TABLE: u16 = 0x0019;
    pub const SM_INFO: u16 = 0x0020;
}

header_view!(
    /// A view of a whole SMP.
    Smp, SMP_LEN, "SMP"
);

/// The first 24 bytes of an SMP are the common MAD header ([`Mad`],
/// [`MadHeaderRepr`]); what follows is the SMP's own: the M_Key, the
/// directed route's LIDs, the attribute and the two paths. A DR SMP uses
/// the header's class-specific field as its hop pointer and hop count, and
/// bit 15 of its status as the direction.
impl<T: AsRef<[u8]>> Smp<T> {
    /// The common MAD header (method, status word, transaction and
    /// attribute IDs, ...).
    pub fn mad(&self) -> Mad<&[u8]> {
        Mad::new_unchecked(self.b())
    }
    pub fn is_directed(&self) -> bool {
        self.mad().mgmt_class() == CLASS_DIRECTED_ROUTE
    }
    /// DR only: set on the return trip.
    pub fn direction(&self) -> bool {
        self.is_directed() && self.mad().status() & DIRECTION != 0
    }
    /// The status, without a DR SMP's direction bit.
    pub fn status(&self) -> u16 {
        if self.is_directed() {
            self.mad().status() & !DIRECTION
        } else {
            self.mad().status()
        }
    }
    /// DR: the high byte of the class-specific field.
    pub fn hop_ptr(&self) -> u8 {
        (self.mad().class_specific() >> 8) as u8
    }
    /// DR: the low byte of the class-specific field.
    pub fn hop_cnt(&self) -> u8 {
        self.mad().class_specific() as u8
    }
    pub fn mkey(&self) -> u64 {
        u64_at(self.b(), 24)
    }
    pub fn dr_slid(&self) -> u16 {
        u16_at(self.b(), 32)
    }
    pub fn dr_dlid(&self) -> u16 {
        u16_at(self.b(), 34)
    }
    /// The 64-byte attribute.
    pub fn data(&self) -> &[u8] {
        &self.b()[64..128]
    }
    /// Entry i: the egress port at hop i (entry 0 unused).
    pub fn initial_path(&self) -> &[u8] {
        &self.b()[128..192]
    }
    /// Entry i: the ingress port recorded at hop i on the way out.
    pub fn return_path(&self) -> &[u8] {
        &self.b()[192..256]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Smp<T> {
    /// The common MAD header, to write (`set_method`, `set_status`, ...).
    pub fn mad_mut(&mut self) -> Mad<&mut [u8]> {
        Mad::new_unchecked(self.bm())
    }
    pub fn set_hop_ptr(&mut self, v: u8) {
        self.bm()[6] = v
    }
    pub fn set_dr_slid(&mut self, v: u16) {
        set_u16(self.bm(), 32, v)
    }
    pub fn set_dr_dlid(&mut self, v: u16) {
        set_u16(self.bm(), 34, v)
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[64..128]
    }
    pub fn return_path_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[192..256]
    }
}

/// The directed-route part of an SMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirectedRoute {
    /// The D bit: false outbound, true on the return trip.
    pub returning: bool,
    pub hop_ptr: u8,
    pub hop_cnt: u8,
    pub dr_slid: u16,
    pub dr_dlid: u16,
    pub initial_path: [u8; 64],
    pub return_path: [u8; 64],
}

impl DirectedRoute {
    /// A pure directed route (permissive LIDs) out of `ports`, hop 1 first.
    pub fn outbound(ports: &[u8]) -> Result<DirectedRoute> {
        if ports.len() > 63 {
            return Err(Error::InvalidField { header: "SMP", field: "hop count", value: ports.len() as u64 });
        }
        let mut initial_path = [0u8; 64];
        initial_path[1..=ports.len()].copy_from_slice(ports);
        Ok(DirectedRoute {
            returning: false,
            hop_ptr: 0,
            hop_cnt: ports.len() as u8,
            dr_slid: PERMISSIVE_LID,
            dr_dlid: PERMISSIVE_LID,
            initial_path,
            return_path: [0; 64],
        })
    }
}

/// An owned SMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmpRepr {
    /// Byte 3 whole (0x81 for GetResp).
    pub method: u8,
    /// 15 bits for a DR SMP.
    pub status: u16,
    pub tid: u64,
    pub attr_id: u16,
    pub attr_mod: u32,
    pub mkey: u64,
    /// `None`: LID-routed.
    pub dr: Option<DirectedRoute>,
    pub data: [u8; SMP_DATA_LEN],
}

impl SmpRepr {
    /// A Get or Set (`method`) of `attr_id` along `dr` (or LID-routed).
    pub fn request(method: u8, tid: u64, attr_id: u16, attr_mod: u32, dr: Option<DirectedRoute>) -> SmpRepr {
        SmpRepr { method, status: 0, tid, attr_id, attr_mod, mkey: 0, dr, data: [0; SMP_DATA_LEN] }
    }

    pub fn parse<T: AsRef<[u8]>>(s: &Smp<T>) -> Result<SmpRepr> {
        let m = s.mad();
        if m.base_version() != BASE_VERSION {
            return Err(Error::BadVersion { header: "SMP", version: m.base_version() });
        }
        let h = MadHeaderRepr::parse(&m)?;
        if h.class_version != SMP_CLASS_VERSION {
            return Err(Error::BadVersion { header: "SMP class", version: h.class_version });
        }
        let dr = match h.mgmt_class {
            CLASS_LID_ROUTED => None,
            CLASS_DIRECTED_ROUTE => {
                if s.hop_cnt() > 63 || s.hop_ptr() > 64 {
                    return Err(Error::InvalidField { header: "SMP", field: "hop count", value: s.hop_cnt().into() });
                }
                Some(DirectedRoute {
                    returning: s.direction(),
                    hop_ptr: s.hop_ptr(),
                    hop_cnt: s.hop_cnt(),
                    dr_slid: s.dr_slid(),
                    dr_dlid: s.dr_dlid(),
                    initial_path: s.initial_path().try_into().expect("64 bytes"),
                    return_path: s.return_path().try_into().expect("64 bytes"),
                })
            }
            c => return Err(Error::InvalidField { header: "SMP", field: "management class", value: c.into() }),
        };
        Ok(SmpRepr {
            method: h.method,
            status: s.status(),
            tid: h.transaction_id,
            attr_id: h.attribute_id,
            attr_mod: h.attribute_modifier,
            mkey: s.mkey(),
            dr,
            data: s.data().try_into().expect("64 bytes"),
        })
    }

    /// The common MAD header of this SMP: LID-routed, or directed with
    /// the hop pointer and count in the class-specific field and the
    /// direction in bit 15 of the status.
    pub fn mad_header(&self) -> MadHeaderRepr {
        let (mgmt_class, status, class_specific) = match &self.dr {
            None => (CLASS_LID_ROUTED, self.status, 0),
            Some(dr) => {
                let d = if dr.returning { DIRECTION } else { 0 };
                (CLASS_DIRECTED_ROUTE, (self.status & !DIRECTION) | d, u16::from_be_bytes([dr.hop_ptr, dr.hop_cnt]))
            }
        };
        MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class,
            class_version: SMP_CLASS_VERSION,
            method: self.method,
            status,
            class_specific,
            transaction_id: self.tid,
            attribute_id: self.attr_id,
            attribute_modifier: self.attr_mod,
        }
    }

    /// Writes the 256 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_len("SMP", buf, SMP_LEN)?;
        let b = &mut buf[..SMP_LEN];
        b.fill(0);
        self.mad_header().emit(&mut Mad::new_unchecked(&mut *b));
        set_u64(b, 24, self.mkey);
        b[64..128].copy_from_slice(&self.data);
        if let Some(dr) = &self.dr {
            set_u16(b, 32, dr.dr_slid);
            set_u16(b, 34, dr.dr_dlid);
            b[128..192].copy_from_slice(&dr.initial_path);
            b[192..256].copy_from_slice(&dr.return_path);
        }
        Ok(())
    }

    pub fn to_bytes(&self) -> [u8; SMP_LEN] {
        let mut b = [0u8; SMP_LEN];
        self.emit(&mut b).expect("256 bytes fit");
        b
    }
}

/// Node types of NodeInfo.
pub mod node_type {
    pub const CA: u8 = 1;
    pub const SWITCH: u8 = 2;
    pub const ROUTER: u8 = 3;
}

header_view!(
    /// NodeInfo (0x0011).
    NodeInfo, 40, "NodeInfo"
);

impl<T: AsRef<[u8]>> NodeInfo<T> {
    pub fn node_type(&self) -> u8 {
        self.b()[2]
    }
    pub fn num_ports(&self) -> u8 {
        self.b()[3]
    }
    pub fn system_image_guid(&self) -> u64 {
        u64_at(self.b(), 4)
    }
    pub fn node_guid(&self) -> u64 {
        u64_at(self.b(), 12)
    }
    pub fn port_guid(&self) -> u64 {
        u64_at(self.b(), 20)
    }
    pub fn partition_cap(&self) -> u16 {
        u16_at(self.b(), 28)
    }
    pub fn device_id(&self) -> u16 {
        u16_at(self.b(), 30)
    }
    pub fn revision(&self) -> u32 {
        u32_at(self.b(), 32)
    }
    pub fn local_port_num(&self) -> u8 {
        self.b()[36]
    }
    pub fn vendor_id(&self) -> u32 {
        u24_at(self.b(), 37)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NodeInfoRepr {
    pub node_type: u8,
    pub num_ports: u8,
    pub system_image_guid: u64,
    pub node_guid: u64,
    pub port_guid: u64,
    pub partition_cap: u16,
    pub device_id: u16,
    pub revision: u32,
    pub local_port_num: u8,
    /// 24 bits.
    pub vendor_id: u32,
}

impl NodeInfoRepr {
    pub fn parse<T: AsRef<[u8]>>(v: &NodeInfo<T>) -> NodeInfoRepr {
        NodeInfoRepr {
            node_type: v.node_type(),
            num_ports: v.num_ports(),
            system_image_guid: v.system_image_guid(),
            node_guid: v.node_guid(),
            port_guid: v.port_guid(),
            partition_cap: v.partition_cap(),
            device_id: v.device_id(),
            revision: v.revision(),
            local_port_num: v.local_port_num(),
            vendor_id: v.vendor_id(),
        }
    }

    /// Writes the 64 data bytes (base and class version 1).
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_len("NodeInfo", b, SMP_DATA_LEN)?;
        b[..SMP_DATA_LEN].fill(0);
        b[0] = 1;
        b[1] = 1;
        b[2] = self.node_type;
        b[3] = self.num_ports;
        set_u64(b, 4, self.system_image_guid);
        set_u64(b, 12, self.node_guid);
        set_u64(b, 20, self.port_guid);
        set_u16(b, 28, self.partition_cap);
        set_u16(b, 30, self.device_id);
        set_u32(b, 32, self.revision);
        b[36] = self.local_port_num;
        set_u24(b, 37, self.vendor_id & 0xff_ffff);
        Ok(())
    }
}

/// PortState values.
pub mod port_state {
    pub const NO_CHANGE: u8 = 0;
    pub const DOWN: u8 = 1;
    pub const INIT: u8 = 2;
    pub const ARMED: u8 = 3;
    pub const ACTIVE: u8 = 4;
}

/// PortPhysicalState values ibsim uses.
pub mod phys_state {
    pub const POLLING: u8 = 2;
    pub const LINK_UP: u8 = 5;
}

header_view!(
    /// PortInfo (0x0015), `struct ib_port_info`.
    PortInfo, 60, "PortInfo"
);

impl<T: AsRef<[u8]>> PortInfo<T> {
    pub fn mkey(&self) -> u64 {
        u64_at(self.b(), 0)
    }
    pub fn gid_prefix(&self) -> u64 {
        u64_at(self.b(), 8)
    }
    pub fn lid(&self) -> u16 {
        u16_at(self.b(), 16)
    }
    pub fn master_sm_lid(&self) -> u16 {
        u16_at(self.b(), 18)
    }
    pub fn capability_mask(&self) -> u32 {
        u32_at(self.b(), 20)
    }
    pub fn local_port_num(&self) -> u8 {
        self.b()[28]
    }
    pub fn link_width_enabled(&self) -> u8 {
        self.b()[29]
    }
    pub fn link_width_supported(&self) -> u8 {
        self.b()[30]
    }
    pub fn link_width_active(&self) -> u8 {
        self.b()[31]
    }
    pub fn link_speed_supported(&self) -> u8 {
        self.b()[32] >> 4
    }
    pub fn port_state(&self) -> u8 {
        self.b()[32] & 0xf
    }
    pub fn phys_state(&self) -> u8 {
        self.b()[33] >> 4
    }
    pub fn link_down_default(&self) -> u8 {
        self.b()[33] & 0xf
    }
    pub fn lmc(&self) -> u8 {
        self.b()[34] & 0x7
    }
    pub fn link_speed_active(&self) -> u8 {
        self.b()[35] >> 4
    }
    pub fn link_speed_enabled(&self) -> u8 {
        self.b()[35] & 0xf
    }
    pub fn neighbor_mtu(&self) -> u8 {
        self.b()[36] >> 4
    }
    pub fn master_sm_sl(&self) -> u8 {
        self.b()[36] & 0xf
    }
    pub fn vl_cap(&self) -> u8 {
        self.b()[37] >> 4
    }
    pub fn vl_high_limit(&self) -> u8 {
        self.b()[38]
    }
    pub fn vl_arb_high_cap(&self) -> u8 {
        self.b()[39]
    }
    pub fn vl_arb_low_cap(&self) -> u8 {
        self.b()[40]
    }
    pub fn mtu_cap(&self) -> u8 {
        self.b()[41] & 0xf
    }
    pub fn vl_stall_count(&self) -> u8 {
        self.b()[42] >> 5
    }
    pub fn hoq_life(&self) -> u8 {
        self.b()[42] & 0x1f
    }
    pub fn operational_vls(&self) -> u8 {
        self.b()[43] >> 4
    }
    /// PartitionEnforcementInbound/Outbound, FilterRawInbound/Outbound.
    pub fn enforcement(&self) -> u8 {
        self.b()[43] & 0xf
    }
    pub fn mkey_violations(&self) -> u16 {
        u16_at(self.b(), 44)
    }
    pub fn pkey_violations(&self) -> u16 {
        u16_at(self.b(), 46)
    }
    pub fn qkey_violations(&self) -> u16 {
        u16_at(self.b(), 48)
    }
    pub fn guid_cap(&self) -> u8 {
        self.b()[50]
    }
    pub fn subnet_timeout(&self) -> u8 {
        self.b()[51] & 0x1f
    }
    pub fn resp_time_value(&self) -> u8 {
        self.b()[52] & 0x1f
    }
    pub fn local_phy_errors(&self) -> u8 {
        self.b()[53] >> 4
    }
    pub fn overrun_errors(&self) -> u8 {
        self.b()[53] & 0xf
    }
}

/// PortInfo, every field of `struct ib_port_info` up to the error
/// thresholds (MaxCreditHint and round-trip latency are left zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortInfoRepr {
    pub mkey: u64,
    pub gid_prefix: u64,
    pub lid: u16,
    pub master_sm_lid: u16,
    pub capability_mask: u32,
    pub local_port_num: u8,
    pub link_width_enabled: u8,
    pub link_width_supported: u8,
    pub link_width_active: u8,
    pub link_speed_supported: u8,
    pub port_state: u8,
    pub phys_state: u8,
    pub link_down_default: u8,
    pub lmc: u8,
    pub link_speed_active: u8,
    pub link_speed_enabled: u8,
    pub neighbor_mtu: u8,
    pub master_sm_sl: u8,
    pub vl_cap: u8,
    pub vl_high_limit: u8,
    pub vl_arb_high_cap: u8,
    pub vl_arb_low_cap: u8,
    pub mtu_cap: u8,
    pub vl_stall_count: u8,
    pub hoq_life: u8,
    pub operational_vls: u8,
    pub enforcement: u8,
    pub mkey_violations: u16,
    pub pkey_violations: u16,
    pub qkey_violations: u16,
    pub guid_cap: u8,
    pub subnet_timeout: u8,
    pub resp_time_value: u8,
    pub local_phy_errors: u8,
    pub overrun_errors: u8,
}

impl PortInfoRepr {
    pub fn parse<T: AsRef<[u8]>>(v: &PortInfo<T>) -> PortInfoRepr {
        PortInfoRepr {
            mkey: v.mkey(),
            gid_prefix: v.gid_prefix(),
            lid: v.lid(),
            master_sm_lid: v.master_sm_lid(),
            capability_mask: v.capability_mask(),
            local_port_num: v.local_port_num(),
            link_width_enabled: v.link_width_enabled(),
            link_width_supported: v.link_width_supported(),
            link_width_active: v.link_width_active(),
            link_speed_supported: v.link_speed_supported(),
            port_state: v.port_state(),
            phys_state: v.phys_state(),
            link_down_default: v.link_down_default(),
            lmc: v.lmc(),
            link_speed_active: v.link_speed_active(),
            link_speed_enabled: v.link_speed_enabled(),
            neighbor_mtu: v.neighbor_mtu(),
            master_sm_sl: v.master_sm_sl(),
            vl_cap: v.vl_cap(),
            vl_high_limit: v.vl_high_limit(),
            vl_arb_high_cap: v.vl_arb_high_cap(),
            vl_arb_low_cap: v.vl_arb_low_cap(),
            mtu_cap: v.mtu_cap(),
            vl_stall_count: v.vl_stall_count(),
            hoq_life: v.hoq_life(),
            operational_vls: v.operational_vls(),
            enforcement: v.enforcement(),
            mkey_violations: v.mkey_violations(),
            pkey_violations: v.pkey_violations(),
            qkey_violations: v.qkey_violations(),
            guid_cap: v.guid_cap(),
            subnet_timeout: v.subnet_timeout(),
            resp_time_value: v.resp_time_value(),
            local_phy_errors: v.local_phy_errors(),
            overrun_errors: v.overrun_errors(),
        }
    }

    /// Writes the 64 data bytes; sub-byte fields are masked to their width.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_len("PortInfo", b, SMP_DATA_LEN)?;
        b[..SMP_DATA_LEN].fill(0);
        set_u64(b, 0, self.mkey);
        set_u64(b, 8, self.gid_prefix);
        set_u16(b, 16, self.lid);
        set_u16(b, 18, self.master_sm_lid);
        set_u32(b, 20, self.capability_mask);
        b[28] = self.local_port_num;
        b[29] = self.link_width_enabled;
        b[30] = self.link_width_supported;
        b[31] = self.link_width_active;
        b[32] = (self.link_speed_supported << 4) | (self.port_state & 0xf);
        b[33] = (self.phys_state << 4) | (self.link_down_default & 0xf);
        b[34] = self.lmc & 0x7;
        b[35] = (self.link_speed_active << 4) | (self.link_speed_enabled & 0xf);
        b[36] = (self.neighbor_mtu << 4) | (self.master_sm_sl & 0xf);
        b[37] = self.vl_cap << 4;
        b[38] = self.vl_high_limit;
        b[39] = self.vl_arb_high_cap;
        b[40] = self.vl_arb_low_cap;
        b[41] = self.mtu_cap & 0xf;
        b[42] = (self.vl_stall_count << 5) | (self.hoq_life & 0x1f);
        b[43] = (self.operational_vls << 4) | (self.enforcement & 0xf);
        set_u16(b, 44, self.mkey_violations);
        set_u16(b, 46, self.pkey_violations);
        set_u16(b, 48, self.qkey_violations);
        b[50] = self.guid_cap;
        b[51] = self.subnet_timeout & 0x1f;
        b[52] = self.resp_time_value & 0x1f;
        b[53] = (self.local_phy_errors << 4) | (self.overrun_errors & 0xf);
        Ok(())
    }
}

header_view!(
    /// SwitchInfo (0x0012), opensm's `ib_switch_info_t`.
    SwitchInfo, 20, "SwitchInfo"
);

impl<T: AsRef<[u8]>> SwitchInfo<T> {
    pub fn linear_fdb_cap(&self) -> u16 {
        u16_at(self.b(), 0)
    }
    pub fn random_fdb_cap(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    pub fn mcast_fdb_cap(&self) -> u16 {
        u16_at(self.b(), 4)
    }
    pub fn linear_fdb_top(&self) -> u16 {
        u16_at(self.b(), 6)
    }
    pub fn default_port(&self) -> u8 {
        self.b()[8]
    }
    pub fn life_time_value(&self) -> u8 {
        self.b()[11] >> 3
    }
    pub fn port_state_change(&self) -> bool {
        self.b()[11] & 0x04 != 0
    }
    pub fn lids_per_port(&self) -> u16 {
        u16_at(self.b(), 12)
    }
    pub fn partition_enforcement_cap(&self) -> u16 {
        u16_at(self.b(), 14)
    }
    pub fn flags(&self) -> u8 {
        self.b()[16]
    }
    pub fn mcast_fdb_top(&self) -> u16 {
        u16_at(self.b(), 18)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SwitchInfoRepr {
    pub linear_fdb_cap: u16,
    pub random_fdb_cap: u16,
    pub mcast_fdb_cap: u16,
    pub linear_fdb_top: u16,
    pub default_port: u8,
    /// 5 bits.
    pub life_time_value: u8,
    pub port_state_change: bool,
    pub lids_per_port: u16,
    pub partition_enforcement_cap: u16,
    pub flags: u8,
    pub mcast_fdb_top: u16,
}

impl SwitchInfoRepr {
    pub fn parse<T: AsRef<[u8]>>(v: &SwitchInfo<T>) -> SwitchInfoRepr {
        SwitchInfoRepr {
            linear_fdb_cap: v.linear_fdb_cap(),
            random_fdb_cap: v.random_fdb_cap(),
            mcast_fdb_cap: v.mcast_fdb_cap(),
            linear_fdb_top: v.linear_fdb_top(),
            default_port: v.default_port(),
            life_time_value: v.life_time_value(),
            port_state_change: v.port_state_change(),
            lids_per_port: v.lids_per_port(),
            partition_enforcement_cap: v.partition_enforcement_cap(),
            flags: v.flags(),
            mcast_fdb_top: v.mcast_fdb_top(),
        }
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_len("SwitchInfo", b, SMP_DATA_LEN)?;
        b[..SMP_DATA_LEN].fill(0);
        set_u16(b, 0, self.linear_fdb_cap);
        set_u16(b, 2, self.random_fdb_cap);
        set_u16(b, 4, self.mcast_fdb_cap);
        set_u16(b, 6, self.linear_fdb_top);
        b[8] = self.default_port;
        b[11] = ((self.life_time_value & 0x1f) << 3) | if self.port_state_change { 0x04 } else { 0 };
        set_u16(b, 12, self.lids_per_port);
        set_u16(b, 14, self.partition_enforcement_cap);
        b[16] = self.flags;
        set_u16(b, 18, self.mcast_fdb_top);
        Ok(())
    }
}

/// One block of the LinearForwardingTable: 64 egress ports for LIDs
/// 64 x block .. 64 x block + 63 (0xFF: none). The modifier is the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LftBlock(pub [u8; 64]);

impl LftBlock {
    pub fn parse(data: &[u8]) -> Result<LftBlock> {
        check_len("LinearForwardingTable", data, 64)?;
        Ok(LftBlock(data[..64].try_into().expect("64 bytes")))
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_len("LinearForwardingTable", b, 64)?;
        b[..64].copy_from_slice(&self.0);
        Ok(())
    }
}

/// One block of 32 P_Keys. Modifier: block in bits 15..0 (switches: the
/// port in bits 31..16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PKeyBlock(pub [u16; 32]);

impl PKeyBlock {
    pub fn parse(data: &[u8]) -> Result<PKeyBlock> {
        check_len("P_KeyTable", data, 64)?;
        let mut k = [0u16; 32];
        for (i, v) in k.iter_mut().enumerate() {
            *v = u16_at(data, 2 * i);
        }
        Ok(PKeyBlock(k))
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_len("P_KeyTable", b, 64)?;
        for (i, v) in self.0.iter().enumerate() {
            set_u16(b, 2 * i, *v);
        }
        Ok(())
    }
}

/// Whether two P_Keys let their ports talk: equal partitions and at
/// least one full member (bit 15); base 0 is invalid (§3.7).
pub fn pkeys_match(a: u16, b: u16) -> bool {
    let (base_a, base_b) = (a & 0x7fff, b & 0x7fff);
    base_a != 0 && base_a == base_b && (a | b) & 0x8000 != 0
}

/// SLtoVLMappingTable: 16 four-bit VLs, SL 0 in the high nibble of byte 0.
/// Switch modifier: input port in bits 15..8, output port in 7..0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sl2Vl(pub [u8; 16]);

impl Sl2Vl {
    pub fn parse(data: &[u8]) -> Result<Sl2Vl> {
        check_len("SLtoVLMappingTable", data, 8)?;
        let mut t = [0u8; 16];
        for (sl, v) in t.iter_mut().enumerate() {
            let byte = data[sl / 2];
            *v = if sl % 2 == 0 { byte >> 4 } else { byte & 0xf };
        }
        Ok(Sl2Vl(t))
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_len("SLtoVLMappingTable", b, 8)?;
        for (byte, pair) in b.iter_mut().zip(self.0.chunks(2)) {
            *byte = (pair[0] << 4) | (pair[1] & 0xf);
        }
        Ok(())
    }
}

/// A VLArbitrationTable entry: VL (low 4 bits of its byte) and weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlArbEntry {
    pub vl: u8,
    pub weight: u8,
}

/// 32 entries of a VLArbitrationTable. Modifier bits 31..16: 1 low 0-31,
/// 2 low 32-63, 3 high 0-31, 4 high 32-63; bits 15..0: the switch port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlArbBlock(pub [VlArbEntry; 32]);

impl VlArbBlock {
    pub fn parse(data: &[u8]) -> Result<VlArbBlock> {
        check_len("VLArbitrationTable", data, 64)?;
        let mut e = [VlArbEntry::default(); 32];
        for (i, v) in e.iter_mut().enumerate() {
            *v = VlArbEntry { vl: data[2 * i] & 0xf, weight: data[2 * i + 1] };
        }
        Ok(VlArbBlock(e))
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        check_len("VLArbitrationTable", b, 64)?;
        for (i, e) in self.0.iter().enumerate() {
            b[2 * i] = e.vl & 0xf;
            b[2 * i + 1] = e.weight;
        }
        Ok(())
    }
}

/// NodeDescription: up to 64 bytes of text, NUL-padded.
pub fn node_description(data: &[u8]) -> String {
    let end = data.iter().take(64).position(|&c| c == 0).unwrap_or(data.len().min(64));
    String::from_utf8_lossy(&data[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_dr() -> impl Strategy<Value = Option<DirectedRoute>> {
        proptest::option::of(
            (any::<bool>(), 0u8..=64, 0u8..=63, any::<u16>(), any::<u16>(), any::<[u8; 32]>(), any::<[u8; 32]>())
                .prop_map(|(returning, hop_ptr, hop_cnt, dr_slid, dr_dlid, ip, rp)| {
                    let mut initial_path = [0u8; 64];
                    initial_path[..32].copy_from_slice(&ip);
                    let mut return_path = [0u8; 64];
                    return_path[32..].copy_from_slice(&rp);
                    DirectedRoute { returning, hop_ptr, hop_cnt, dr_slid, dr_dlid, initial_path, return_path }
                }),
        )
    }

    proptest! {
        #[test]
        fn smp_round_trips(method: u8, status in 0u16..0x8000, tid: u64, attr_id: u16, attr_mod: u32, mkey: u64,
                           dr in arb_dr(), d in any::<[u8; 32]>()) {
            let mut data = [0u8; 64];
            data[16..48].copy_from_slice(&d);
            let s = SmpRepr { method, status, tid, attr_id, attr_mod, mkey, dr, data };
            let b = s.to_bytes();
            prop_assert_eq!(SmpRepr::parse(&Smp::new_checked(&b[..]).unwrap()).unwrap(), s);
        }

        #[test]
        fn node_info_round_trips(t: u8, n: u8, g1: u64, g2: u64, g3: u64, pc: u16, dev: u16, rev: u32, lp: u8,
                                 vendor in 0u32..0x100_0000) {
            let x = NodeInfoRepr { node_type: t, num_ports: n, system_image_guid: g1, node_guid: g2, port_guid: g3,
                partition_cap: pc, device_id: dev, revision: rev, local_port_num: lp, vendor_id: vendor };
            let mut b = [0u8; 64];
            x.emit(&mut b).unwrap();
            prop_assert_eq!(NodeInfoRepr::parse(&NodeInfo::new_checked(&b[..]).unwrap()), x);
        }

        #[test]
        fn port_info_round_trips(raw in any::<[u8; 54]>()) {
            // Any bytes parse; what parses re-emits to bytes that parse the same.
            let mut b = [0u8; 64];
            b[..54].copy_from_slice(&raw);
            let x = PortInfoRepr::parse(&PortInfo::new_checked(&b[..]).unwrap());
            let mut c = [0u8; 64];
            x.emit(&mut c).unwrap();
            prop_assert_eq!(PortInfoRepr::parse(&PortInfo::new_checked(&c[..]).unwrap()), x);
        }

        #[test]
        fn switch_info_round_trips(raw in any::<[u8; 20]>()) {
            let mut b = [0u8; 64];
            b[..20].copy_from_slice(&raw);
            let x = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&b[..]).unwrap());
            let mut c = [0u8; 64];
            x.emit(&mut c).unwrap();
            prop_assert_eq!(SwitchInfoRepr::parse(&SwitchInfo::new_checked(&c[..]).unwrap()), x);
        }

        #[test]
        fn tables_round_trip(lft: [u8; 32], keys: [u16; 32], sl in proptest::array::uniform16(0u8..16),
                             arb in proptest::array::uniform32((0u8..16, any::<u8>()))) {
            let mut l = [0xffu8; 64];
            l[..32].copy_from_slice(&lft);
            let mut b = [0u8; 64];
            LftBlock(l).emit(&mut b).unwrap();
            prop_assert_eq!(LftBlock::parse(&b).unwrap(), LftBlock(l));
            PKeyBlock(keys).emit(&mut b).unwrap();
            prop_assert_eq!(PKeyBlock::parse(&b).unwrap(), PKeyBlock(keys));
            Sl2Vl(sl).emit(&mut b).unwrap();
            prop_assert_eq!(Sl2Vl::parse(&b).unwrap(), Sl2Vl(sl));
            let e = arb.map(|(vl, weight)| VlArbEntry { vl, weight });
            VlArbBlock(e).emit(&mut b).unwrap();
            prop_assert_eq!(VlArbBlock::parse(&b).unwrap(), VlArbBlock(e));
        }
    }

    #[test]
    fn a_dr_get_node_info_has_the_kernels_layout() {
        let dr = DirectedRoute::outbound(&[1, 3]).unwrap();
        let s = SmpRepr::request(0x01, 0x1234, attr::NODE_INFO, 0, Some(dr)).to_bytes();
        assert_eq!(&s[..8], &[1, 0x81, 1, 0x01, 0, 0, 0, 2]);
        assert_eq!(&s[16..18], &[0x00, 0x11]);
        assert_eq!(&s[32..36], &[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(&s[128..131], &[0, 1, 3]);
        // The return trip: D bit over the status.
        let mut v = Smp::new_checked(s).unwrap();
        v.mad_mut().set_status(DIRECTION | status::UNSUPPORTED_ATTRIBUTE);
        assert!(v.direction());
        assert_eq!(v.status(), status::UNSUPPORTED_ATTRIBUTE);
    }

    #[test]
    fn sl2vl_packs_sl0_in_the_high_nibble_and_pkeys_need_a_full_member() {
        let mut t = [0u8; 16];
        t[0] = 1;
        t[1] = 2;
        t[15] = 7;
        let mut b = [0u8; 8];
        Sl2Vl(t).emit(&mut b).unwrap();
        assert_eq!((b[0], b[7]), (0x12, 0x07));
        assert!(pkeys_match(0xffff, 0x7fff));
        assert!(!pkeys_match(0x7fff, 0x7fff), "two limited members");
        assert!(!pkeys_match(0x8001, 0x8002));
        assert!(!pkeys_match(0x8000, 0x8000), "base 0 is invalid");
    }
}

#[cfg(test)]
mod fuzz_seeds {
    #[test]
    fn the_smp_fuzz_body_runs_over_its_seeds() {
        let seeds = crate::fuzzing::seeds("smp");
        assert!(seeds.len() >= 10);
        for (_, s) in &seeds {
            crate::fuzzing::smp(s);
        }
        // The seeds exercise what they are named after.
        let parsed = seeds
            .iter()
            .filter(|(_, s)| super::Smp::new_checked(&s[..]).is_ok_and(|v| super::SmpRepr::parse(&v).is_ok()))
            .count();
        assert_eq!(parsed, seeds.len() - 3, "all but bad-class, bad-version and truncated parse");
    }
}
