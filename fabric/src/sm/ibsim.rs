//! ibsim's client protocol (reference §4.3), spoken natively: two abstract
//! Unix datagram sockets named from `IBSIM_SOCKNAME` (default `sim`), the
//! 80-byte `sim_ctl` CONNECT handshake (attaching at `SIM_HOST`, as
//! libumad2sim does), then 288-byte `sim_request`s carrying our SMPs.
//!
//! Abstract names include a trailing NUL (ibsim's `make_name` counts it).
//! `sim_ctl` is host-endian; `sim_request` holds network-order values in
//! host-sized slots, exactly as umad2sim copies them.

use super::{SmError, SmpTransport};
use rdma_wire::smp::{Smp, SmpRepr, PERMISSIVE_LID, SMP_LEN};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;
use tracing::debug;

pub const SIM_MAGIC: u32 = 0xdead_beef;
pub const CTL_LEN: usize = 80;
pub const REQUEST_LEN: usize = 288;
pub(crate) const CTL_CONNECT: u32 = 1;
const CTL_DISCONNECT: u32 = 2;
const CTL_ERROR: u32 = 0;
/// `sim_request.status` when ibsim dropped the MAD.
pub const ETIMEDOUT: u32 = 110;

fn abstract_addr(name: &str) -> Result<SocketAddr, SmError> {
    let mut b = name.as_bytes().to_vec();
    b.push(0);
    SocketAddr::from_abstract_name(&b).map_err(|e| SmError::Transport(format!("socket name {name:?}: {e}")))
}

/// An `sim_ctl` message.
pub fn ctl(clientid: u32, kind: u32, data: &[u8]) -> [u8; CTL_LEN] {
    let mut b = [0u8; CTL_LEN];
    b[0..4].copy_from_slice(&SIM_MAGIC.to_ne_bytes());
    b[4..8].copy_from_slice(&clientid.to_ne_bytes());
    b[8..12].copy_from_slice(&kind.to_ne_bytes());
    let n = data.len().min(64);
    b[12..16].copy_from_slice(&(n as u32).to_ne_bytes());
    b[16..16 + n].copy_from_slice(&data[..n]);
    b
}

/// A `sim_request` carrying `mad` to `dlid`/`dqp` from our QP `sqp`.
pub fn request(dlid: u16, dqp: u32, sqp: u32, mad: &[u8; SMP_LEN]) -> [u8; REQUEST_LEN] {
    let mut b = [0u8; REQUEST_LEN];
    b[0..2].copy_from_slice(&dlid.to_be_bytes());
    // Directed route: permissive both ways (ibsim routes the answer back
    // by it); otherwise 0, which ibsim fills in with ours.
    if dlid == PERMISSIVE_LID {
        b[4..6].copy_from_slice(&PERMISSIVE_LID.to_be_bytes());
    }
    b[8..12].copy_from_slice(&dqp.to_be_bytes());
    b[12..16].copy_from_slice(&sqp.to_be_bytes());
    b[24..32].copy_from_slice(&(SMP_LEN as u64).to_be_bytes());
    b[32..].copy_from_slice(mad);
    b
}

/// A client attached to an ibsim node.
#[derive(Debug)]
pub struct IbsimClient {
    ctl: UnixDatagram,
    data: UnixDatagram,
    pub clientid: u32,
    /// The node ibsim attached us to.
    pub node: String,
    pub timeout: Duration,
    pub retries: u32,
}

