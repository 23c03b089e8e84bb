#!/usr/bin/env bash
# End-to-end benchmark: rdma-perf --loopback against raw UDP baselines
# measured in the same run on the same machine (examples/udp_baseline.rs),
# printed as ratios. Usage: scripts/bench.sh [SECONDS_PER_RUN]
# Not a test: figures on a noisy 2-core machine vary; compare within a run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-2}"
echo "== building (release)" >&2
cargo build --release -q --bin rdma-perf --example udp_baseline
perf=target/release/rdma-perf
udp=target/release/examples/udp_baseline
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() { echo "== $*" >&2; "$@" | tail -1 | tee -a "$out" >&2; }

# Bandwidth: 64 KiB WRITEs on 1 QP, MTU 4096 (4124-byte datagrams on the wire).
run $udp bw plain 4124 "$secs"
run $udp bw mmsg 4124 "$secs"
run $udp bw gso 4124 "$secs"
run $perf write-bw --loopback --quiet --json -s 65536 -D "$secs"
# 8-byte round trips, busy-polling on both sides (rdma-perf polls its CQ).
run $udp pingpong 8 20000 busy
run $perf send-lat --loopback --quiet --json -s 8 -n 20000
run $perf write-lat --loopback --quiet --json -s 8 -n 20000
# Small messages: 64-byte WRITEs on 4 QPs against 92-byte datagrams.
run $udp bw mmsg 92 "$secs"
run $perf write-bw --loopback --quiet --json -s 64 -q 4 -D "$secs"

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def pick(**kw):
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    raise SystemExit(f"missing result {kw}")
plain, mmsg, gso = (pick(test="udp-bw", mode=m, size=4124) for m in ("plain", "mmsg", "gso"))
wbw = pick(test="write-bw", size=65536)
upp = pick(test="udp-pingpong", size=8)
slat, wlat = pick(test="send-lat", size=8), pick(test="write-lat", size=8)
small_udp, small = pick(test="udp-bw", mode="mmsg", size=92), pick(test="write-bw", size=64)
print()
print(f"{'measure':46} {'rdma-perf':>12} {'baseline':>12} {'ratio':>8}  goal")
def line(name, a, b, unit, goal, higher=True):
    r = a / b if b else float("nan")
    print(f"{name:46} {a:>9.2f} {unit:2} {b:>9.2f} {unit:2} {r:>7.2f}x  {goal}")
line("WRITE 64 KiB, 1 QP vs UDP GSO/GRO (Gb/s)", wbw["gbps"], gso["gbps"], "", ">= 0.5x")
line("WRITE 64 KiB, 1 QP vs UDP sendmmsg (Gb/s)", wbw["gbps"], mmsg["gbps"], "", "")
line("WRITE 64 KiB, 1 QP vs UDP plain (Gb/s)", wbw["gbps"], plain["gbps"], "", "")
line("SEND 8 B RTT p50 vs UDP busy-poll (us)", slat["rtt_us_p50"], upp["rtt_us_p50"], "", "<= 1.3x")
line("WRITE 8 B RTT p50 vs UDP busy-poll (us)", wlat["rtt_us_p50"], upp["rtt_us_p50"], "", "<= 1.3x")
line("64 B WRITEs, 4 QPs vs 92 B UDP sendmmsg (Mmsg/s)", small["mpps"], small_udp["mpps"], "", "")
print(f"{'peak RSS of the 1-QP WRITE run (both sides)':46} {wbw['peak_rss_kib']/1024:>9.1f} MiB")
print(f"{'retransmits in the WRITE run':46} {wbw['retransmits']:>12}")
PY
