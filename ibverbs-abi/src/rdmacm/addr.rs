//! Socket addresses between C and Rust, and `rdma_getaddrinfo`.

use super::abi::*;
use crate::ffi::{guard, set_errno};
use libc::{c_char, c_int, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The address at `p` (AF_INET or AF_INET6), or None.
///
/// # Safety
/// `p` is NULL or points to a sockaddr of its family's size.
pub unsafe fn from_c(p: *const sockaddr) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's sockaddr, read by its family.
    unsafe {
        match c_int::from((*p).sa_family) {
            libc::AF_INET => {
                let s = &*(p.cast::<sockaddr_in>());
                let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
                Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(s.sin_port))))
            }
            libc::AF_INET6 => {
                let s = &*(p.cast::<sockaddr_in6>());
                let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(s.sin6_port), s.sin6_flowinfo, s.sin6_scope_id)))
            }
            _ => None,
        }
    }
}

/// `a` as a sockaddr_storage, and its length.
pub fn to_c(a: SocketAddr) -> (sockaddr_storage, socklen_t) {
    // SAFETY: plain data, zero is valid.
    let mut st: sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            let s = unsafe { &mut *(&mut st as *mut sockaddr_storage).cast::<sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            std::mem::size_of::<sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let s = unsafe { &mut *(&mut st as *mut sockaddr_storage).cast::<sockaddr_in6>() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<sockaddr_in6>()
        }
    };
    (st, len as socklen_t)
}

/// A malloc'd copy of `a` (rdma_freeaddrinfo frees it).
fn malloc_addr(a: SocketAddr) -> (*mut sockaddr, socklen_t) {
    let (st, len) = to_c(a);
    // SAFETY: a fresh allocation of `len` bytes, filled from `st`.
    unsafe {
        let p = libc::malloc(len as usize).cast::<sockaddr>();
        if !p.is_null() {
            std::ptr::copy_nonoverlapping((&st as *const sockaddr_storage).cast::<u8>(), p.cast::<u8>(), len as usize);
        }
        (p, len)
    }
}

/// The addresses `node`/`service` name, by the system's resolver (IPv4
/// first when the family is open, as the devices here mostly are).
fn resolve(node: Option<&str>, port: u16, family: c_int, passive: bool) -> Result<SocketAddr, c_int> {
    let Some(node) = node else {
        if !passive {
            return Err(libc::EINVAL);
        }
        let any: IpAddr =
            if family == libc::AF_INET6 { Ipv6Addr::UNSPECIFIED.into() } else { Ipv4Addr::UNSPECIFIED.into() };
        return Ok(SocketAddr::new(any, port));
    };
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    use std::net::ToSocketAddrs;
    let all: Vec<SocketAddr> = (node, port).to_socket_addrs().map_err(|_| libc::ENOENT)?.collect();
    let fits = |a: &&SocketAddr| match family {
        libc::AF_INET => a.is_ipv4(),
        libc::AF_INET6 => a.is_ipv6(),
        _ => true,
    };
    all.iter().filter(fits).find(|a| a.is_ipv4()).or_else(|| all.iter().find(fits)).copied().ok_or(libc::ENOENT)
}

unsafe fn cstr<'a>(p: *const c_char) -> Result<Option<&'a str>, c_int> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_str().map(Some).map_err(|_| libc::EINVAL)
}

#[export_name = "softroce_rdma_getaddrinfo_impl"]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard("rdma_getaddrinfo", -1, || {
        let r = (|| -> Result<*mut rdma_addrinfo, c_int> {
            // SAFETY: the caller's hints, or NULL.
            let h = unsafe { hints.as_ref() };
            // SAFETY: the hints' addresses, if any.
            let (hint_src, hint_dst) =
                h.map_or((None, None), |h| unsafe { (from_c(h.ai_src_addr), from_c(h.ai_dst_addr)) });
            if res.is_null() || (node.is_null() && service.is_null() && hint_src.is_none() && hint_dst.is_none()) {
                return Err(libc::EINVAL);
            }
            let flags = h.map_or(0, |h| h.ai_flags);
            let family = h.map_or(0, |h| h.ai_family);
            // SAFETY: the caller's strings.
            let (node, service) = unsafe { (cstr(node)?, cstr(service)?) };
            let port = match service {
                Some(s) => s.parse::<u16>().map_err(|_| libc::EINVAL)?,
                None => 0,
            };
            let passive = flags & RAI_PASSIVE != 0;
            // No name: the hints' own addresses, as librdmacm copies them
            // (libfabric's verbs provider resolves a peer's name this way).
            let named = node.is_some() || service.is_some();
            let (src, dst) = match (named, passive) {
                (false, _) => (hint_src, hint_dst),
                (true, true) => (Some(resolve(node, port, family, true)?), None),
                (true, false) => (hint_src, Some(resolve(node, port, family, false)?)),
            };
            let addr = dst.or(src).ok_or(libc::EINVAL)?;
            let mut qp_type = h.map_or(0, |h| h.ai_qp_type);
            let mut ps = h.map_or(0, |h| h.ai_port_space);
            if ps == 0 {
                ps = if qp_type == crate::abi::IBV_QPT_UD { RDMA_PS_UDP } else { RDMA_PS_TCP };
            }
            if qp_type == 0 {
                qp_type = if ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB {
                    crate::abi::IBV_QPT_UD
                } else {
                    crate::abi::IBV_QPT_RC
                };
            }
            // SAFETY: plain data, zero is valid; calloc'd so that free() releases it.
            let ai = unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
            if ai.is_null() {
                return Err(libc::ENOMEM);
            }
            // SAFETY: a fresh zeroed allocation.
            let a = unsafe { &mut *ai };
            a.ai_flags = flags;
            a.ai_family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
            a.ai_qp_type = qp_type;
            a.ai_port_space = ps;
            if let Some(src) = src {
                (a.ai_src_addr, a.ai_src_len) = malloc_addr(src);
            }
            if let Some(dst) = dst {
                (a.ai_dst_addr, a.ai_dst_len) = malloc_addr(dst);
            }
            Ok(ai)
        })();
        match r {
            Ok(ai) => {
                // SAFETY: the caller's out-parameter (checked non-NULL).
                unsafe { *res = ai };
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

#[export_name = "softroce_rdma_freeaddrinfo_impl"]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    guard("rdma_freeaddrinfo", (), || {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: a list rdma_getaddrinfo made: every pointer malloc'd or NULL.
            unsafe {
                let next = (*p).ai_next;
                libc::free((*p).ai_src_addr.cast());
                libc::free((*p).ai_dst_addr.cast());
                libc::free((*p).ai_src_canonname.cast());
                libc::free((*p).ai_dst_canonname.cast());
                libc::free((*p).ai_route);
                libc::free((*p).ai_connect);
                libc::free(p.cast());
                p = next;
            }
        }
    })
}
