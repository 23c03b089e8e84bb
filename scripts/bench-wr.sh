#!/usr/bin/env bash
# ibv_wr_* against ibv_post_send for the same work, over the drop-in
# libibverbs.so.1, in one run, interleaved (post, wr, post, wr, ...):
# 64-byte RDMA WRITEs between two RC QPs of one device, batches of 16.
# Prints each API's median and range of messages per second and the ratio.
#
# Usage: scripts/bench-wr.sh [ROUNDS] [MESSAGES]   (default 7, 200000)
# Needs gcc and libibverbs-dev. Not a test: compare within a run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-7}
N=${2:-200000}
[ -f /usr/include/infiniband/verbs.h ] || { echo "bench-wr: needs libibverbs-dev (apt-get install libibverbs-dev)" >&2; exit 1; }
echo "== building (release)" >&2
cargo build --release -q -p ibverbs-abi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ln -s "$PWD/target/release/libibverbs_abi.so" "$out/libibverbs.so.1"
ln -s "$PWD/target/release/libibverbs_abi.so" "$out/libibverbs.so"
cc -O2 -Wall -o "$out/wr_vs_post" scripts/bench/wr_vs_post.c -L"$out" -libverbs
for i in $(seq "$ROUNDS"); do
    echo "round $i/$ROUNDS" >&2
    for mode in post wr; do
        LD_LIBRARY_PATH=$out SOFTROCE_DEVICES=wr0=127.0.62.1 "$out/wr_vs_post" $mode "$N" >>"$out/$mode"
    done
done
python3 - "$out" <<'PY'
import statistics, sys
d = sys.argv[1]
def vals(name):
    return [float(l.split()[-1]) for l in open(f"{d}/{name}")]
p, w = vals("post"), vals("wr")
for label, v in (("ibv_post_send", p), ("ibv_wr_*", w)):
    print(f"{label:14} median {statistics.median(v)/1e6:.3f} M msgs/s  range {min(v)/1e6:.3f} .. {max(v)/1e6:.3f}")
print(f"ratio wr/post (medians): {statistics.median(w)/statistics.median(p):.3f}")
PY
