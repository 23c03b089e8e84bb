//! The RDMA IP CM layer (IBTA annex A11, Linux `cma.c`): service IDs built
//! from a port space and a port, and the 36-byte `cma_hdr` that opens the
//! private data of a REQ or SIDR_REQ.

use crate::field::*;
use crate::{Error, Result};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An `enum rdma_ucm_port_space` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RdmaPs(pub u16);

impl RdmaPs {
    pub const IPOIB: RdmaPs = RdmaPs(0x0002);
    /// RC and UC connections.
    pub const TCP: RdmaPs = RdmaPs(0x0106);
    /// UD through SIDR.
    pub const UDP: RdmaPs = RdmaPs(0x0111);
    pub const IB: RdmaPs = RdmaPs(0x013f);
}

/// `rdma_get_service_id`: `ps << 16 | port`, `port` being the listener's.
pub const fn service_id(ps: RdmaPs, port: u16) -> u64 {
    ((ps.0 as u64) << 16) | port as u64
}

/// The inverse of [`service_id`], as the passive side reads it back
/// (`rdma_ps_from_service_id`, `cma_port_from_service_id`).
pub const fn service_id_parts(sid: u64) -> (RdmaPs, u16) {
    (RdmaPs((sid >> 16) as u16), sid as u16)
}

/// Whether `sid` is in the RDMA IP CM range (prefix 0x0000000001), the one
/// whose REQ/SIDR_REQ private data starts with a [`CmaHdr`].
pub const fn is_ip_cm_service_id(sid: u64) -> bool {
    sid & 0xffff_ffff_ff00_0000 == 0x0000_0000_0100_0000
}

/// `CMA_VERSION`: major 0, minor 0.
pub const CMA_VERSION: u8 = 0x00;
/// `cma_user_data_offset` for IP addresses: user data follows the header.
pub const CMA_HDR_LEN: usize = 36;

header_view!(
    /// A view of a `cma_hdr`.
    CmaHdr, CMA_HDR_LEN, "cma_hdr"
);

