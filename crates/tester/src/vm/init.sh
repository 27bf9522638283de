#!/bin/sh
# /init of routeplex's test guest (busybox only, plus /bin/rvhx). What it does comes from the
# kernel command line (rvh.*). Every line it means for the host starts with "RVH ".
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
log() { echo "RVH $*"; }

ROLE=ping; IP0=10.0.0.2/24; IP1=; GW=10.0.0.1; UDP=; N=100; PINGS=3
for a in $(cat /proc/cmdline); do
  case "$a" in
    rvh.role=*) ROLE=${a#rvh.role=};;
    rvh.ip0=*) IP0=${a#rvh.ip0=};;
    rvh.ip1=*) IP1=${a#rvh.ip1=};;
    rvh.gw=*) GW=${a#rvh.gw=};;
    rvh.udp=*) UDP=${a#rvh.udp=};;
    rvh.n=*) N=${a#rvh.n=};;
    rvh.pings=*) PINGS=${a#rvh.pings=};;
  esac
done

# virtio is modular in Debian's cloud kernel; no modules.dep, so load in dependency order.
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci failover \
         net_failover virtio_net; do
  insmod /lib/modules/$m.ko 2>/dev/null || log "insmod $m failed"
done
want=eth0; [ -n "$IP1" ] && want=eth1
i=0
while [ ! -e /sys/class/net/$want ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
[ -e /sys/class/net/$want ] || { log "FAIL no $want"; poweroff -f; }
ip link set lo up
ip addr add $IP0 dev eth0
ip link set eth0 up
log "eth0 $IP0 up"

case "$ROLE" in
  ping)
    ip route add default via $GW
    ping -c $PINGS -i 0.2 -W 2 $GW
    log "ping rc=$?"
    if [ -n "$UDP" ]; then
      /bin/rvhx $UDP 9999 $N
      log "rvhx rc=$?"
    fi
    log "done"
    poweroff -f
    ;;
  forward)
    ip addr add $IP1 dev eth1
    ip link set eth1 up
    echo 1 > /proc/sys/net/ipv4/ip_forward
    # The tester's neighbors are static (busybox's ip cannot add neighbors: arp -s does).
    for a in $(cat /proc/cmdline); do
      case "$a" in
        rvh.neigh=*) set -- $(echo ${a#rvh.neigh=} | tr ',' ' ')
                     arp -i $3 -s $1 $2 || log "arp -s $1 failed";;
        rvh.route=*) set -- $(echo ${a#rvh.route=} | tr ',' ' ')
                     ip route add $1 via $2;;
      esac
    done
    ip route | while read -r l; do log "route $l"; done
    arp -an | while read -r l; do log "neigh $l"; done
    log "forwarding"
    while true; do sleep 3600; done
    ;;
esac
