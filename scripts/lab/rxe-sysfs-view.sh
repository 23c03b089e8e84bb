#!/bin/sh
# In a lab guest: gives each RDMA device the /sys/class/infiniband/NAME/
# device/net/IFNAME entry that a device with a parent (a NIC) has and rxe
# has not (its device is virtual: no `device` in sysfs). rdma-core's pyverbs
# suite takes a device's IP address from there (`ls .../device/net/`, then
# `ip addr show IFNAME`) and skips its rdmacm tests without it; softroce-run
# presents the same entry for this project's devices. A tmpfs over
# /sys/class/infiniband holds, for each device, a directory of links to the
# real entries plus device/net/IFNAME -> /sys/class/net/IFNAME (IFNAME from
# `rdma link`). Run it again after adding a device; `-u` takes it away.
set -e
c=/sys/class/infiniband
if grep -q " $c tmpfs " /proc/mounts; then umount "$c"; fi
[ "${1:-}" = -u ] && exit 0
ls "$c" | while read -r d; do echo "$d $(readlink -f "$c/$d")"; done >/tmp/ibdevs
mount -t tmpfs -o mode=0755 ibview "$c"
while read -r d real; do
    mkdir "$c/$d"
    for e in "$real"/*; do ln -s "$e" "$c/$d/${e##*/}"; done
    ndev=$(rdma link show "$d/1" | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
    if [ -n "$ndev" ] && [ ! -e "$real/device" ]; then
        mkdir -p "$c/$d/device/net"
        ln -s "/sys/class/net/$ndev" "$c/$d/device/net/$ndev"
    fi
    echo "$d: device/net/$ndev"
done </tmp/ibdevs
