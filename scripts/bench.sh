#!/usr/bin/env bash
# End-to-end benchmark: rdma-perf --loopback against raw UDP baselines and
# against UCX (ucx_perftest, UCX_TLS=tcp) and libfabric (fi_pingpong -p tcp),
# all measured in this one run on this machine, printed as ratios.
#
# Usage: scripts/bench.sh [SECONDS_PER_RUN]   (default 2)
#   BENCH_NO_INSTALL=1  do not apt-get install ucx-utils / libfabric-bin
#   BENCH_OUT=FILE      also keep every raw JSON result in FILE
# Not a test: figures on a noisy 2-core machine vary; compare within a run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-2}"
out="${BENCH_OUT:-$(mktemp)}"
: >"$out"
logs=$(mktemp -d)
trap 'rm -rf "$logs"; [ -n "${BENCH_OUT:-}" ] || rm -f "$out"' EXIT

echo "== building (release)" >&2
cargo build --release -q --bin rdma-perf --example udp_baseline --example raw_baseline
perf=target/release/rdma-perf
udp=target/release/examples/udp_baseline

if ! command -v ucx_perftest >/dev/null || ! command -v fi_pingpong >/dev/null; then
    if [ -z "${BENCH_NO_INSTALL:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== installing the peers to compare with: ucx-utils libfabric-bin" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q ucx-utils libfabric-bin >"$logs/apt.log" 2>&1 ||
            echo "   (could not install them: see apt-get; their rows will be missing)" >&2
    fi
fi

# Runs a command that prints one JSON object as its last line, keeps it.
run() {
    echo "== $*" >&2
    local line
    line=$("$@" | tail -1)
    echo "$line" >>"$out"
    echo "   $line" >&2
}

# rdma-perf on loopback, tagged with extra keys for the table.
rp() {
    local tag=$1
    shift
    echo "== rdma-perf $* ($tag)" >&2
    local line
    line=$($perf "$@" --loopback --quiet --json | tail -1)
    echo "{\"tag\":\"$tag\",${line#\{}" >>"$out"
    echo "   $(echo "$line" | cut -c1-160)" >&2
}

# Raw UDP: 4124-byte datagrams are 4 KiB-MTU RoCE packets; 92 bytes a 64-byte WRITE.
run $udp bw plain 4124 "$secs"
run $udp bw mmsg 4124 "$secs"
run $udp bw gso 4124 "$secs"
# 64 KiB WRITEs' packets as this backend sends them, no engine work: what
# the wire format leaves of GSO (the FIRST packet's RETH makes two messages).
run $udp bw gso-roce 65536 "$secs"
run $udp bw mmsg 92 "$secs"
run $udp pingpong 8 20000 busy
run $udp pingpong 8 20000 block
# The same from unconnected sockets, as this backend first sent (the ICRC
# covers the IPv4 Identification, which Linux writes as a fixed 0 only for
# unconnected sends; it now probes a connected socket's numbers instead).
run $udp pingpong-unconnected 8 20000 busy
run $udp pingpong-unconnected 8 20000 block
# The system calls of an RC ping-pong (a 24-byte SEND of 8 bytes and the
# 20-byte ACK it carries, one UDP_SEGMENT sendmmsg, recvmmsg with GRO):
# rdma-perf's floor without any engine work.
run $udp pingpong-roce 24 20000 busy
run $udp pingpong-roce 24 20000 block
# The same floor from connected sockets: how low a RoCE v2 round trip
# over UDP sockets could go if the Identification were predicted.
run $udp pingpong-roce-connected 24 20000 busy

# Bandwidth, 1 QP, MTU 4096.
for test in write-bw read-bw send-bw; do
    for size in 4096 65536 1048576; do
        depth=128
        [ "$size" = 1048576 ] && depth=16
        rp bw $test -s $size -t $depth -D "$secs"
    done
done
# Scaling with QPs (64 KiB WRITEs), and the small-message rate.
for q in 2 8 64; do
    rp scale write-bw -s 65536 -q $q -t 32 -D "$secs"
done
rp rate write-bw -s 64 -q 8 -D "$secs"
# 8-byte round trips: busy-polling, then blocking (pure sleep, and adaptive).
for test in send-lat write-lat read-lat; do
    rp busy $test -s 8 -n 20000
done
rp block send-lat -s 8 -n 20000 --events --spin-us 0
rp block read-lat -s 8 -n 20000 --events --spin-us 0
rp adaptive send-lat -s 8 -n 20000 --events
# The io_uring driver on the same tests (the default is the socket driver).
rp uring-bw write-bw -s 65536 -t 128 -D "$secs" --io io-uring
rp uring-rate write-bw -s 64 -q 8 -D "$secs" --io io-uring
rp uring-busy send-lat -s 8 -n 20000 --io io-uring
rp uring-block send-lat -s 8 -n 20000 --events --spin-us 0 --io io-uring

# UCX over TCP: put bandwidth at 64 KiB and tag ping-pong latency.
ucx() {
    local port=$1
    shift
    UCX_TLS=tcp timeout 60 ucx_perftest -p "$port" >"$logs/ucx-server.log" 2>&1 &
    local srv=$!
    sleep 1
    UCX_TLS=tcp timeout 60 ucx_perftest 127.0.0.1 -p "$port" "$@" 2>&1 | awk '/^Final:/ {print}' | tail -1
    wait "$srv" 2>/dev/null || true
}
if command -v ucx_perftest >/dev/null; then
    echo "== ucx_perftest (UCX_TLS=tcp)" >&2
    for size in 4096 65536 1048576; do
        n=$((size >= 1048576 ? 2000 : 20000))
        f=$(ucx 13400 -t ucp_put_bw -s $size -n $n || true)
        # Final: iters p50 avg overall | MB/s avg overall | msg/s avg overall
        [ -n "$f" ] && echo "{\"test\":\"ucx-put-bw\",\"size\":$size,\"mbs\":$(echo "$f" | awk '{print $7}')}" >>"$out"
    done
    f=$(ucx 13401 -t tag_lat -s 8 -n 20000 || true)
    # ucx_perftest prints half of the round trip.
    [ -n "$f" ] && echo "{\"test\":\"ucx-tag-lat\",\"size\":8,\"half_rtt_us_p50\":$(echo "$f" | awk '{print $3}')}" >>"$out"
fi
if command -v fi_pingpong >/dev/null; then
    echo "== fi_pingpong -p tcp -e msg" >&2
    timeout 60 fi_pingpong -p tcp -e msg -B 47700 -S 8 -I 20000 >"$logs/fi-server.log" 2>&1 &
    srv=$!
    sleep 1
    line=$(timeout 60 fi_pingpong -p tcp -e msg -P 47700 -S 8 -I 20000 127.0.0.1 2>&1 | awk '$1 == 8 {print}' | tail -1 || true)
    wait "$srv" 2>/dev/null || true
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec: two transfers per round trip.
    [ -n "$line" ] && echo "{\"test\":\"fi-pingpong\",\"size\":8,\"usec_per_xfer\":$(echo "$line" | awk '{print $7}')}" >>"$out"
fi

# The raw-frame backends between two network namespaces joined by a veth
# pair (root only), against a plain AF_PACKET sender/receiver of the same
# frame size over the same pair: RoCE v1 WRITE Middle frames at MTU 1024
# are 14 + 40 + 12 + 1024 + 4 = 1094 bytes, IB ones 14 + 8 + 12 + 1024 + 4 + 2 = 1064.
raw=target/release/examples/raw_baseline
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null; then
    ns=bench$$
    cleanup_ns() { ip netns del ${ns}a 2>/dev/null || true; ip netns del ${ns}b 2>/dev/null || true; }
    trap 'cleanup_ns; rm -rf "$logs"; [ -n "${BENCH_OUT:-}" ] || rm -f "$out"' EXIT
    if ip netns add ${ns}a && ip netns add ${ns}b && ip link add ${ns}va type veth peer name ${ns}vb &&
        ip link set ${ns}va netns ${ns}a && ip link set ${ns}vb netns ${ns}b &&
        ip -n ${ns}a addr add 10.214.0.1/24 dev ${ns}va && ip -n ${ns}b addr add 10.214.0.2/24 dev ${ns}vb &&
        ip -n ${ns}a link set ${ns}va up && ip -n ${ns}b link set ${ns}vb up; then
        for backend in roce1 ib; do
            frame=1094
            [ $backend = ib ] && frame=1064
            echo "== raw baseline, $frame-byte frames over veth" >&2
            ip netns exec ${ns}b $raw recv ${ns}vb "$secs" >"$logs/raw-recv" 2>&1 &
            rx=$!
            sleep 0.3
            ip netns exec ${ns}a $raw send ${ns}va $frame "$secs" >"$logs/raw-send" 2>&1 || true
            wait $rx || true
            line=$(tail -1 "$logs/raw-recv")
            echo "{\"tag\":\"raw-$backend\",\"frame\":$frame,${line#\{}" >>"$out"
            echo "   $line" >&2
            echo "== rdma-perf write-bw --backend $backend over veth" >&2
            lids=(); lidc=()
            [ $backend = ib ] && lids=(--lid 2) && lidc=(--lid 1)
            ip netns exec ${ns}b $perf write-bw --backend $backend --netdev ${ns}vb "${lids[@]}" --oob rdma-perf -p 19600 \
                --bind 10.214.0.2 --quiet --json >"$logs/rp-srv" 2>&1 &
            srv=$!
            sleep 0.5
            line=$(ip netns exec ${ns}a $perf write-bw 10.214.0.2 --backend $backend --netdev ${ns}va "${lidc[@]}" \
                --oob rdma-perf -p 19600 --bind 10.214.0.1 -s 65536 -m 1024 -D "$secs" --quiet --json 2>&1 | tail -1 || true)
            wait $srv || true
            case "$line" in
                \{*) echo "{\"tag\":\"veth-$backend\",${line#\{}" >>"$out"; echo "   $(echo "$line" | cut -c1-160)" >&2 ;;
                *) echo "   rdma-perf over veth failed: $line" >&2 ;;
            esac
        done
    else
        echo "   (could not make the namespaces: the raw backend rows will be missing)" >&2
    fi
    cleanup_ns
