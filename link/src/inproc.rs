//! An in-process link: devices of one process that name the same fabric
//! exchange frames through queues, delivered by destination MAC address
//! (broadcast to every other port), as a learning-free switch would. It
//! needs no root and no network interface: `rdma-perf --loopback
//! --backend roce1|ib` runs both ends over it.

use crate::{FrameMeta, Link, LinkCaps, Mac, BROADCAST, ETH_HEADER};
use rdma_transport::LinkKind;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

/// Frames a port's queue holds before the link drops more (a full
/// receive ring; the transport retransmits).
pub const QUEUE_FRAMES: usize = 8192;

/// Largest frame: Ethernet header and the largest packet the engine writes.
pub const MAX_FRAME: usize = ETH_HEADER + rdma_transport::MAX_PACKET;

struct Port {
    mac: Mac,
    queue: Mutex<VecDeque<(Vec<u8>, SystemTime)>>,
    /// Readable while the queue may hold frames.
    ready: OwnedFd,
}

impl Port {
    fn deliver(&self, frame: &[u8]) -> bool {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= QUEUE_FRAMES {
            return false;
        }
        q.push_back((frame.to_vec(), SystemTime::now()));
        drop(q);
        let one = 1u64;
        // SAFETY: writes 8 bytes to an eventfd we own.
        unsafe { libc::write(self.ready.as_raw_fd(), (&one as *const u64).cast(), 8) };
        true
    }
}

#[derive(Default)]
struct Fabric {
    ports: Mutex<Vec<Weak<Port>>>,
}

static FABRICS: Mutex<BTreeMap<String, Weak<Fabric>>> = Mutex::new(BTreeMap::new());

/// One port on a named in-process fabric.
pub struct InProcessLink {
    fabric: Arc<Fabric>,
    port: Arc<Port>,
    kind: LinkKind,
    /// Frames the link dropped because the destination's queue was full.
    pub dropped: u64,
}

impl std::fmt::Debug for InProcessLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessLink").field("mac", &self.port.mac).field("kind", &self.kind).finish()
    }
}

impl InProcessLink {
    /// Attaches a port with address `mac` to the fabric `name` (made on
    /// first use, gone with its last port).
    pub fn join(name: &str, mac: Mac, kind: LinkKind) -> io::Result<InProcessLink> {
        // SAFETY: plain syscall; the fd is owned from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let ready = unsafe { OwnedFd::from_raw_fd(fd) };
        let port = Arc::new(Port { mac, queue: Mutex::new(VecDeque::new()), ready });
        let mut fabrics = FABRICS.lock().unwrap_or_else(|e| e.into_inner());
        fabrics.retain(|_, f| f.strong_count() > 0);
        let fabric = match fabrics.get(name).and_then(Weak::upgrade) {
            Some(f) => f,
            None => {
                let f = Arc::new(Fabric::default());
                fabrics.insert(name.to_string(), Arc::downgrade(&f));
                f
            }
        };
        {
            let mut ports = fabric.ports.lock().unwrap_or_else(|e| e.into_inner());
            ports.retain(|p| p.strong_count() > 0);
            if ports.iter().filter_map(Weak::upgrade).any(|p| p.mac == mac) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("in-process fabric {name:?}: a port with MAC {mac:02x?} is already attached"),
                ));
            }
            ports.push(Arc::downgrade(&port));
        }
        tracing::debug!(fabric = name, mac = ?mac, kind = kind.name(), "in-process link up");
        Ok(InProcessLink { fabric, port, kind, dropped: 0 })
    }
}

impl Link for InProcessLink {
    fn caps(&self) -> LinkCaps {
        LinkCaps { kind: self.kind, max_frame: MAX_FRAME, segmentation_offload: false, by_reference: false }
    }

    fn mac(&self) -> Mac {
        self.port.mac
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if frame.len() < ETH_HEADER || frame.len() > MAX_FRAME {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("a {}-byte frame", frame.len())));
        }
        let dst: Mac = frame[..6].try_into().expect("checked length");
        let ports: Vec<Arc<Port>> = {
            let ports = self.fabric.ports.lock().unwrap_or_else(|e| e.into_inner());
            ports.iter().filter_map(Weak::upgrade).collect()
        };
        for p in ports.iter().filter(|p| !Arc::ptr_eq(p, &self.port)) {
            if (dst == BROADCAST || dst == p.mac) && !p.deliver(frame) {
                self.dropped += 1;
                tracing::trace!(dst = ?p.mac, "in-process link: queue full, frame dropped");
            }
        }
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<FrameMeta>> {
        let pop = |port: &Port| port.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        let next = match pop(&self.port) {
            Some(f) => Some(f),
            None => {
                // Empty: reset the readiness, then look once more, so that a
                // frame queued between the two is not left without a wake-up.
                let mut v = 0u64;
                // SAFETY: reads 8 bytes into `v`; EAGAIN is fine.
                unsafe { libc::read(self.port.ready.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                pop(&self.port)
            }
        };
        let Some((frame, arrival)) = next else { return Ok(None) };
        let n = frame.len().min(buf.len());
        buf[..n].copy_from_slice(&frame[..n]);
        let src: Mac = frame[6..12].try_into().expect("frames are checked on send");
        Ok(Some(FrameMeta { len: n, src, arrival, traffic_class: None, datagram: None }))
    }

    fn fd(&self) -> RawFd {
        self.port.ready.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: Mac, src: Mac, body: u8) -> Vec<u8> {
        let mut f = vec![body; 60];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f
    }

    #[test]
    fn frames_go_to_the_port_they_name_or_to_every_other_on_broadcast() {
        let (ma, mb, mc) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 3]);
        let mut a = InProcessLink::join("inproc-test", ma, LinkKind::Ib).unwrap();
        let mut b = InProcessLink::join("inproc-test", mb, LinkKind::Ib).unwrap();
        let mut c = InProcessLink::join("inproc-test", mc, LinkKind::Ib).unwrap();
        assert!(InProcessLink::join("inproc-test", mb, LinkKind::Ib).is_err(), "one port per MAC");
        let mut buf = [0u8; 128];
        a.send(&frame(mb, ma, 7)).unwrap();
        let m = b.recv(&mut buf).unwrap().expect("b gets its frame");
        assert_eq!((m.len, m.src, buf[20]), (60, ma, 7));
        assert!(c.recv(&mut buf).unwrap().is_none(), "c is not addressed");
        assert!(b.recv(&mut buf).unwrap().is_none());
        a.send(&frame(BROADCAST, ma, 9)).unwrap();
        assert_eq!(b.recv(&mut buf).unwrap().map(|m| m.src), Some(ma));
        assert_eq!(c.recv(&mut buf).unwrap().map(|m| m.src), Some(ma));
        assert!(a.recv(&mut buf).unwrap().is_none(), "a sender does not hear itself");
        assert!(a.send(&[0u8; 4]).is_err(), "a runt frame is refused");
    }
}
