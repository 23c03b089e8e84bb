//! A device shared by processes gives each a range of QPNs
//! (`Endpoint::set_qpn_range`): QPs are made only there, a full range is
//! an error, not a loop, and the range is fixed once QPs exist.

use core::net::{IpAddr, Ipv4Addr};
use rdma_transport::*;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

fn rc(ep: &mut Endpoint) -> Result<u32, VerbsError> {
    let pd = ep.alloc_pd();
    let cq = ep.create_cq(16);
    ep.create_qp(QpInitAttr::new(QpType::Rc, pd, cq))
}

#[test]
fn qps_are_numbered_within_the_range_until_it_is_full() {
    let mut ep = Endpoint::with_seed(A, 5);
    ep.set_qpn_range(0x60000..0x60003).unwrap();
    let mut got: Vec<u32> = (0..3).map(|_| rc(&mut ep).unwrap()).collect();
    got.sort();
    assert_eq!(got, [0x60000, 0x60001, 0x60002]);
    assert_eq!(rc(&mut ep), Err(VerbsError::QpnsExhausted { start: 0x60000, end: 0x60003 }));
    // A destroyed QP's number comes free again.
    ep.destroy_qp(0x60001).unwrap();
    assert_eq!(rc(&mut ep), Ok(0x60001));
    // Fixed once QPs exist.
    assert!(ep.set_qpn_range(0x20000..0x40000).is_err());
}

#[test]
fn the_range_keeps_clear_of_the_special_qps_and_of_multicast() {
    let mut ep = Endpoint::with_seed(A, 6);
    ep.set_qpn_range(0..0x20000).unwrap();
    assert_eq!(ep.qpn_range(), 0x11..0x20000, "QPs 0 to 0x10 are the special ones");
    let q = rc(&mut ep).unwrap();
    assert!((0x11..0x20000).contains(&q), "{q:#x}");
    let mut top = Endpoint::with_seed(A, 7);
    top.set_qpn_range(0xfe0000..0x1000000).unwrap();
    assert_eq!(top.qpn_range(), 0xfe0000..0xffffff, "0xFFFFFF is multicast's");
    assert!(Endpoint::with_seed(A, 8).set_qpn_range(0x30..0x30).is_err(), "an empty range");
}
