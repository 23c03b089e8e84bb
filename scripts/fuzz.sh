#!/usr/bin/env bash
# Fuzzes every network-facing parser. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Needs cargo-fuzz (cargo install cargo-fuzz). On a stable toolchain it runs
# with RUSTC_BOOTSTRAP=1, which lets stable rustc take cargo-fuzz's -Z flags.
# Seeds each corpus with the golden and handmade packets; a crash leaves its
# input in fuzz/artifacts/TARGET/ and makes this script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(roce_v2 roce_v1 ib_packet transport_packet flow_control capture_frame responder)
command -v cargo-fuzz >/dev/null || { echo "fuzz.sh: cargo-fuzz is not installed: cargo install cargo-fuzz" >&2; exit 1; }
export RUSTC_BOOTSTRAP=1
python3 - <<'PY'
import json, os
def seed(target, name, data):
    d = f"fuzz/corpus/{target}"; os.makedirs(d, exist_ok=True)
    open(f"{d}/{name}", "wb").write(data)
vec = json.load(open("tests/fixtures/golden/vectors.json"))
hand = json.load(open("tests/fixtures/handmade.json"))
for i, v in enumerate(vec):
    b = bytes.fromhex(v["l3_packet_hex"])
    seed("roce_v2", f"golden{i}", b)
    t = b[20 if b[0] >> 4 == 4 else 40:][8:]
    seed("transport_packet", f"golden{i}", t)
    seed("responder", f"golden{i}", len(t).to_bytes(2, "big") + t)
    seed("capture_frame", f"golden{i}", bytes([1]) + bytes(12) + (b"\x08\x00" if b[0] >> 4 == 4 else b"\x86\xdd") + b)
for i, p in enumerate(hand["packets"]):
    b = bytes.fromhex(p["hex"])
    target = {"roce_v2": "roce_v2", "roce_v1": "roce_v1", "ib": "ib_packet"}[p["kind"]]
    seed(target, f"hand{i}", b)
for i, f in enumerate(hand["flow_control"]):
    seed("flow_control", f"hand{i}", bytes.fromhex(f["hex"]))
PY
status=0
for t in "${targets[@]}"; do
  echo "== fuzzing $t for ${secs}s"
  (cd fuzz && cargo fuzz run -O "$t" -- -max_total_time="$secs" -print_final_stats=1 2>&1) \
    | grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss|ERROR|panicked|SUMMARY|Test unit written" || status=1
  [ -z "$(ls -A "fuzz/artifacts/$t" 2>/dev/null)" ] || { echo "!! $t: crash inputs in fuzz/artifacts/$t"; status=1; }
done
exit $status
