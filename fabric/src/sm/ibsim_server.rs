//! `rdma-fabric ibsim-serve NETFILE`: ibsim's server protocol in front of
//! the emulated fabric (reference §4.4 (b), server side), so that unmodified
//! `opensm` and `infiniband-diags` under libumad2sim manage and inspect it.
//! A gateway, not a second model: each client SMP is injected at the
//! client's HCA as a real VL15 packet, forwarded hop by hop by the emulated
//! switches' SMAs, and the answer that comes back is returned. Only SMPs
//! (QP0) are carried; other MADs are answered with ibsim's "dropped"
//! status (110).

use super::fabric_transport::FabricTransport;
use super::ibsim::{CTL_LEN, ETIMEDOUT, REQUEST_LEN, SIM_MAGIC};
use super::{SmError, SmpTransport};
use crate::topology::Node;
use rdma_wire::mad::method;
use rdma_wire::smp::{attr, Smp, SmpRepr, CLASS_DIRECTED_ROUTE, CLASS_LID_ROUTED};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;
use tracing::{debug, info};

pub const MAX_CLIENTS: usize = 10;
const CONNECT: u32 = 1;
const DISCONNECT: u32 = 2;
const GET_PORT: u32 = 3;
const GET_VENDOR: u32 = 4;
const GET_GID: u32 = 5;
const GET_GUID: u32 = 6;
const GET_NODEINFO: u32 = 7;
const GET_PORTINFO: u32 = 8;
const SET_ISSM: u32 = 9;
const GET_PKEYS: u32 = 10;

fn name(n: &str) -> Result<SocketAddr, SmError> {
    let mut b = n.as_bytes().to_vec();
    b.push(0);
    SocketAddr::from_abstract_name(&b).map_err(|e| SmError::Transport(format!("{n}: {e}")))
}

#[derive(Debug, Clone, Copy)]
struct Client {
    node: usize,
}

/// The server: its sockets, its clients, and the fabric behind it.
#[derive(Debug)]
pub struct IbsimServer {
    base: String,
    ctl: UnixDatagram,
    outs: Vec<UnixDatagram>,
    clients: Vec<Option<Client>>,
    pub transport: FabricTransport,
    /// Where a client without SIM_HOST attaches: the first HCA.
    default_node: usize,
}

impl IbsimServer {
    pub fn bind(base: &str, transport: FabricTransport) -> Result<IbsimServer, SmError> {
        let io = |e: std::io::Error| SmError::Transport(format!("ibsim-serve {base}: {e}"));
        let ctl = UnixDatagram::bind_addr(&name(&format!("{base}:ctl"))?).map_err(io)?;
        ctl.set_nonblocking(true).map_err(io)?;
        let mut outs = Vec::new();
        for i in 0..MAX_CLIENTS {
            let s = UnixDatagram::bind_addr(&name(&format!("{base}:out{i}"))?).map_err(io)?;
            s.set_nonblocking(true).map_err(io)?;
            outs.push(s);
        }
        let default_node = transport.sm_node;
        Ok(IbsimServer { base: base.into(), ctl, outs, clients: vec![None; MAX_CLIENTS], transport, default_node })
    }

