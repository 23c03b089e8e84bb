//! An RDMA CM server whose application polls a CQ without pause still
//! answers a peer's connection request: the MADs are handled by whichever
//! thread makes progress on the device, not only by the CM's service
//! thread. Here that thread never runs (its period is an hour), so only
//! the polls can take the REQ in; before they did, perftest `-R` servers
//! spinning in `ibv_poll_cq` left their peers' REQs unanswered until the
//! peers gave up (UNREACHABLE).

use rdma_core_rs::cm::{set_options, CmOptions, ConnParam, EventChannel, EventType, PortSpace};
use rdma_core_rs::{QpInitAttr, QpType};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn readable(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

#[test]
fn a_busy_polling_server_answers_a_connection_request() {
    set_options(CmOptions {
        response_timeout: Duration::from_millis(200),
        max_retries: 20,
        timewait: Duration::from_millis(200),
        service_period: Duration::from_secs(3600),
    });
    let pid = (std::process::id() % 200) as u8 + 20;
    let (s, c): (IpAddr, IpAddr) =
        (format!("127.{pid}.250.1").parse().unwrap(), format!("127.{pid}.250.2").parse().unwrap());
    let sch = EventChannel::with_fd().unwrap();
    let listen = sch.create_id(PortSpace::Tcp);
    listen.bind_addr(SocketAddr::new(s, 7400)).unwrap();
    listen.listen(1).unwrap();

    // The server's application: a CQ polled without pause on its device.
    let sctx = listen.context().unwrap();
    let cq = sctx.create_cq(4, None).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let spin = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut wcs = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                cq.poll(&mut wcs, 1).unwrap();
            }
        })
    };

    let cch = EventChannel::new();
    let id = cch.create_id(PortSpace::Tcp);
    id.resolve_addr(Some(c), SocketAddr::new(s, 7400), Duration::from_secs(2)).unwrap();
    assert_eq!(cch.get_cm_event(Some(Duration::from_secs(5))).unwrap().event, EventType::AddrResolved);
    id.resolve_route(Duration::from_secs(2)).unwrap();
    assert_eq!(cch.get_cm_event(Some(Duration::from_secs(5))).unwrap().event, EventType::RouteResolved);
    let cctx = id.context().unwrap();
    let (cpd, ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(4, None).unwrap());
    id.create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq)).unwrap();
    id.connect(&ConnParam::default()).unwrap();

    // Nobody on the server calls into the CM: only the spinning polls can
    // have taken the REQ in and queued its CONNECT_REQUEST.
    assert!(readable(sch.fd().unwrap(), 3000), "the REQ waits unanswered while the application polls");
    let req = sch.get_cm_event(Some(Duration::from_secs(1))).unwrap();
    assert_eq!(req.event, EventType::ConnectRequest);
    let (spd, scq) = (sctx.alloc_pd().unwrap(), sctx.create_cq(4, None).unwrap());
    req.id.create_qp(&spd, &QpInitAttr::new(QpType::Rc, &scq)).unwrap();
    req.id.accept(&ConnParam::default()).unwrap();
    assert_eq!(cch.get_cm_event(Some(Duration::from_secs(5))).unwrap().event, EventType::Established);
    stop.store(true, Ordering::Relaxed);
    spin.join().unwrap();
}
