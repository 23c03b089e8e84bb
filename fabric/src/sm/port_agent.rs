//! The port agent: what the firmware SMA of a real HCA is, for the
//! emulated native-IB port on a network interface (`rdma-sm --agent
//! --netdev IFACE`). It holds the port's management state ([`CaSma`]),
//! answers the SMPs that reach the port as VL15 frames on the interface
//! (directed route and LID-routed) and those the SM on this same port
//! sends through the agent's local socket, and publishes the state for the
//! devices opened on the interface ([`rdma_link::ib_port`]). It
//! removes the record and the socket when it stops.

use super::ca_sma::{mtu_code_for, CaSma};
use super::raw_transport::{eth_frame, smp_of_eth_frame};
use crate::ib::sma::smp_frame;
use rdma_link::ib_port::{self, IbPortRecord, PortState};
use rdma_link::raw::RawLink;
use rdma_link::{Link, Mac, ETH_HEADER};
use rdma_transport::LinkKind;
use rdma_wire::smp::{Smp, SmpRepr, PERMISSIVE_LID, SMP_LEN};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::{debug, info, warn};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("port agent on {netdev}: {what}: {source}")]
    Io { netdev: String, what: String, source: std::io::Error },
}

/// The agent of the port on one interface.
pub struct PortAgent {
    sma: CaSma,
    link: RawLink,
    netdev: String,
    guid: u64,
    local: UnixDatagram,
    socket_path: PathBuf,
    published: Option<IbPortRecord>,
    buf: Vec<u8>,
    /// SMPs answered (wire, local).
    pub answered: (u64, u64),
}

impl PortAgent {
    /// Opens `netdev` (AF_PACKET: root), binds the local socket and
    /// publishes the port as INIT (linked up, not configured).
    pub fn open(netdev: &str) -> Result<PortAgent, AgentError> {
        let io = |what: String| move |source| AgentError::Io { netdev: netdev.to_string(), what, source };
        let link = RawLink::open(netdev, LinkKind::Ib).map_err(io("open".into()))?;
        link.only_vl15().map_err(io("filter".into()))?;
        let guid = ib_port::port_guid(link.mac());
        let eth_mtu = link.caps().max_frame - ETH_HEADER;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let description = format!("softroce {} {netdev}", host.trim());
        let sma = CaSma::new(guid, description, mtu_code_for(eth_mtu));
        let dir = ib_port::run_dir();
        std::fs::create_dir_all(&dir).map_err(io(format!("{}", dir.display())))?;
        let socket_path = ib_port::agent_socket_path(guid);
        let _ = std::fs::remove_file(&socket_path);
        let local = UnixDatagram::bind(&socket_path).map_err(io(format!("{}", socket_path.display())))?;
        local.set_nonblocking(true).map_err(io("local socket".into()))?;
        let mut a = PortAgent {
            sma,
            link,
            netdev: netdev.to_string(),
            guid,
            local,
            socket_path,
            published: None,
            buf: vec![0u8; 16 * 1024],
            answered: (0, 0),
        };
        a.publish()?;
        info!(netdev, guid = %ib_port::guid_text(guid), mtu = eth_mtu, "port agent up");
        Ok(a)
    }

    /// The port's GUID.
    pub fn guid(&self) -> u64 {
        self.guid
    }

    fn record(&self) -> IbPortRecord {
        IbPortRecord {
            netdev: self.netdev.clone(),
            port_guid: ib_port::guid_text(self.guid),
            lid: self.sma.mgmt.lid,
            sm_lid: self.sma.mgmt.sm_lid,
            lmc: self.sma.mgmt.lmc,
            state: PortState::from_code(self.sma.mgmt.state).unwrap_or(PortState::Down),
            mtu: 128 << self.sma.mtu_cap,
            pkeys: self.sma.mgmt.pkeys.iter().copied().filter(|&k| k != 0).collect(),
            pid: std::process::id(),
        }
    }

    /// Writes the record if the state changed.
    fn publish(&mut self) -> Result<(), AgentError> {
        let r = self.record();
        if self.published.as_ref() == Some(&r) {
            return Ok(());
        }
        r.publish(self.guid).map_err(|source| AgentError::Io {
            netdev: self.netdev.clone(),
            what: format!("publish {}", ib_port::record_path(self.guid).display()),
            source,
        })?;
        info!(netdev = %self.netdev, lid = r.lid, sm_lid = r.sm_lid, state = ?r.state, "port state published");
        self.published = Some(r);
        Ok(())
    }

