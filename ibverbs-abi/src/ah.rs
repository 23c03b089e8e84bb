//! Address handles (where UD sends go), and those made from a received
//! completion's GRH.

use crate::abi::*;
use crate::ffi::{errno_of, guard, live, set_errno, Held, Registry};
use crate::pd::{pd_use, Pd};
use libc::c_int;
use rdma_core_rs::{AddressHandle, AddressVector, AhAttr, Gid, LinkKind};

pub static AHS: Registry = Registry::new();

#[repr(C)]
pub struct Ah {
    pub c: ibv_ah,
    pub(crate) verbs: AddressHandle,
    pd: &'static Pd,
}

// SAFETY: the raw pointers in `c` are the application's; see srq.rs.
unsafe impl Send for Ah {}
unsafe impl Sync for Ah {}

/// The RoCE v2 address of an `ibv_ah_attr`: RoCE needs the GRH.
pub(crate) fn ah_of(a: &ibv_ah_attr) -> Result<AhAttr, c_int> {
    if a.is_global == 0 {
        tracing::warn!("address without a GRH (is_global = 0): RoCE needs the destination GID");
        return Err(libc::EINVAL);
    }
    // SAFETY: every bit pattern is a valid [u8; 16].
    let dgid = Gid(unsafe { a.grh.dgid.raw });
    Ok(AhAttr {
        dgid,
        sgid_index: a.grh.sgid_index.into(),
        hop_limit: if a.grh.hop_limit == 0 { 64 } else { a.grh.hop_limit },
        traffic_class: a.grh.traffic_class,
    })
}

/// The address vector of an `ibv_ah_attr` on a device whose link is
/// `link`. RoCE needs the GRH (the destination GID). Native IB routes by
/// the DLID (`is_global = 0`: LRH-only packets, as qperf and perftest
/// address without `-g`), with a GRH as well when `is_global`; a DLID
/// outside 1..=0xBFFF (and not a multicast LID) is EINVAL.
pub(crate) fn av_of(link: LinkKind, a: &ibv_ah_attr) -> Result<AddressVector, c_int> {
    if link != LinkKind::Ib {
        return ah_of(a).map(|g| g.to_av());
    }
    let unicast = (1..=0xbfff).contains(&a.dlid);
    // A multicast LID (0xC000 up to the permissive 0xFFFF) names a group.
    if !unicast && !(0xc000..0xffff).contains(&a.dlid) {
        tracing::warn!(dlid = a.dlid, "native IB address without a unicast or multicast DLID");
        return Err(libc::EINVAL);
    }
    if a.is_global == 0 {
        return Ok(AddressVector::lid(a.dlid, a.sl));
    }
    if a.grh.sgid_index != 0 {
        return Err(libc::EINVAL);
    }
    Ok(AddressVector { dlid: a.dlid, sl: a.sl, ..ah_of(a)?.to_av() })
}

fn make_ah(pd: *mut ibv_pd, attr: &ibv_ah_attr) -> *mut ibv_ah {
    let mut held = Held::new();
    // SAFETY: pd_use checks the registry.
    let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return std::ptr::null_mut() };
    let link = p.engine.verbs.link_kind();
    let made = if link == LinkKind::Ib && !(attr.is_global != 0 && attr.dlid == 0) {
        // A LID route (or a global one with its DLID).
        av_of(link, attr).map(|av| p.verbs.create_ah_av(av))
    } else {
        // RoCE, or a global route on IB without a DLID: the port's path
        // table gives the LID of the GID.
        ah_of(attr).map(|a| p.verbs.create_ah(&a))
    };
    let made = match made {
        Ok(m) => m,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    let verbs = match made {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!(error = %e, "ibv_create_ah refused");
            set_errno(errno_of(&e));
            return std::ptr::null_mut();
        }
    };
    held.keep();
    let ah = Box::into_raw(Box::new(Ah { c: ibv_ah { context: p.c.context, pd, handle: 0 }, verbs, pd: p }));
    AHS.insert(ah);
    ah.cast()
}

#[export_name = "softroce_ibv_create_ah"]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard("ibv_create_ah", std::ptr::null_mut(), || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's attributes.
        make_ah(pd, unsafe { &*attr })
    })
}

#[export_name = "softroce_ibv_destroy_ah"]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard("ibv_destroy_ah", libc::EIO, || {
        let p = ah.cast::<Ah>();
        // SAFETY: `live` checks the registry.
        if unsafe { live(&AHS, p, "ibv_ah") }.is_none() || !AHS.remove(p) {
            return libc::EINVAL;
        }
        // SAFETY: removed from the registry; made by Box::into_raw.
        let a = unsafe { Box::from_raw(p) };
        a.pd.users.put();
        0
    })
}

/// The address of the sender of a UD receive: its GID is the source GID
/// of the GRH the engine wrote at the start of the receive buffer.
#[export_name = "softroce_ibv_init_ah_from_wc"]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    guard("ibv_init_ah_from_wc", -1, || {
        // SAFETY: ctx_of checks the registry.
        if unsafe { crate::context::ctx_of(context) }.is_none() {
            return -1;
        }
        // SAFETY: NULL-checked; the caller's structures.
        if wc.is_null() || grh.is_null() || ah_attr.is_null() || unsafe { (*wc).wc_flags } & 1 == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: as above.
        let (g, a) = unsafe { (&*grh, &mut *ah_attr) };
        // SAFETY: plain data, zero is valid.
        *a = unsafe { std::mem::zeroed() };
        a.is_global = 1;
        a.port_num = port;
        a.grh.hop_limit = 0xff;
        // RoCE v2 over IPv4 puts the 20-byte IPv4 header in the last 20
        // bytes of the 40-byte GRH area (as rxe does and rdma-core reads
        // it): the sender is its source address, as an IPv4-mapped GID.
        // SAFETY: `grh` is the caller's 40-byte receive area.
        let raw = unsafe { &*(grh as *const [u8; 40]) };
        if raw[20] == 0x45 {
            let mut gid = [0u8; 16];
            gid[10..12].copy_from_slice(&[0xff, 0xff]);
            gid[12..].copy_from_slice(&raw[32..36]);
            a.grh.dgid = ibv_gid { raw: gid };
            a.grh.traffic_class = raw[21];
        } else {
            a.grh.dgid = g.sgid;
            a.grh.traffic_class = ((u32::from_be(g.version_tclass_flow) >> 20) & 0xff) as u8;
        }
        0
    })
}

#[export_name = "softroce_ibv_create_ah_from_wc"]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    guard("ibv_create_ah_from_wc", std::ptr::null_mut(), || {
        // A use of the PD for the whole call: a concurrent ibv_dealloc_pd
        // then fails with EBUSY instead of freeing what this reads.
        let mut held = Held::new();
        // SAFETY: pd_use checks the registry.
        let Some(p) = (unsafe { pd_use(pd, &mut held) }) else { return std::ptr::null_mut() };
        // SAFETY: plain data, zero is valid.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: forwarded; it checks its pointers.
        if unsafe { ibv_init_ah_from_wc(p.c.context, port, wc, grh, &mut a) } != 0 {
            return std::ptr::null_mut();
        }
        make_ah(pd, &a)
    })
}
