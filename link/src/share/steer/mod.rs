//! The classic BPF program that steers each datagram of a shared device's
//! UDP port to the process that owns its destination (see `share`).
//!
//! The kernel runs it on every datagram for the group of sockets bound to
//! the port with `SO_REUSEPORT` (`SO_ATTACH_REUSEPORT_CBPF`), with the UDP
//! payload at offset 0: the BTH. Its answer is an index into the kernel's
//! array of the group's sockets; an index past the end makes the kernel
//! pick a socket by the flow's hash instead. What it reads:
//!
//! - the destination QPN (BTH bytes 5..8): its top [`SLOT_BITS`] bits are
//!   the slot of the process that made the QP;
//! - QP1 (the GSI: CM MADs, after the 12-byte BTH and 8-byte DETH): a REQ
//!   or SIDR_REQ by the low 32 bits of its service ID (port space and
//!   port) to the process listening there; a SIDR_REP by its request ID,
//!   every other CM message by its remote communication ID, whose top
//!   bits are the slot of the process that allocated it;
//! - anything else, or a slot or service no one has: the hash;
//! - a probe ([`PROBE_LEN`] bytes starting with [`PROBE_MAGIC`]): the
//!   index it names, so that a member can find its own place in the
//!   kernel's array (see `member`).
//!
//! A load past the end of a datagram ends a classic BPF program with 0:
//! a runt goes to the socket at index 0, which drops it as it would.

/// Bits of a slot number: at most 128 processes share a device.
pub const SLOT_BITS: u32 = 7;
/// Slots a device has.
pub const SLOTS: u32 = 1 << SLOT_BITS;
/// A QPN's slot is its top [`SLOT_BITS`] of 24 bits.
pub const QPN_SLOT_SHIFT: u32 = 24 - SLOT_BITS;
/// A communication ID's slot is its top [`SLOT_BITS`] of 32 bits.
pub const COMM_ID_SLOT_SHIFT: u32 = 32 - SLOT_BITS;
/// What the program answers to let the kernel hash (any index past the end).
pub const HASH: u32 = u32::MAX;
/// A probe's length: no RoCE packet of ours is this short (a BTH and an
/// ICRC are 16 bytes, and then its first byte would be an opcode of the
/// manufacturer-specific range, which no one sends).
pub const PROBE_LEN: usize = 16;
/// A probe's first word; the second is the index it asks for.
pub const PROBE_MAGIC: u32 = 0xff53_5052;

/// The QPNs of `slot`.
pub fn qpn_range(slot: u8) -> std::ops::Range<u32> {
    let start = u32::from(slot) << QPN_SLOT_SHIFT;
    start..start + (1 << QPN_SLOT_SHIFT)
}

/// The slot whose range holds `qpn` (the inverse of [`qpn_range`]).
pub fn slot_of_qpn(qpn: u32) -> u8 {
    ((qpn & 0x00ff_ffff) >> QPN_SLOT_SHIFT) as u8
}

/// Where the CM fields are in a QP1 datagram (UDP payload offsets).
mod offset {
    /// The word whose low 24 bits are the destination QPN.
    pub const BTH_DEST_QP: u32 = 4;
    /// The MAD, after the BTH and the DETH.
    const MAD: u32 = 20;
    pub const MGMT_CLASS: u32 = MAD + 1;
    pub const ATTR_ID: u32 = MAD + 16;
    /// A SIDR_REP's request ID (the requester's).
    pub const SIDR_REQUEST_ID: u32 = MAD + 24;
    /// REP, REJ, RTU, MRA, DREQ, DREP, LAP, APR: the receiver's ID.
    pub const REMOTE_COMM_ID: u32 = MAD + 28;
    /// The low 32 bits of a REQ's or SIDR_REQ's service ID.
    pub const SERVICE_LOW: u32 = MAD + 36;
}

const CM_CLASS: u32 = 0x07;
const ATTR_REQ: u32 = 0x0010;
const ATTR_SIDR_REQ: u32 = 0x0017;
const ATTR_SIDR_REP: u32 = 0x0018;

// Classic BPF opcodes (linux/filter.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_W_LEN: u16 = 0x80;
const ALU_AND_K: u16 = 0x54;
const ALU_RSH_K: u16 = 0x74;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;

/// The kernel's limit on a classic BPF program (BPF_MAXINSNS).
pub const MAX_INSNS: usize = 4096;

/// What the program steers by: each live slot's index in the kernel's
/// socket array, and which slot listens on each service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Steering {
    /// `(slot, index)` pairs.
    pub slots: Vec<(u8, u32)>,
    /// `(service ID low 32 bits, slot)` pairs.
    pub services: Vec<(u32, u8)>,
}

/// What a [`Steering`] cannot be turned into.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SteerError {
    #[error("the steering program needs {0} instructions, more than the kernel's {MAX_INSNS}")]
    TooLong(usize),
}

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// Where a jump goes before the program is laid out.
#[derive(Clone, Copy)]
enum Label {
    Gsi,
    Service,
    SidrRep,
    Table,
}

/// An instruction, or a jump to a label (resolved by [`build`]).
enum Item {
    Insn(Insn),
    Ja(Label),
    /// `jeq #k`: to the label if equal, else on.
    JeqTo(u32, Label),
    At(Label),
}

fn op(code: u16, k: u32) -> Item {
    Item::Insn(Insn { code, jt: 0, jf: 0, k })
}

