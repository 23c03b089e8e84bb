#!/usr/bin/env bash
# rdma-core 44's own test suite (pyverbs, Debian's python3-pyverbs) over the
# drop-in libibverbs.so.1/librdmacm.so.1, through softroce-run, on one
# device and on two; prints what passed, failed and was skipped (each skip
# reason classed as hardware or as missing here) and fails on any failure
# or error. See docs/ibverbs-abi.md.
#
#   scripts/pyverbs-suite.sh [--out DIR] [--lab] [-- unittest names, e.g. tests.test_cq]
#
# --lab: then the same suite in the lab guest against kernel rxe (Linux 6.1,
# rdma-core 44; scripts/lab/pyverbs-rxe.sh, as root, results in DIR/rxe), and
# one report with both columns side by side that fails when a test passing
# on kernel rxe does not pass here.
#
# The suite is the `tests/` directory of Debian's rdma-core 44 source
# package, which python3-pyverbs ships in /usr/share/doc/rdma-core/tests
# (taken from the package file itself where a system drops /usr/share/doc).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${TMPDIR:-/tmp}/pyverbs-suite
names=()
lab=0
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=$2; shift 2 ;;
    --lab) lab=1; shift ;;
    --) shift; names=("$@"); break ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pyverbs-suite: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

py=/usr/bin/python3 # Debian's: pyverbs is built for it, not for another Python on PATH
if ! "$py" -c 'import pyverbs.device' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== installing python3-pyverbs"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-pyverbs >/dev/null ||
            { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-pyverbs >/dev/null; }
    fi
    "$py" -c 'import pyverbs.device' 2>/dev/null || { echo "pyverbs-suite: needs Debian's python3-pyverbs (apt-get install python3-pyverbs)" >&2; exit 1; }
fi

echo "== the suite (rdma-core $(dpkg-query -W -f='${Version}' python3-pyverbs))"
rm -rf "$out" && mkdir -p "$out/suite"
if [ -f /usr/share/doc/rdma-core/tests/__init__.py ]; then
    cp -r /usr/share/doc/rdma-core/tests "$out/suite/"
else
    (cd "$out" && apt-get -o APT::Sandbox::User=root download -q python3-pyverbs >/dev/null && dpkg-deb -x python3-pyverbs_*.deb pkg)
    cp -r "$out/pkg/usr/share/doc/rdma-core/tests" "$out/suite/"
fi
gunzip -f "$out"/suite/tests/*.gz

echo "== building the drop-in libraries (release)"
cargo build --release -q -p ibverbs-abi -p rdmacm-abi
run=$root/target/release/softroce-run

# A network namespace of the suite's own: its loopback is the devices'
# interface (rdma-core's rdmacm tests take the device's address from
# `ip addr show` of the interface softroce-run presents under
# /sys/class/infiniband/NAME/device/net/, the first one, 127.0.0.1), and
# nothing else on the host's 127.0.0.1:4791 (a perftest or qperf run beside
# this one) is in the way.
netns=(unshare --net)
[ "$(id -u)" = 0 ] || netns+=(--map-root-user)
if ! "${netns[@]}" true 2>/dev/null; then
    echo "pyverbs-suite: cannot make a network namespace (${netns[*]}): needs root or unprivileged user namespaces" >&2
    exit 1
fi

status=0
for cfg in "one=rxe0=127.0.0.1" "two=rxe0=127.0.0.1,rxe1=127.0.0.2"; do
    label=${cfg%%=*}
    devices=${cfg#*=}
    echo "== $label device(s): $devices"
    args=()
    IFS=, read -ra devs <<<"$devices"
    for d in "${devs[@]}"; do args+=(--device "$d"); done
    # Bounded: a hang is a failure that says where (the log's last lines).
    if ! timeout 600 "${netns[@]}" sh -c 'ip link set lo up && exec "$@"' sh \
        "$run" "${args[@]}" -- "$py" scripts/pyverbs/run_suite.py "$out/suite" "$out/$label.json" "${names[@]}" \
        >"$out/$label.log" 2>&1; then
        echo "pyverbs-suite: the $label-device run did not finish cleanly; its last lines:" >&2
        tail -20 "$out/$label.log" >&2
        status=1
    fi
    tail -1 "$out/$label.log"
done
results=()
for label in one two; do [ -f "$out/$label.json" ] && results+=("$label=$out/$label.json"); done
[ ${#results[@]} -gt 0 ] || { echo "pyverbs-suite: no results" >&2; exit 1; }
"$py" scripts/pyverbs/report.py "${results[@]}" --known scripts/pyverbs/known-failures.txt --markdown "$out/report.md" || status=1
echo "(results and logs: $out)"
if [ $lab = 1 ]; then
    echo "== the same suite in the lab guest, kernel rxe"
    bash scripts/lab/pyverbs-rxe.sh --out "$out/rxe" --ours "$out" -- "${names[@]}" || status=1
fi
exit $status