    /// Serves until `stop` returns true; polls every millisecond when idle.
    pub fn serve(&mut self, stop: &dyn Fn() -> bool) -> Result<(), SmError> {
        info!(base = self.base, "ibsim-serve listening");
        while !stop() {
            let mut busy = self.poll_ctl()?;
            for i in 0..MAX_CLIENTS {
                busy |= self.poll_client(i)?;
            }
            if !busy {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }

    fn poll_ctl(&mut self) -> Result<bool, SmError> {
        let mut b = [0u8; CTL_LEN];
        let (n, from) = match self.ctl.recv_from(&mut b) {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(SmError::Transport(format!("ctl: {e}"))),
        };
        let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        if n != CTL_LEN || u32_at(&b, 0) != SIM_MAGIC {
            debug!(n, "not a sim_ctl");
            return Ok(true);
        }
        let (client, kind) = (u32_at(&b, 4) as usize, u32_at(&b, 8));
        let ok = self.ctl_message(kind, client, &mut b[16..]);
        if !ok {
            b[8..12].copy_from_slice(&0u32.to_ne_bytes());
        }
        let _ = self.ctl.send_to_addr(&b, &from);
        Ok(true)
    }

    /// Fills `data` (64 bytes) with the answer; false: SIM_CTL_ERROR.
    fn ctl_message(&mut self, kind: u32, client: usize, data: &mut [u8]) -> bool {
        let node_of = |s: &Self, c: usize| s.clients.get(c).copied().flatten().map(|c| c.node);
        match kind {
            CONNECT => {
                let id = u32::from_ne_bytes(data[0..4].try_into().expect("4 bytes"));
                let end = data[12..44].iter().position(|&c| c == 0).unwrap_or(32);
                let host = String::from_utf8_lossy(&data[12..12 + end]).into_owned();
                let ident = &self.transport.fab.topo.ident;
                let node =
                    if host.is_empty() { Some(self.default_node) } else { ident.iter().position(|i| i.name == host) };
                let Some(node) = node.filter(|&n| matches!(self.transport.fab.topo.nodes[n], Node::Host(_))) else {
                    debug!(host, "no HCA by that name");
                    return false;
                };
                let Some(slot) = self.clients.iter().position(Option::is_none) else { return false };
                let Ok(addr) = name(&format!("{}:in{id}", self.base)) else { return false };
                if self.outs[slot].connect_addr(&addr).is_err() {
                    return false;
                }
                self.clients[slot] = Some(Client { node });
                data[0..4].copy_from_slice(&(slot as u32).to_ne_bytes());
                data[12..44].fill(0);
                let nm = self.transport.fab.topo.ident[node].name.as_bytes();
                let k = nm.len().min(31);
                data[12..12 + k].copy_from_slice(&nm[..k]);
                info!(slot, host = %self.transport.fab.topo.ident[node].name, "client attached");
                true
            }
            DISCONNECT => {
                if let Some(c) = self.clients.get_mut(client) {
                    *c = None;
                }
                true
            }
            _ => {
                let Some(node) = node_of(self, client) else { return false };
                let fab = &mut self.transport.fab;
                let get = |fab: &mut crate::fabric::Fabric, attr_id: u16, m: u32| {
                    fab.sma(node, 0, &SmpRepr::request(method::GET, 0, attr_id, m, None)).data
                };
                data.fill(0);
                match kind {
                    GET_PORT => {
                        let ib = fab.topo.ports[node][0].ib.as_ref().map(|i| i.mgmt);
                        let (lid, state) = ib.map_or((0, 1), |m| (m.lid, m.state));
                        data[0..2].copy_from_slice(&lid.to_ne_bytes());
                        data[2] = state;
                    }
                    GET_VENDOR | SET_ISSM => {}
                    GET_GID => {
                        data[0..8].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
                        data[8..16].copy_from_slice(&fab.topo.ident[node].guid.to_ne_bytes());
                    }
                    GET_GUID => data[0..8].copy_from_slice(&fab.topo.ident[node].guid.to_ne_bytes()),
                    GET_NODEINFO => data[..64].copy_from_slice(&get(fab, attr::NODE_INFO, 0)),
                    GET_PORTINFO => data[..64].copy_from_slice(&get(fab, attr::PORT_INFO, 0)),
                    GET_PKEYS => data[..64].copy_from_slice(&get(fab, attr::P_KEY_TABLE, 0)),
                    _ => return false,
                }
                true
            }
        }
    }

    fn poll_client(&mut self, i: usize) -> Result<bool, SmError> {
        let Some(client) = self.clients[i] else { return Ok(false) };
        let mut r = [0u8; REQUEST_LEN];
        match self.outs[i].recv(&mut r) {
            Ok(REQUEST_LEN) => {}
            Ok(_) => return Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                self.clients[i] = None;
                return Ok(true);
            }
            Err(e) => return Err(SmError::Transport(format!("client {i}: {e}"))),
        }
        let dlid = u16::from_be_bytes([r[0], r[1]]);
        let answer = match r[33] {
            CLASS_DIRECTED_ROUTE | CLASS_LID_ROUTED => {
                Smp::new_checked(&r[32..]).ok().and_then(|v| SmpRepr::parse(&v).ok()).and_then(|req| {
                    self.transport.sm_node = client.node;
                    self.transport.lid_routed_dlid = dlid;
                    self.transport.exchange(&req).map_err(|e| debug!(%e, "no answer")).ok()
                })
            }
            _ => None,
        };
        let mut out = r;
        match answer {
            Some(a) => {
                out[0..4].copy_from_slice(&r[4..8]);
                out[4..8].copy_from_slice(&r[0..4]);
                out[8..12].copy_from_slice(&r[12..16]);
                out[12..16].copy_from_slice(&r[8..12]);
                out[16..20].fill(0);
                out[32..].copy_from_slice(&a.to_bytes());
            }
            None => out[16..20].copy_from_slice(&ETIMEDOUT.to_be_bytes()),
        }
        let _ = self.outs[i].send(&out);
        Ok(true)
    }
}
