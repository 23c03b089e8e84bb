#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.

Wire seeds are real packets from the golden captures (tests/fixtures/golden,
kernel Soft-RoCE) and the hand-made fixtures, plus small variants (cut
short, a flipped bit, a broken CRC). Run from anywhere:
    python3 fuzz/gen_corpus.py
"""
import json
import os
import shutil
import struct
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")
FIX = os.path.join(ROOT, "tests", "fixtures")


def pcap(path):
    """(linktype, [frames]) of a classic pcap file."""
    d = open(path, "rb").read()
    e = "<" if struct.unpack("<I", d[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    lt = struct.unpack(e + "I", d[20:24])[0]
    off, frames = 24, []
    while off + 16 <= len(d):
        _, _, incl, _ = struct.unpack(e + "IIII", d[off : off + 16])
        frames.append(d[off + 16 : off + 16 + incl])
        off += 16 + incl
    return lt, frames


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def flip(data, i):
    b = bytearray(data)
    b[i % len(b)] ^= 0x01
    return bytes(b)


def crc16_ib(data):
    """CRC-16 of the VCRC and LPCRC (poly 0x100B reflected, init and xorout 0xFFFF)."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xD008 if crc & 1 else crc >> 1
    return crc ^ 0xFFFF


def roce_v1_icrc(packet_without_icrc):
    """ICRC of a RoCE v1 packet (GRH on): masked LRH, GRH variant fields and BTH byte 4 set to ones."""
    b = bytearray(packet_without_icrc)
    b[0] |= 0x0F  # traffic class (low nibble of byte 0) ...
    b[1:4] = b"\xff\xff\xff"  # ... rest of traffic class and flow label
    b[7] = 0xFF  # hop limit
    b[40 + 4] = 0xFF  # BTH FECN/BECN/reserved
    return zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF


vectors = json.load(open(os.path.join(FIX, "golden", "vectors.json")))
l3 = [(v["family"], v["name"], bytes.fromhex(v["l3_packet_hex"])) for v in vectors]


def transport_of(pkt):
    ip_len = 20 if pkt[0] >> 4 == 4 else 40
    return pkt[ip_len + 8 :]


