//! FLUSH and ATOMIC WRITE (IBTA 1.5) through the verbs API, between two
//! soft devices over real UDP sockets on loopback: the bytes that land,
//! the completions, and the errors misuse gets.

mod common;
use common::*;
use rdma_core_rs::*;

/// A pair whose QPs grant the peer FLUSH (both placement types) besides
/// everything else.
fn flush_pair() -> (Side, Side) {
    let opts = ConnectOptions {
        access: Access::ALL | Access::FLUSH_GLOBAL | Access::FLUSH_PERSISTENT,
        ..ConnectOptions::default()
    };
    pair_with(QpType::Rc, DeviceConfig { progress: Progress::Thread, ..DeviceConfig::default() }, opts)
}

#[test]
fn the_device_reports_flush_and_atomic_write() {
    let (a, _b) = flush_pair();
    let caps = a.ctx.device_cap_flags_ex();
    // The values of rdma-core's ib_user_verbs.h.
    assert_eq!(caps, (1 << 38) | (1 << 39) | (1 << 40));
    assert_eq!(caps, device_cap_ex::FLUSH_GLOBAL | device_cap_ex::FLUSH_PERSISTENT | device_cap_ex::ATOMIC_WRITE);
    // And the verbs values of the new opcodes and access flags (verbs.h).
    assert_eq!((WcOpcode::Flush as u32, WcOpcode::AtomicWrite as u32), (8, 9));
    assert_eq!((Access::FLUSH_GLOBAL.0, Access::FLUSH_PERSISTENT.0), (1 << 8, 1 << 9));
    assert_eq!((flush::GLOBAL, flush::PERSISTENT, flush::SELECTIVITY_RANGE, flush::SELECTIVITY_MR), (1, 2, 0, 1));
}

#[test]
fn write_then_flush_then_atomic_write_over_udp() {
    let (a, b) = flush_pair();
    let target = b.pd.reg_mr(8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::FLUSH_GLOBAL).unwrap();
    let data = pattern(5000, 9);
    a.mr.write(0, &data).unwrap();
    let write = SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: target.addr() + 64, rkey: target.rkey() },
        vec![a.mr.sge(0, data.len() as u32).unwrap()],
    );
    let flush = SendWr::new(
        2,
        SendOp::Flush {
            remote_addr: target.addr() + 64,
            rkey: target.rkey(),
            len: data.len() as u64,
            placement: flush::GLOBAL,
            selectivity: flush::SELECTIVITY_RANGE,
        },
        vec![],
    );
    let value = 0x0123_4567_89ab_cdefu64.to_ne_bytes();
    let atomic =
        SendWr::new(3, SendOp::AtomicWrite { remote_addr: target.addr() + 8128, rkey: target.rkey(), value }, vec![]);
    a.qp.post_send(&[write, flush, atomic]).unwrap();
    let wcs: Vec<_> = (0..3).map(|_| a.wait_one()).collect();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite, 5000),
            (2, WcStatus::Success, WcOpcode::Flush, 5000),
            (3, WcStatus::Success, WcOpcode::AtomicWrite, 8),
        ]
    );
    let mut back = vec![0u8; data.len()];
    target.read(64, &mut back).unwrap();
    assert!(back == data, "the WRITE before the FLUSH is in place");
    let mut word = [0u8; 8];
    target.read(8128, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), 0x0123_4567_89ab_cdef);
    let mut tail = [0u8; 56];
    target.read(8136, &mut tail).unwrap();
    assert_eq!(tail, [0; 56], "nothing past the 8 bytes");
}

#[test]
fn a_flush_past_the_region_fails_with_a_remote_access_error_and_changes_nothing() {
    let (a, b) = flush_pair();
    let target = b.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL).unwrap();
    target.write(0, &[0x5a; 4096]).unwrap();
    let flush = SendOp::Flush {
        remote_addr: target.addr() + 4000,
        rkey: target.rkey(),
        len: 97,
        placement: flush::GLOBAL,
        selectivity: flush::SELECTIVITY_RANGE,
    };
    a.qp.post_send(&[SendWr::new(1, flush, vec![])]).unwrap();
    let wc = a.wait_one();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::RemAccessErr, WcOpcode::Flush));
    let mut all = vec![0u8; 4096];
    target.read(0, &mut all).unwrap();
    assert!(all.iter().all(|&x| x == 0x5a));
    assert_eq!(b.ctx.stats().drops.get(&DropReason::RkeyViolation), Some(&1));
    assert_eq!(a.qp.query().unwrap().0, QpState::Err);
}

#[test]
fn an_atomic_write_to_a_read_only_or_misaligned_target_fails_and_writes_nothing() {
    for (case, want) in [("read-only region", WcStatus::RemAccessErr), ("misaligned", WcStatus::RemInvReqErr)] {
        let (a, b) = flush_pair();
        let target = b.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
        let (addr, rkey) = match case {
            "read-only region" => (target.addr() + 8, target.rkey()),
            _ => (b.mr.addr() + 12, b.mr.rkey()),
        };
        let op = SendOp::AtomicWrite { remote_addr: addr, rkey, value: [0xff; 8] };
        a.qp.post_send(&[SendWr::new(7, op, vec![])]).unwrap();
        let wc = a.wait_one();
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (7, want, WcOpcode::AtomicWrite), "{case}");
        let mut bytes = [0u8; 32];
        target.read(0, &mut bytes).unwrap();
        assert_eq!(bytes, [0; 32], "{case}");
        b.mr.read(0, &mut bytes).unwrap();
        assert_eq!(bytes, [0; 32], "{case}");
    }
}
