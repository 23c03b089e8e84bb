//! A packet on the fabric's links, with its payload left in the sender's
//! memory region.
//!
//! A switch reads a packet's headers (to route it, mark it, stamp it) and
//! never its payload, yet the payload is most of its bytes: copied into
//! every queued packet, it made the queues' bytes the simulator's working
//! set, cold by the time a packet left (docs/performance.md, "The misses
//! counted": at 128 hosts some 40 % of the last-level read misses were the
//! receiver's ICRC check over a payload that had waited in the queues). So a RoCE v2
//! data packet travels as its headers, pad and ICRC (sealed when it was
//! sent) and a reference to its payload ([`PayloadRef`]), and is made whole
//! where a host receives it.
//!
//! The payload is read twice, when the packet is sealed and when it is
//! delivered: the bytes delivered are the bytes sent as long as the
//! sender's region does not change in between. The fabric's hosts send
//! from and write into one zeroed region (`host::Host`): incoming WRITEs
//! land in the range a host sends from, but every byte ever written is
//! zero, so its contents never change. Were they to change, the receiver's ICRC check would drop the packet
//! (counted as a bad ICRC; up to CRC-32's collisions).
//!
//! Under `--threads` a receiving partition reads the sender's region, which
//! another thread may be writing in the same window: harmless only while
//! all bytes are zero. Making the packet whole where it leaves for another
//! partition would lift that (not done yet).

use rdma_transport::PayloadRef;

#[derive(Debug, Clone)]
pub struct Packet {
    /// The bytes in hand: a whole packet, or with `payload` its headers,
    /// then its pad and ICRC, then whatever the fabric appends (INT).
    bytes: Vec<u8>,
    payload: Option<PayloadRef>,
}

impl From<Vec<u8>> for Packet {
    /// A packet whole in `bytes`.
    fn from(bytes: Vec<u8>) -> Packet {
        Packet { bytes, payload: None }
    }
}

impl Packet {
    /// A packet whose headers, pad and ICRC are `bytes` and whose payload
    /// goes at `payload.at` (sealed: the ICRC covers it).
    pub fn by_reference(bytes: Vec<u8>, payload: PayloadRef) -> Packet {
        debug_assert!(payload.at <= bytes.len());
        Packet { bytes, payload: Some(payload) }
    }

    /// The bytes in hand, from the first header on: what the switches and
    /// the INT trailer read and change. The payload (if by reference) is
    /// not among them, so these are the whole packet only if
    /// [`Packet::is_whole`].
    pub fn headers(&self) -> &[u8] {
        &self.bytes
    }

    pub fn headers_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    pub fn is_whole(&self) -> bool {
        self.payload.is_none()
    }

    /// The bytes the packet takes on a link: what queues and links count.
    pub fn wire_len(&self) -> usize {
        self.bytes.len() + self.payload.as_ref().map_or(0, |p| p.len)
    }

    /// The whole packet: its bytes, with the payload read from its region
    /// into `scratch` if it travels by reference.
    pub fn whole<'a>(&'a self, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        let Some(p) = &self.payload else { return &self.bytes };
        scratch.clear();
        scratch.extend_from_slice(&self.bytes[..p.at]);
        scratch.resize(p.at + p.len, 0);
        p.memory.read(p.offset, &mut scratch[p.at..]);
        scratch.extend_from_slice(&self.bytes[p.at..]);
        scratch
    }

    /// The packet's bytes, whole (for paths that keep them: IB frames
    /// never travel by reference).
    pub fn into_bytes(self) -> Vec<u8> {
        match self.payload {
            None => self.bytes,
            Some(_) => {
                let mut whole = Vec::new();
                self.whole(&mut whole);
                whole
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::fabric::{deliver, next_packet, SCRATCH};
    use crate::host::{connect, Host};
    use rdma_transport::{Drop, Instant, SendOp, SendWr, Sge};
    use std::net::Ipv4Addr;

    fn pair() -> Vec<Host> {
        (0..2).map(|i| Host::new(i, Ipv4Addr::new(10, 0, 0, 1 + i as u8), 7, None)).collect()
    }

    /// Host 0 WRITEs `len` bytes from the start of its region to host 1's.
    fn write(hosts: &mut [Host], qpn: u32, len: u32) {
        let (src, dst) = (&hosts[0], &hosts[1]);
        let wr = SendWr::new(
            1,
            SendOp::RdmaWrite { remote_addr: dst.va, rkey: dst.rkey },
            vec![Sge { addr: src.va, length: len, lkey: src.lkey }],
        );
        hosts[0].ep.post_send(qpn, wr).expect("the QP is connected");
    }

    fn region(host: &Host, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        host.memory.read(0, &mut out);
        out
    }

    #[test]
    fn a_packet_sent_by_reference_arrives_as_the_engine_writes_it_whole() {
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        // Two identical pairs, one sending payloads by reference.
        let (mut by_ref, mut whole) = (pair(), pair());
        whole[0].ep.set_payload_by_reference(false);
        let mut qpns = Vec::new();
        for hosts in [&mut by_ref, &mut whole] {
            hosts[0].memory.write(0, &pattern);
            let (qpn, _) = connect(hosts, 0, 1);
            write(hosts, qpn, pattern.len() as u32);
            qpns.push(qpn);
        }
        assert_eq!(qpns[0], qpns[1]);
        let (mut buf, mut scratch, mut expected) = (vec![0; SCRATCH], Vec::new(), Vec::new());
        let mut sent_by_ref = 0;
        let now = Instant::ZERO;
        while let Some(p) = next_packet(&mut by_ref[0].ep, now, &mut buf, None, 0) {
            let w = next_packet(&mut whole[0].ep, now, &mut buf, None, 0).expect("the same packets");
            assert!(w.is_whole());
            sent_by_ref += usize::from(!p.is_whole());
            assert_eq!(p.wire_len(), w.wire_len());
            expected.clear();
            expected.extend_from_slice(w.headers());
            assert_eq!(p.whole(&mut scratch), &expected[..], "packet {sent_by_ref}");
            deliver(&mut by_ref[1], 1, None, now, p, &mut scratch);
        }
        assert_eq!(sent_by_ref, 4, "4 KiB in 1 KiB packets, each payload by reference");
        assert_eq!(region(&by_ref[1], pattern.len()), pattern);
        assert_eq!(by_ref[1].ep.stats().drops_for(Drop::IcrcMismatch), 0);
    }

    #[test]
    fn a_payload_changed_before_delivery_is_dropped_not_taken() {
        let mut hosts = pair();
        hosts[0].memory.write(0, &[0x5a; 1024]);
        let (qpn, _) = connect(&mut hosts, 0, 1);
        write(&mut hosts, qpn, 1024);
        let mut buf = vec![0; SCRATCH];
        let p = next_packet(&mut hosts[0].ep, Instant::ZERO, &mut buf, None, 0).expect("the WRITE");
        assert!(!p.is_whole());
        // The sender's region changes while the packet is on its way.
        hosts[0].memory.write(100, &[1]);
        deliver(&mut hosts[1], 1, None, Instant::ZERO, p, &mut Vec::new());
        assert_eq!(hosts[1].ep.stats().drops_for(Drop::IcrcMismatch), 1);
        assert_eq!(region(&hosts[1], 1024), vec![0; 1024], "nothing placed");
    }
}
