#!/usr/bin/env bash
# rdma-core 44's pyverbs test suite against kernel Soft-RoCE: the same suite
# as scripts/pyverbs-suite.sh (Debian 12's python3-pyverbs 44 and the tests/
# it ships), run by the same scripts/pyverbs/run_suite.py, inside one lab
# guest (Linux 6.1's rdma_rxe, Debian 12's rdma-core 44), on one device (rxe0
# on the guest's eth0) and on two (rxe1 added on a veth in the guest); the
# records come back to the host and scripts/pyverbs/report.py puts them beside
# this stack's (pyverbs-suite.sh's results), with --passes-on: the report
# fails when a test that passes on kernel rxe does not pass here. Before
# each run the guest gets the sysfs entry the suite looks for a device's
# interface in (scripts/lab/rxe-sysfs-view.sh: device/net/IFNAME, which rxe
# lacks and softroce-run presents for this stack's devices), so the rdmacm
# tests run on both sides.
#
#   sudo scripts/lab/pyverbs-rxe.sh [--out DIR] [--ours DIR] [-- unittest names]
#
# --out: where rxe-one.json, rxe-two.json, their logs and report.md go
# (default ${TMPDIR:-/tmp}/pyverbs-rxe). --ours: pyverbs-suite.sh's results
# (one.json, two.json; default ${TMPDIR:-/tmp}/pyverbs-suite); without them
# the report has the rxe columns only. Boots one guest (SRLAB_PYVERBS=1, its
# own namespace and run directory unless SRLAB_NS/SRLAB_RUN say) under
# `nice -n ${SRLAB_NICE:-5}`; needs what scripts/lab/lab.sh needs (says
# SKIPPED and exits 0 without root, qemu or network namespaces).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
LAB="$root/scripts/lab/lab.sh"
out=${TMPDIR:-/tmp}/pyverbs-rxe
ours=${TMPDIR:-/tmp}/pyverbs-suite
names=()
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=$2; shift 2 ;;
    --ours) ours=$2; shift 2 ;;
    --) shift; names=("$@"); break ;;
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pyverbs-rxe: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
# Where the lab cannot run, say so and succeed, as scripts/interop.sh does.
skip() { echo "pyverbs-rxe: SKIPPED: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (the lab's network namespace and taps)"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed (Debian: qemu-system-x86)"
ip netns add srlab-probe-pv 2>/dev/null || skip "network namespaces are not available here"
ip netns del srlab-probe-pv

export SRLAB_GUEST=bookworm SRLAB_PYVERBS=1 SRLAB_NS=${SRLAB_NS:-srlab-pyverbs}
export SRLAB_RUN=${SRLAB_RUN:-/tmp/softroce-lab-pyverbs} SRLAB_MEM=${SRLAB_MEM:-1024}
lab() { nice -n "${SRLAB_NICE:-5}" bash "$LAB" "$@"; }

mkdir -p "$out"
rm -f "$out"/rxe-*.json "$out"/rxe-*.log
lab prepare
lab down >/dev/null 2>&1 || true
trap 'lab down >/dev/null 2>&1 || true' EXIT
lab up 1
runner=$(lab put "$root/scripts/pyverbs/run_suite.py")
view=$(lab put "$root/scripts/lab/rxe-sysfs-view.sh")
share=$SRLAB_RUN/share/files

lab run 1 'echo "guest: Linux $(uname -r), python3-pyverbs from rdma-core $(ls /usr/lib/x86_64-linux-gnu/libibverbs.so.1.* | sed "s/.*so.1.[0-9]*.//")"; rdma link' 60 |
    tee "$out/rxe-guest.txt"
status=0
for label in one two; do
    if [ $label = two ]; then
        # rxe refuses a second device on eth0: rxe1 goes on a veth of its own
        lab run 1 'grep -q "^veth " /proc/modules || insmod /lib/modules/$(uname -r)/extra/veth.ko
            ip link add vrxe1 type veth peer name vrxe1p && ip link set vrxe1p up && ip link set vrxe1 up &&
            rdma link add rxe1 type rxe netdev vrxe1 && rdma link' 60 >>"$out/rxe-guest.txt" ||
            { echo "pyverbs-rxe: no second rxe device in the guest" >&2; status=1; break; }
    fi
    lab run 1 "sh $view" 60 >>"$out/rxe-guest.txt" ||
        { echo "pyverbs-rxe: the sysfs view failed in the guest" >&2; status=1; }
    echo "== kernel rxe, $label device(s)"
    # (the names are unittest names: no quoting needed)
    if ! lab run 1 "cd /tmp && timeout 1200 python3 $runner /opt/pyverbs-suite /share/files/rxe-$label.json ${names[*]} \
        >/share/files/rxe-$label.log 2>&1" 1260; then
        echo "pyverbs-rxe: the $label-device run in the guest did not finish cleanly; its last lines:" >&2
        tail -20 "$share/rxe-$label.log" >&2 || true
    fi
    cp "$share/rxe-$label.log" "$out/" 2>/dev/null || true
    cp "$share/rxe-$label.json" "$out/" 2>/dev/null || status=1
    tail -1 "$out/rxe-$label.log" 2>/dev/null || true
done

results=() refs=()
for label in one two; do
    [ -f "$ours/$label.json" ] && results+=("ours-$label=$ours/$label.json")
    if [ -f "$out/rxe-$label.json" ]; then
        results+=("rxe-$label=$out/rxe-$label.json")
        refs+=(--passes-on "rxe-$label")
        [ -f "$ours/$label.json" ] && refs[-1]="rxe-$label:ours-$label"
    fi
done
[ ${#refs[@]} -gt 0 ] || { echo "pyverbs-rxe: no results from the guest" >&2; exit 1; }
[ -f "$ours/one.json" ] || echo "pyverbs-rxe: no results of this stack in $ours (scripts/pyverbs-suite.sh): rxe columns only"
/usr/bin/python3 "$root/scripts/pyverbs/report.py" "${results[@]}" "${refs[@]}" --known "$root/scripts/pyverbs/known-failures.txt" --markdown "$out/report.md" || status=1
echo "(results and logs: $out)"
exit $status
