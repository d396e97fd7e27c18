#!/bin/bash
# Build the Host Image for one architecture from this folder (or the context archive that
# `./pants package src/images/host:context` makes), with every pin of versions.env passed as a
# build argument. Refuses to start while any pin the build needs is a placeholder (HI-004).
# The image's created time and file times are --created (default 0), so the same inputs give
# the same digest.
#   build.sh --arch amd64|arm64 [--tag TAG] [--created EPOCH] [--dry-run]
# HI-002: run it once per architecture (on a machine of that architecture, or with emulation),
# then join the two into one multi-arch index (buildah manifest create / add / push).
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=build/lib.sh
. "$here/build/lib.sh"

arch="" tag="" created=0 dry_run=0
while (($#)); do
  case $1 in
  --arch) arch=$2; shift 2 ;;
  --tag) tag=$2; shift 2 ;;
  --created) created=$2; shift 2 ;;
  --dry-run) dry_run=1; shift ;;
  *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $arch == amd64 || $arch == arm64 ]] || { echo "build.sh: --arch must be amd64 or arm64" >&2; exit 2; }
[[ $created =~ ^[0-9]+$ ]] || { echo "build.sh: --created must be seconds since the epoch, not $created" >&2; exit 2; }
versions_read "$here/versions.env"
tag=${tag:-localhost/battery-host-image:$arch}

# --timestamp: buildah 1.28 does not read SOURCE_DATE_EPOCH (docs/dev/decisions.md).
args=(--platform "linux/$arch" --timestamp "$created" --tag "$tag" --file "$here/Containerfile"
  --build-arg "BASE=$(pin BASE_IMAGE)@$(pin BASE_DIGEST)"
  --build-arg "BASE_DIGEST=$(pin BASE_DIGEST)")
for key in KUBERNETES_VERSION CONTAINERD_VERSION RUNC_VERSION FIRECRACKER_VERSION \
  CLOUD_HYPERVISOR_VERSION FLINTLOCK_VERSION CLOUD_INIT_VERSION; do
  args+=(--build-arg "$key=$(pin "$key")")
done
# Every checksum this architecture needs, before any download starts.
for component in CONTAINERD RUNC FIRECRACKER CLOUD_HYPERVISOR FLINTLOCK KUBERNETES_REPO_KEY; do
  pin "${component}_SHA256_${arch}" >/dev/null
done

if ((dry_run)); then
  printf 'buildah build'
  printf ' %q' "${args[@]}" "$here"
  printf '\n'
  exit 0
fi
exec buildah build "${args[@]}" "$here"
