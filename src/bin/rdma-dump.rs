//! rdma-dump: decode the RDMA packets of a capture and check their CRCs.

use clap::Parser;
use softroce::capture::Capture;
use softroce::decode::decode;
use softroce::dump::{malformed_json, malformed_text, PacketLine, Summary};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// Decode RoCE v2 (UDP 4791), RoCE v1 (EtherType 0x8915) and InfiniBand
/// (LINKTYPE_INFINIBAND, ERF type 21 as ibdump writes, EtherType 0x88B5)
/// packets from pcap/pcapng files, one line per
/// packet, verifying every ICRC and VCRC (which Wireshark shows but never
/// checks). MADs to or from QP1 are decoded too, CM messages by name.
#[derive(Parser, Debug)]
#[command(
    name = "rdma-dump",
    version,
    after_help = "Exit status: 0 when the file was read; with --check, 2 when any RDMA packet was malformed or failed its ICRC/VCRC; 1 on errors reading the file."
)]
struct Args {
    /// Capture files (pcap or pcapng) to decode, in order.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// One JSON object per RDMA packet per line (the summary goes to stderr).
    #[arg(long)]
    json: bool,
    /// Stop after this many RDMA packets.
    #[arg(short = 'c', long)]
    count: Option<u64>,
    /// Exit with status 2 if any RDMA packet is malformed or has a bad ICRC/VCRC.
    #[arg(long)]
    check: bool,
    /// Print only the summary.
    #[arg(short, long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut summary = Summary::default();
    let mut status = ExitCode::SUCCESS;
    'files: for path in &args.files {
        let capture = match Capture::open(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("rdma-dump: error: {e}");
                status = ExitCode::from(1);
                continue;
            }
        };
        for frame in capture {
            let frame = match frame {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("rdma-dump: error: {e}");
                    status = ExitCode::from(1);
                    break;
                }
            };
            summary.frames += 1;
            let decoded = decode(frame.linktype, &frame.data);
            let Some(kind) = decoded.kind() else { continue };
            let line = match PacketLine::from_decoded(frame.number, &decoded) {
                Some(Ok(p)) => {
                    summary.add(&p);
                    if args.json {
                        p.to_json().to_string()
                    } else {
                        p.to_text()
                    }
                }
                Some(Err(e)) => {
                    summary.malformed += 1;
                    if args.json {
                        malformed_json(frame.number, kind, &e).to_string()
                    } else {
                        malformed_text(frame.number, kind, &e)
                    }
                }
                None => continue,
            };
            if !args.quiet && writeln!(out, "{line}").is_err() {
                return status; // stdout closed (e.g. piped into head)
            }
            if args.count.is_some_and(|c| summary.packets + summary.malformed >= c) {
                break 'files;
            }
        }
    }
    let _ = out.flush();
    if args.json {
        eprintln!("{}", summary.to_text());
    } else {
        let _ = writeln!(out, "{}", summary.to_text());
        let _ = out.flush();
    }
    if args.check && !summary.all_good() && status == ExitCode::SUCCESS {
        status = ExitCode::from(2);
    }
    status
}
