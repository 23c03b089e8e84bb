#!/usr/bin/env bash
# The Soft-RoCE lab: small qemu guests running the Linux kernel's Soft-RoCE
# (rdma_rxe) with rdma-core's tools and perftest, on a bridge inside a network
# namespace this script creates. Our stack runs on the host side of that
# bridge (see `host`), so every packet stays inside the namespace.
#
#   scripts/lab/lab.sh prepare            fetch and unpack the guest (once; cached)
#   scripts/lab/lab.sh up [N]             namespace + bridge + N guests (default 2)
#   scripts/lab/lab.sh run K 'CMD' [SECS] run CMD in guest K: its output and exit code
#   scripts/lab/lab.sh start K 'CMD'      start CMD in guest K; prints a job id
#   scripts/lab/lab.sh wait K ID [SECS]   wait for that job: its output and exit code
#   scripts/lab/lab.sh out K ID           what that job printed so far
#   scripts/lab/lab.sh host CMD...        run CMD on the host side, inside the namespace
#   scripts/lab/lab.sh put FILE           copy FILE where the guests see it; prints its guest path
#   scripts/lab/lab.sh capture start|stop NAME   tcpdump of the bridge -> $RUN/NAME.pcap
#   scripts/lab/lab.sh status | down
#
# Addresses: host side 10.88.0.1 and fd88::1; guest K at 10.88.0.(10+K) and
# fd88::(10+K) (hex). MTU 9000 on the bridge, the taps and the guests, so path
# MTU 4096 works. Needs root, qemu-system-x86_64, busybox (static), cpio and
# iproute2; `prepare` needs apt-get (Debian bookworm sources for the default guest).
#
# Environment: SRLAB_CACHE (guest files, default ~/.cache/softroce-lab),
# SRLAB_RUN (run state, default /tmp/softroce-lab), SRLAB_NS (namespace name,
# default srlab), SRLAB_MEM (guest MiB, default 768), SRLAB_GUEST (the guest's
# Debian release: bookworm, the default, is Linux 6.1 with rdma-core 44;
# trixie is Linux 6.12 with rdma-core 56, its packages fetched through an APT
# configuration of its own in its cache, default ~/.cache/softroce-lab-trixie,
# so the host's sources and lists stay as they are), SRLAB_PYVERBS=1 (bookworm
# only: `prepare` also makes $CACHE/pyverbs.gz, Python 3.11, Debian's
# python3-pyverbs 44 with rdma-core 44's test suite in /opt/pyverbs-suite and
# the veth module, and `up` boots with it appended to the initramfs; see
# scripts/lab/pyverbs-rxe.sh).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GUEST=${SRLAB_GUEST:-bookworm}
case "$GUEST" in
    bookworm) CACHE=${SRLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/softroce-lab} ;;
    trixie) CACHE=${SRLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/softroce-lab-trixie} ;;
    *) echo "lab: SRLAB_GUEST is bookworm or trixie, not '$GUEST'" >&2; exit 2 ;;
esac
RUN=${SRLAB_RUN:-/tmp/softroce-lab}
NS=${SRLAB_NS:-srlab}
MEM=${SRLAB_MEM:-768}
BRIDGE=srbr0
MTU=9000
HOST4=10.88.0.1
HOST6=fd88::1

# Debian packages unpacked into the guest's root file system: rdma-core's
# libraries, providers and tools, perftest, iproute2 (tc, ip), kmod, bash,
# tcpdump, and the libraries they load.
GUEST_PACKAGES="libc6 libgcc-s1 libstdc++6 libgomp1 libibverbs1 ibverbs-providers librdmacm1 libibumad3
 ibverbs-utils perftest rdmacm-utils iproute2 libnl-3-200 libnl-route-3-200 libmnl0 libelf1 libbpf1 libcap2
 libdb5.3 libselinux1 libtirpc3 libxtables12 zlib1g libzstd1 liblzma5 libpcre2-8-0 libgssapi-krb5-2 libkrb5-3
 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1 libssl3 libpci3 libudev1 libbsd0 libmd0 kmod bash
 libtinfo6 tcpdump libpcap0.8 libdbus-1-3 libsystemd0 liblz4-1 libgcrypt20 libgpg-error0"