def wire_seeds():
    # roce_v2: one packet per (family, opcode), small ones cut and corrupted too.
    for fam, name, p in l3:
        write("roce_v2", f"{fam}-{name.lower()}", p)
    small = [(f, n, p) for f, n, p in l3 if len(p) <= 80]
    for fam, name, p in small:
        write("roce_v2", f"{fam}-{name.lower()}-cut", p[: len(p) - 6])
        write("roce_v2", f"{fam}-{name.lower()}-badicrc", flip(p, len(p) - 1))
    _, eth = pcap(os.path.join(FIX, "mixed_ethernet.pcap"))
    v1 = [f[14:] for f in eth if f[12:14] == b"\x89\x15"]

    # roce_v1: the captured packet, and the golden transports behind a GRH.
    for i, p in enumerate(v1):
        write("roce_v1", f"captured-{i}", p)
        write("roce_v1", f"captured-{i}-cut", p[:44])
        write("roce_v1", f"captured-{i}-flipped", flip(p, 50))
    grh_src = bytes.fromhex("fe800000000000005054fffe77000001")
    grh_dst = bytes.fromhex("fe800000000000005054fffe77000002")
    for fam, name, p in l3:
        if fam != "ipv4" or len(p) > 80:
            continue
        t = transport_of(p)[:-4]  # without the ICRC
        grh = struct.pack(">IHBB", 6 << 28, len(t) + 4, 0x1B, 64) + grh_src + grh_dst
        body = grh + t
        write("roce_v1", f"golden-{name.lower()}", body + struct.pack("<I", roce_v1_icrc(body)))

    # ib_packet: the native IB frames of the hand-made link capture.
    _, ib = pcap(os.path.join(FIX, "ib_link.pcap"))
    for i, f in enumerate(ib):
        write("ib_packet", f"ib_link-{i}", f)
        if i < 3:
            write("ib_packet", f"ib_link-{i}-flipped", flip(f, 9))
    write("ib_packet", "ib_link-2-cut", ib[2][:30])
    # The golden transports on a native link: LRH (LNH = BTH), ICRC, VCRC.
    for fam, name, p in l3:
        if fam != "ipv4" or len(p) > 80:
            continue
        t = transport_of(p)[:-4]
        lrh = struct.pack(">BBHHH", 0x30, 0x02, 2, (8 + len(t) + 4) // 4, 1)
        masked = bytearray(lrh + t)
        masked[0] |= 0xF0  # VL
        masked[8 + 4] = 0xFF  # BTH FECN/BECN/reserved
        body = lrh + t + struct.pack("<I", zlib.crc32(bytes(masked)) & 0xFFFFFFFF)
        write("ib_packet", f"golden-{name.lower()}", body + struct.pack("<H", crc16_ib(body)))

    # transport_packet: the golden packets from the BTH on.
    for fam, name, p in l3:
        if fam == "ipv4":
            write("transport_packet", name.lower(), transport_of(p))
    for fam, name, p in small:
        if fam == "ipv4":
            write("transport_packet", f"{name.lower()}-cut", transport_of(p)[:14])
    t = bytearray(transport_of(small[0][2]))
    t[0] = 0x15  # a reserved opcode
    write("transport_packet", "reserved-opcode", bytes(t))

    # flow_control: credit updates on several VLs, and broken ones.
    for i, (op, fctbs, vl, fccl) in enumerate(
        [(0, 0, 0, 0), (0, 0x123, 0, 0x456), (1, 0xFFF, 15, 0xFFF), (0, 1, 3, 64), (1, 0, 7, 0x800), (0, 0xABC, 1, 2)]
    ):
        four = struct.pack(">HH", op << 12 | fctbs, vl << 12 | fccl)
        good = four + struct.pack("<H", crc16_ib(four))
        write("flow_control", f"fc-{i}", good)
        if i < 3:
            write("flow_control", f"fc-{i}-badcrc", flip(good, 5))
    four = struct.pack(">HH", 0x2 << 12 | 5, 0)
    write("flow_control", "reserved-op", four + struct.pack("<H", crc16_ib(four)))
    write("flow_control", "short", b"\x00\x01\x02")

    # capture_frame: first byte picks the link type (index into
    # [ETHERNET, RAW, LINUX_SLL, IPV4, IPV6, INFINIBAND, LINUX_SLL2]).
    ETH, RAW, SLL, IPV4, IPV6, IB, SLL2 = range(7)
    for i, f in enumerate(eth):
        write("capture_frame", f"ethernet-{i}", bytes([ETH]) + f)
    for name in ["rc_pingpong", "ib_atomic_bw", "ib_read_bw", "rc_pingpong_ipv6", "ud_pingpong"]:
        _, frames = pcap(os.path.join(FIX, "golden", "pcaps", name + ".pcap"))
        roce = [f for f in frames if len(f) > 42 and (f[23] == 17 or f[20] == 17)][:2]
        for j, f in enumerate(roce):
            write("capture_frame", f"{name}-{j}", bytes([ETH]) + f)
    for fam, name, p in small[:4]:
        write("capture_frame", f"raw-{name.lower()}", bytes([RAW]) + p)
        ethertype = b"\x08\x00" if fam == "ipv4" else b"\x86\xdd"
        sll = struct.pack(">HHH", 0, 1, 6) + b"\x52\x54\x00\x77\x00\x01\x00\x00" + ethertype
        write("capture_frame", f"sll-{name.lower()}", bytes([SLL]) + sll + p)
        sll2 = ethertype + b"\x00\x00" + struct.pack(">IHBB", 2, 1, 0, 6) + b"\x52\x54\x00\x77\x00\x01\x00\x00"
        write("capture_frame", f"sll2-{name.lower()}", bytes([SLL2]) + sll2 + p)
        write("capture_frame", f"ip-{name.lower()}", bytes([IPV4 if fam == "ipv4" else IPV6]) + p)
    for fam, name, p in small:
        if fam == "ipv6":
            write("capture_frame", f"ip-ipv6-{name.lower()}", bytes([IPV6]) + p)
    for i, f in enumerate(ib):
        write("capture_frame", f"infiniband-{i}", bytes([IB]) + f)
    write("capture_frame", "empty-ethernet", bytes([ETH]))

    # responder: golden transport packets, two length bytes in front of each.
    def run(*names):
        out = b""
        for n in names:
            t = next(transport_of(p) for f, nm, p in l3 if nm == n and f == "ipv4")
            out += struct.pack(">H", len(t)) + t
        return out

    write("responder", "send-only", run("RC_SEND_ONLY"))
    write("responder", "write-only", run("RC_RDMA_WRITE_ONLY"))
    write("responder", "read-request", run("RC_RDMA_READ_REQUEST"))
    write("responder", "fetch-add", run("RC_FETCH_ADD"))
    write("responder", "ack-and-atomic-ack", run("RC_ACKNOWLEDGE", "RC_ATOMIC_ACKNOWLEDGE"))
    write("responder", "send-first-middle-last", run("RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST"))
    write("responder", "uc-send-first-middle-last", run("UC_SEND_FIRST", "UC_SEND_MIDDLE", "UC_SEND_LAST"))
    write("responder", "ud-send-only", run("UD_SEND_ONLY"))
    write(
        "responder",
        "read-responses",
        run("RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE", "RC_RDMA_READ_RESPONSE_LAST"),
    )
    write("responder", "write-first-middle-last", run("RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST"))
    write("responder", "garbage", b"\x00\x05\x01\x02\x03\x04\x05")


if __name__ == "__main__":
    for t in ["roce_v2", "roce_v1", "ib_packet", "transport_packet", "flow_control", "capture_frame", "responder"]:
        shutil.rmtree(os.path.join(OUT, t), ignore_errors=True)
    wire_seeds()
    for t in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, t))
        print(t, len(files), "files,", sum(os.path.getsize(os.path.join(OUT, t, f)) for f in files), "bytes")
