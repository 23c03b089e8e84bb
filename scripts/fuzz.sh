#!/usr/bin/env bash
# Fuzzes every target: the network-facing parsers, the engine as a whole,
# the UDP receive path and the tools' out-of-band parsers (docs/fuzzing.md).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Needs cargo-fuzz (cargo install cargo-fuzz). On a stable toolchain it runs
# with RUSTC_BOOTSTRAP=1, which lets stable rustc take cargo-fuzz's -Z flags.
# Starts from the checked-in seeds (fuzz/seeds/TARGET, read only); what the
# fuzzer finds goes to fuzz/corpus/TARGET (git-ignored). A crash leaves its
# input in fuzz/artifacts/TARGET/ and makes this script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(roce_v2 roce_v1 ib_packet transport_packet flow_control capture_frame
  responder engine cm_receive udp_receive frame_receive perf_oob perftest_exchange pingpong_exchange cm_mad port_agent)
command -v cargo-fuzz >/dev/null || { echo "fuzz.sh: cargo-fuzz is not installed: cargo install cargo-fuzz" >&2; exit 1; }
export RUSTC_BOOTSTRAP=1
status=0
for t in "${targets[@]}"; do
  echo "== fuzzing $t for ${secs}s"
  mkdir -p "fuzz/corpus/$t"
  (cd fuzz && cargo fuzz run -O "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$secs" -print_final_stats=1 2>&1) \
    | grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss|ERROR|panicked|SUMMARY|Test unit written" || status=1
  [ -z "$(ls -A "fuzz/artifacts/$t" 2>/dev/null)" ] || { echo "!! $t: crash inputs in fuzz/artifacts/$t"; status=1; }
done
exit $status
