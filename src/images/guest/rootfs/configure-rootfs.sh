#!/bin/sh
# Configure a guest root filesystem tree (the image at build time, or a tree unpacked from
# packages): units enabled, an empty machine-id and fstab, no password, no SSH host key. POSIX sh.
#   configure-rootfs.sh --root DIR
set -eu
[ "${1:-}" = --root ] || { echo "usage: configure-rootfs.sh --root DIR" >&2; exit 2; }
root=$2

# GI-013: an empty machine-id, so every MicroVM makes its own at boot (and its own DHCP lease).
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
# GI-012: the root volume is /dev/vda, mounted by the kernel; nothing in fstab.
: >"$root/etc/fstab"
# GI-014: no password hash: root is locked for password logins.
if [ -f "$root/etc/shadow" ]; then
  sed -i 's/^root:[^:]*:/root:*:/' "$root/etc/shadow"
fi

# GI-020..GI-025: networkd, resolved and the guest agent start at boot; timesyncd is masked
# (the MicroVM's clock is the Host's, through kvm-clock).
for unit in systemd-networkd.service systemd-networkd-wait-online.service systemd-resolved.service; do
  systemctl --root="$root" enable "$unit"
done
if [ -e "$root/usr/lib/systemd/system/guest-agent.service" ] || [ -e "$root/lib/systemd/system/guest-agent.service" ]; then
  systemctl --root="$root" enable guest-agent.service
fi
systemctl --root="$root" mask systemd-timesyncd.service

# GI-027: sshd starts at boot behind its own host key, made at first boot by ssh-host-key.service;
# the keys openssh-server's maintainer script made (in the Ubuntu image) are removed. ssh.socket
# (Ubuntu's default) is disabled: ssh.service listens itself, on 127.0.0.1 only.
# SYSTEMCTL_SKIP_SYSV: the package's /etc/init.d/ssh would make systemctl run the tree's own
# update-rc.d in a chroot, which cannot run in a tree of another architecture; systemd boots it.
rm -f "$root"/etc/ssh/ssh_host_*
if [ -e "$root/usr/lib/systemd/system/ssh.service" ] || [ -e "$root/lib/systemd/system/ssh.service" ]; then
  SYSTEMCTL_SKIP_SYSV=1 systemctl --root="$root" disable ssh.socket 2>/dev/null || true
  SYSTEMCTL_SKIP_SYSV=1 systemctl --root="$root" enable ssh.service ssh-host-key.service
fi
