#!/usr/bin/env bash
# ibv_wr_* against ibv_post_send for the same work, over the drop-in
# libibverbs.so.1, in one run, interleaved (post, wr, post, wr, ...):
# 64-byte RDMA WRITEs between two RC QPs of one device, batches of 16.
# Prints each API's median and range of messages per second and the ratio.
#
# Usage: scripts/bench-wr.sh [ROUNDS] [MESSAGES]   (default 7, 200000)
#        scripts/bench-wr.sh --callgrind [MESSAGES]   (default 20000)
# --callgrind counts instructions instead (valgrind; repeatable whatever
# else the machine does): the posting calls' inclusive cost per message,
# ibv_post_send's against the ibv_wr_* calls' (wr_start, the operations,
# the setters, wr_complete), the engine's posting included in both.
# Needs gcc and libibverbs-dev. Not a test: compare within a run.
set -euo pipefail
cd "$(dirname "$0")/.."
CALLGRIND=0
if [ "${1:-}" = --callgrind ]; then CALLGRIND=1; shift; fi
ROUNDS=${1:-7}
N=${2:-200000}
[ $CALLGRIND = 1 ] && N=${1:-20000}
[ -f /usr/include/infiniband/verbs.h ] || { echo "bench-wr: needs libibverbs-dev (apt-get install libibverbs-dev)" >&2; exit 1; }
echo "== building (release)" >&2
cargo build --release -q -p ibverbs-abi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ln -s "$PWD/target/release/libibverbs_abi.so" "$out/libibverbs.so.1"
ln -s "$PWD/target/release/libibverbs_abi.so" "$out/libibverbs.so"
cc -O2 -Wall -o "$out/wr_vs_post" scripts/bench/wr_vs_post.c -L"$out" -libverbs
if [ $CALLGRIND = 1 ]; then
    command -v valgrind >/dev/null || { echo "bench-wr: --callgrind needs valgrind" >&2; exit 1; }
    for mode in post wr; do
        LD_LIBRARY_PATH=$out SOFTROCE_DEVICES=wr0=127.0.62.1 valgrind -q --tool=callgrind \
            --callgrind-out-file="$out/cg.$mode" "$out/wr_vs_post" $mode "$N" >/dev/null
    done
    python3 - "$out" "$N" <<'PY'
import subprocess, sys
d, n = sys.argv[1], int(sys.argv[2])
def inclusive(mode, names):
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", f"{d}/cg.{mode}"], capture_output=True, text=True).stdout
    total = 0
    for line in text.splitlines():
        if "libibverbs_abi.so]" in line and any(f"{x} [" in line for x in names):
            total += int(line.split()[0].replace(",", ""))
    return total
# The engine's part (post_with_retry: queueing, and the progress a full
# queue makes) varies with timing; the library's own part does not.
engine = "ibverbs_abi::post::post_with_retry"
post_all = inclusive("post", ["ibverbs_abi::post::post_send"])
wr_all = inclusive("wr", [f"ibverbs_abi::qp_ex::{f}" for f in ("wr_start", "wr_rdma_write", "wr_set_sge", "wr_complete")])
post_own, wr_own = post_all - inclusive("post", [engine]), wr_all - inclusive("wr", [engine])
print(f"{'':14} {'library':>8} {'with engine':>12}  instructions per message")
print(f"{'ibv_post_send':14} {post_own / n:8.0f} {post_all / n:12.0f}")
print(f"{'ibv_wr_*':14} {wr_own / n:8.0f} {wr_all / n:12.0f}")
print(f"ratio wr/post, library's own part: {wr_own / post_own:.3f}")
PY
    exit 0
fi
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
