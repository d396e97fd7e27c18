#!/bin/bash
# Print the sha256 lines of versions.env for every download, both architectures: run on a
# machine that reaches the upstream releases, check the output, and paste it into versions.env.
#   build/pin.sh [versions.env]
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=lib.sh
. "$here/lib.sh"
versions_read "${1:-$here/../versions.env}"
for arch in amd64 arm64; do
  for component in CONTAINERD RUNC FIRECRACKER CLOUD_HYPERVISOR FLINTLOCK; do
    sum=$(curl --fail --silent --show-error --location "$(url "$component" "$arch")" | sha256sum | cut -d' ' -f1)
    echo "${component}_SHA256_${arch}=$sum"
  done
  sum=$(curl --fail --silent --show-error --location "$(pin KUBERNETES_REPO_KEY_URL)" | sha256sum | cut -d' ' -f1)
  echo "KUBERNETES_REPO_KEY_SHA256_${arch}=$sum"
done