impl IbsimClient {
    /// Connects as SM (QP0 and traps) at `SIM_HOST` (`host`; None: ibsim's
    /// default node) under socket base name `base`.
    pub fn connect(base: &str, host: Option<&str>) -> Result<IbsimClient, SmError> {
        let io = |what: &str, e: std::io::Error| SmError::Transport(format!("{what}: {e}"));
        let pid = std::process::id();
        // ibsim names our input socket after the id we give it (as %d);
        // one process may run several clients, so the id is pid x 100 + n.
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 100;
        let id = pid.wrapping_mul(100).wrapping_add(n) & 0x7fff_ffff;
        let tag = id.to_string();
        let ctl =
            UnixDatagram::bind_addr(&abstract_addr(&format!("{base}:ctl{tag}"))?).map_err(|e| io("bind ctl", e))?;
        ctl.connect_addr(&abstract_addr(&format!("{base}:ctl"))?).map_err(|e| {
            io(&format!("connect to ibsim at {base}:ctl (is ibsim running with IBSIM_SOCKNAME={base}?)"), e)
        })?;
        ctl.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| io("timeout", e))?;
        let data =
            UnixDatagram::bind_addr(&abstract_addr(&format!("{base}:in{tag}"))?).map_err(|e| io("bind in", e))?;
        // sim_client_info { id, qp, issm, nodeid[32] }
        let mut info = [0u8; 44];
        info[0..4].copy_from_slice(&id.to_ne_bytes());
        info[8..12].copy_from_slice(&1u32.to_ne_bytes());
        if let Some(h) = host {
            let n = h.len().min(31);
            info[12..12 + n].copy_from_slice(&h.as_bytes()[..n]);
        }
        let reply = Self::ctl_exchange(&ctl, &self::ctl(0, CTL_CONNECT, &info))?;
        let clientid = u32::from_ne_bytes(reply[16..20].try_into().expect("4 bytes"));
        let node_bytes = &reply[16 + 12..16 + 44];
        let end = node_bytes.iter().position(|&c| c == 0).unwrap_or(node_bytes.len());
        let node = String::from_utf8_lossy(&node_bytes[..end]).into_owned();
        data.connect_addr(&abstract_addr(&format!("{base}:out{clientid}"))?).map_err(|e| io("connect out", e))?;
        debug!(clientid, node, "attached to ibsim");
        Ok(IbsimClient { ctl, data, clientid, node, timeout: Duration::from_millis(500), retries: 3 })
    }

    fn ctl_exchange(ctl: &UnixDatagram, msg: &[u8; CTL_LEN]) -> Result<[u8; CTL_LEN], SmError> {
        ctl.send(msg).map_err(|e| SmError::Transport(format!("ctl send: {e}")))?;
        let mut r = [0u8; CTL_LEN];
        let n = ctl.recv(&mut r).map_err(|e| SmError::Transport(format!("ctl recv: {e}")))?;
        let kind = u32::from_ne_bytes(r[8..12].try_into().expect("4 bytes"));
        if n != CTL_LEN || kind == CTL_ERROR {
            return Err(SmError::Transport(format!("ibsim refused the control message ({n} bytes, type {kind})")));
        }
        Ok(r)
    }
}

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Drop for IbsimClient {
    fn drop(&mut self) {
        let _ = self.ctl.send(&ctl(self.clientid, CTL_DISCONNECT, &[]));
        let mut r = [0u8; CTL_LEN];
        let _ = self.ctl.recv(&mut r);
    }
}

impl SmpTransport for IbsimClient {
    fn exchange(&mut self, req: &SmpRepr) -> Result<SmpRepr, SmError> {
        let mad = req.to_bytes();
        // LID-routed SMPs are not sent by this SM (opensm's Gets and Sets are DR too).
        let dlid = PERMISSIVE_LID;
        let msg = request(dlid, 0, 0, &mad);
        self.data.set_read_timeout(Some(self.timeout)).map_err(|e| SmError::Transport(e.to_string()))?;
        for _ in 0..=self.retries {
            self.data.send(&msg).map_err(|e| SmError::Transport(format!("send: {e}")))?;
            let mut r = [0u8; REQUEST_LEN];
            loop {
                let n = match self.data.recv(&mut r) {
                    Ok(n) => n,
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                        break
                    }
                    Err(e) => return Err(SmError::Transport(format!("recv: {e}"))),
                };
                if n != REQUEST_LEN {
                    continue;
                }
                let status = u32::from_be_bytes(r[16..20].try_into().expect("4 bytes"));
                let v = Smp::new_checked(&r[32..]).map_err(|e| SmError::Transport(e.to_string()))?;
                if v.mad().transaction_id() != req.tid {
                    continue; // a trap or a stale answer
                }
                if status == ETIMEDOUT {
                    break;
                }
                return SmpRepr::parse(&v).map_err(|e| SmError::Transport(format!("answer: {e}")));
            }
        }
        Err(SmError::Timeout { attr: super::attr_name(req.attr_id), path: path_of(req) })
    }
}

fn path_of(req: &SmpRepr) -> Vec<u8> {
    req.dr.map_or(Vec::new(), |d| d.initial_path[1..=usize::from(d.hop_cnt)].to_vec())
}