# Debian 13 renamed several of those libraries in the 64-bit time_t
# transition (the t64 suffix), and splits libkmod out of kmod.
if [ "$GUEST" = trixie ]; then
    GUEST_PACKAGES="libc6 libgcc-s1 libstdc++6 libgomp1 libibverbs1 ibverbs-providers librdmacm1t64 libibumad3
 ibverbs-utils perftest rdmacm-utils iproute2 libnl-3-200 libnl-route-3-200 libmnl0 libelf1t64 libbpf1 libcap2
 libdb5.3t64 libselinux1 libtirpc3t64 libtirpc-common libxtables12 zlib1g libzstd1 liblzma5 libpcre2-8-0
 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1 libssl3t64 libpci3 libudev1
 libbsd0 libmd0 kmod libkmod2 bash libtinfo6 tcpdump libpcap0.8t64 libdbus-1-3 libsystemd0 liblz4-1 libxxhash0
 libgcrypt20 libgpg-error0"
fi
# SRLAB_PYVERBS=1: what rdma-core 44's pyverbs test suite needs on top, in
# an archive of its own appended to the initramfs at boot (the default
# image, and so every other row of the lab, stays as it was).
PYVERBS=${SRLAB_PYVERBS:-0}
PYVERBS_PACKAGES="python3-pyverbs libpython3.11 python3 python3-minimal python3.11 python3.11-minimal
 libpython3-stdlib libpython3.11-stdlib libpython3.11-minimal libexpat1 libffi8 libbz2-1.0 libcrypt1 libncursesw6
 libnsl2 libreadline8 readline-common libsqlite3-0 libuuid1 media-types"
# Kernel modules the guest loads (their dependencies come along).
GUEST_MODULES="rdma_rxe rdma_ucm ib_umad ib_uverbs virtio_net virtio_pci 9pnet_virtio 9p crc32_generic
 crc32c_generic sch_netem sch_tbf"

die() { echo "lab: $*" >&2; exit 1; }
in_ns() { ip netns exec "$NS" "$@"; }
guest_ip4() { echo "10.88.0.$((10 + $1))"; }
guest_ip6() { printf 'fd88::%x\n' $((10 + $1)); }

