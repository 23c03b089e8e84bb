//! The SM on the raw native-IB backend: its SMPs leave as real IB packets
//! (LRH on VL15, BTH to QP0, DETH, the MAD, ICRC, VCRC) in Ethernet frames
//! of the IB EtherType on a network interface, and the answers are matched
//! by TID, with a timeout and retries. The SM's own port (a directed route
//! of 0 hops) is reached through its port agent's local socket
//! ([`super::port_agent`]), as a real SM reaches its HCA's SMA through
//! umad: no frame goes on the wire for it.

use super::{SmError, SmpTransport};
use crate::ib::sma::{parse_smp_frame, smp_frame};
use rdma_link::capture::CaptureLink;
use rdma_link::raw::RawLink;
use rdma_link::{ib_port, Link, Mac, BROADCAST, ETH_HEADER};
use rdma_transport::LinkKind;
use rdma_wire::ethernet::ETHERTYPE_IB;
use rdma_wire::mad::method;
use rdma_wire::smp::{Smp, SmpRepr, PERMISSIVE_LID, SMP_LEN};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing::{debug, trace};

/// How long the SM waits for each answer before it sends again.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);
/// Sends of one SMP before the SM gives up on it.
pub const DEFAULT_TRIES: u32 = 3;

/// The Ethernet frame carrying the IB packet `packet` from `src` to `dst`.
pub fn eth_frame(dst: Mac, src: Mac, packet: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HEADER + packet.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE_IB.to_be_bytes());
    f.extend_from_slice(packet);
    f
}

/// The SMP of a received Ethernet frame, with the frame's source MAC and
/// the LRH's SLID and DLID; None for other traffic or bad CRCs. Ethernet
/// padding after the VCRC is cut by the LRH's PktLen.
pub fn smp_of_eth_frame(frame: &[u8]) -> Option<(SmpRepr, Mac, u16, u16)> {
    if frame.len() < ETH_HEADER + 8 || u16::from_be_bytes([frame[12], frame[13]]) != ETHERTYPE_IB {
        return None;
    }
    let packet = &frame[ETH_HEADER..];
    if packet[0] >> 4 != 15 {
        return None; // not VL15
    }
    let words = usize::from(u16::from_be_bytes([packet[4], packet[5]]) & 0x7ff);
    let len = (words * 4 + 2).min(packet.len());
    let (smp, slid, dlid) = parse_smp_frame(&packet[..len])?;
    let src: Mac = frame[6..12].try_into().ok()?;
    Some((smp, src, slid, dlid))
}

/// Waits until `fd` is readable or `until` passes; true if readable.
pub(crate) fn wait_readable(fd: i32, until: Instant) -> bool {
    let left = until.saturating_duration_since(Instant::now());
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one pollfd that lives across the call.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r > 0 && p.revents & libc::POLLIN != 0
}

/// SMPs over a raw interface, and to the local port through its agent.
pub struct RawSmpTransport {
    /// The interface, in a capture when asked for one.
    link: Box<dyn Link>,
    netdev: String,
    /// Bound to a path of its own, connected to the agent's socket.
    agent: UnixDatagram,
    own_socket: PathBuf,
    pub timeout: Duration,
    pub tries: u32,
    /// Where a LID-routed SMP goes (its LRH DLID).
    pub lid_routed_dlid: u16,
    buf: Vec<u8>,
}

impl std::fmt::Debug for RawSmpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawSmpTransport").field("netdev", &self.netdev).finish_non_exhaustive()
    }
}

