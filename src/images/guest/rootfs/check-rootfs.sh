#!/bin/sh
# GI-032: the check stage of a guest root filesystem: the guest agent and networkd installed and
# enabled, machine-id and fstab empty, networkd leaving eth0 alone, no password or key; sshd
# (GI-027) installed and enabled with its account, on 127.0.0.1 only, keys only, no host key.
#   check-rootfs.sh --root DIR [--without-agent]
# --without-agent: for a tree built without flintlock's guest agent (the Debian rootfs built in
# this repository's tests, which cannot download the agent); says so in its output.
set -u
[ "${1:-}" = --root ] || { echo "usage: check-rootfs.sh --root DIR [--without-agent]" >&2; exit 2; }
root=$2
agent=yes
[ "${3:-}" = --without-agent ] && agent=no
failures=0
fail() { echo "check-rootfs: FAIL: $*" >&2; failures=$((failures + 1)); }
enabled() { [ "$(systemctl --root="$root" is-enabled "$1" 2>/dev/null)" = enabled ]; }

empty_file() { [ -f "$1" ] && [ ! -s "$1" ]; }
empty_file "$root/etc/machine-id" || fail "/etc/machine-id is not an empty file"
empty_file "$root/etc/fstab" || fail "/etc/fstab is not an empty file"
for unit in systemd-networkd.service systemd-resolved.service systemd-networkd-wait-online.service; do
  enabled "$unit" || fail "$unit is not enabled"
done
[ "$(systemctl --root="$root" is-enabled systemd-timesyncd.service 2>/dev/null)" = masked ] ||
  fail "systemd-timesyncd.service is not masked"
if [ "$agent" = yes ]; then
  enabled guest-agent.service || fail "guest-agent.service is not enabled"
else
  echo "check-rootfs: no guest agent in this tree (--without-agent): not checked" >&2
fi
for bin in systemd networkctl ip sshd; do
  found=no
  for dir in usr/lib/systemd usr/bin bin usr/sbin sbin; do
    [ -e "$root/$dir/$bin" ] && found=yes
  done
  [ "$found" = yes ] || fail "$bin is not installed"
done
has() { grep -qx "$1" "$root/etc/systemd/network/$2" 2>/dev/null; }
if ! { has 'Name=eth0' 10-mmds.network && has 'Unmanaged=yes' 10-mmds.network; }; then
  fail "networkd does not leave eth0 alone"
fi
if ! { has 'Name=!eth0' 20-dhcp.network && has 'DHCP=ipv4' 20-dhcp.network; }; then
  fail "networkd does not DHCP the other interfaces"
fi
if [ -f "$root/etc/shadow" ] && awk -F: '$2 !~ /^(\*|!.*|)$/ {found=1} END {exit !found}' "$root/etc/shadow"; then
  fail "/etc/shadow holds a password hash"
fi
# GI-027: sshd's drop-in, its privilege separation account, its units, no host key baked in.
ssh_conf=$root/etc/ssh/sshd_config.d/10-battery.conf
for line in 'ListenAddress 127.0.0.1' 'PasswordAuthentication no' 'KbdInteractiveAuthentication no' \
  'PermitRootLogin prohibit-password'; do
  grep -qx "$line" "$ssh_conf" 2>/dev/null || fail "sshd_config.d/10-battery.conf does not say $line"
done
grep -qE '^Include /etc/ssh/sshd_config.d/\*\.conf' "$root/etc/ssh/sshd_config" 2>/dev/null ||
  fail "/etc/ssh/sshd_config does not include sshd_config.d"
grep -q '^sshd:' "$root/etc/passwd" 2>/dev/null || fail "no sshd account in /etc/passwd"
for unit in ssh.service ssh-host-key.service; do
  enabled "$unit" || fail "$unit is not enabled"
done
for key in "$root"/etc/ssh/ssh_host_*; do
  [ -e "$key" ] && fail "an SSH host key is baked in: ${key#"$root"}"
done
keys=$(grep -rlE -- '-----BEGIN ([A-Z]+ )?PRIVATE KEY-----' "$root/etc" "$root/root" 2>/dev/null)
[ -z "$keys" ] || fail "private keys: $keys"

if [ "$failures" -gt 0 ]; then
  echo "check-rootfs: $failures failure(s)" >&2
  exit 1
fi
echo "check-rootfs: the root filesystem passed every check" >&2
