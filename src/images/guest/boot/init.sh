#!/bin/busybox sh
# shellcheck shell=dash
# The boot test's initramfs /init (GI-100): Debian's cloud kernel has virtio and virtio-blk as
# modules, so they are loaded here, in the dependency order written to /modules.order when the
# initramfs was made, then the root filesystem /dev/vda is mounted and systemd started on it.
bb=/bin/busybox
$bb mount -t devtmpfs devtmpfs /dev
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
while read -r module; do
  $bb insmod "/lib/modules/$module.ko" || echo "init: cannot load $module"
done </modules.order
# virtio-blk probes while its module loads; the loop only covers a slow devtmpfs node (5 s).
tries=0
while [ ! -b /dev/vda ] && [ "$tries" -lt 100 ]; do
  $bb usleep 50000
  tries=$((tries + 1))
done
if ! $bb mount -t ext4 -o rw /dev/vda /newroot; then
  echo "init: cannot mount /dev/vda"
  $bb poweroff -f
fi
$bb umount /proc /sys
$bb mount --move /dev /newroot/dev
exec $bb switch_root /newroot /sbin/init
