//! Reading capture files: classic pcap and pcapng, frame by frame, with
//! each frame's link type. Errors name the file and what was wrong.

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Link types (LINKTYPE_* numbers) the decoder understands.
pub mod linktype {
    pub const ETHERNET: u32 = 1;
    pub const RAW: u32 = 101;
    pub const LINUX_SLL: u32 = 113;
    pub const IPV4: u32 = 228;
    pub const IPV6: u32 = 229;
    pub const INFINIBAND: u32 = 247;
    /// Endace ERF records (what `ibdump` and rdma-core-rs's IB captures write).
    pub const ERF: u32 = 197;
    pub const LINUX_SLL2: u32 = 276;
}

/// One captured frame.
#[derive(Debug, Clone)]
pub struct Frame {
    /// 1-based index in the file, as Wireshark numbers frames.
    pub number: u64,
    /// LINKTYPE_* of the interface the frame was captured on.
    pub linktype: u32,
    /// The captured bytes (possibly fewer than `orig_len`).
    pub data: Vec<u8>,
    /// Length of the frame on the wire.
    pub orig_len: u32,
}

/// Why a capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a pcap or pcapng file (magic {magic:02x?})")]
    NotACapture { path: PathBuf, magic: [u8; 4] },
    #[error("{path}: frame {frame}: {message}")]
    Corrupt { path: PathBuf, frame: u64, message: String },
}

enum Inner {
    Pcap(PcapReader<BufReader<File>>),
    PcapNg(PcapNgReader<BufReader<File>>),
}

/// A capture file opened for reading, yielding frames in order.
pub struct Capture {
    path: PathBuf,
    inner: Inner,
    next_number: u64,
    done: bool,
    /// Link types of the pcapng interfaces seen so far, by interface id.
    interfaces: Vec<u32>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("path", &self.path).field("next_number", &self.next_number).finish()
    }
}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

impl Capture {
    /// Opens a pcap or pcapng file, telling them apart by their magic number.
    pub fn open(path: impl AsRef<Path>) -> Result<Capture, CaptureError> {
        let path = path.as_ref().to_path_buf();
        let open_err = |source| CaptureError::Open { path: path.clone(), source };
        let mut file = File::open(&path).map_err(open_err)?;
        let mut magic = [0u8; 4];
        let n = file.read(&mut magic).map_err(open_err)?;
        file.seek(SeekFrom::Start(0)).map_err(open_err)?;
        let not_capture = || CaptureError::NotACapture { path: path.clone(), magic };
        let reader = BufReader::new(file);
        let inner = if n == 4 && magic == PCAPNG_MAGIC {
            Inner::PcapNg(PcapNgReader::new(reader).map_err(|_| not_capture())?)
        } else {
            Inner::Pcap(PcapReader::new(reader).map_err(|_| not_capture())?)
        };
        Ok(Capture { path, inner, next_number: 1, done: false, interfaces: Vec::new() })
    }

    fn corrupt(&mut self, message: String) -> CaptureError {
        self.done = true;
        CaptureError::Corrupt { path: self.path.clone(), frame: self.next_number, message }
    }
}

impl Iterator for Capture {
    type Item = Result<Frame, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let frame = match &mut self.inner {
            Inner::Pcap(r) => {
                let linktype = u32::from(r.header().datalink);
                match r.next_packet()? {
                    Ok(p) => {
                        Frame { number: self.next_number, linktype, data: p.data.into_owned(), orig_len: p.orig_len }
                    }
                    Err(e) => return Some(Err(self.corrupt(e.to_string()))),
                }
            }
            Inner::PcapNg(r) => loop {
                // (interface, original length, bytes) of the next packet block.
                let packet = match r.next_block()? {
                    Err(e) => return Some(Err(self.corrupt(e.to_string()))),
                    Ok(Block::InterfaceDescription(i)) => {
                        self.interfaces.push(u32::from(i.linktype));
                        continue;
                    }
                    Ok(Block::EnhancedPacket(p)) => (p.interface_id as usize, p.original_len, p.data.into_owned()),
                    Ok(Block::SimplePacket(p)) => (0, p.original_len, p.data.into_owned()),
                    Ok(_) => continue,
                };
                let (interface, orig_len, data) = packet;
                let linktype = self.interfaces.get(interface).copied().unwrap_or(linktype::ETHERNET);
                break Frame { number: self.next_number, linktype, data, orig_len };
            },
        };
        self.next_number += 1;
        Some(Ok(frame))
    }
}
