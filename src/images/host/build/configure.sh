#!/bin/bash
# Put the image together after the files are in place: links into /var, the SELinux module,
# the host.conf defaults, and the units enabled by preset.
set -euo pipefail

# HI-082: /opt, /usr/local and /usr/libexec/kubernetes point into /var (tmpfiles makes the
# targets at boot; battery.fc and the base policy label them as their link paths).
for pair in /opt:/var/opt /usr/local:/var/usrlocal /usr/libexec/kubernetes:/var/libexec/kubernetes; do
  link=${pair%%:*} target=${pair#*:}
  if [[ -L $link ]]; then
    [[ $(readlink "$link") == "$target" ]] || ln -sfn "$target" "$link"
    continue
  fi
  rm -rf "$link"
  ln -s "$target" "$link"
done

# HI-012, HI-013: SELinux stays enforcing; our module relaxes only what battery.te names.
grep -q '^SELINUX=enforcing' /etc/selinux/config
work=$(mktemp -d)
checkmodule -M -m -o "$work/battery.mod" /build/selinux/battery.te
semodule_package -o "$work/battery.pp" -m "$work/battery.mod" -f /build/selinux/battery.fc
semodule -i "$work/battery.pp"
rm -rf "$work"

# HI-051: the defaults, for reading (the boot steps take them from batteryop.hostconf).
PYTHONPATH=/usr/lib/battery/python python3 -P -c \
  'import sys; from batteryop.hostconf import defaults_file; sys.stdout.write(defaults_file())' \
  >/usr/share/battery/host.conf.defaults

# HI-008, HI-062: enable what the preset enables; bootc never updates itself.
systemctl preset-all
systemctl mask bootc-fetch-apply-updates.timer
