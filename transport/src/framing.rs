//! RoCE v2 framing of the engine's packets, and the copies between packets
//! and registered memory through scatter/gather lists.
//!
//! The engine emits whole IP packets (IP header through ICRC) because the
//! ICRC covers the IP header: a driver that sends through a UDP socket
//! strips the IP and UDP headers, and must make the kernel write the same
//! ones (see [`Framer`]).

use crate::memory::{Access, AccessError, MemoryTable, Pd};
use crate::qp::AddressVector;
use crate::wr::Sge;
use core::net::IpAddr;
use rdma_wire::{IpRepr, Ipv4Repr, Ipv6Repr, RoceV2Repr, TransportRepr, UdpRepr, ROCE_V2_PORT};

/// Builds RoCE v2 packets from a local address.
///
/// IPv4 headers carry DF, identification 0 and the address vector's TTL
/// and traffic class, which is what Linux writes for a UDP socket with
/// `IP_PMTUDISC_DO`; the UDP checksum is 0 as every RoCE v2 sender sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framer {
    pub local: IpAddr,
}

/// Largest IP + UDP header in front of a transport packet.
pub const MAX_FRAMING: usize = 40 + 8;

impl Framer {
    /// Writes a packet with `payload_len` bytes of payload that `fill`
    /// writes in place. Returns the packet length.
    pub fn frame<E>(
        &self,
        buf: &mut [u8],
        av: &AddressVector,
        src_port: u16,
        transport: &TransportRepr,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<usize, E> {
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
        let repr =
            RoceV2Repr { ip, udp: UdpRepr { src_port, dst_port: ROCE_V2_PORT, checksum: 0 }, transport: *transport };
        // The opcode table gives the offset; emit_in_place checks the headers once.
        let ext = transport.bth.opcode.info().map_or(0, |i| i.ext_len());
        let at = repr.ip.header_len() + 8 + 12 + ext;
        fill(&mut buf[at..at + payload_len])?;
        Ok(repr.emit_in_place(buf, payload_len).expect("the engine sizes its buffers"))
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
    mut f: impl FnMut(&crate::memory::RegionMemory, usize, usize, usize),
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
        let (r, at) = mrs.check(s.lkey, pd, s.addr + offset, n as u64, needed)?;
        f(&r.memory, at, done, n);
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
    walk(mrs, pd, sges, offset, len, Access::NONE, |m, at, start, n| m.read(at, &mut out[start..start + n]))
}

/// Copies `data` into the buffers of `sges`, starting `offset` bytes in.
/// The buffers must allow local writes.
pub fn scatter(mrs: &MemoryTable, pd: Pd, sges: &[Sge], offset: u64, data: &[u8]) -> Result<(), AccessError> {
    walk(mrs, pd, sges, offset, data.len(), Access::LOCAL_WRITE, |m, at, start, n| m.write(at, &data[start..start + n]))
}

/// Total length of a scatter/gather list.
pub fn sge_len(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}
