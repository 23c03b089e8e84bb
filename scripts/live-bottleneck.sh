#!/usr/bin/env bash
# DCQCN end to end between real rdma-perf processes over real UDP sockets:
# two network namespaces joined by rdma-bottleneck (a userspace router with
# a rate-limited RED/ECN queue), N write-bw flows from the left namespace to
# the right one, then the router's report, a plot of the flows' rates, and
# the simulated fabric's figures for the same parameters beside them.
#
#   sudo scripts/live-bottleneck.sh [--flows N] [--rate-mbps R] [--seconds S]
#                                   [--dcqcn paper|nvidia|off] [--cc timely|swift|none]
#                                   [--min-rtt-us U] [--out DIR]
#
# --cc timely (or swift) runs TIMELY (Swift) on RTT samples only in the senders instead of DCQCN,
# with --min-rtt-us as the path's unloaded RTT (default 200: the router's own
# forwarding on a busy 2-core host); the simulated figures are TIMELY's too.
# Needs root (it creates and removes its own namespaces, named bn-*-PID).
set -euo pipefail
cd "$(dirname "$0")/.."

FLOWS=2 RATE=500 SECONDS_RUN=12 DCQCN=paper CC= MIN_RTT_US=200 OUT=target/live-bottleneck
while [ $# -gt 0 ]; do
    case $1 in
    --flows) FLOWS=$2; shift 2 ;;
    --rate-mbps) RATE=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --dcqcn) DCQCN=$2; shift 2 ;;
    --cc) CC=$2; shift 2 ;;
    --min-rtt-us) MIN_RTT_US=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h | --help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "live-bottleneck: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "live-bottleneck: needs root (network namespaces, TUN devices)" >&2; exit 1; }
[ "$FLOWS" -ge 1 ] && [ "$FLOWS" -le 8 ] || { echo "live-bottleneck: --flows must be 1..8" >&2; exit 2; }

cargo build --release -q -p softroce -p rdma-bottleneck -p rdma-fabric --bin rdma-perf --bin rdma-bottleneck --bin rdma-fabric
BIN=target/release
mkdir -p "$OUT"
L=bn-l-$$ R=bn-r-$$
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    wait 2>/dev/null || true
    ip netns del "$L" 2>/dev/null || true
    ip netns del "$R" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$L"
ip netns add "$R"

left= right=
for i in $(seq 1 "$FLOWS"); do left+="${left:+,}10.77.1.$i/24"; right+="${right:+,}10.77.2.$i/24"; done
# The senders' line rate: twice the bottleneck, as two NICs into one port.
LINE_GBPS=$(awk "BEGIN { print $RATE * 2 / 1000 }")
READY=$OUT/ready
rm -f "$READY"
$BIN/rdma-bottleneck --left "$L=$left" --right "$R=$right" --rate-mbps "$RATE" \
    --duration "$((SECONDS_RUN + 4))s" --warmup 3s --json --plot "$OUT/rates.svg" \
    --ready-file "$READY" >"$OUT/router.json" 2>"$OUT/router.log" &
ROUTER=$!
for _ in $(seq 100); do [ -e "$READY" ] && break; sleep 0.1; done
[ -e "$READY" ] || { cat "$OUT/router.log" >&2; exit 1; }

# The senders' congestion control: --dcqcn's preset, or --cc's algorithm.
CC_ARGS=(--dcqcn "$DCQCN")
[ -n "$CC" ] && CC_ARGS=(--cc "$CC" --min-rtt-us "$MIN_RTT_US") && DCQCN=$CC
echo "live-bottleneck: $FLOWS flow(s) through $RATE Mb/s, congestion control $DCQCN (line rate $LINE_GBPS Gb/s), ${SECONDS_RUN}s"
for i in $(seq 1 "$FLOWS"); do
    ip netns exec "$R" $BIN/rdma-perf write-bw --bind "10.77.2.$i" -p $((18600 + i)) --json --quiet \
        >"$OUT/server$i.json" 2>"$OUT/server$i.log" &
done
sleep 0.5
CLIENTS=()
for i in $(seq 1 "$FLOWS"); do
    ip netns exec "$L" $BIN/rdma-perf write-bw "10.77.2.$i" --bind "10.77.1.$i" -p $((18600 + i)) \
        -D "$SECONDS_RUN" "${CC_ARGS[@]}" --line-rate "$LINE_GBPS" --json --quiet \
        >"$OUT/client$i.json" 2>"$OUT/client$i.log" &
    CLIENTS+=($!)
done
for p in "${CLIENTS[@]}"; do wait "$p" || { echo "live-bottleneck: a client failed:" >&2; cat "$OUT"/client*.log >&2; exit 1; }; done
wait "$ROUTER" || { cat "$OUT/router.log" >&2; exit 1; }

# The simulated fabric, same rate, flows, preset and RED (rdma-fabric's defaults are the paper's).
SIM=$OUT/simulated.json
if [ "$DCQCN" = timely ] || [ "$DCQCN" = swift ]; then
    $BIN/rdma-fabric run dcqcn-fairness --flows "$FLOWS" --line-rate "$(awk "BEGIN { print $RATE / 1000 }")" \
        --cc "$DCQCN" --duration 200ms --json >"$SIM"
elif [ "$DCQCN" != off ] && [ "$DCQCN" != none ]; then
    $BIN/rdma-fabric run dcqcn-fairness --flows "$FLOWS" --line-rate "$(awk "BEGIN { print $RATE / 1000 }")" \
        --preset "$DCQCN" --duration 200ms --json >"$SIM"
fi
python3 - "$OUT" "$FLOWS" "$DCQCN" "$SECONDS_RUN" <<'EOF'
import json, sys, os
out, flows, dcqcn, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
live = json.load(open(f"{out}/router.json"))
clients = [json.load(open(f"{out}/client{i}.json")) for i in range(1, flows + 1)]
sim = json.load(open(f"{out}/simulated.json")) if os.path.exists(f"{out}/simulated.json") else None
print(f"{'':28}{'live':>12}{'simulated':>12}")
def row(name, a, b=None, fmt="{:.3f}"):
    f = lambda v: "-" if v is None else fmt.format(v)
    print(f"{name:28}{f(a):>12}{f(b):>12}")
row("Jain's index", live["jain"], sim and sim["jain"])
row("throughput / link", live["throughput_fraction"], sim and sim["throughput_fraction"])
row("queue p50 (bytes)", live["queue_p50_bytes"], sim and sim["queue_p50_bytes"], "{}")
row("queue p99 (bytes)", live["queue_p99_bytes"], sim and sim["queue_p99_bytes"], "{}")
row("drops", live["drops"], sim and sim["drops"], "{}")
# Per millisecond: the live run lasts seconds, the simulated one 200 ms.
sim_ms = sim and sim["duration_us"] / 1000
row("ECN marks per ms", live["ecn_marks"] / (secs * 1000), sim and sim["ecn_marks"] / sim_ms, "{:.1f}")
row("CNPs per ms", live["cnps"] / (secs * 1000), sim and sim["cnps"] / sim_ms, "{:.1f}")
for i, c in enumerate(clients):
    k = c["counters"]
    print(f"flow {i}: {c['gbps']:.3f} Gb/s payload, rate cuts {k.get('rate_cuts')}, CNPs received {k.get('cnps_received')}, retransmits {c['retransmits']}")
print(f"plot: {out}/rates.svg; reports: {out}/*.json")
EOF