fi

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def pick(**kw):
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return None
plain, mmsg, gso = (pick(test="udp-bw", mode=m, size=4124) for m in ("plain", "mmsg", "gso"))
gso_roce = pick(test="udp-bw", mode="gso-roce", size=65536)
busy, block = pick(test="udp-pingpong", poll="busy"), pick(test="udp-pingpong", poll="block")
floor = {m: pick(test="udp-pingpong-roce", poll=m) for m in ("busy", "block")}
unconnected = {m: pick(test="udp-pingpong-unconnected", poll=m) for m in ("busy", "block")}
floor_connected = pick(test="udp-pingpong-roce-connected", poll="busy")
def ucx_gbps(size):
    r = pick(test="ucx-put-bw", size=size)
    return r and r["mbs"] * 2**20 * 8 / 1e9
ucx_lat = pick(test="ucx-tag-lat")
ucx_rtt = ucx_lat and 2 * ucx_lat["half_rtt_us_p50"]
fi = pick(test="fi-pingpong")
fi_rtt = fi and 2 * fi["usec_per_xfer"]
def ratio(a, b):
    return f"{a / b:6.2f}x" if a is not None and b else "     -"

print()
print("Bandwidth, 1 QP, MTU 4096 (Gb/s of payload); raw UDP moves 4124-byte datagrams")
print(f"  {'test':10} {'size':>8} {'Gb/s':>7}  {'/plain':>7} {'/mmsg':>7} {'/GSO':>7}  {'UCX put':>7} {'/UCX':>7}")
for test in ("write-bw", "read-bw", "send-bw"):
    for size in (4096, 65536, 1048576):
        r = pick(tag="bw", test=test, size=size)
        if not r:
            continue
        u = ucx_gbps(size) if test == "write-bw" else None
        us = f"{u:7.2f}" if u else "      -"
        print(f"  {test:10} {size:>8} {r['gbps']:7.2f}  {ratio(r['gbps'], plain['gbps'])} "
              f"{ratio(r['gbps'], mmsg['gbps'])} {ratio(r['gbps'], gso['gbps'])}  {us} {ratio(r['gbps'], u)}")
