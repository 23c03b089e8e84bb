#!/usr/bin/env python3
"""Writes tests/fixtures/handmade.json: packets for the opcodes the kernel
Soft-RoCE captures do not contain, built field by field from the IBTA
layouts with struct.pack, their ICRC from zlib.crc32 and their VCRC from a
bitwise CRC-16. This is a second implementation, independent of the Rust
wire crate, that the golden tests compare against.

Run: python3 scripts/make_wire_fixtures.py  (output is committed)."""
import json, struct, zlib, os

def crc16_ib(data):
    # CRC-16, poly 0x100B, init 0xFFFF, reflected in and out, xorout 0xFFFF.
    c = 0xFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0xD008 if c & 1 else c >> 1
    return c ^ 0xFFFF

def ipv4_checksum(h):
    s = sum(struct.unpack("!10H", h))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF

def bth(opcode, dqpn, psn, pad=0, se=0, ackreq=0, pkey=0xFFFF, becn=0, fecn=0):
    return struct.pack("!BBHBBHBBH", opcode, (se << 7) | (pad << 4), pkey,
                       (fecn << 7) | (becn << 6), dqpn >> 16, dqpn & 0xFFFF,
                       ackreq << 7, psn >> 16, psn & 0xFFFF)

def reth(va, rkey, length): return struct.pack("!QII", va, rkey, length)
def aeth(syn, msn): return struct.pack("!BBH", syn, msn >> 16, msn & 0xFFFF)
def atomic_eth(va, rkey, swap, cmp): return struct.pack("!QIQQ", va, rkey, swap, cmp)
def atomic_ack(orig): return struct.pack("!Q", orig)
def deth(qkey, srcqp): return struct.pack("!IBBH", qkey, 0, srcqp >> 16, srcqp & 0xFFFF)
def word(v): return struct.pack("!I", v)
# FETH (IBTA 1.5 A19): placement type in bits 3..0, selectivity level in 5..4.
def feth(plt, sel): return struct.pack("!I", (sel << 4) | plt)

def transport(hdrs, payload):
    pad = (4 - len(payload) % 4) % 4
    b = bytearray(hdrs)
    b[1] |= pad << 4
    return bytes(b) + payload + bytes(pad)

def roce_v2_ipv4(t, src=(10, 0, 0, 1), dst=(10, 0, 0, 2), ident=0x1234, sport=0xC123, ecn=0):
    udp_len = 8 + len(t) + 4
    ip = bytearray(struct.pack("!BBHHHBBH4B4B", 0x45, ecn, 20 + udp_len, ident, 0x4000, 64, 17, 0, *src, *dst))
    ip[10:12] = struct.pack("!H", ipv4_checksum(bytes(ip)))
    udp = struct.pack("!HHHH", sport, 4791, udp_len, 0)
    m_ip = bytearray(ip); m_ip[1] = 0xFF; m_ip[8] = 0xFF; m_ip[10:12] = b"\xff\xff"
    m_udp = bytearray(udp); m_udp[6:8] = b"\xff\xff"
    m_t = bytearray(t); m_t[4] = 0xFF
    icrc = zlib.crc32(b"\xff" * 8 + bytes(m_ip) + bytes(m_udp) + bytes(m_t))
    return bytes(ip) + udp + t + struct.pack("<I", icrc), icrc

def grh(payload_len, sgid, dgid, tclass=0, flow=0, hop=64, nxt=0x1B):
    w0 = (6 << 28) | (tclass << 20) | flow
    return struct.pack("!IHBB", w0, payload_len, nxt, hop) + sgid + dgid

def mask_grh(g):
    g = bytearray(g); g[0] |= 0x0F; g[1:4] = b"\xff\xff\xff"; g[7] = 0xFF
    return bytes(g)

def roce_v2_ipv6(t, sgid, dgid):
    udp_len = 8 + len(t) + 4
    ip = struct.pack("!IHBB", 6 << 28, udp_len, 17, 64) + sgid + dgid
    udp = struct.pack("!HHHH", 0xC456, 4791, udp_len, 0)
    m_t = bytearray(t); m_t[4] = 0xFF
    icrc = zlib.crc32(b"\xff" * 8 + mask_grh(ip) + udp[:6] + b"\xff\xff" + bytes(m_t))
    return ip + udp + t + struct.pack("<I", icrc), icrc