need() {
    local missing=()
    for tool in "$@"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
    [ ${#missing[@]} -eq 0 ] || die "missing tools: ${missing[*]} (Debian: qemu-system-x86 busybox-static cpio iproute2 tcpdump)"
}

# ---------------------------------------------------------------- prepare
# APT options: none for bookworm (the host's own sources); for trixie a
# sources list, lists, cache and an empty status of its own under $CACHE/apt.
APT_OPTS=()
if [ "$GUEST" = trixie ]; then
    APT_OPTS=(-o "Dir::Etc::sourcelist=$CACHE/apt/sources.list" -o "Dir::Etc::sourceparts=$CACHE/apt/sources.list.d"
        -o "Dir::Etc::preferences=$CACHE/apt/preferences" -o "Dir::Etc::preferencesparts=$CACHE/apt/preferences.d"
        -o "Dir::State::lists=$CACHE/apt/lists" -o "Dir::State::status=$CACHE/apt/status"
        -o "Dir::Cache=$CACHE/apt/cache" -o APT::Sandbox::User=root)
fi

apt_setup() {
    [ "$GUEST" = trixie ] || return 0
    local a=$CACHE/apt
    mkdir -p "$a/sources.list.d" "$a/preferences.d" "$a/lists/partial" "$a/cache/archives/partial"
    touch "$a/status"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
        >"$a/sources.list"
    ls "$a/lists/"*_Packages >/dev/null 2>&1 ||
        apt-get "${APT_OPTS[@]}" update -q >/dev/null || die "apt-get update (trixie) failed"
}

fetch_debs() { # PACKAGE... (default: the kernel package $1 and GUEST_PACKAGES)
    local list="$*"
    [ $# -gt 1 ] || list="$1 $GUEST_PACKAGES"
    (cd "$CACHE/debs" && for p in $list; do
        ls "${p}"_*.deb >/dev/null 2>&1 ||
            apt-get "${APT_OPTS[@]}" -o APT::Sandbox::User=root download -q "$p" >/dev/null || exit 1
    done)
}

# Debian 13's packages install into /usr only (merged /usr): make /bin,
# /sbin, /lib and /lib64 links into /usr, moving what a package put there.
merge_usr() {
    local r=$1 d
    for d in bin sbin lib lib64; do
        mkdir -p "$r/usr/$d"
        if [ -d "$r/$d" ] && [ ! -L "$r/$d" ]; then
            cp -a "$r/$d/." "$r/usr/$d/" && rm -rf "${r:?}/$d"
        fi
        ln -sfn "usr/$d" "$r/$d"
    done
}

# The guest's depmod: its own kmod, run with its own loader and libraries
# (trixie's needs a newer glibc than bookworm's host has).
guest_depmod() {
    if [ "$GUEST" = trixie ]; then
        "$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "$root/usr/lib/x86_64-linux-gnu" \
            --argv0 depmod "$root/usr/bin/kmod" "$@"
    else
        "$root/bin/depmod" "$@"
    fi
}

prepare() {
    need apt-get dpkg cpio gzip busybox
    local kpkg debs root kver kdir
    apt_setup
    kpkg=$(apt-cache "${APT_OPTS[@]}" depends linux-image-amd64 | sed -n 's/.*Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
    [ -n "$kpkg" ] || die "cannot find the kernel package linux-image-amd64 depends on (apt-get update?)"
    kver=${kpkg#linux-image-}
    if [ -e "$CACHE/ready" ] && [ "$(cat "$CACHE/ready")" = "$kver" ]; then
        echo "lab: guest for kernel $kver already prepared in $CACHE"
        return
    fi
    debs=$CACHE/debs
    mkdir -p "$debs"
    echo "lab: downloading $kpkg and $(echo $GUEST_PACKAGES | wc -w) packages into $debs"
    fetch_debs "$kpkg" || { apt-get "${APT_OPTS[@]}" update -q >/dev/null && fetch_debs "$kpkg"; } ||
        die "apt-get download failed"

    kdir=$CACHE/kernel
    rm -rf "$kdir" && mkdir -p "$kdir"
    dpkg -x "$(ls "$debs/${kpkg}"_*.deb | head -1)" "$kdir"
    cp "$kdir/boot/vmlinuz-$kver" "$CACHE/vmlinuz"

    root=$CACHE/root
    rm -rf "$root" && mkdir -p "$root"
    for p in $GUEST_PACKAGES; do dpkg -x "$(ls "$debs/${p}"_*.deb | head -1)" "$root"; done
    if [ "$GUEST" = trixie ]; then merge_usr "$root"; merge_usr "$kdir"; fi
    # depmod from the guest's own kmod
    ln -sf kmod "$root/bin/depmod"
    guest_depmod -b "$kdir" "$kver"
    local mods=$kdir/lib/modules/$kver
    mkdir -p "$root/lib/modules/$kver"
    cp "$mods"/modules.order "$mods"/modules.builtin "$mods"/modules.builtin.modinfo "$root/lib/modules/$kver/"
    # (a module built into the kernel, as virtio_pci is in Debian 13's, needs no file)
    for m in $GUEST_MODULES; do
        grep -E "(^|/)$m\.ko(\.[a-z]+)?:" "$mods/modules.dep" || grep -qE "(^|/)$m\.ko\$" "$mods/modules.builtin" ||
            die "no module $m"
    done |
        tr ' :' '\n\n' | grep . | sort -u | while read -r f; do
            mkdir -p "$root/lib/modules/$kver/$(dirname "$f")"
            cp "$mods/$f" "$root/lib/modules/$kver/$f"
        done
    guest_depmod -b "$root" "$kver"

    cp "$(command -v busybox)" "$root/bin/busybox"
    local applet d
    for applet in $("$root/bin/busybox" --list); do
        for d in bin sbin usr/bin usr/sbin; do [ -e "$root/$d/$applet" ] && continue 2; done
        ln -s busybox "$root/bin/$applet"
    done
    for t in modprobe insmod rmmod modinfo; do ln -sf ../bin/kmod "$root/sbin/$t"; done
    mkdir -p "$root"/{proc,sys,dev,tmp,share,run,root}
    install -m755 "$HERE/guest-init.sh" "$root/init"
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$CACHE/initramfs.gz.new")
    mv "$CACHE/initramfs.gz.new" "$CACHE/initramfs.gz"
    echo "$kver" >"$CACHE/ready"
    echo "lab: prepared kernel $kver and $(du -h "$CACHE/initramfs.gz" | cut -f1) initramfs in $CACHE"
}

# The pyverbs archive ($CACHE/pyverbs.gz): Python and python3-pyverbs from
# the same Debian release as the guest, the suite (the tests/ directory that
# python3-pyverbs ships, uncompressed, in /opt/pyverbs-suite) and veth.ko (a
# second netdev for a second rxe device). Remade when the package list or
# the kernel changes.
prepare_pyverbs() {
    [ "$GUEST" = bookworm ] || die "SRLAB_PYVERBS: the suite is rdma-core 44's, for the bookworm guest only"
    local kver stamp x=$CACHE/pyverbs root p
    kver=$(cat "$CACHE/ready")
    stamp="$kver $(echo $PYVERBS_PACKAGES | md5sum | cut -c1-12)"
    if [ -e "$x.ready" ] && [ "$(cat "$x.ready")" = "$stamp" ]; then
        echo "lab: pyverbs archive for kernel $kver already prepared in $CACHE"
        return
    fi
    echo "lab: downloading $(echo $PYVERBS_PACKAGES | wc -w) packages for the pyverbs suite into $CACHE/debs"
    fetch_debs $PYVERBS_PACKAGES || { apt-get "${APT_OPTS[@]}" update -q >/dev/null && fetch_debs $PYVERBS_PACKAGES; } ||
        die "apt-get download failed"
    root=$x.root
    rm -rf "$root" && mkdir -p "$root"
    for p in $PYVERBS_PACKAGES; do dpkg -x "$(ls "$CACHE/debs/${p}"_*.deb | head -1)" "$root"; done
    mkdir -p "$root/opt/pyverbs-suite"
    cp -r "$root/usr/share/doc/rdma-core/tests" "$root/opt/pyverbs-suite/"
    gunzip -f "$root"/opt/pyverbs-suite/tests/*.gz
    rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale"
    mkdir -p "$root/lib/modules/$kver/extra"
    cp "$CACHE/kernel/lib/modules/$kver/kernel/drivers/net/veth.ko" "$root/lib/modules/$kver/extra/"
    (cd "$root" && find . -mindepth 1 | cpio -o -H newc --quiet | gzip -1 >"$x.gz.new")
    mv "$x.gz.new" "$x.gz"
    echo "$stamp" >"$x.ready"
    echo "lab: prepared the pyverbs archive, $(du -h "$x.gz" | cut -f1), in $CACHE"
}

# Rebuilds the initramfs when guest-init.sh changed since the last prepare.
refresh_init() {
    [ -e "$CACHE/ready" ] || die "the guest is not prepared: run '$0 prepare' first"
    if ! cmp -s "$HERE/guest-init.sh" "$CACHE/root/init"; then
        install -m755 "$HERE/guest-init.sh" "$CACHE/root/init"
        (cd "$CACHE/root" && find . | cpio -o -H newc --quiet | gzip -1 >"$CACHE/initramfs.gz.new")
        mv "$CACHE/initramfs.gz.new" "$CACHE/initramfs.gz"
    fi
}

# ---------------------------------------------------------------- up/down
net_up() {
    ip netns list | grep -qw "^$NS" && return
    ip netns add "$NS"
    echo "$NS" >"$RUN/netns"
    in_ns ip link set lo up
    in_ns ip link add "$BRIDGE" type bridge stp_state 0 forward_delay 0
    in_ns ip link set "$BRIDGE" mtu "$MTU"
    in_ns sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
    in_ns sysctl -qw net.ipv6.conf.default.router_solicitations=0
    in_ns ip addr add "$HOST4/24" dev "$BRIDGE"
    in_ns ip -6 addr add "$HOST6/64" dev "$BRIDGE" nodad
    in_ns ip link set "$BRIDGE" up
}

boot() {
    local k=$1 tap=srtap$1 accel initrd=$CACHE/initramfs.gz
    local share=$RUN/share
    if [ "$PYVERBS" = 1 ]; then
        # a second archive after the first: the kernel unpacks both
        [ -e "$CACHE/pyverbs.gz" ] || die "no pyverbs archive: run 'SRLAB_PYVERBS=1 $0 prepare' first"
        initrd=$RUN/initrd-pyverbs.gz
        cat "$CACHE/initramfs.gz" "$CACHE/pyverbs.gz" >"$initrd"
    fi
    mkdir -p "$share/vm$k"
    rm -rf "${share:?}/vm$k"/{jobs,done,ready}
    in_ns ip tuntap add dev "$tap" mode tap
    in_ns ip link set "$tap" mtu "$MTU" master "$BRIDGE" up
    # KVM only where the CPU offers it: a nested guest without vmx/svm hangs.
    accel="-accel tcg,thread=multi -cpu max"
    if grep -qwE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ]; then accel="-enable-kvm -cpu host"; fi
    date +%s.%N >"$RUN/vm$k.started"
    # shellcheck disable=SC2086
    in_ns qemu-system-x86_64 $accel -m "$MEM" -smp 1 -name "srlab-vm$k" \
        -nodefaults -display none -no-reboot \
        -kernel "$CACHE/vmlinuz" -initrd "$initrd" \
        -append "console=ttyS0 panic=-1 quiet srlab.vm=$k srlab.ip4=$(guest_ip4 "$k")/24 srlab.ip6=$(guest_ip6 "$k")/64 srlab.mtu=$MTU" \
        -serial "file:$RUN/vm$k.console" \
        -netdev "tap,id=net0,ifname=$tap,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=net0,mac=52:54:00:88:00:$(printf %02x "$k"),host_mtu=$MTU" \
        -fsdev "local,id=share,path=$share,security_model=none" \
        -device virtio-9p-pci,fsdev=share,mount_tag=share \
        -daemonize -pidfile "$RUN/vm$k.pid" || die "qemu did not start guest $k"
}

wait_ready() {
    local k=$1 i
    for i in $(seq 1 1200); do
        if [ -e "$RUN/share/vm$k/ready" ]; then
            printf 'lab: vm%s ready at %s (%.1f s after start)\n' "$k" "$(guest_ip4 "$k")" \
                "$(echo "$(date +%s.%N) - $(cat "$RUN/vm$k.started")" | bc)"
            return 0
        fi
        kill -0 "$(cat "$RUN/vm$k.pid" 2>/dev/null || echo 0)" 2>/dev/null || break
        sleep 0.1
    done
    echo "lab: vm$k did not come up; the end of its console:" >&2
    tail -20 "$RUN/vm$k.console" >&2
    return 1
}

up() {
    local n=${1:-2} k
    need qemu-system-x86_64 ip bc
    refresh_init
    mkdir -p "$RUN/share"
    [ -e "$RUN/vm1.pid" ] && die "a lab is already up ($RUN); run '$0 down' first"
    net_up
    for k in $(seq 1 "$n"); do boot "$k"; done
    for k in $(seq 1 "$n"); do wait_ready "$k" || { down; return 1; }; done
}

down() {
    local p pid i
    for p in "$RUN"/capture-*.pid "$RUN"/vm*.pid; do
        [ -e "$p" ] || continue
        pid=$(cat "$p")
        kill "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$p"
    done
    if [ -e "$RUN/netns" ]; then
        ip netns del "$(cat "$RUN/netns")" 2>/dev/null || true
        rm -f "$RUN/netns"
    fi
    rm -rf "$RUN/share"
    echo "lab: down"
}

# ---------------------------------------------------------------- jobs
submit() {
    local k=$1 cmd=$2 id dir=$RUN/share/vm$1
    [ -e "$dir/ready" ] || die "guest $k is not up"
    id=$(date +%s%N)$RANDOM
    printf '%s\n' "$cmd" >"$dir/jobs/.$id"
    mv "$dir/jobs/.$id" "$dir/jobs/$id.sh"
    echo "$id"
}

wait_job() {
    local k=$1 id=$2 secs=${3:-300} dir=$RUN/share/vm$1/done i
    for ((i = 0; i < secs * 10; i++)); do
        if [ -e "$dir/$id.rc" ]; then
            cat "$dir/$id.out"
            return "$(cat "$dir/$id.rc")"
        fi
        sleep 0.1
    done
    cat "$dir/$id.out" 2>/dev/null || true
    echo "lab: guest $k job $id did not finish in $secs s" >&2
    return 124
}

capture() {
    local what=$1 name=$2 pid
    case "$what" in
        start)
            # `ip netns exec` execs tcpdump: $! is tcpdump itself (not a subshell)
            ip netns exec "$NS" tcpdump -i "$BRIDGE" -s 0 -U -w "$RUN/$name.pcap" >"$RUN/capture-$name.log" 2>&1 &
            echo $! >"$RUN/capture-$name.pid"
            for _ in $(seq 1 30); do grep -q listening "$RUN/capture-$name.log" && break; sleep 0.1; done
            ;;
        stop)
            [ -e "$RUN/capture-$name.pid" ] || die "no capture named $name"
            pid=$(cat "$RUN/capture-$name.pid")
            sleep 0.3
            kill -INT "$pid" 2>/dev/null || true
            for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            rm -f "$RUN/capture-$name.pid"
            echo "$RUN/$name.pcap"
            ;;
        *) die "capture start|stop NAME" ;;
    esac
}

status() {
    local p
    ip netns list | grep -w "^$NS" || echo "no namespace $NS"
    for p in "$RUN"/vm*.pid; do
        [ -e "$p" ] || continue
        echo "$(basename "$p" .pid): pid $(cat "$p") $(kill -0 "$(cat "$p")" 2>/dev/null && echo running || echo gone)"
    done
}

[ "$(id -u)" = 0 ] || die "run as root (network namespaces and taps)"
mkdir -p "$RUN"
cmd=${1:-help}
shift || true
case "$cmd" in
    prepare) prepare; [ "$PYVERBS" = 1 ] && prepare_pyverbs; true ;;
    up) up "$@" ;;
    down) down ;;
    run) id=$(submit "$1" "$2"); wait_job "$1" "$id" "${3:-300}" ;;
    start) submit "$1" "$2" ;;
    wait) wait_job "$@" ;;
    out) cat "$RUN/share/vm$1/done/$2.out" 2>/dev/null || true ;;
    host) in_ns "$@" ;;
    put)
        [ -d "$RUN/share" ] || die "the lab is not up"
        mkdir -p "$RUN/share/files" && cp "$1" "$RUN/share/files/" && echo "/share/files/$(basename "$1")"
        ;;
    capture) capture "$@" ;;
    status) status ;;
    guest-ip4) guest_ip4 "$1" ;;
    guest-ip6) guest_ip6 "$1" ;;
    help | -h | --help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command $cmd (try: $0 help)" ;;
esac