gso_roce_gbps = gso_roce and gso_roce['gbps']
print(f"  raw UDP: plain {plain['gbps']:.2f}, sendmmsg {mmsg['gbps']:.2f}, GSO/GRO {gso['gbps']:.2f} Gb/s"
      + (f"; 64 KiB WRITEs' packets through GSO/GRO without the engine {gso_roce_gbps:.2f} Gb/s "
         f"({ratio(gso_roce_gbps, gso['gbps']).strip()} GSO)" if gso_roce_gbps else ""))
print()
print("Scaling, 64 KiB WRITEs (Gb/s)")
one = pick(tag="bw", test="write-bw", size=65536)
print(f"  {'QPs':>4} {'Gb/s':>7} {'/1 QP':>7}")
for q in (1, 2, 8, 64):
    r = one if q == 1 else pick(tag="scale", qps=q)
    if r:
        print(f"  {q:>4} {r['gbps']:7.2f} {ratio(r['gbps'], one['gbps'])}")
print()
rate, small = pick(tag="rate"), pick(test="udp-bw", mode="mmsg", size=92)
print("Message rate, 64-byte WRITEs on 8 QPs (million messages/s)")
print(f"  rdma-perf {rate['mpps']:.3f}   raw UDP sendmmsg of 92 bytes {small['mpps']:.3f}   {ratio(rate['mpps'], small['mpps'])}")
print()
print("8-byte round trips, p50 (us)")
print(f"  {'test':22} {'RTT':>7}  {'/UDP same mode':>14} {'/RoCE floor':>11} {'/UCX':>7} {'/libfabric':>10}")
for tag, test, base, mode in (("busy", "send-lat", busy, "busy"), ("busy", "write-lat", busy, "busy"),
                              ("busy", "read-lat", busy, "busy"), ("block", "send-lat", block, "block"),
                              ("block", "read-lat", block, "block"), ("adaptive", "send-lat", busy, "busy")):
    r = pick(tag=tag, test=test)
    if r:
        name = f"{test} ({tag})"
        f = floor.get(mode)
        print(f"  {name:22} {r['rtt_us_p50']:7.2f}  {ratio(r['rtt_us_p50'], base['rtt_us_p50']):>14} "
              f"{ratio(r['rtt_us_p50'], f and f['rtt_us_p50']):>11} "
              f"{ratio(r['rtt_us_p50'], ucx_rtt)} {ratio(r['rtt_us_p50'], fi_rtt):>10}")