impl RawSmpTransport {
    /// Opens `netdev` (AF_PACKET: root) and the socket of its port agent,
    /// which must run (`rdma-sm --agent --netdev IFACE`). With `pcap`,
    /// the SMPs it sends and the answers go to that file (ERF type-21
    /// records in a pcap, as the devices' `--pcap` on IB writes).
    pub fn open(netdev: &str, pcap: Option<&Path>) -> Result<RawSmpTransport, SmError> {
        let t = |e: String| SmError::Transport(e);
        let raw = RawLink::open(netdev, LinkKind::Ib).map_err(|e| t(format!("{netdev}: {e}")))?;
        raw.only_vl15().map_err(|e| t(e.to_string()))?; // not every data frame on the interface
        let guid = ib_port::port_guid(raw.mac());
        let link: Box<dyn Link> = match pcap {
            Some(p) => Box::new(CaptureLink::new(raw, p).map_err(|e| t(e.to_string()))?),
            None => Box::new(raw),
        };
        let agent_path = ib_port::agent_socket_path(guid);
        let own_socket = ib_port::run_dir().join(format!("sm-{}-{guid:016x}.sock", std::process::id()));
        let _ = std::fs::remove_file(&own_socket);
        let agent = UnixDatagram::bind(&own_socket).map_err(|e| t(format!("{}: {e}", own_socket.display())))?;
        if let Err(e) = agent.connect(&agent_path) {
            let _ = std::fs::remove_file(&own_socket);
            return Err(t(format!(
                "no port agent for {netdev} (port GUID {}; {}: {e}): start `rdma-sm --agent --netdev {netdev}` first",
                ib_port::guid_text(guid),
                agent_path.display()
            )));
        }
        Ok(RawSmpTransport {
            link,
            netdev: netdev.to_string(),
            agent,
            own_socket,
            timeout: DEFAULT_TIMEOUT,
            tries: DEFAULT_TRIES,
            lid_routed_dlid: PERMISSIVE_LID,
            buf: vec![0u8; 16 * 1024],
        })
    }

    /// One send of `req` to the local agent; the answer with its TID, if in time.
    fn local_once(&mut self, req: &SmpRepr) -> Result<Option<SmpRepr>, SmError> {
        self.agent.send(&req.to_bytes()).map_err(|e| SmError::Transport(format!("to the port agent: {e}")))?;
        let until = Instant::now() + self.timeout;
        let mut buf = [0u8; SMP_LEN];
        while wait_readable(self.agent.as_raw_fd(), until) {
            let n = match self.agent.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(SmError::Transport(format!("from the port agent: {e}"))),
            };
            let Some(r) = Smp::new_checked(&buf[..n]).ok().and_then(|s| SmpRepr::parse(&s).ok()) else { continue };
            if r.tid == req.tid && r.method & method::RESP != 0 {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// One send of `req` on the wire; the answer with its TID, if in time.
    fn wire_once(&mut self, req: &SmpRepr, slid: u16, dlid: u16) -> Result<Option<SmpRepr>, SmError> {
        // The peer's MAC is not known (and on a back-to-back link not
        // needed): a VL15 packet goes to every port of the segment, and
        // only the one it is for answers.
        let f = eth_frame(BROADCAST, self.link.mac(), &smp_frame(req, slid, dlid));
        self.link.send(&f).map_err(|e| SmError::Transport(format!("{}: send: {e}", self.netdev)))?;
        let until = Instant::now() + self.timeout;
        while wait_readable(self.link.fd(), until) {
            while let Some(meta) =
                self.link.recv(&mut self.buf).map_err(|e| SmError::Transport(format!("{}: {e}", self.netdev)))?
            {
                let Some((r, src, ..)) = smp_of_eth_frame(&self.buf[..meta.len]) else { continue };
                if r.tid == req.tid && r.method & method::RESP != 0 {
                    trace!(tid = r.tid, ?src, "SMP answer");
                    let _ = self.link.flush(); // a capture's records
                    return Ok(Some(r));
                }
            }
        }
        Ok(None)
    }
}

impl SmpTransport for RawSmpTransport {
    fn exchange(&mut self, req: &SmpRepr) -> Result<SmpRepr, SmError> {
        let mut s = *req;
        for attempt in 1..=self.tries.max(1) {
            let r = match s.dr.as_mut() {
                Some(dr) if dr.hop_cnt == 0 => self.local_once(&s)?,
                Some(dr) => {
                    dr.hop_ptr = 1;
                    self.wire_once(&s, PERMISSIVE_LID, PERMISSIVE_LID)?
                }
                None => self.wire_once(&s, PERMISSIVE_LID, self.lid_routed_dlid)?,
            };
            if let Some(r) = r {
                return Ok(r);
            }
            debug!(tid = req.tid, attempt, "SMP timed out");
        }
        let path = req.dr.map_or(Vec::new(), |dr| dr.initial_path[1..=usize::from(dr.hop_cnt)].to_vec());
        Err(SmError::Timeout { attr: super::attr_name(req.attr_id), path })
    }
}

impl Drop for RawSmpTransport {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.own_socket);
    }
}
