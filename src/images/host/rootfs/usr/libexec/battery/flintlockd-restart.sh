#!/bin/bash
# battery-flintlockd-restart: run by a path unit when tls.crt or client-ca.crt is written.
# Restarts flintlockd only when their checksums differ from those it started with (HI-071), so
# the Exec Agent rewriting the same files never restarts it. Hypervisors keep running
# (flintlockd.service has KillMode=process, HI-073).
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
if "$here/flintlockd-certs.sh" changed; then
  echo "flintlockd's certificate or client CA changed: restarting flintlockd" >&2
  systemctl try-restart flintlockd.service
fi
