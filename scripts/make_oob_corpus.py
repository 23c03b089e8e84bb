#!/usr/bin/env python3
"""Writes the seed corpora of the out-of-band parser fuzz targets
(softroce::fuzzing::{perf_oob, perftest_exchange, pingpong_exchange}) to
fuzz/seeds/<target>/: real messages as the tools encode them, hostile
ones (issue 17), and seeded mutations of both. Deterministic: running it
again rewrites the same files. tests/fuzz_corpus_oob.rs runs every file.

Usage: python3 scripts/make_oob_corpus.py
(Seeds are checked in under fuzz/seeds/; fuzz/corpus/ is cargo fuzz's
working set and git-ignored.)
"""
import json
import os
import random
import shutil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "seeds")
rng = random.Random(17)


def write(target, files):
    d = os.path.join(ROOT, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in files:
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print(f"{target}: {len(files)} files")


def mutate(data, n=3):
    b = bytearray(data)
    for _ in range(n):
        op = rng.randrange(4)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif op == 1:
            b[i:i] = bytes([rng.choice(b"0123456789abcdef:-{}[]\",\n\0\xff")])
        elif op == 2 and b:
            del b[min(i, len(b) - 1)]
        else:
            j = rng.randrange(len(b) + 1)
            b[i:i] = b[min(i, j):max(i, j)][:64]
    return bytes(b)


# ---------------------------------------------------------------- rdma-perf JSON
def line(m):
    return json.dumps(m, separators=(",", ":")).encode() + b"\n"


def hello(**kw):
    h = {"test": "write-bw", "size": 65536, "iters": 5000, "duration_ms": None, "qps": 1, "mtu": 4096,
         "tx_depth": 128, "atomic": "FETCH_AND_ADD", "verify": False}
    h.update(kw)
    return {"Hello": h}


def info(n=1, **kw):
    i = {"qpns": [0x11 + q for q in range(n)], "psns": [0x123456 + q for q in range(n)],
         "gid": "00000000000000000000ffff7f000001", "addrs": [0x55aa63fb3000 + q * 4096 for q in range(n)],
         "rkeys": [0x101] * n, "slots": 32, "slot_len": 65536, "out_reads": 128}
    i.update(kw)
    return {"Info": i}


real = [
    hello(), hello(test="send-lat", size=2, iters=1000), hello(test="atomic-bw", size=8, atomic="CMP_AND_SWAP"),
    hello(test="read-bw", qps=4, size=10000, verify=True, duration_ms=2000), info(), info(3, slots=64, slot_len=64),
    "Ready", {"Done": {"iters": [5000]}}, {"Done": {"iters": [200, 200, 200]}},
    {"Result": {"verified": True, "detail": None, "retransmits": 0}},
    {"Result": {"verified": False, "detail": "write-bw: QP 0 message 3: byte 7 is 0x00, expected 0x5a",
                "retransmits": 12}},
    {"Error": "the client failed: QP 0 work request 9 completed with status RemAccessErr"},
]
hostile = [
    hello(qps=1024, size=1 << 30),  # the Hello of issue 17: 1 TiB
    hello(qps=64, size=1 << 24, tx_depth=4096, verify=True), hello(size=-1), hello(qps=18446744073709551616),
    hello(size=1e9), hello(tx_depth="many"), hello(test="\u001b[2Jbogus"), hello(mtu=1000), hello(iters=0),
    hello(test="send-bw", verify=True, tx_depth=4096, size=1 << 20),
    info(1, slots=1 << 60), info(1, rkeys=[]), info(2, qpns=[1]), info(1, slots=0), info(1, gid="zz"),
    info(1, slot_len=18446744073709551615, addrs=[18446744073709551615]),
    {"Done": {"iters": []}}, {"Done": {"iters": [18446744073709551615, 18446744073709551615]}},
    {"Error": "x" * 2000}, {"Result": {"verified": None, "detail": "\u0007\u001b]0;owned\u0007", "retransmits": 1}},
]
perf = []
for k, m in enumerate(real):
    perf.append((f"real{k:02}", bytes([k * 19 % 256]) + line(m)))
for k, m in enumerate(hostile):
    perf.append((f"hostile{k:02}", bytes([k * 7 % 256]) + line(m)))
conversation = b"".join(line(m) for m in [hello(), info(), "Ready", {"Done": {"iters": [5000]}}])
perf.append(("conversation", b"\x00" + conversation))
perf.append(("conversation_bytewise", b"\x00" + conversation.replace(b"\n", b"\r\n")))
perf.append(("no_newline", b"\x05" + line(hello())[:-1]))
perf.append(("deep_nesting", b"\x01" + b"[" * 200 + b"]" * 200 + b"\n"))
perf.append(("many_numbers", b"\x02" + line({"Done": {"iters": [0] * 2000}})))
perf.append(("blank_lines", b"\x03" + b"\n\n \n" + line("Ready")))
perf.append(("not_json", b"\x04not json at all\n\xff\xfe\n"))
perf.append(("duplicate_keys", b"\x06" + b'{"Hello":{"test":"write-bw","test":"read-bw"}}\n'))
for k in range(12):
    src = rng.choice(real + hostile)
    perf.append((f"mutant{k:02}", bytes([rng.randrange(256)]) + mutate(line(src), rng.randrange(1, 6))))
write("perf_oob", perf)


# ---------------------------------------------------------------- perftest's exchange
def dest(lid=0, out_reads=0x80, qpn=0x1F, psn=0x0FECDF, rkey=0x10F7, vaddr=0x55AA63FB3000,
         gid=bytes(10) + b"\xff\xff\x0a\x4d\x00\x0c", srqn=0, raw=None):
    s = raw or "%04x:%04x:%06x:%06x:%08x:%016x:" % (lid, out_reads, qpn, psn, rkey, vaddr)
    if raw is None:
        s += "".join("%02x:" % b for b in gid) + "%08x:" % srqn
    m = s.encode()[:107]
    return m + bytes(108 - len(m))


def setup(version=b"6.06", cycle=4096, cache=64, mtu=b"3\0"):
    v = version[:16] + bytes(16 - len(version[:16]))
    return v + cycle.to_bytes(4, "big") + cache.to_bytes(4, "big") + mtu


pt = [
    ("captured", setup() + dest()),
    ("captured_3qps", setup(mtu=b"5\0") + b"".join(dest(qpn=0x1F + q, psn=q) for q in range(3)) * 2),
    ("write_lat_script", setup(version=b"5.70") + dest() * 3),
    ("widest_fields", setup() + dest(lid=0xFFFF, out_reads=0xFFFF, qpn=0xFFFFFF, psn=0xFFFFFF, rkey=0xFFFFFFFF,
                                     vaddr=0xFFFFFFFFFFFFFFFF, gid=b"\xff" * 16, srqn=0xFFFFFFFF)),
    ("ipv6_gid", setup() + dest(gid=bytes.fromhex("fe80000000000000505400fffe770001"))),
    ("big_page", setup(cycle=1 << 16, cache=128) + dest()),
    # hostile
    ("page_1gib", setup(cycle=1 << 30) + dest()),
    ("page_2gib", setup(cycle=1 << 31) + dest()),
    ("page_max", setup(cycle=0xFFFFFFFF, cache=0xFFFFFFFF) + dest()),
    ("cache_8k", setup(cache=8192) + dest()),
    ("version_nan", setup(version=b"NaN") + dest()),
    ("version_inf", setup(version=b"inf") + dest()),
    ("version_old", setup(version=b"5.60") + dest()),
    ("version_garbage", setup(version=b"\xff" * 16) + dest()),
    ("mtu_bad", setup(mtu=b"9\0") + dest()),
    ("qpn_25_bits", setup() + dest(raw="0000:0080:1000000:0fecdf:000010f7:000055aa63fb3000:" + "00:" * 16 + "00000000:")),
    ("out_reads_wide", setup() + dest(raw="0000:10000:00001f:0fecdf:000010f7:000055aa63fb3000:" + "00:" * 16 + "00000000:")),
    ("gid_byte_wide", setup() + dest(raw="0000:0080:00001f:0fecdf:000010f7:000055aa63fb3000:" + "100:" * 16 + "0:")),
    ("vaddr_65_bits", setup() + dest(raw="0000:0080:00001f:0fecdf:000010f7:10000000000000000:" + "00:" * 16 + "0:")),
    ("few_fields", setup() + dest(raw="0000:0080:00001f")),
    ("empty_fields", setup() + dest(raw=":" * 40)),
    ("plus_signs", setup() + dest(raw="+0:+80:+1f:+0:+1:+0:" + "+0:" * 16 + "+0:")),
    ("no_nul", setup() + b"0" * 108),
    ("not_utf8", setup() + b"\xc3\x28" * 54),
    ("long_message", setup() + dest() + b"0:" * 200),
    # found by fuzzing: non-ASCII bytes in the version (U+00A0 counts as
    # whitespace to trim); the oracle had counted UTF-8 bytes, not chars
    ("version_nbsp", b"6" + b"\xa0" * 10 + b"\x0b\x00" + b"\xa0" * 4 + setup()[16:] + dest()),
    ("truncated_setup", setup()[:11]),
    ("empty", b""),
]
for k in range(14):
    name, src = rng.choice(pt[:8])
    pt.append((f"mutant{k:02}_{name}", mutate(src, rng.randrange(1, 6))))
write("perftest_exchange", pt)


# ---------------------------------------------------------------- the ping-pong string
def pp(qpn=0x17, psn=0x35DE35, gid="00000000000000000000ffff0a4d000c", raw=None):
    s = (raw or "%04x:%06x:%06x:%s" % (0, qpn, psn, gid)).encode()[:52]
    return s + bytes(52 - len(s))


zero = pp(0, 0, "0" * 32)
ping = [
    ("captured", pp()),
    ("captured_nul", b"0000:000017:35de35:00000000000000000000ffff0a4d000c\0"),
    ("srq_table", b"".join(pp(0x11 + q, q) for q in range(16)) + zero * 240),
    ("ipv6", pp(gid="fe80000000000000505400fffe770001")),
    ("widest", pp(0xFFFFFF, 0xFFFFFF, "f" * 32)),
    ("two_entries", pp() + pp(0x18, 1)),
    # hostile
    ("qpn_25_bits", pp(raw="0000:1000000:000001:00000000000000000000ffff0a4d000c")),
    ("psn_32_bits", pp(raw="0000:000001:ffffffff:00000000000000000000ffff0a4d000c")),
    ("lid_wide", pp(raw="10000:000001:000001:00000000000000000000ffff0a4d000c")),
    ("five_fields", pp(raw="0000:000001:000001:00000000000000000000ffff0a4d000c:")),
    ("short_gid", pp(raw="0000:000001:000001:00000000000000000000ffff0a4d")),
    ("gid_not_hex", pp(raw="0000:000001:000001:zz000000000000000000ffff0a4d000c")),
    ("gid_multibyte", pp(raw="0000:000001:000001:\u00e90000000000000000000ffff0a4d000")),
    ("not_utf8", b"\xff" * 52),
    ("no_nul", b"0" * 52),
    ("short", pp()[:20]),
    ("srq_table_short", pp() * 100),
    ("colons", b":" * 52),
    ("empty", b""),
]
for k in range(14):
    name, src = rng.choice(ping[:6])
    ping.append((f"mutant{k:02}_{name}", mutate(src, rng.randrange(1, 6))))
write("pingpong_exchange", ping)
