//! Framing of the engine's packets for the link they go over, and the
//! copies between packets and registered memory through scatter/gather
//! lists.
//!
//! The link kind ([`LinkKind`]) chooses the headers in front of the BTH:
//!
//! - RoCE v2: IPv4/IPv6 and UDP. The engine emits whole IP packets (IP
//!   header through ICRC) because the ICRC covers the IP header: a driver
//!   that sends through a UDP socket strips the IP and UDP headers, and
//!   must make the kernel write the same ones (see [`Framer`]).
//! - RoCE v1: a GRH (source and destination GIDs), BTH.., ICRC; the
//!   driver puts it in an Ethernet frame of EtherType 0x8915.
//! - Native InfiniBand: an LRH (DLID, SLID, SL), a GRH only for an address
//!   vector with a GID, BTH.., ICRC and VCRC.
//!
//! RoCE v2 stays the first, inlined branch: the other kinds go through
//! one out-of-line function, so the RoCE v2 path is the code it was.

use crate::memory::{Access, AccessError, MemoryTable, Pd, RegionMemory};
use crate::qp::attr::AddressVector;
use crate::wr::Sge;
use core::net::IpAddr;
use rdma_wire::{
    GrhRepr, IbRepr, IpRepr, Ipv4Repr, Ipv6Repr, Lnh, LrhRepr, RoceV1Repr, RoceV2Repr, TransportRepr, UdpRepr,
    ROCE_V2_PORT,
};

/// Which headers go in front of the BTH (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LinkKind {
    /// IP/UDP (port 4791).
    #[default]
    RoceV2,
    /// GRH, in Ethernet frames of EtherType 0x8915.
    RoceV1,
    /// LRH [+ GRH], with the VCRC after the ICRC.
    Ib,
}

impl LinkKind {
    /// The name the tools take (`--backend`) and print.
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::RoceV2 => "roce2",
            LinkKind::RoceV1 => "roce1",
            LinkKind::Ib => "ib",
        }
    }
}

/// Builds packets from a local address, for one kind of link.
///
/// RoCE v2 IPv4 headers carry DF, identification 0 and the address
/// vector's TTL and traffic class, which is what Linux writes for a UDP
/// socket with `IP_PMTUDISC_DO`; the UDP checksum is 0 as every RoCE v2
/// sender sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framer {
    /// The port's GID (for RoCE v2, its IP address).
    pub local: IpAddr,
    /// Whether packets may carry their payload by reference (see
    /// [`PayloadRef`]): for a driver that sends it straight from the
    /// memory region instead of from a copy. RoCE v2 only.
    pub by_ref: bool,
    /// The headers in front of the BTH.
    pub link: LinkKind,
    /// The port's LID (native IB: the SLID of every packet).
    pub lid: u16,
}

/// Payloads shorter than this are copied even when packets may carry
/// them by reference: for them a copy costs less than the lock and the
/// extra pieces of a scattered send.
pub const BY_REF_MIN: usize = 512;

/// The payload of a packet that is not in the packet's buffer: `len`
/// bytes at `offset` in `memory`. The buffer holds the headers
/// (`buf[..at]`), then room for the pad and the ICRC, which
/// [`PayloadRef::seal`] fills in once the payload's bytes are at hand, so
/// that the ICRC covers exactly the bytes sent. On the wire the payload
/// goes between the two, as if it were in the buffer at `at`.
#[derive(Debug, Clone)]
pub struct PayloadRef {
    pub memory: RegionMemory,
    pub offset: usize,
    pub len: usize,
    pub at: usize,
}

impl PayloadRef {
    /// Writes the pad and ICRC of `packet` (the buffer's first
    /// [`crate::Transmit::len`] bytes) for `payload`, which must be the
    /// referenced bytes, read under the region's lock.
    pub fn seal(&self, packet: &mut [u8], payload: &[u8]) {
        debug_assert_eq!(payload.len(), self.len);
        let icrc = rdma_wire::icrc::roce_v2_split(&packet[..self.at], payload).expect("the engine wrote the headers");
        let n = packet.len();
        packet[self.at..n - 4].fill(0);
        packet[n - 4..].copy_from_slice(&rdma_wire::Icrc::wire_bytes(icrc));
    }

    /// Makes the packet in `buf` (`len` bytes) whole, with the payload
    /// copied into place: for paths that need the packet in one piece.
    /// Returns its new length.
    pub fn inline(&self, buf: &mut [u8], len: usize) -> usize {
        let (at, n) = (self.at, self.len);
        let total = len + n;
        self.memory.read(self.offset, &mut buf[at..at + n]);
        buf[at + n..total - 4].fill(0);
        let icrc = rdma_wire::icrc::roce_v2(&buf[..total - 4]).expect("the engine wrote the headers");
        buf[total - 4..total].copy_from_slice(&rdma_wire::Icrc::wire_bytes(icrc));
        total
    }
}