    /// Serves until `stop` is set (checked at least every 100 ms).
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), AgentError> {
        let fds = [self.link.fd(), self.local.as_raw_fd()];
        while !stop.load(Ordering::Relaxed) {
            let mut p = fds.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            // SAFETY: two pollfds that live across the call.
            let r = unsafe { libc::poll(p.as_mut_ptr(), 2, 100) };
            if r <= 0 {
                continue; // timeout, or a signal (EINTR): look at `stop`
            }
            if p[0].revents != 0 {
                self.serve_wire()?;
            }
            if p[1].revents != 0 {
                self.serve_local()?;
            }
            self.publish()?;
        }
        Ok(())
    }

    fn err(&self, what: &str) -> impl FnOnce(std::io::Error) -> AgentError {
        let netdev = self.netdev.clone();
        let what = what.to_string();
        move |source| AgentError::Io { netdev, what, source }
    }

    /// VL15 frames from the interface.
    fn serve_wire(&mut self) -> Result<(), AgentError> {
        let mac = self.link.mac();
        while let Some(meta) = self.link.recv(&mut self.buf).map_err(self.err("receive"))? {
            let Some(f) = answer(&mut self.sma, mac, &self.buf[..meta.len]) else { continue };
            if let Err(e) = self.link.send(&f) {
                warn!(error = %e, "an SMP answer was not sent (the SM retries)");
            }
            self.answered.0 += 1;
        }
        Ok(())
    }

    /// SMPs from the SM on this port.
    fn serve_local(&mut self) -> Result<(), AgentError> {
        let mut buf = [0u8; SMP_LEN + 1];
        loop {
            let (n, from) = match self.local.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(self.err("local socket")(e)),
            };
            let Some(req) = Smp::new_checked(&buf[..n]).ok().and_then(|s| SmpRepr::parse(&s).ok()) else {
                debug!(len = n, "not an SMP on the local socket");
                continue;
            };
            let Some(resp) = self.sma.handle(&req) else { continue };
            debug!(attr = req.attr_id, method = req.method, tid = req.tid, status = resp.status, "local SMP answered");
            if let Some(path) = from.as_pathname() {
                if let Err(e) = self.local.send_to(&resp.to_bytes(), path) {
                    warn!(error = %e, "a local SMP answer was not sent");
                }
            }
            self.answered.1 += 1;
        }
    }
}

/// What the port does with one frame from the interface (`own_mac` is
/// its MAC): the answer frame, to the requester's MAC, when the frame is
/// a good VL15 SMP for this port that a CA answers; None for anything
/// else. The SMA's state takes what a Set writes. No I/O, so that the
/// fuzz body ([`crate::fuzzing::port_agent`]) runs exactly what the agent
/// runs on every frame it reads as root.
pub fn answer(sma: &mut CaSma, own_mac: Mac, frame: &[u8]) -> Option<Vec<u8>> {
    let (req, src, slid, dlid) = smp_of_eth_frame(frame)?;
    // A LID-routed SMP is for this port only at its LID, once it has
    // one, or at the permissive LID.
    let own = sma.mgmt.lid;
    if req.dr.is_none() && dlid != PERMISSIVE_LID && (own == 0 || dlid != own) {
        return None;
    }
    let resp = sma.handle(&req)?;
    let (rslid, rdlid) = if resp.dr.is_some() { (PERMISSIVE_LID, PERMISSIVE_LID) } else { (sma.mgmt.lid, slid) };
    debug!(attr = req.attr_id, method = req.method, tid = req.tid, status = resp.status, "SMP answered");
    Some(eth_frame(src, own_mac, &smp_frame(&resp, rslid, rdlid)))
}

impl Drop for PortAgent {
    /// The port goes away with its agent: devices then fall back to the
    /// LID plan, as on a port nobody manages.
    fn drop(&mut self) {
        ib_port::unpublish(self.guid);
        let _ = std::fs::remove_file(&self.socket_path);
        info!(netdev = %self.netdev, "port agent down");
    }
}
