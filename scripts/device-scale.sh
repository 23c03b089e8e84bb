#!/usr/bin/env bash
# Issue 32's multi-core figures in one short run on a many-core host (the
# tool library's device machine: 16 cores, 15 minutes a session), from
# binaries built on this machine:
#
#   scripts/device-scale.sh prepare        here: release binaries, stripped,
#                                          into target-device/ (ignored by git;
#                                          the device tool's `carry` takes it)
#   scripts/device-scale.sh run [SECONDS]  there: interleaved rounds of
#                                          rdma-perf against the raw UDP
#                                          baselines; a summary, and every raw
#                                          JSON row in $OUT (or target-device/)
#
# What it measures (3 interleaved rounds, SECONDS per bandwidth run, default 2):
#   - raw UDP GSO+GRO of 4 KiB-MTU packets, and 64 KiB WRITEs' packets
#     through GSO without the engine (udp_baseline bw gso / gso-roce);
#   - rdma-perf write-bw --loopback -s 65536: 1 QP on 1 engine, and 8 QPs on
#     1, 4 and 8 engines a device (--threads): the aggregate's scaling
#     with the cores given (the issue's goal: 8 QPs on 8 cores >= 6x one QP);
#   - 8 QPs connected over the RDMA CM (-R) between two processes, on 1
#     and 8 engines each;
#   - the busy 8-byte SEND round trip on one engine (send-lat).
# With DEVICE_FABRIC_HOSTS=N also one `rdma-fabric run allreduce --hosts N
# --size 64MiB` (ring) on every core, its wall time and JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target-device

if [ "${1:-}" = prepare ]; then
    cargo build --release -q --bin rdma-perf --bin rdma-fabric --example udp_baseline
    mkdir -p "$dir"
    release="${CARGO_TARGET_DIR:-target}/release"
    for b in "$release/rdma-perf" "$release/rdma-fabric" "$release/examples/udp_baseline"; do
        if command -v strip >/dev/null; then strip -o "$dir/$(basename "$b")" "$b"; else cp "$b" "$dir/"; fi
    done
    du -sh "$dir" >&2
    echo "carry: [\"$dir\"]; command: bash scripts/device-scale.sh run" >&2
    exit 0
fi
[ "${1:-}" = run ] || { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
secs="${2:-2}"
for b in rdma-perf rdma-fabric udp_baseline; do
    [ -x "$dir/$b" ] || { echo "no $dir/$b: run 'scripts/device-scale.sh prepare' first" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "python3 is needed for the summary" >&2; exit 1; }
out="${OUT:-$dir}/device-scale.jsonl"
log="${OUT:-$dir}/device-scale.log"
: >"$out"
: >"$log"
# No process of this run outlives it (a server whose client failed).
trap 'jobs -p | xargs -r kill 2>/dev/null || true' EXIT
cores=$(nproc)
echo "== $(uname -r), $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)" >&2

# Appends the command's last line (one JSON object) to $out, tagged.
row() {
    local tag=$1 round=$2
    shift 2
    local line
    echo "== $tag, round $round: $*" >>"$log"
    line=$(timeout 120 "$@" 2>>"$log" | tail -1) || true
    case "$line" in
        \{*) echo "{\"tag\":\"$tag\",\"round\":$round,${line#\{}" >>"$out"; echo "   $tag: $(echo "$line" | cut -c1-120)" >&2 ;;
        *) echo "   $tag: no result (see $log)" >&2 ;;
    esac
}