print(f"  raw UDP ping-pong: busy {busy['rtt_us_p50']:.2f}, blocking {block['rtt_us_p50']:.2f}"
      + (f"; UCX tag_lat {ucx_rtt:.2f}" if ucx_rtt else "; UCX: not installed")
      + (f"; fi_pingpong {fi_rtt:.2f}" if fi_rtt else "; libfabric: not installed or failed"))
if unconnected["busy"] and unconnected["block"]:
    print(f"  unconnected sends alone (udp_baseline pingpong-unconnected): busy {unconnected['busy']['rtt_us_p50']:.2f} "
          f"({ratio(unconnected['busy']['rtt_us_p50'], busy['rtt_us_p50']).strip()} raw), blocking "
          f"{unconnected['block']['rtt_us_p50']:.2f} ({ratio(unconnected['block']['rtt_us_p50'], block['rtt_us_p50']).strip()} raw)")
if floor["busy"] and floor["block"]:
    print(f"  RoCE system-call floor (udp_baseline pingpong-roce): busy {floor['busy']['rtt_us_p50']:.2f} "
          f"({ratio(floor['busy']['rtt_us_p50'], busy['rtt_us_p50']).strip()} raw), blocking {floor['block']['rtt_us_p50']:.2f} "
          f"({ratio(floor['block']['rtt_us_p50'], block['rtt_us_p50']).strip()} raw)")
