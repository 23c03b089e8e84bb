#!/usr/bin/env bash
# A/B of two rdma-perf builds on UDP loopback, interleaved round by round
# (A, B, A, B ...) so that the noise of a busy machine falls on both: the
# three figures a change to the engine or the UDP backend must keep.
#   write-bw 64 KiB, 1 QP, 128 deep       Gb/s
#   write-bw 64 B, 8 QPs (message rate)   Mpps
#   send-lat 8 B, busy polling            p50 round trip, us
# Prints each side's median [min..max] and B/A (for the RTT, A/B, so that
# above 1 always means B is better).
#
# Usage: scripts/bench-ab.sh A_RDMA_PERF B_RDMA_PERF [ROUNDS] [SECONDS]
#   e.g. build the old tree elsewhere (git worktree add --detach /tmp/old REV;
#   cargo build --release --bin rdma-perf there), then
#   scripts/bench-ab.sh /tmp/old/target/release/rdma-perf target/release/rdma-perf 7
# Not a test: read the ratios, and the ranges, of one run.
set -euo pipefail
a=${1:?usage: bench-ab.sh A_RDMA_PERF B_RDMA_PERF [ROUNDS] [SECONDS]}
b=${2:?usage: bench-ab.sh A_RDMA_PERF B_RDMA_PERF [ROUNDS] [SECONDS]}
rounds=${3:-5}
secs=${4:-2}
for bin in "$a" "$b"; do
    [ -x "$bin" ] || { echo "bench-ab.sh: $bin is not an executable" >&2; exit 1; }
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# One run: SIDE WORKLOAD rdma-perf-args... -> a JSON line tagged with both.
one() {
    local side=$1 work=$2 bin
    shift 2
    bin=$a
    [ "$side" = B ] && bin=$b
    local line
    line=$("$bin" "$@" --loopback --quiet --json | tail -1)
    echo "{\"side\":\"$side\",\"work\":\"$work\",${line#\{}" >>"$out"
}

for r in $(seq 1 "$rounds"); do
    echo "round $r of $rounds" >&2
    for side in A B; do
        one "$side" bw write-bw -s 65536 -t 128 -D "$secs"
        one "$side" rate write-bw -s 64 -q 8 -D "$secs"
        one "$side" rtt send-lat -s 8 -n 20000
    done
done

python3 - "$out" "$a" "$b" "$rounds" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"A = {sys.argv[2]}\nB = {sys.argv[3]}\n{sys.argv[4]} interleaved rounds\n")
print(f"{'workload':<26} {'A median [range]':>26} {'B median [range]':>26} {'B/A':>6}")
for work, key, name, higher_better in [
    ("bw", "gbps", "write-bw 64 KiB (Gb/s)", True),
    ("rate", "mpps", "write-bw 64 B x8 (Mpps)", True),
    ("rtt", "rtt_us_p50", "send-lat 8 B p50 (us)", False),
]:
    v = {s: [r[key] for r in rows if r["work"] == work and r["side"] == s] for s in "AB"}
    med = {s: statistics.median(v[s]) for s in "AB"}
    cell = lambda s: f"{med[s]:.3f} [{min(v[s]):.3f}..{max(v[s]):.3f}]"
    ratio = med["B"] / med["A"] if higher_better else med["A"] / med["B"]
    print(f"{name:<26} {cell('A'):>26} {cell('B'):>26} {ratio:6.3f}")
print("\nB/A above 1: B is better (for the RTT, A's time over B's).")
EOF
