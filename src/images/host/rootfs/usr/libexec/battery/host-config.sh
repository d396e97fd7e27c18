#!/bin/bash
# battery-host-config: check /etc/battery/host.conf and write /run/battery/host.env (HI-050).
# The file is parsed by batteryop.hostconf, the one definition of its keys and rules, never
# sourced; unknown keys are skipped; no file means every default (HI-051). An invalid value
# leaves host.env unwritten and the Host not ready, with the key and the rule named.
set -euo pipefail
# shellcheck source=lib.sh
. "${BATTERY_LIB:-/usr/libexec/battery/lib.sh}"

unit=battery-host-config
if err=$(PYTHONPATH="$(battery_path "$BATTERY_PYTHONPATH")" "${PYTHON:-python3}" -P -m batteryop.hostimage host-env \
  --conf "$(battery_path "$BATTERY_HOST_CONF")" --out "$(battery_path "$BATTERY_HOST_ENV")" 2>&1); then
  [[ -z $err ]] || printf '%s\n' "$err" >&2
  battery_ready "$unit"
else
  battery_not_ready "$unit" "$(printf '%s\n' "$err" | tail -n 1)"
  exit 1
fi