if floor_connected and busy:
    print(f"  the same floor from connected sockets (pingpong-roce-connected): busy {floor_connected['rtt_us_p50']:.2f} "
          f"({ratio(floor_connected['rtt_us_p50'], busy['rtt_us_p50']).strip()} raw)")
print("  (adaptive: --events with the default spin: spins while packets move, sleeps when idle)")
print()
print("I/O drivers: io_uring against the socket driver (the default), same tests")
print(f"  {'test':34} {'sockets':>9} {'io_uring':>9} {'ratio':>7}")
for name, sock, ur, key in (("WRITE 64 KiB, 1 QP (Gb/s)", one, pick(tag="uring-bw"), "gbps"),
                            ("64 B WRITEs, 8 QPs (M/s)", rate, pick(tag="uring-rate"), "mpps"),
                            ("SEND RTT p50, busy-polling (us)", pick(tag="busy", test="send-lat"), pick(tag="uring-busy"), "rtt_us_p50"),
                            ("SEND RTT p50, blocking (us)", pick(tag="block", test="send-lat"), pick(tag="uring-block"), "rtt_us_p50")):
    if sock and ur:
        drv = ur["counters"].get("io_driver", "?")
        print(f"  {name:34} {sock[key]:9.2f} {ur[key]:9.2f} {ratio(ur[key], sock[key])}" + ("" if drv == "io-uring" else f"  (ran on {drv})"))
print()
print("Raw-frame backends over a veth pair between namespaces, WRITE 64 KiB at MTU 1024, against a plain")
print("AF_PACKET sender/receiver of the same frame size over the same pair (frames per second)")
for b in ("roce1", "ib"):
    base, rp = pick(tag=f"raw-{b}"), pick(tag=f"veth-{b}")
    if base and rp and base.get("seconds"):
        base_fps = base["frames"] / base["seconds"]
        rp_fps = rp["gbps"] * 1e9 / 8 / 1024  # 64 packets of 1024 bytes per message
        print(f"  {b:6} rdma-perf {rp['gbps']:6.2f} Gb/s = {rp_fps / 1e3:7.1f} kframes/s; raw {base['gbps']:6.2f} Gb/s = "
              f"{base_fps / 1e3:7.1f} kframes/s of {base['frame']} B; ratio {ratio(rp_fps, base_fps).strip()}")
    else:
        print(f"  {b:6} not measured (needs root and network namespaces)")
print()
print("Goals: WRITE 64 KiB 1 QP >= 0.5x GSO and >= 2x UCX; RTT <= 1.3x raw UDP (same mode), below UCX and")
print("libfabric; >= 1 M 64-byte WRITEs/s. (Issue 32 asks 0.9x GSO; the wire format alone leaves the")
print("ratio of its packets without the engine, docs/performance.md.)")
wbw = one
print(f"  WRITE 64 KiB / GSO {ratio(wbw['gbps'], gso['gbps'])}, / its packets without the engine "
      f"{ratio(wbw['gbps'], gso_roce_gbps).strip()}, / UCX {ratio(wbw['gbps'], ucx_gbps(65536))}; "
      f"peak RSS {wbw['peak_rss_kib'] / 1024:.1f} MiB; retransmits {wbw['retransmits']}")
PY
