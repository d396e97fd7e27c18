#!/bin/bash
# battery-kubelet-config: /run/battery/kubelet.env, the kubelet's Node labels (HI-060, HI-074)
# and system reserve (HI-061), computed by batteryop.hostimage.kubelet_env.
set -euo pipefail
# shellcheck source=lib.sh
. "${BATTERY_LIB:-/usr/libexec/battery/lib.sh}"

status=$(mktemp)
trap 'rm -f "$status"' EXIT
# The booted image's digest; a Host that bootc cannot describe gets host-image=unknown.
"${BOOTC:-bootc}" status --format=json >"$status" 2>/dev/null || : >"$status"
PYTHONPATH="$(battery_path "$BATTERY_PYTHONPATH")" "${PYTHON:-python3}" -P -m batteryop.hostimage kubelet-env \
  --host-env "$(battery_path "$BATTERY_HOST_ENV")" \
  --versions "$(battery_path "$BATTERY_VERSIONS")" \
  --bootc-status "$status" \
  --meminfo "$(battery_path /proc/meminfo)" \
  ${BATTERY_CPUS:+--cpus "$BATTERY_CPUS"} \
  --out "$(battery_path "$BATTERY_KUBELET_ENV")"
