//! The steady-state datapath allocates nothing per packet and nothing per
//! work request: a counting global allocator watches two runs of WRITEs of
//! different lengths over UDP loopback (64 KiB WRITEs of 16 packets each,
//! one-packet WRITEs of 64 bytes, and the same with the bytes inline in
//! the request); the extra allocations of the longer run, per extra work
//! request, must be (almost) zero.

mod common;
use common::*;
use rdma_core_rs::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and packets sent (both sides) for `n` WRITEs of 64 KiB.
fn run(a: &Side, b: &Side, n: usize, wrs: &[SendWr]) -> (u64, u64) {
    let packets = || a.ctx.stats().packets_sent + b.ctx.stats().packets_sent;
    let (allocs0, packets0) = (ALLOCATIONS.load(Ordering::Relaxed), packets());
    let mut out = Vec::with_capacity(64);
    let mut done = 0;
    for chunk in wrs[..n].chunks(32) {
        a.qp.post_send(chunk).unwrap();
        let mut got = 0;
        while got < chunk.len() {
            b.ctx.progress().unwrap();
            out.clear();
            got += a.cq.poll(&mut out, 64).unwrap();
            assert!(out.iter().all(|w| w.status == WcStatus::Success));
        }
        done += got;
    }
    assert_eq!(done, n);
    (ALLOCATIONS.load(Ordering::Relaxed) - allocs0, packets() - packets0)
}

#[test]
fn no_allocation_per_packet_or_work_request_in_the_steady_state() {
    // One engine, driven by this thread's calls: its steady state.
    let cfg = DeviceConfig { progress: Progress::Manual, threads: 1, ..DeviceConfig::default() };
    let (a, b) = pair_with(QpType::Rc, cfg, ConnectOptions { mtu: Mtu::Mtu4096, ..ConnectOptions::default() });
    for (len, inline) in [(65536, false), (64, false), (64, true)] {
        let wrs: Vec<SendWr> = (0..640)
            .map(|i| {
                let mut wr = write_wr(i, &a, (i as usize % 8) * 65536, len, &b, 0);
                if inline {
                    // IBV_SEND_INLINE: the bytes travel in the request, copied at post time.
                    wr.inline_data = Some(vec![i as u8; len as usize]);
                }
                wr
            })
            .collect();
        run(&a, &b, 64, &wrs); // warm up: buffers, caches, queues at their working size
        let (allocs1, packets1) = run(&a, &b, 192, &wrs);
        let (allocs2, packets2) = run(&a, &b, 576, &wrs);
        let per_wr = (allocs2 as f64 - allocs1 as f64) / (576.0 - 192.0);
        eprintln!(
            "{len}-byte WRITEs (inline: {inline}): {allocs1} allocations for {packets1} packets, {allocs2} for {packets2}: {per_wr:.3} per WR"
        );
        // One per WR (a copy of its scatter list), per packet or per ACK would show.
        assert!(
            per_wr < 0.1,
            "{per_wr:.2} allocations per {len}-byte WRITE (inline: {inline}): something allocates per request or packet"
        );
    }
}
