//! The network header of a received packet as a UD receive shows it: the
//! 40 bytes in front of the data hold the GRH, or on RoCE v2 the IP header
//! (an IPv4 header in the last 20 bytes, as rxe writes it).

use rdma_wire::DatagramHeaders;

/// Where the header of a received packet is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NetHeader<'a> {
    /// Its bytes as they arrived (a frame's GRH or IP header); empty
    /// when the packet had none (native IB without a GRH).
    Bytes(&'a [u8]),
    /// A packet a UDP socket handed up without its headers: the header is
    /// written from what the socket reported, and only when a UD receive
    /// shows it. The length is the packet's, BTH through ICRC.
    Datagram(&'a DatagramHeaders, usize),
}

impl NetHeader<'_> {
    /// The 40 bytes a UD receive gets in front of the data.
    pub(crate) fn grh_area(&self) -> [u8; 40] {
        let mut grh = [0u8; 40];
        match *self {
            NetHeader::Bytes(ip) => {
                let n = ip.len().min(40);
                grh[40 - n..].copy_from_slice(&ip[..n]);
            }
            NetHeader::Datagram(h, len) => {
                let mut both = [0u8; 48];
                // Checked when the packet was taken in; zeros otherwise.
                if let Ok(n) = h.emit(len, &mut both) {
                    let ip = &both[..n - 8];
                    grh[40 - ip.len()..].copy_from_slice(ip);
                }
            }
        }
        grh
    }
}