def ib_packet(t, dlid, slid, vl=0, sl=0, g=None):
    body_len = 8 + (40 if g else 0) + len(t) + 4
    lnh = 3 if g else 2
    lrh = struct.pack("!BBHHH", vl << 4, (sl << 4) | lnh, dlid, body_len // 4, slid)
    m_t = bytearray(t); m_t[4] = 0xFF
    if g:
        gh = grh(len(t) + 4, *g)
        icrc = zlib.crc32(b"\xff" * 8 + mask_grh(gh) + bytes(m_t))
        pkt = lrh + gh + t + struct.pack("<I", icrc)
    else:
        m_lrh = bytearray(lrh); m_lrh[0] |= 0xF0
        icrc = zlib.crc32(bytes(m_lrh) + bytes(m_t))
        pkt = lrh + t + struct.pack("<I", icrc)
    vcrc = crc16_ib(pkt)
    return pkt + struct.pack("<H", vcrc), icrc, vcrc

def roce_v1(t, sgid, dgid):
    gh = grh(len(t) + 4, sgid, dgid)
    m_t = bytearray(t); m_t[4] = 0xFF
    icrc = zlib.crc32(b"\xff" * 8 + mask_grh(gh) + bytes(m_t))
    return gh + t + struct.pack("<I", icrc), icrc

PAY = bytes(range(7))  # 7 bytes: pad count 1
out = []
def add(name, kind, pkt, icrc, fields, vcrc=None, payload=PAY):
    d = {"name": name, "kind": kind, "hex": pkt.hex(), "icrc": icrc, "fields": fields, "payload_hex": payload.hex()}
    if vcrc is not None:
        d["vcrc"] = vcrc
    out.append(d)

cases = [
    ("RC_SEND_LAST_WITH_IMMEDIATE", 0x03, word(0xDEADBEEF), PAY, {"imm_dt": 0xDEADBEEF}),
    ("RC_SEND_ONLY_WITH_IMMEDIATE", 0x05, word(0x01020304), PAY, {"imm_dt": 0x01020304}),
    ("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 0x09, word(0xCAFEF00D), PAY, {"imm_dt": 0xCAFEF00D}),
    ("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 0x0B, reth(0x7F0000001000, 0x1234, 7) + word(0x55), PAY,
     {"reth_va": 0x7F0000001000, "reth_rkey": 0x1234, "reth_len": 7, "imm_dt": 0x55}),
    ("RC_RDMA_READ_RESPONSE_ONLY", 0x10, aeth(0x1F, 9), PAY, {"aeth_syndrome": 0x1F, "aeth_msn": 9}),
    ("RC_COMPARE_SWAP", 0x13, atomic_eth(0x1000, 0xABCD, 0x1111222233334444, 0x5555666677778888), b"",
     {"atomic_va": 0x1000, "atomic_rkey": 0xABCD, "atomic_swap_add": 0x1111222233334444, "atomic_compare": 0x5555666677778888}),
    ("RC_ACKNOWLEDGE (RNR NAK)", 0x11, aeth(0x2C, 4), b"", {"aeth_syndrome": 0x2C, "aeth_msn": 4}),
    ("RC_ACKNOWLEDGE (NAK PSN sequence error)", 0x11, aeth(0x60, 5), b"", {"aeth_syndrome": 0x60, "aeth_msn": 5}),
    ("RC_ACKNOWLEDGE (NAK remote access error)", 0x11, aeth(0x62, 6), b"", {"aeth_syndrome": 0x62, "aeth_msn": 6}),
    ("RC_SEND_LAST_WITH_INVALIDATE", 0x16, word(0x00BADCAB), PAY, {"ieth": 0x00BADCAB}),
    ("RC_SEND_ONLY_WITH_INVALIDATE", 0x17, word(0x00C0FFEE), PAY, {"ieth": 0x00C0FFEE}),
    ("UC_SEND_ONLY", 0x24, b"", PAY, {}),
    ("UC_SEND_ONLY_WITH_IMMEDIATE", 0x25, word(7), PAY, {"imm_dt": 7}),
    ("UC_RDMA_WRITE_FIRST", 0x26, reth(0x2000, 0x77, 4096), bytes(256), {"reth_va": 0x2000, "reth_rkey": 0x77, "reth_len": 4096}),
    ("UC_RDMA_WRITE_MIDDLE", 0x27, b"", bytes(256), {}),
    ("UC_RDMA_WRITE_LAST", 0x28, b"", bytes(256), {}),
    ("UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 0x29, word(9), bytes(256), {"imm_dt": 9}),
    ("UC_RDMA_WRITE_ONLY", 0x2A, reth(0x3000, 0x78, 7), PAY, {"reth_va": 0x3000, "reth_rkey": 0x78, "reth_len": 7}),
    ("UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 0x2B, reth(0x3000, 0x78, 7) + word(10), PAY,
     {"reth_va": 0x3000, "reth_rkey": 0x78, "reth_len": 7, "imm_dt": 10}),
    ("UC_SEND_LAST_WITH_IMMEDIATE", 0x23, word(11), PAY, {"imm_dt": 11}),
    ("UD_SEND_ONLY_WITH_IMMEDIATE", 0x65, deth(0x11111111, 0x000123) + word(12), PAY,
     {"deth_qkey": 0x11111111, "deth_src_qp": 0x123, "imm_dt": 12}),
    ("XRC_SEND_ONLY", 0xA4, word(0x000042), PAY, {"xrc_srq": 0x42}),
    ("XRC_RDMA_WRITE_ONLY", 0xAA, word(0x000043) + reth(0x4000, 0x79, 7), PAY,
     {"xrc_srq": 0x43, "reth_va": 0x4000, "reth_rkey": 0x79, "reth_len": 7}),
    ("XRC_ACKNOWLEDGE", 0xB1, aeth(0x1F, 1), b"", {"aeth_syndrome": 0x1F, "aeth_msn": 1}),
    # IBTA 1.5 annex A19, as Linux rxe lays them out (rxe_opcode.c): FLUSH is
    # BTH + FETH + RETH, ATOMIC WRITE is BTH + RETH + 8 bytes; both are
    # answered by a READ RESPONSE ONLY without payload.
    ("RC_FLUSH", 0x1C, feth(3, 1) + reth(0x7F0000002000, 0x4321, 4096), b"",
     {"feth_placement": 3, "feth_selectivity": 1, "reth_va": 0x7F0000002000, "reth_rkey": 0x4321, "reth_len": 4096}),
    ("RC_ATOMIC_WRITE", 0x1D, reth(0x7F0000002008, 0x4321, 8), bytes(range(0xA0, 0xA8)),
     {"reth_va": 0x7F0000002008, "reth_rkey": 0x4321, "reth_len": 8}),
    ("RC_RDMA_READ_RESPONSE_ONLY (empty, answering FLUSH/ATOMIC WRITE)", 0x10, aeth(0x1F, 10), b"",
     {"aeth_syndrome": 0x1F, "aeth_msn": 10}),
]
for name, op, ext, payload, fields in cases:
    ackreq = int(op < 0x11 or op in (0x1C, 0x1D))
    t = transport(bth(op, 0x000ABC, 0xFFFFFE, ackreq=ackreq) + ext, payload)
    pkt, icrc = roce_v2_ipv4(t)
    f = dict(fields, opcode=op, dqpn=0xABC, psn=0xFFFFFE, payload_len=len(payload))
    add(name, "roce_v2", pkt, icrc, f, payload=payload)

# CNP: BTH (opcode 0x81, BECN) + 16 reserved bytes; sent with ECN 0 by a NP.
t = bth(0x81, 0x000011, 0, becn=1) + bytes(16)
pkt, icrc = roce_v2_ipv4(t, ecn=0)
add("CNP", "roce_v2", pkt, icrc, {"opcode": 0x81, "dqpn": 0x11, "psn": 0, "becn": True, "payload_len": 0}, payload=b"")

# ECN-CE marked data packet (the IP TOS is masked in the ICRC).
t = transport(bth(0x04, 0x22, 100, ackreq=1), PAY)
pkt, icrc = roce_v2_ipv4(t, ecn=3)
add("RC_SEND_ONLY (ECN CE)", "roce_v2", pkt, icrc, {"opcode": 4, "dqpn": 0x22, "psn": 100, "ecn": 3, "payload_len": 7})

sgid = bytes.fromhex("fe800000000000000000000000000001")
dgid = bytes.fromhex("fe800000000000000000000000000002")
t = transport(bth(0x0A, 0x33, 7, ackreq=1) + reth(0x5000, 0x99, 7), PAY)
pkt, icrc = roce_v2_ipv6(t, sgid, dgid)
add("RC_RDMA_WRITE_ONLY over IPv6", "roce_v2", pkt, icrc, {"opcode": 0x0A, "dqpn": 0x33, "psn": 7, "payload_len": 7})

t = transport(bth(0x04, 0x44, 8, ackreq=1), PAY)
pkt, icrc = roce_v1(t, sgid, dgid)
add("RC_SEND_ONLY (RoCE v1)", "roce_v1", pkt, icrc, {"opcode": 4, "dqpn": 0x44, "psn": 8, "payload_len": 7})

t = transport(bth(0x04, 0x55, 9, ackreq=1), PAY)
pkt, icrc, vcrc = ib_packet(t, dlid=2, slid=1, vl=3, sl=5)
add("RC_SEND_ONLY (IB local)", "ib", pkt, icrc, {"opcode": 4, "dqpn": 0x55, "psn": 9, "payload_len": 7, "slid": 1, "dlid": 2, "vl": 3, "sl": 5}, vcrc)

t = transport(bth(0x11, 0x56, 9) + aeth(0x1F, 3), b"")
pkt, icrc, vcrc = ib_packet(t, dlid=1, slid=2)
add("RC_ACKNOWLEDGE (IB local)", "ib", pkt, icrc, {"opcode": 0x11, "dqpn": 0x56, "psn": 9, "payload_len": 0, "slid": 2, "dlid": 1, "vl": 0, "sl": 0}, vcrc, payload=b"")

t = transport(bth(0x64, 0x57, 10) + deth(0x80010000, 0x1), bytes(range(64)))
pkt, icrc, vcrc = ib_packet(t, dlid=7, slid=8, vl=1, sl=1, g=(sgid, dgid))
add("UD_SEND_ONLY (IB global)", "ib", pkt, icrc, {"opcode": 0x64, "dqpn": 0x57, "psn": 10, "payload_len": 64, "slid": 8, "dlid": 7, "vl": 1, "sl": 1, "deth_qkey": 0x80010000, "deth_src_qp": 1}, vcrc, payload=bytes(range(64)))

# IB link-layer flow-control packets: op, FCTBS, VL, FCCL, LPCRC.
fc = []
for op, fctbs, vl, fccl in [(0, 0x123, 0, 0x456), (1, 0, 15, 0xFFF), (0, 0xFFF, 7, 0x001)]:
    b = struct.pack("!HH", (op << 12) | fctbs, (vl << 12) | fccl)
    lp = crc16_ib(b)
    fc.append({"hex": (b + struct.pack("<H", lp)).hex(), "op": op, "fctbs": fctbs, "vl": vl, "fccl": fccl, "lpcrc": lp})

here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, "..", "tests", "fixtures", "handmade.json")
with open(path, "w") as f:
    json.dump({"generator": "scripts/make_wire_fixtures.py", "packets": out, "flow_control": fc}, f, indent=1)
print(f"wrote {len(out)} packets and {len(fc)} flow-control packets to {os.path.normpath(path)}")

# Capture files for rdma-dump's end-to-end test.
def write_pcap(path, linktype, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", 1700000000 + i, 0, len(fr), len(fr)))
            f.write(fr)

fixtures = os.path.join(here, "..", "tests", "fixtures")
ib_frames = [bytes.fromhex(p["hex"]) for p in out if p["kind"] == "ib"]
bad_vcrc = bytearray(ib_frames[0]); bad_vcrc[-1] ^= 0xFF
bad_icrc = bytearray(ib_frames[1]); bad_icrc[-3] ^= 0x01  # last ICRC byte; VCRC recomputed below
bad_icrc[-2:] = struct.pack("<H", crc16_ib(bytes(bad_icrc[:-2])))
write_pcap(os.path.join(fixtures, "ib_link.pcap"), 247,
           ib_frames + [bytes(bad_vcrc), bytes(bad_icrc), ib_frames[0][:20]])

eth = lambda et, payload: bytes.fromhex("020000000002020000000001") + struct.pack("!H", et) + payload
v2 = [bytes.fromhex(p["hex"]) for p in out if p["kind"] == "roce_v2"]
v1 = [bytes.fromhex(p["hex"]) for p in out if p["kind"] == "roce_v1"]
bad_pad = bytearray(v2[0]); bad_pad[28 + 1] |= 0x30  # pad count 3 on a 7-byte payload with pad 1: ICRC fails, parse ok
truncated = v2[1][:40]
tcp_like = bytes.fromhex("450000280000400040060000") + bytes(16)
write_pcap(os.path.join(fixtures, "mixed_ethernet.pcap"), 1,
           [eth(0x0800, v2[0]), eth(0x8915, v1[0]), eth(0x0800, bytes(bad_pad)), eth(0x0800, truncated),
            eth(0x0806, bytes(28)), eth(0x0800, tcp_like), eth(0x86DD, v2[-1])])
print("wrote tests/fixtures/ib_link.pcap and tests/fixtures/mixed_ethernet.pcap")