impl<T: AsRef<[u8]>> CmaHdr<T> {
    pub fn cma_version(&self) -> u8 {
        self.b()[0]
    }
    /// The IP version, from the high nibble of byte 1 (0x40 means IPv4).
    pub fn ip_version(&self) -> u8 {
        self.b()[1] >> 4
    }
    /// The active side's source port; the destination port is in the service ID.
    pub fn src_port(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    /// The 16-byte source address field: IPv4 in its last four bytes.
    pub fn src_field(&self) -> [u8; 16] {
        addr_at(self.b(), 4)
    }
    pub fn dst_field(&self) -> [u8; 16] {
        addr_at(self.b(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmaHdr<T> {
    pub fn set_cma_version(&mut self, v: u8) {
        self.bm()[0] = v
    }
    pub fn set_ip_version(&mut self, v: u8) {
        self.bm()[1] = v << 4
    }
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.bm(), 2, v)
    }
    pub fn set_src_field(&mut self, v: [u8; 16]) {
        self.bm()[4..20].copy_from_slice(&v)
    }
    pub fn set_dst_field(&mut self, v: [u8; 16]) {
        self.bm()[20..36].copy_from_slice(&v)
    }
}

/// An owned `cma_hdr`. Both addresses are of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdrRepr {
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

/// IPv4 goes in the last four bytes after 12 zeros, not `::ffff:`-mapped.
fn encode(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => {
            let mut f = [0u8; 16];
            f[12..].copy_from_slice(&v4.octets());
            f
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl CmaHdrRepr {
    /// Rejects what `cma_ib_req_handler` rejects: a version other than 0,
    /// an IP version other than 4 or 6. Bytes 4..16 of an IPv4 field are
    /// ignored, as Linux ignores them.
    pub fn parse<T: AsRef<[u8]>>(h: &CmaHdr<T>) -> Result<CmaHdrRepr> {
        if h.cma_version() != CMA_VERSION {
            return Err(Error::BadVersion { header: "cma_hdr", version: h.cma_version() });
        }
        let (src, dst) = (h.src_field(), h.dst_field());
        let (src, dst) = match h.ip_version() {
            4 => {
                let v4 = |f: [u8; 16]| IpAddr::V4(Ipv4Addr::new(f[12], f[13], f[14], f[15]));
                (v4(src), v4(dst))
            }
            6 => (IpAddr::V6(Ipv6Addr::from(src)), IpAddr::V6(Ipv6Addr::from(dst))),
            v => return Err(Error::InvalidField { header: "cma_hdr", field: "IP version", value: v.into() }),
        };
        Ok(CmaHdrRepr { src_port: h.src_port(), src, dst })
    }

    /// Fails if the two addresses are of different families.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut CmaHdr<T>) -> Result<()> {
        let version = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return Err(Error::InvalidField { header: "cma_hdr", field: "address family mix", value: 0 }),
        };
        h.set_cma_version(CMA_VERSION);
        h.set_ip_version(version);
        h.set_src_port(self.src_port);
        h.set_src_field(encode(self.src));
        h.set_dst_field(encode(self.dst));
        Ok(())
    }
}

fn addr_at(b: &[u8], at: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked examples of §3.1.
    #[test]
    fn service_ids() {
        assert_eq!(service_id(RdmaPs::TCP, 7174), 0x0000_0000_0106_1c06); // rping
        assert_eq!(service_id(RdmaPs::TCP, 4420), 0x0000_0000_0106_1144); // NVMe-oF
        assert_eq!(service_id(RdmaPs::TCP, 18515), 0x0000_0000_0106_4853); // perftest
        assert_eq!(service_id(RdmaPs::UDP, 7174), 0x0000_0000_0111_1c06); // udaddy
        assert_eq!(service_id(RdmaPs::IB, 0), 0x0000_0000_013f_0000);
        assert_eq!(service_id(RdmaPs::IPOIB, 0), 0x0000_0000_0002_0000);
        assert_eq!(service_id_parts(0x0000_0000_0106_1c06), (RdmaPs::TCP, 7174));
        assert!(is_ip_cm_service_id(service_id(RdmaPs::UDP, 1)));
        assert!(!is_ip_cm_service_id(service_id(RdmaPs::IPOIB, 1)));
        assert!(!is_ip_cm_service_id(0x0000_0001_0106_1c06));
    }

    #[test]
    fn cma_hdr_v4_and_v6() {
        let v4 = CmaHdrRepr {
            src_port: 0xc123,
            src: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2)),
        };
        let mut b = [0xffu8; 36];
        v4.emit(&mut CmaHdr::new_checked(&mut b[..]).unwrap()).unwrap();
        let mut want = [0u8; 36];
        want[..4].copy_from_slice(&[0x00, 0x40, 0xc1, 0x23]);
        want[16..20].copy_from_slice(&[192, 168, 1, 1]);
        want[32..36].copy_from_slice(&[192, 168, 1, 2]);
        assert_eq!(b, want);
        assert_eq!(CmaHdrRepr::parse(&CmaHdr::new_checked(&b[..]).unwrap()), Ok(v4));

        let v6 = CmaHdrRepr {
            src_port: 1,
            src: IpAddr::V6("fe80::1".parse().unwrap()),
            dst: IpAddr::V6("2001:db8::2".parse().unwrap()),
        };
        v6.emit(&mut CmaHdr::new_checked(&mut b[..]).unwrap()).unwrap();
        assert_eq!(b[..6], [0x00, 0x60, 0x00, 0x01, 0xfe, 0x80]);
        assert_eq!(b[20..22], [0x20, 0x01]);
        assert_eq!(b[35], 2);
        assert_eq!(CmaHdrRepr::parse(&CmaHdr::new_checked(&b[..]).unwrap()), Ok(v6));
    }

    #[test]
    fn cma_hdr_errors() {
        assert_eq!(
            CmaHdr::new_checked(&[0u8; 35][..]).unwrap_err(),
            Error::Truncated { header: "cma_hdr", needed: 36, available: 35 }
        );
        let mut b = [0u8; 36];
        b[1] = 0x04; // the classic mistake: version in the low nibble
        let h = CmaHdr::new_checked(&b[..]).unwrap();
        assert_eq!(
            CmaHdrRepr::parse(&h),
            Err(Error::InvalidField { header: "cma_hdr", field: "IP version", value: 0 })
        );
        b[0] = 0x10;
        b[1] = 0x40;
        assert_eq!(
            CmaHdrRepr::parse(&CmaHdr::new_checked(&b[..]).unwrap()),
            Err(Error::BadVersion { header: "cma_hdr", version: 0x10 })
        );
        let mixed =
            CmaHdrRepr { src_port: 0, src: IpAddr::V4(Ipv4Addr::LOCALHOST), dst: IpAddr::V6(Ipv6Addr::LOCALHOST) };
        assert!(mixed.emit(&mut CmaHdr::new_checked(&mut b[..]).unwrap()).is_err());
    }
}
