//! Helpers shared by the scenario tests.
#![allow(dead_code)]

use rdma_transport::sim::Side;
use rdma_transport::*;
use rdma_wire::{Opcode, RoceV2Packet};

/// A UD SEND to QP1 (a MAD packet) from `from` to `to` with the DETH's
/// Q_Key `qkey`, framed with a correct ICRC: what a peer, honest or not,
/// puts on the wire for a GSI.
pub fn to_qp1(from: core::net::IpAddr, to: core::net::IpAddr, qkey: u32, payload: &[u8]) -> Vec<u8> {
    let mut t = rdma_wire::mad::gsi_send_transport(rdma_wire::Psn::new(9));
    t.deth = Some(rdma_wire::DethRepr { qkey, src_qp: 1 });
    let mut buf = vec![0u8; MAX_PACKET];
    let len = rdma_transport::framing::Framer::roce_v2(from)
        .frame(&mut buf, &AddressVector::new(to), 0xc001, &t, payload.len(), |p| {
            p.copy_from_slice(payload);
            Ok::<(), ()>(())
        })
        .expect("a MAD packet frames");
    buf.truncate(len);
    buf
}

/// One SGE of `len` bytes at `offset` in a side's registered buffer.
pub fn sge(s: &Side, offset: u64, len: u32) -> Vec<Sge> {
    vec![Sge { addr: s.va + offset, length: len, lkey: s.lkey }]
}

/// Writes a recognisable pattern at `offset` and returns it.
pub fn fill(s: &Side, offset: usize, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    s.mem.write(offset, &data);
    data
}

pub fn read(s: &Side, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    s.mem.read(offset, &mut v);
    v
}

pub fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

pub fn opcode_of(p: &[u8]) -> Opcode {
    RoceV2Packet::new_checked(p).unwrap().transport().bth().opcode()
}

pub fn psn_of(p: &[u8]) -> u32 {
    RoceV2Packet::new_checked(p).unwrap().transport().bth().psn().value()
}

/// A hostile peer's requests, crafted straight into side B of a pair made
/// by `sim::connect` (A at 127.0.0.1, B at 127.0.0.2).
pub mod hostile {
    use core::net::IpAddr;
    use rdma_transport::framing::Framer;
    use rdma_transport::sim::{Side, Sim};
    use rdma_transport::*;
    use rdma_wire::{Opcode, RoceV2Packet, Syndrome, TransportRepr};

    pub const A: [u8; 4] = [127, 0, 0, 1];
    pub const B: [u8; 4] = [127, 0, 0, 2];
    /// The PSN side B expects first (`PairConfig::a_psn`).
    pub const EPSN: u32 = 0x10;

    /// A request from A's address to B's QP, framed with a correct ICRC.
    pub fn craft(tr: &TransportRepr, payload: &[u8]) -> Vec<u8> {
        let framer = Framer::roce_v2(IpAddr::from(A));
        let mut buf = vec![0u8; MAX_PACKET];
        let n = framer
            .frame(&mut buf, &AddressVector::new(IpAddr::from(B)), 0xc000, tr, payload.len(), |d| {
                d.copy_from_slice(payload);
                Ok::<(), ()>(())
            })
            .expect("a valid request");
        buf.truncate(n);
        buf
    }

    /// B's answers to one crafted request, as (opcode, syndrome).
    pub fn answers(sim: &mut Sim, b: &Side, packet: &[u8]) -> Vec<(Opcode, Option<Syndrome>)> {
        let ep = sim.ep(b.ep);
        ep.handle_packet(Instant::ZERO, packet);
        let mut buf = vec![0u8; MAX_PACKET];
        let mut out = Vec::new();
        while let Some(t) = ep.poll_transmit(Instant::ZERO, &mut buf) {
            let p = RoceV2Packet::new_checked(&buf[..t.len]).unwrap();
            let t = p.transport();
            out.push((t.bth().opcode(), t.aeth().map(|a| a.syndrome())));
        }
        out
    }
}
