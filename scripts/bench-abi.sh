#!/usr/bin/env bash
# The drop-in libibverbs.so.1 against this project's own tools, measured in
# one run, interleaved (A, B, A, B, ...), medians and ranges printed:
#   - ibv_rc_pingpong (Debian's binary, over softroce-run) against the
#     rc_pingpong example: round trip, goal within 10 %;
#   - ib_write_bw (perftest, over softroce-run) against rdma-perf write-bw,
#     64 KiB, MTU 1024: goal at least 0.9x.
#
# Usage: scripts/bench-abi.sh [ROUNDS]   (default 5)
# Needs ibverbs-utils and perftest. Not a test: on a noisy 2-core machine
# compare within a run, and run it again when another job was busy.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
for b in ibv_rc_pingpong ib_write_bw; do
    command -v $b >/dev/null || { echo "bench-abi: $b not found (apt-get install ibverbs-utils perftest)" >&2; exit 1; }
done
echo "== building (release)" >&2
cargo build --release -q -p ibverbs-abi -p softroce --bin softroce-run --bin rdma-perf --example rc_pingpong
cargo build --release -q -p rdmacm-abi # softroce-run refuses to run without librdmacm_abi.so
R=target/release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Runs "server args" then "client args" (client last), waits for both, and
# prints the client's stdout. $1 = the TCP port both use (waited for).
pair() {
    local port=$1 srv=$2 cli=$3
    bash -c "$srv" >"$out/s" 2>&1 &
    local s=$!
    for _ in $(seq 200); do ss -ltn | grep -q ":$port " && break; sleep 0.02; done
    bash -c "$cli" >"$out/c" 2>&1 || { cat "$out/s" "$out/c" >&2; return 1; }
    wait $s || { cat "$out/s" >&2; return 1; }
    cat "$out/c"
}
usec() { grep usec/iter | sed 's/.* = \([0-9.]*\) usec\/iter.*/\1/'; }
# The BW average (MB/s) of perftest's result row, or of rdma-perf's table row.
mbps() { awk '/^ *#bytes/ { getline; print $4; exit }'; }

n=20000
for i in $(seq "$ROUNDS"); do
    echo "round $i/$ROUNDS" >&2
    pair 18951 "$R/softroce-run --device a=127.0.60.1 -- ibv_rc_pingpong -d a -g 0 -p 18951 -n $n -s 64" \
        "$R/softroce-run --device b=127.0.60.2 -- ibv_rc_pingpong -d b -g 0 -p 18951 -n $n -s 64 127.0.60.1" |
        usec >>"$out/lib_rtt"
    pair 18952 "$R/examples/rc_pingpong -n $n -s 64 -p 18952 --bind 127.0.60.3" \
        "$R/examples/rc_pingpong -n $n -s 64 -p 18952 --bind 127.0.60.4 127.0.60.3" | usec >>"$out/own_rtt"
    pair 18953 "$R/softroce-run --device a=127.0.61.1 -- ib_write_bw -d a -x 0 -p 18953 -n $n" \
        "$R/softroce-run --device b=127.0.61.2 -- ib_write_bw -d b -x 0 -p 18953 -n $n 127.0.61.1" |
        mbps >>"$out/lib_bw"
    pair 18954 "$R/rdma-perf write-bw --bind 127.0.61.3 -m 1024 -p 18954 --quiet" \
        "$R/rdma-perf write-bw 127.0.61.3 --bind 127.0.61.4 -m 1024 -p 18954 -n $n" | mbps >>"$out/own_bw"
done

python3 - "$out" <<'PY'
import statistics, sys
d = sys.argv[1]
def vals(name):
    return [float(x) for x in open(f"{d}/{name}").read().split()]
def show(label, a, b, unit, goal):
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{label}: library {ma:.2f} {unit} [{min(a):.2f}..{max(a):.2f}], "
          f"own {mb:.2f} {unit} [{min(b):.2f}..{max(b):.2f}], ratio of medians {ma / mb:.2f}x ({goal})")
show("ibv_rc_pingpong vs rc_pingpong, 64 B round trip", vals("lib_rtt"), vals("own_rtt"), "us", "goal <= 1.10x")
show("ib_write_bw vs rdma-perf write-bw, 64 KiB", vals("lib_bw"), vals("own_bw"), "MB/s", "goal >= 0.9x")
PY
