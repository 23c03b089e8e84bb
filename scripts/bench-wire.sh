#!/usr/bin/env bash
# Runs the wire micro-benchmarks and prints each 4 KiB path as a ratio of
# the raw crc32fast throughput measured in the same run (goal: >= 0.9x).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench wire -- "$@"
est() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['median']['point_estimate'])" "target/criterion/$1/new/estimates.json"; }
base=$(est wire_4k/crc32fast_baseline)
printf '\n%-28s %12s %10s\n' "4 KiB RoCE v2 packet" "median ns" "vs CRC"
for t in crc32fast_baseline parse_verify build_icrc_in_place build_icrc_copy; do
  ns=$(est "wire_4k/$t")
  python3 -c "import sys; b,n=float(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]:<28} {n:12.1f} {b/n:9.2f}x')" "$t" "$base" "$ns"
done
