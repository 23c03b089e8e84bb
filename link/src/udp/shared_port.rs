//! The receive socket of a device whose port the host's processes share
//! ([`crate::share`]): bound with `SO_REUSEPORT` as a member of the port,
//! or alone as before.

use super::config::IoDriver;
use super::sys::sock_addr;
use crate::share::Member;
use rdma_wire::ROCE_V2_PORT;
use socket2::Socket;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

/// Binds `rx` to `local`:4791: alone, or (`shared`) as a new member of
/// the port's group, whose membership comes back; such a member turns
/// UDP GRO on and off itself (`gro`: whether it may).
pub(super) fn bind_rx(
    rx: &Socket,
    local: IpAddr,
    scope_id: u32,
    shared: bool,
    gro: bool,
) -> io::Result<Option<Member>> {
    let addr = sock_addr(local, ROCE_V2_PORT, scope_id);
    let bind = || {
        rx.bind(&addr).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot bind UDP {local} port {ROCE_V2_PORT} for RoCE v2: {e}"))
        })
    };
    if !shared {
        bind()?;
        return Ok(None);
    }
    rx.set_reuse_port(true)?;
    Ok(Some(Member::join(local, scope_id, rx.as_raw_fd(), gro, bind)?))
}

/// Says so when io_uring was asked for (`want` or `SOFTROCE_IO_DRIVER`):
/// a shared socket must close the moment its member leaves, and
/// io_uring's armed receive holds it open until the ring's teardown ends.
pub(super) fn note_socket_driver(want: IoDriver) {
    let env = std::env::var("SOFTROCE_IO_DRIVER").ok().and_then(|v| v.parse().ok());
    if env.unwrap_or(want) == IoDriver::IoUring {
        tracing::info!("a shared port uses the socket driver, not io_uring");
    }
}