for round in 1 2 3; do
    echo "== round $round" >&2
    row gso $round "$dir/udp_baseline" bw gso 4124 "$secs"
    row gso-roce $round "$dir/udp_baseline" bw gso-roce 65536 "$secs"
    row q1-t1 $round "$dir/rdma-perf" write-bw --loopback -s 65536 -q 1 --threads 1 -D "$secs" --quiet --json
    for t in 1 4 8; do
        [ "$t" -le "$cores" ] || continue
        row q8-t$t $round "$dir/rdma-perf" write-bw --loopback -s 65536 -q 8 --threads $t -D "$secs" --quiet --json
    done
    row busy-rtt $round "$dir/rdma-perf" send-lat --loopback -s 8 -n 20000 --threads 1 --quiet --json
    # The same 8 QPs connected by the RDMA CM (perftest's -R), server and
    # client in two processes: the CM's QPs spread over the engines too.
    for t in 1 8; do
        [ "$t" -le "$cores" ] || continue
        timeout $((secs + 60)) "$dir/rdma-perf" write-bw -R --bind 127.0.0.2 -q 8 -s 65536 --threads $t --quiet \
            >>"$log" 2>&1 &
        srv=$!
        sleep 1 # the client tries again while the server is not listening yet (REJ 8)
        row cm-q8-t$t $round "$dir/rdma-perf" write-bw -R --bind 127.0.0.3 127.0.0.2 -q 8 -s 65536 --threads $t \
            -D "$secs" --quiet --json
        kill $srv 2>/dev/null || true
        wait $srv 2>/dev/null || true
    done
done

if [ -n "${DEVICE_FABRIC_HOSTS:-}" ]; then
    echo "== rdma-fabric run allreduce --hosts $DEVICE_FABRIC_HOSTS --size 64MiB --threads $cores" >&2
    start=$(date +%s%N)
    line=$("$dir/rdma-fabric" run allreduce --algorithm ring --hosts "$DEVICE_FABRIC_HOSTS" --size 64MiB \
        --threads "$cores" --quiet --json 2>>"$log" | tail -1) || true
    wall=$(( ($(date +%s%N) - start) / 1000000 ))
    case "$line" in
        \{*) echo "{\"tag\":\"allreduce\",\"wall_ms\":$wall,${line#\{}" >>"$out" ;;
        *) echo "   allreduce: no result" >&2 ;;
    esac
fi

python3 - "$out" "$cores" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cores = int(sys.argv[2])
def values(tag, key):
    return [r[key] for r in rows if r.get("tag") == tag and key in r]
def med(tag, key):
    v = values(tag, key)
    return (statistics.median(v), min(v), max(v)) if v else None
def show(m, unit):
    return f"{m[0]:8.2f} {unit} [{m[1]:.2f}-{m[2]:.2f}]" if m else "     (none)"
gso, one = med("gso", "gbps"), med("q1-t1", "gbps")
print(f"issue 32 on {cores} cores, medians [ranges] of the rounds:")
print(f"  raw UDP GSO+GRO (4124-byte packets)     {show(gso, 'Gb/s')}")
print(f"  64 KiB WRITEs' packets, no engine       {show(med('gso-roce', 'gbps'), 'Gb/s')}")
print(f"  WRITE 64 KiB, 1 QP, 1 engine            {show(one, 'Gb/s')}"
      + (f"  = {one[0] / gso[0]:.2f}x GSO" if one and gso else ""))
for t in (1, 4, 8):
    m = med(f"q8-t{t}", "gbps")
    if m:
        print(f"  WRITE 64 KiB, 8 QPs, {t} engine(s)        {show(m, 'Gb/s')}"
              + (f"  = {m[0] / one[0]:.2f}x one QP" if one else ""))
cm_one = med("cm-q8-t1", "gbps")
for t in (1, 8):
    m = med(f"cm-q8-t{t}", "gbps")
    if m:
        print(f"  the same over the RDMA CM, {t} engine(s)  {show(m, 'Gb/s')}"
              + (f"  = {m[0] / cm_one[0]:.2f}x one engine" if cm_one and t > 1 else ""))
print(f"  busy 8-byte SEND round trip             {show(med('busy-rtt', 'rtt_us_p50'), 'us')}")
for r in rows:
    if r.get("tag") == "allreduce":
        print(f"  allreduce: wall {r['wall_ms'] / 1000:.0f} s, " + ", ".join(
            f"{k} {r[k]}" for k in ("hosts", "jct_us", "algbw_gbps", "busbw_gbps") if k in r))
PY
