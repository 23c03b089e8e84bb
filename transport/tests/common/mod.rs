//! Helpers shared by the scenario tests.
#![allow(dead_code)]

use rdma_transport::sim::Side;
use rdma_transport::*;
use rdma_wire::{Opcode, RoceV2Packet};

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
