//! The program's logic, run in a small classic BPF interpreter over
//! crafted datagrams (the real-socket tests are in `share::tests`).

use super::*;

/// Runs `prog` on `data` as the kernel does for a reuseport program: a
/// load past the end ends it with 0.
fn run(prog: &[Insn], data: &[u8]) -> u32 {
    let (mut a, mut pc) = (0u32, 0usize);
    let load = |at: u32, n: usize| -> Option<u32> {
        let b = data.get(at as usize..at as usize + n)?;
        Some(b.iter().fold(0, |v, &x| (v << 8) | u32::from(x)))
    };
    loop {
        let i = prog[pc];
        pc += 1;
        match i.code {
            LD_W_ABS | LD_H_ABS | LD_B_ABS => {
                let n = match i.code {
                    LD_W_ABS => 4,
                    LD_H_ABS => 2,
                    _ => 1,
                };
                match load(i.k, n) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            LD_W_LEN => a = data.len() as u32,
            ALU_AND_K => a &= i.k,
            ALU_RSH_K => a >>= i.k,
            JMP_JA => pc += i.k as usize,
            JMP_JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
            RET_K => return i.k,
            RET_A => return a,
            c => panic!("opcode {c:#x} not in the interpreter"),
        }
    }
}

/// A data packet's first bytes: a BTH to `qpn` and some payload.
fn data_to(qpn: u32) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x04; // RC SEND_ONLY
    p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    p
}

/// A QP1 datagram: BTH, DETH and a CM MAD of `attr` with `fill` applied.
fn mad(attr: u16, fill: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut p = vec![0u8; 12 + 8 + 256 + 4];
    p[0] = 0x64; // UD SEND_ONLY
    p[7] = 1;
    p[21] = CM_CLASS as u8;
    p[36..38].copy_from_slice(&attr.to_be_bytes());
    fill(&mut p[20..]);
    p
}

fn steering() -> Steering {
    Steering { slots: vec![(0, 2), (3, 0), (127, 1)], services: vec![(0x0106_1c06, 3), (0x0111_0050, 9)] }
}

#[test]
fn data_packets_go_to_the_index_of_their_qpns_slot() {
    let p = build(&steering()).unwrap();
    assert_eq!(run(&p, &data_to(0x11)), 2);
    assert_eq!(run(&p, &data_to(qpn_range(3).start + 5)), 0);
    assert_eq!(run(&p, &data_to(qpn_range(3).end - 1)), 0);
    assert_eq!(run(&p, &data_to(qpn_range(127).start)), 1);
    // A slot no socket has: the kernel's hash.
    assert_eq!(run(&p, &data_to(qpn_range(4).start)), HASH);
    // QP0 lies in slot 0.
    assert_eq!(run(&p, &data_to(0)), 2);
}

#[test]
fn a_req_goes_to_the_listener_of_its_service_and_replies_by_comm_id() {
    let p = build(&steering()).unwrap();
    let req = |svc: u64| mad(0x10, |m| m[32..40].copy_from_slice(&svc.to_be_bytes()));
    assert_eq!(run(&p, &req(0x0000_0000_0106_1c06)), 0, "port 7174 (TCP space) listens in slot 3");
    assert_eq!(run(&p, &req(0x0000_0000_0106_1c07)), HASH, "no listener: hashed, refused there");
    // The listener's slot has no socket (it died): hashed.
    assert_eq!(run(&p, &req(0x0000_0000_0111_0050)), HASH);
    let sidr_req = mad(0x17, |m| m[32..40].copy_from_slice(&0x0000_0000_0106_1c06u64.to_be_bytes()));
    assert_eq!(run(&p, &sidr_req), 0);
    for attr in [0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x19, 0x1a] {
        let m = mad(attr, |m| m[28..32].copy_from_slice(&((127u32 << COMM_ID_SLOT_SHIFT) | 0x42).to_be_bytes()));
        assert_eq!(run(&p, &m), 1, "attribute {attr:#x} by its remote comm ID");
    }
    let sidr_rep = mad(0x18, |m| m[24..28].copy_from_slice(&((3u32 << COMM_ID_SLOT_SHIFT) | 7).to_be_bytes()));
    assert_eq!(run(&p, &sidr_rep), 0);
    // Not a CM MAD (e.g. a PerfMgt query): hashed.
    let mut other = mad(0x10, |_| {});
    other[21] = 0x04;
    assert_eq!(run(&p, &other), HASH);
}

#[test]
fn runts_go_to_index_0_and_long_tables_still_lay_out() {
    let p = build(&steering()).unwrap();
    assert_eq!(run(&p, &[0u8; 6]), 0);
    assert_eq!(run(&p, &mad(0x13, |_| {})[..40]), 0, "a QP1 datagram cut short");
    // Every slot and a thousand services: jumps past 255 instructions.
    let all = Steering {
        slots: (0..SLOTS).map(|s| (s as u8, SLOTS - 1 - s)).collect(),
        services: (0..1000).map(|i| (0x0106_0000 | i, (i % SLOTS) as u8)).collect(),
    };
    let p = build(&all).unwrap();
    assert!(p.len() > 255 && p.len() <= MAX_INSNS);
    assert_eq!(run(&p, &data_to(qpn_range(5).start)), SLOTS - 1 - 5);
    let req = mad(0x10, |m| m[32..40].copy_from_slice(&0x0106_03e7u64.to_be_bytes()));
    assert_eq!(run(&p, &req), SLOTS - 1 - (999 % SLOTS));
}

#[test]
fn a_program_past_the_kernels_limit_is_refused() {
    let s = Steering { slots: vec![(0, 0)], services: (0..3000).map(|i| (i, 0)).collect() };
    assert!(matches!(build(&s), Err(SteerError::TooLong(n)) if n > MAX_INSNS));
}

#[test]
fn a_probe_goes_to_the_index_it_names_and_nothing_else_looks_like_one() {
    let p = build(&steering()).unwrap();
    let probe = |index: u32| {
        let mut d = [0u8; PROBE_LEN];
        d[..4].copy_from_slice(&PROBE_MAGIC.to_be_bytes());
        d[4..8].copy_from_slice(&index.to_be_bytes());
        d
    };
    assert_eq!(run(&p, &probe(0)), 0);
    assert_eq!(run(&p, &probe(2)), 2);
    assert_eq!(run(&p, &probe(77)), 77, "past the end: the kernel hashes it");
    // The magic in a longer datagram, or another word in a 16-byte one:
    // steered as data (here the QPN slot 0x7f & ... of its bytes 5..8).
    let mut long = probe(2).to_vec();
    long.extend([0u8; 16]);
    assert_eq!(run(&p, &long), run(&p, &data_to(0x0000_0002 & 0xffffff)));
    let mut other = probe(2);
    other[0] = 0x04;
    assert_eq!(run(&p, &other), 2, "QPN 2 (bytes 5..8) lies in slot 0, index 2");
}