/// `if A == k return ret`: two instructions, no long jump.
fn jeq_ret(items: &mut Vec<Item>, k: u32, ret: u32) {
    items.push(Item::Insn(Insn { code: JMP_JEQ_K, jt: 0, jf: 1, k }));
    items.push(op(RET_K, ret));
}

/// Builds the program for `s`.
pub fn build(s: &Steering) -> Result<Vec<Insn>, SteerError> {
    use Label::*;
    let mut items = vec![
        // A probe: the index it names (not one: on to the data rules).
        op(LD_W_LEN, 0),
        Item::Insn(Insn { code: JMP_JEQ_K, jt: 0, jf: 4, k: PROBE_LEN as u32 }),
        op(LD_W_ABS, 0),
        Item::Insn(Insn { code: JMP_JEQ_K, jt: 0, jf: 2, k: PROBE_MAGIC }),
        op(LD_W_ABS, 4),
        op(RET_A, 0),
        op(LD_W_ABS, offset::BTH_DEST_QP),
        op(ALU_AND_K, 0x00ff_ffff),
        Item::JeqTo(1, Gsi),
        op(ALU_RSH_K, QPN_SLOT_SHIFT),
        Item::Ja(Table),
        Item::At(Gsi),
        op(LD_B_ABS, offset::MGMT_CLASS),
        Item::Insn(Insn { code: JMP_JEQ_K, jt: 1, jf: 0, k: CM_CLASS }),
        op(RET_K, HASH),
        op(LD_H_ABS, offset::ATTR_ID),
        Item::JeqTo(ATTR_REQ, Service),
        Item::JeqTo(ATTR_SIDR_REQ, Service),
        Item::JeqTo(ATTR_SIDR_REP, SidrRep),
        op(LD_W_ABS, offset::REMOTE_COMM_ID),
        op(ALU_RSH_K, COMM_ID_SLOT_SHIFT),
        Item::Ja(Table),
        Item::At(SidrRep),
        op(LD_W_ABS, offset::SIDR_REQUEST_ID),
        op(ALU_RSH_K, COMM_ID_SLOT_SHIFT),
        Item::Ja(Table),
        Item::At(Service),
        op(LD_W_ABS, offset::SERVICE_LOW),
    ];
    for &(service, slot) in &s.services {
        // A service whose slot has no socket goes to the hash as well.
        let index = s.slots.iter().find(|e| e.0 == slot).map_or(HASH, |e| e.1);
        jeq_ret(&mut items, service, index);
    }
    items.push(op(RET_K, HASH));
    items.push(Item::At(Table));
    for &(slot, index) in &s.slots {
        jeq_ret(&mut items, u32::from(slot), index);
    }
    items.push(op(RET_K, HASH));
    lay_out(items)
}

/// Resolves labels: a conditional jump to a label is `jeq #k, 0, 1` and a
/// `ja` after it (a `ja` reaches any distance, `jt` only 255).
fn lay_out(items: Vec<Item>) -> Result<Vec<Insn>, SteerError> {
    let len = |i: &Item| match i {
        Item::Insn(_) | Item::Ja(_) => 1,
        Item::JeqTo(..) => 2,
        Item::At(_) => 0,
    };
    let total: usize = items.iter().map(len).sum();
    if total > MAX_INSNS {
        return Err(SteerError::TooLong(total));
    }
    let mut at = [0usize; 4];
    let mut pc = 0;
    for i in &items {
        if let Item::At(l) = i {
            at[*l as usize] = pc;
        }
        pc += len(i);
    }
    let mut out = Vec::with_capacity(total);
    for i in items {
        // A jump's offset counts from the instruction after it.
        let ja = |from: usize, l: Label| Insn { code: JMP_JA, jt: 0, jf: 0, k: (at[l as usize] - from - 1) as u32 };
        match i {
            Item::Insn(x) => out.push(x),
            Item::Ja(l) => out.push(ja(out.len(), l)),
            Item::JeqTo(k, l) => {
                out.push(Insn { code: JMP_JEQ_K, jt: 0, jf: 1, k });
                out.push(ja(out.len(), l));
            }
            Item::At(_) => {}
        }
    }
    Ok(out)
}

/// Linux's `SO_DETACH_REUSEPORT_BPF` (asm-generic/socket.h; since 5.8).
const SO_DETACH_REUSEPORT_BPF: i32 = 68;

/// Takes the program off the reuseport group of `fd`: a group of one
/// needs none, and each datagram then skips it. Where the kernel lacks the
/// option the program stays, which is as correct.
pub fn detach(fd: std::os::fd::RawFd) {
    let zero: i32 = 0;
    // SAFETY: an int option on our socket.
    unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, (&zero as *const i32).cast(), 4);
    }
}

/// Attaches `prog` to the reuseport group of the bound socket `fd`: it
/// steers every datagram of the group from now on, replacing the last.
pub fn attach(fd: std::os::fd::RawFd, prog: &[Insn]) -> std::io::Result<()> {
    let filters: Vec<libc::sock_filter> =
        prog.iter().map(|i| libc::sock_filter { code: i.code, jt: i.jt, jf: i.jf, k: i.k }).collect();
    // Zeroed first: the six bytes of padding after `len` are copied to the
    // kernel too, and valgrind reports them uninitialised otherwise.
    // SAFETY: sock_fprog is plain data; all zeroes is a valid value.
    let mut fprog: libc::sock_fprog = unsafe { std::mem::zeroed() };
    fprog.len = filters.len() as u16;
    fprog.filter = filters.as_ptr() as *mut libc::sock_filter;
    // SAFETY: `fprog` points at `filters`, alive across the call; the
    // kernel copies the program.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests;