/// Largest header stack in front of a transport packet (IPv6 + UDP, or
/// LRH + GRH).
pub const MAX_FRAMING: usize = 40 + 8;

/// Bytes a packet may have after its ICRC: the VCRC of native IB.
pub const MAX_TRAILER: usize = 2;

impl Framer {
    /// The destination QPN of a packet in this link's framing, read
    /// without checking anything else: a hint for [`crate::Endpoint::prefetch_for`].
    pub(crate) fn dest_qpn(&self, l3: &[u8]) -> Option<u32> {
        let bth = match self.link {
            LinkKind::RoceV2 => match l3.first()? >> 4 {
                4 => usize::from(l3[0] & 0xf) * 4 + 8,
                6 => 48,
                _ => return None,
            },
            LinkKind::RoceV1 => 40,
            LinkKind::Ib => match l3.get(1)? & 3 {
                2 => 8,
                3 => 48,
                _ => return None,
            },
        };
        let q = l3.get(bth + 5..bth + 8)?;
        Some(u32::from_be_bytes([0, q[0], q[1], q[2]]))
    }

    /// A RoCE v2 framer for the address `local`, payloads copied.
    pub fn roce_v2(local: IpAddr) -> Framer {
        Framer { local, by_ref: false, link: LinkKind::RoceV2, lid: 0 }
    }

