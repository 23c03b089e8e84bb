#!/bin/sh
# /init of a Soft-RoCE lab guest: busybox plus Debian's rdma-core, perftest
# and iproute2, on a stock Debian kernel. Configured from the kernel command
# line (srlab.vm, srlab.ip4, srlab.ip6, srlab.mtu); afterwards it serves jobs
# that the host drops into the shared folder (see scripts/lab/lab.sh).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /tmp /share
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp

VM=0 IP4= IP6= MTU=1500
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        srlab.vm=*) VM=${arg#*=} ;;
        srlab.ip4=*) IP4=${arg#*=} ;;
        srlab.ip6=*) IP6=${arg#*=} ;;
        srlab.mtu=*) MTU=${arg#*=} ;;
    esac
done
hostname "vm$VM"

# Modules: the network and 9p drivers, Soft-RoCE and its user-space access,
# and netem for loss/reordering on the guest's side.
for m in virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs ib_umad rdma_ucm sch_netem; do
    modprobe "$m" 2>/dev/null || echo "srlab: modprobe $m failed"
done

# No router solicitations or DAD delays: addresses are usable at once and
# the bridge carries only the traffic the tests make.
echo 0 > /proc/sys/net/ipv6/conf/default/router_solicitations 2>/dev/null
echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad 2>/dev/null
/bin/ip link set lo up
n=0
while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
echo 0 > /proc/sys/net/ipv6/conf/eth0/router_solicitations 2>/dev/null
echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_dad 2>/dev/null
/bin/ip link set eth0 mtu "$MTU"
/bin/ip link set eth0 up
[ -n "$IP4" ] && /bin/ip addr add "$IP4" dev eth0
[ -n "$IP6" ] && /bin/ip -6 addr add "$IP6" dev eth0 nodad

mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /share || echo "srlab: 9p mount failed"
rdma link add rxe0 type rxe netdev eth0 || echo "srlab: rdma link add failed"
ulimit -l unlimited

DIR=/share/vm$VM
mkdir -p "$DIR/jobs" "$DIR/done"
# Wait until rxe0 lists the global IPv6 GID, so tests can look it up.
n=0
while [ -n "$IP6" ] && [ $n -lt 50 ]; do
    grep -q "^fd" /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null && break
    sleep 0.1; n=$((n + 1))
done
cut -d' ' -f1 /proc/uptime > "$DIR/ready"
echo "srlab: vm$VM ready"

# The job server: the host writes jobs/ID.sh (atomically, by rename); the
# guest runs it with bash and leaves done/ID.out and, last, done/ID.rc.
while :; do
    for job in "$DIR"/jobs/*.sh; do
        [ -e "$job" ] || continue
        id=$(basename "$job" .sh)
        mv "$job" "$DIR/done/$id.sh"
        (
            cd /tmp
            bash "$DIR/done/$id.sh" > "$DIR/done/$id.out" 2>&1 < /dev/null
            echo $? > "$DIR/done/$id.rc.new"
            mv "$DIR/done/$id.rc.new" "$DIR/done/$id.rc"
        ) &
    done
    sleep 0.1
done
