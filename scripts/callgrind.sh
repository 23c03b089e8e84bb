#!/usr/bin/env bash
# Instructions per packet of the transport engine (build with ICRC, parse,
# verify, execute, ACK), counted by callgrind: stable on machines without
# hardware counters. Each workload runs twice (N and 2N messages); the
# difference divided by the extra packets leaves out the set-up.
# The simulated link's own work (a copy and a heap entry per packet) is
# included: read the figures as an upper bound of the engine's.
# A third line counts a whole verbs round trip over UDP loopback: rdma-perf
# send-lat with blocking waits (no busy polls to inflate the count), both
# sides' user-space instructions (the engine, the verbs layer, the socket
# driver) per 8-byte SEND round trip, system calls themselves not included.
# Usage: scripts/callgrind.sh [N]   (default 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-2000}"
command -v valgrind >/dev/null || { echo "callgrind.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q --example engine_packets --bin rdma-perf
bin=target/release/examples/engine_packets
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
count() { # op messages -> "instructions packets"
    local out=$dir/cg.$1.$2
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$1" "$2" >"$dir/json" 2>"$dir/log"
    local ir packets
    ir=$(awk '/^summary:/ {print $2}' "$out")
    packets=$(python3 -c "import json; print(json.load(open('$dir/json'))['packets'])")
    echo "$ir $packets"
}
printf '%-10s %14s %10s\n' workload "instr/packet" packets
for op in send_8b write_4k; do
    read -r i1 p1 < <(count $op "$n")
    read -r i2 p2 < <(count $op $((2 * n)))
    python3 -c "import sys; i1,p1,i2,p2=map(int,sys.argv[2:]); print(f'{sys.argv[1]:<10} {(i2-i1)/(p2-p1):14.0f} {p2-p1:10d}')" $op "$i1" "$p1" "$i2" "$p2"
done
# A round trip: a SEND each way, their ACKs, and the posts and polls around them.
rtt() { # iterations -> instructions
    local out=$dir/cg.rtt.$1
    valgrind --tool=callgrind --callgrind-out-file="$out" target/release/rdma-perf send-lat -s 8 -n "$1" \
        --events --spin-us 0 --loopback --quiet --json >/dev/null 2>"$dir/log"
    awk '/^summary:/ {print $2}' "$out"
}
r1=$(rtt "$n")
r2=$(rtt $((2 * n)))
python3 -c "import sys; r1,r2,n=map(int,sys.argv[1:]); print(f'{\"verbs_rtt\":<10} {(r2-r1)/n:14.0f} {\"-\":>10}   (instructions per round trip, both sides)')" "$r1" "$r2" "$n"
