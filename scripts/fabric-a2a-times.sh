#!/usr/bin/env bash
# Wall and CPU seconds of the all-to-all command (leaf-spine, 4
# spines, 8 hosts per leaf, 16 KiB per flow) for each binary given, sizes
# interleaved round by round so that a noisy machine slows each alike.
# Usage: scripts/fabric-a2a-times.sh ROUNDS "LEAVES..." BINARY...
# e.g.   scripts/fabric-a2a-times.sh 3 "2 4 8" /tmp/rdma-fabric.before target/release/rdma-fabric
# Against a build from before fabric/src/huge_pages.rs, set
# RDMA_FABRIC_HUGE_PAGES=0 (or GLIBC_TUNABLES=glibc.malloc.hugetlb=1) so
# that both sides run on the same pages.
set -euo pipefail
rounds=$1 leaves=$2
shift 2
for r in $(seq 1 "$rounds"); do
  for l in $leaves; do
    for b in "$@"; do
      /usr/bin/time -f "round $r hosts $((l * 8)) $b: %e s wall, %U s user, %M KB max RSS" \
        "$b" run all-to-all --topology leaf-spine --spines 4 --hosts-per-leaf 8 --leaves "$l" \
        --flow-kb 16 --json > /dev/null
    done
  done
done
