#!/bin/bash
# battery-kvm: flintlockd starts only where /dev/kvm exists and opens for reading and writing
# (HI-011); otherwise the Host reports KVM unavailable and flintlockd, which Requires= this
# unit, does not start.
set -euo pipefail
# shellcheck source=lib.sh
. "${BATTERY_LIB:-/usr/libexec/battery/lib.sh}"

unit=battery-kvm
dev=$(battery_path /dev/kvm)
if [[ ! -e $dev ]]; then
  battery_not_ready "$unit" "KVM is unavailable: /dev/kvm does not exist"
  exit 1
fi
if [[ ! -c $dev ]]; then
  battery_not_ready "$unit" "KVM is unavailable: /dev/kvm is not a character device"
  exit 1
fi
if ! { exec 3<>"$dev"; } 2>/dev/null; then
  battery_not_ready "$unit" "KVM is unavailable: /dev/kvm cannot be opened for reading and writing"
  exit 1
fi
exec 3>&-
battery_ready "$unit"
