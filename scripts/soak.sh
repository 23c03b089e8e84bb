#!/usr/bin/env bash
# A soak: 64 RC QPs of mixed verbs (WRITE, READ, SEND, atomics: 16 QPs
# each, one rdma-perf server and client process per verb) on loopback
# addresses, 2% loss and 2% reordering injected on each client's device,
# every byte verified (rdma-perf's own exchange, --verify), for MINUTES.
# Samples every process's resident memory every INTERVAL seconds and fails
# unless every pair finished verified (no completion lost, duplicated or
# in error: a QP in ERR ends its run with an error) and no process's
# memory grew after warm-up (the first fifth of the run) by more than
# 10% or 4 MiB, whichever is larger.
#
#   scripts/soak.sh [--minutes M] [--interval S] [--out DIR]
#
# Defaults: 60 minutes, a sample every 30 s, results in $TMPDIR/soak
# (rss.csv: seconds, process, KiB; one JSON per process; summary.txt).
#
# The QPs' ACK timeout is 537 ms (-u 17) instead of perftest's 67 ms: the
# soak checks the protocol under loss, not the machine. With eight busy
# processes on two cores a process can wait hundreds of milliseconds for a
# core (each JSON's longest_progress_gap_ms says how long), and a peer
# gives up after 8 ACK timeouts without an answer (RetryExcErr).
# CI runs it for 2 minutes. See docs/testing.md for the one-hour figures.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=60 interval=30 out=${TMPDIR:-/tmp}/soak
while [ $# -gt 0 ]; do
    case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
secs=$((minutes * 60))
[ "$secs" -gt 0 ] || { echo "soak: --minutes must be at least 1" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out"

echo "== building rdma-perf (release)"
cargo build --release -q --bin rdma-perf
perf=target/release/rdma-perf

tests=(write-bw read-bw send-bw atomic-bw)
pids=() names=()
for i in "${!tests[@]}"; do
    t=${tests[$i]} port=$((18600 + i))
    srv=127.0.89.$((2 * i + 1)) cli=127.0.89.$((2 * i + 2))
    size=4096
    [ "$t" = atomic-bw ] && size=8
    "$perf" "$t" --bind "$srv" -p "$port" --oob rdma-perf -u 17 --quiet --json >"$out/$t.server.json" 2>"$out/$t.server.log" &
    pids+=($!) names+=("$t-server")
    sleep 0.5
    "$perf" "$t" "$srv" --bind "$cli" -p "$port" --oob rdma-perf -u 17 -q 16 -s "$size" -D "$secs" \
        --loss 0.02 --reorder 0.02 --seed $((i + 1)) --verify --json >"$out/$t.json" 2>"$out/$t.client.log" &
    pids+=($!) names+=("$t-client")
done

echo "== soaking for $minutes min: ${#pids[@]} processes, 64 QPs, 2% loss and reordering"
echo "seconds,process,rss_kib" >"$out/rss.csv"
start=$(date +%s)
while :; do
    now=$(($(date +%s) - start))
    alive=0
    for k in "${!pids[@]}"; do
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/${pids[$k]}/status" 2>/dev/null || true)
        [ -n "$rss" ] || continue
        alive=1
        echo "$now,${names[$k]},$rss" >>"$out/rss.csv"
    done
    [ "$alive" = 1 ] || break
    [ $((now % 300)) -lt "$interval" ] && echo "   $now s of $secs s"
    [ "$now" -gt $((secs + 120)) ] && { echo "soak: still running 2 minutes past its end" >&2; break; }
    sleep "$interval"
done

status=0
for k in "${!pids[@]}"; do
    if ! wait "${pids[$k]}"; then
        echo "soak: ${names[$k]} failed; its last lines:" >&2
        tail -5 "$out/${names[$k]%-*}.${names[$k]##*-}.log" 2>/dev/null >&2 || true
        status=1
    fi
done

python3 - "$out" "$secs" <<'EOF' || status=1
import csv, json, sys
out, secs = sys.argv[1], int(sys.argv[2])
ok = True
lines = []
for t in ["write-bw", "read-bw", "send-bw", "atomic-bw"]:
    try:
        r = json.load(open(f"{out}/{t}.json"))
    except Exception as e:
        print(f"soak: {t}: no result ({e})", file=sys.stderr)
        ok = False
        continue
    good = r.get("verified") is True and r["iterations"] > 0
    ok &= good
    gaps = [r['counters'].get('longest_progress_gap_ms', 0)]
    try:
        gaps.append(json.load(open(f"{out}/{t}.server.json"))['counters'].get('longest_progress_gap_ms', 0))
    except Exception:
        gaps.append(None)
    lines.append(f"{t:10} {r['iterations']:>12} msgs  {r['gbps']:.3f} Gb/s  retransmits {r['retransmits']:>9}  "
                 f"timeouts {r['counters']['timeouts']:>6}  verified {r.get('verified')}  "
                 f"longest gap client {gaps[0]} ms server {gaps[1]} ms")
rss = {}
for row in csv.DictReader(open(f"{out}/rss.csv")):
    rss.setdefault(row["process"], []).append((int(row["seconds"]), int(row["rss_kib"])))
warm = secs / 5
for p, samples in sorted(rss.items()):
    after = [k for s, k in samples if s >= warm]
    if len(after) < 2:
        continue
    base, peak = after[0], max(after)
    grew = peak - base
    limit = max(base // 10, 4096)
    flat = grew <= limit
    ok &= flat
    lines.append(f"{p:18} RSS after warm-up {base} KiB, peak {peak} KiB (+{grew} KiB, limit +{limit}){'' if flat else '  GREW'}")
text = "\n".join(lines)
print(text)
open(f"{out}/summary.txt", "w").write(text + "\n")
sys.exit(0 if ok else 1)
EOF
echo "(samples and results: $out)"
exit $status