    /// Writes a packet with `payload_len` bytes of payload that `fill`
    /// writes in place. Returns the packet length.
    #[inline]
    pub fn frame<E>(
        &self,
        buf: &mut [u8],
        av: &AddressVector,
        src_port: u16,
        transport: &TransportRepr,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<usize, E> {
        if self.link != LinkKind::RoceV2 {
            return self.frame_raw(buf, av, transport, payload_len, fill);
        }
        let repr = self.repr(av, src_port, transport);
        // The opcode table gives the offset; emit_in_place checks the headers once.
        let ext = transport.bth.opcode.info().map_or(0, |i| i.ext_len());
        let at = repr.ip.header_len() + 8 + 12 + ext;
        fill(&mut buf[at..at + payload_len])?;
        Ok(repr.emit_in_place(buf, payload_len).expect("the engine sizes its buffers"))
    }

    /// [`Framer::frame`] for RoCE v1 and native IB.
    #[inline(never)]
    fn frame_raw<E>(
        &self,
        buf: &mut [u8],
        av: &AddressVector,
        transport: &TransportRepr,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<usize, E> {
        let grh = GrhRepr {
            traffic_class: av.traffic_class,
            flow_label: 0,
            next_header: rdma_wire::ipv6::NEXT_HEADER_IBA,
            hop_limit: av.hop_limit,
            src: to_v6(self.local),
            dst: to_v6(av.dest),
        };
        if self.link == LinkKind::RoceV1 {
            let repr = RoceV1Repr { grh, transport: *transport };
            let at = repr.payload_offset().expect("the engine writes valid headers");
            fill(&mut buf[at..at + payload_len])?;
            return Ok(repr.emit_in_place(buf, payload_len).expect("the engine sizes its buffers"));
        }
        // VL 0 for every data SL: the emulated link has one data lane.
        let lrh = LrhRepr { vl: 0, sl: av.sl & 0xf, lnh: Lnh::IbaLocal, dlid: av.dlid, slid: self.lid };
        let repr = IbRepr { lrh, grh: av.is_global().then_some(grh), transport: *transport };
        let at = repr.payload_offset().expect("the engine writes valid headers");
        fill(&mut buf[at..at + payload_len])?;
        Ok(repr.emit_in_place(buf, payload_len).expect("the engine sizes its buffers"))
    }

    /// Writes the headers of a packet whose payload stays in `memory`
    /// (`len` bytes at `offset`), and leaves room for its pad and ICRC.
    /// Returns the bytes the packet takes in `buf` and the reference.
    pub fn frame_by_ref(
        &self,
        buf: &mut [u8],
        av: &AddressVector,
        src_port: u16,
        transport: &TransportRepr,
        (memory, offset, len): (RegionMemory, usize, usize),
    ) -> (usize, PayloadRef) {
        debug_assert!(!memory.is_on_demand(), "on-demand bytes are never sent by reference");
        let repr = self.repr(av, src_port, transport);
        let at = repr.emit_headers(buf, len).expect("the engine sizes its buffers");
        let total = at + rdma_wire::pad_for(len) + 4;
        (total, PayloadRef { memory, offset, len, at })
    }

    /// Where the payload of `len` bytes starting `offset` bytes into the
    /// buffers of `sges` lies, if it lies in one region and packets may
    /// carry it by reference; `None` means: copy it.
    #[inline]
    pub fn payload_ref(
        &self,
        mrs: &MemoryTable,
        pd: Pd,
        sges: &[Sge],
        offset: u64,
        len: usize,
    ) -> Result<Option<(RegionMemory, usize, usize)>, AccessError> {
        if !self.takes_by_ref(len) {
            return Ok(None);
        }
        self.payload_ref_slow(mrs, pd, sges, offset, len)
    }

    /// [`Framer::payload_ref`] when packets may carry payload by reference
    /// (out of line: the requester's per-packet path stays small).
    #[inline(never)]
    fn payload_ref_slow(
        &self,
        mrs: &MemoryTable,
        pd: Pd,
        sges: &[Sge],
        offset: u64,
        len: usize,
    ) -> Result<Option<(RegionMemory, usize, usize)>, AccessError> {
        let mut off = offset;
        for s in sges {
            let sl = u64::from(s.length);
            if off >= sl {
                off -= sl;
                continue;
            }
            if sl - off < len as u64 {
                return Ok(None); // spans two buffers: copied
            }
            let addr = s.addr.checked_add(off).ok_or(AccessError::OutOfBounds {
                key: s.lkey,
                addr: s.addr,
                len: len as u64,
            })?;
            let (r, at) = mrs.check(s.lkey, pd, addr, len as u64, Access::NONE)?;
            if r.memory.is_on_demand() {
                // Its pages may go away before the driver reads them, and a
                // slice over them would be undefined behaviour: copied.
                return Ok(None);
            }
            return Ok(Some((r.memory.clone(), at, len)));
        }
        Ok(None)
    }

    /// Whether a payload of `len` bytes goes by reference (the driver
    /// allows it, and it is long enough to be worth it).
    pub fn takes_by_ref(&self, len: usize) -> bool {
        // `by_ref` is only ever set with RoCE v2 (Endpoint::set_payload_by_reference).
        self.by_ref && len >= BY_REF_MIN
    }

    fn repr(&self, av: &AddressVector, src_port: u16, transport: &TransportRepr) -> RoceV2Repr {
        let ip = match (self.local, av.dest) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4(Ipv4Repr {
                dscp: av.traffic_class >> 2,
                ecn: av.traffic_class & 3,
                ident: 0,
                dont_frag: true,
                ttl: av.hop_limit,
                protocol: 17,
                src,
                dst,
            }),
            (src, dst) => IpRepr::V6(Ipv6Repr {
                traffic_class: av.traffic_class,
                flow_label: 0,
                next_header: 17,
                hop_limit: av.hop_limit,
                src: to_v6(src),
                dst: to_v6(dst),
            }),
        };
        RoceV2Repr { ip, udp: UdpRepr { src_port, dst_port: ROCE_V2_PORT, checksum: 0 }, transport: *transport }
    }
}

fn to_v6(a: IpAddr) -> core::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Walks a scatter/gather list from byte `offset` for `len` bytes, calling
/// `f(region memory, offset in region, start in the packet, length)`.
fn walk(
    mrs: &MemoryTable,
    pd: Pd,
    sges: &[Sge],
    mut offset: u64,
    len: usize,
    needed: Access,
    mut f: impl FnMut(&crate::memory::RegionMemory, usize, usize, usize) -> Result<(), crate::memory::MemoryFault>,
) -> Result<(), AccessError> {
    let mut done = 0usize;
    for s in sges {
        if done == len {
            break;
        }
        let sl = u64::from(s.length);
        if offset >= sl {
            offset -= sl;
            continue;
        }
        let n = ((sl - offset) as usize).min(len - done);
        let addr =
            s.addr.checked_add(offset).ok_or(AccessError::OutOfBounds { key: s.lkey, addr: s.addr, len: n as u64 })?;
        let (r, at) = mrs.check(s.lkey, pd, addr, n as u64, needed)?;
        // Only an on-demand region can fault: a page gone under it.
        f(&r.memory, at, done, n).map_err(|_| AccessError::Unmapped { key: s.lkey, addr, len: n as u64 })?;
        done += n;
        offset = 0;
    }
    if done < len {
        let last = sges.last().map_or(0, |s| s.lkey);
        return Err(AccessError::OutOfBounds { key: last, addr: offset, len: (len - done) as u64 });
    }
    Ok(())
}

/// Copies `out.len()` bytes starting `offset` bytes into the buffers of
/// `sges` into `out`.
pub fn gather(mrs: &MemoryTable, pd: Pd, sges: &[Sge], offset: u64, out: &mut [u8]) -> Result<(), AccessError> {
    let len = out.len();
    walk(mrs, pd, sges, offset, len, Access::NONE, |m, at, start, n| m.try_read(at, &mut out[start..start + n]))
}

/// Copies `data` into the buffers of `sges`, starting `offset` bytes in.
/// The buffers must allow local writes.
pub fn scatter(mrs: &MemoryTable, pd: Pd, sges: &[Sge], offset: u64, data: &[u8]) -> Result<(), AccessError> {
    walk(mrs, pd, sges, offset, data.len(), Access::LOCAL_WRITE, |m, at, start, n| {
        m.try_write(at, &data[start..start + n])
    })
}

/// Total length of a scatter/gather list.
pub fn sge_len(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_wire::{BthRepr, Opcode, Psn, RethRepr};

    /// `dest_qpn` reads the QPN every framing writes: RoCE v2 over IPv4
    /// and IPv6, RoCE v1, native IB with and without a GRH.
    #[test]
    fn dest_qpn_reads_what_every_framing_writes() {
        let (v4, v6) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 1]));
        let ib = |local, lid| Framer { local, by_ref: false, link: LinkKind::Ib, lid };
        let framers = [
            (Framer::roce_v2(v4), IpAddr::from([10, 0, 0, 2])),
            (Framer::roce_v2(v6), IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 2])),
            (Framer { link: LinkKind::RoceV1, ..Framer::roce_v2(v6) }, IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 2])),
            (ib(v6, 3), IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 2])),
            (ib(IpAddr::from([0u16; 8]), 3), IpAddr::from([0u16; 8])),
        ];
        for (framer, dest) in framers {
            let av = AddressVector { dlid: 9, ..AddressVector::new(dest) };
            let tr = TransportRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, 0xab_cdef, Psn::new(5)));
            let mut buf = vec![0u8; 512];
            let n = framer.frame(&mut buf, &av, 0xc001, &tr, 8, |_| Ok::<(), ()>(())).unwrap();
            assert_eq!(framer.dest_qpn(&buf[..n]), Some(0xab_cdef), "{:?} to {dest}", framer.link);
        }
    }

    proptest::proptest! {
        /// A hint over any bytes: never a panic.
        #[test]
        fn dest_qpn_takes_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            for link in [LinkKind::RoceV2, LinkKind::RoceV1, LinkKind::Ib] {
                let framer = Framer { link, ..Framer::roce_v2(IpAddr::from([10, 0, 0, 1])) };
                let _ = framer.dest_qpn(&bytes);
            }
        }
    }

    /// A packet given by reference, made whole by `inline` or assembled
    /// around `seal`, is byte for byte the packet `frame` copies, for
    /// payload lengths with every pad, over IPv4 and IPv6.
    #[test]
    fn by_reference_inline_and_seal_match_the_copied_packet() {
        let memory = RegionMemory::from_vec((0..20_000u32).map(|i| (i * 7 + 3) as u8).collect());
        for (local, dest) in [
            (IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 2])),
            (IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 1]), IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 2])),
        ] {
            let framer = Framer { by_ref: true, ..Framer::roce_v2(local) };
            let av = AddressVector { traffic_class: 0x12, ..AddressVector::new(dest) };
            for len in [512, 513, 514, 515, 4096] {
                let mut tr = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, 0x11, Psn::new(5)));
                tr.reth = Some(RethRepr { va: 0x1000, rkey: 7, dma_len: len as u32 });
                let offset = 333;
                let mut copied = vec![0u8; 5000];
                let n = framer
                    .frame(&mut copied, &av, 0xc001, &tr, len, |dst| {
                        memory.read(offset, dst);
                        Ok::<(), ()>(())
                    })
                    .unwrap();
                let mut buf = vec![0xeeu8; 5000];
                let (t, p) = framer.frame_by_ref(&mut buf, &av, 0xc001, &tr, (memory.clone(), offset, len));
                assert_eq!(t + len, n, "{len} bytes");
                let mut sealed = buf.clone();
                let payload = &memory.to_vec()[offset..offset + len];
                p.seal(&mut sealed[..t], payload);
                let assembled = [&sealed[..p.at], payload, &sealed[p.at..t]].concat();
                assert!(assembled == copied[..n], "seal, {len} bytes from {local}");
                let whole = p.inline(&mut buf, t);
                assert!(whole == n && buf[..n] == copied[..n], "inline, {len} bytes from {local}");
            }
        }
    }
}
