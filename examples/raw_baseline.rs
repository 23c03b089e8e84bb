//! `raw_baseline`: a plain AF_PACKET sender and receiver of Ethernet frames
//! of one size, through the same raw link the roce1/ib backends use (pnet,
//! no engine): the floor that `scripts/bench.sh` compares the raw backends'
//! throughput with, over the same veth pair in the same run.
//!
//! Receiver: `raw_baseline recv IFACE SECONDS` (prints a JSON line when
//! the frames stop, or after SECONDS + 5 s). Sender: `raw_baseline send
//! IFACE FRAME_BYTES SECONDS`. Needs root (AF_PACKET).

use rdma_core_rs::link::raw::RawLink;
use rdma_core_rs::link::{Link, BROADCAST};
use rdma_core_rs::LinkKind;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: raw_baseline recv IFACE SECONDS | raw_baseline send IFACE FRAME_BYTES SECONDS";
    let (mode, iface) = match (args.get(1), args.get(2)) {
        (Some(m), Some(i)) => (m.as_str(), i.as_str()),
        _ => return Err(usage.into()),
    };
    let mut link = RawLink::open(iface, LinkKind::Ib)?;
    let num = |i: usize| -> Result<f64, Box<dyn std::error::Error>> {
        Ok(args.get(i).ok_or(usage)?.parse::<f64>().map_err(|e| format!("{usage}: {e}"))?)
    };
    match mode {
        "send" => {
            let size = num(3)? as usize;
            let secs = num(4)?;
            let mut frame = vec![0u8; size.max(60)];
            frame[..6].copy_from_slice(&BROADCAST);
            frame[6..12].copy_from_slice(&link.mac());
            frame[12..14].copy_from_slice(&rdma_wire::ethernet::ETHERTYPE_IB.to_be_bytes());
            let start = Instant::now();
            let (mut sent, mut errors) = (0u64, 0u64);
            while start.elapsed() < Duration::from_secs_f64(secs) {
                match link.send(&frame) {
                    Ok(()) => sent += 1,
                    Err(_) => errors += 1, // a full socket buffer: as the backends count send errors
                }
            }
            let s = start.elapsed().as_secs_f64();
            println!(
                "{{\"mode\":\"raw_send\",\"frame\":{size},\"frames\":{sent},\"errors\":{errors},\"gbps\":{}}}",
                sent as f64 * size as f64 * 8.0 / s / 1e9
            );
        }
        "recv" => {
            let secs = num(3)?;
            let mut buf = vec![0u8; 65536];
            let (mut frames, mut bytes) = (0u64, 0u64);
            let (mut first, mut last) = (None, Instant::now());
            let deadline = Instant::now() + Duration::from_secs_f64(secs + 5.0);
            while Instant::now() < deadline {
                match link.recv(&mut buf)? {
                    Some(m) if buf[12..14] == rdma_wire::ethernet::ETHERTYPE_IB.to_be_bytes() => {
                        first.get_or_insert_with(Instant::now);
                        last = Instant::now();
                        frames += 1;
                        bytes += m.len as u64;
                    }
                    Some(_) => {}
                    None if first.is_some() && last.elapsed() > Duration::from_millis(500) => break,
                    None => std::thread::sleep(Duration::from_micros(20)),
                }
            }
            let s = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
            let gbps = if s > 0.0 { bytes as f64 * 8.0 / s / 1e9 } else { 0.0 };
            println!("{{\"mode\":\"raw_recv\",\"frames\":{frames},\"bytes\":{bytes},\"seconds\":{s},\"gbps\":{gbps}}}");
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
