#!/bin/bash
# battery-flintlockd-certs: /etc/battery/flintlockd, where the Exec Agent writes flintlockd's
# serving certificate, key and client CA (HI-067, HI-068). Owned by the agent's UID, mode 0700,
# labelled container_file_t so the agent's confined containers may write it; flintlockd (root,
# unconfined_service_t) reads it (HI-072).
#
#   flintlockd-certs.sh            make and label the directory
#   flintlockd-certs.sh record     note the checksums flintlockd is starting with
#   flintlockd-certs.sh changed    exit 0 when tls.crt or client-ca.crt differ from the noted
#                                  ones (HI-071: restart only on a real change)
set -euo pipefail
# shellcheck source=lib.sh
. "${BATTERY_LIB:-/usr/libexec/battery/lib.sh}"

unit=battery-flintlockd-certs
dir=$(battery_path "$FLINTLOCKD_CERT_DIR")
loaded=$(battery_path "$BATTERY_CERTS_LOADED")

checksums() {
  local name
  for name in tls.crt client-ca.crt; do
    if [[ -r $dir/$name ]]; then
      sha256sum "$dir/$name" | awk -v n="$name" '{print n, $1}'
    else
      echo "$name missing"
    fi
  done
}

case ${1:-} in
record)
  battery_write_file "$loaded" "$(checksums)
"
  exit 0
  ;;
changed)
  [[ -r $loaded ]] || exit 0
  [[ $(checksums) != "$(cat "$loaded")" ]]
  exit
  ;;
"") ;;
*)
  echo "usage: $0 [record|changed]" >&2
  exit 2
  ;;
esac

battery_load_host_env
mkdir -p "$dir"
chown "$EXEC_AGENT_UID:$EXEC_AGENT_UID" "$dir"
chmod 0700 "$dir"
if command -v selinuxenabled >/dev/null 2>&1 && selinuxenabled; then
  # The label of battery.fc for this path; restorecon puts it back if someone changed it.
  if ! restorecon -R "$dir"; then
    battery_not_ready "$unit" "cannot label $FLINTLOCKD_CERT_DIR"
    exit 1
  fi
fi
battery_ready "$unit"
