#!/bin/bash
# Build the Ubuntu guest root filesystem image (rootfs/Containerfile) for one architecture with
# buildah, every pin of its versions.env passed as a build argument; refuses a placeholder
# (GI-031). The image's created time and file times are --created (default 0), so the same
# inputs give the same digest. The guest kernel has no Containerfile: it is built from source
# by `python -m batteryop.release.guest_kernel`.
#   build.sh rootfs --arch amd64|arm64 [--tag TAG] [--created EPOCH] [--dry-run]
# GI-030: build both architectures, then join them into one multi-arch index.
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
image=${1:-}
shift || true
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
if [[ $image == kernel ]]; then
  echo "build.sh: the guest kernel is built from source: ./pants package src/images/guest:guest-kernel (or python -m batteryop.release.guest_kernel build --arch $arch)" >&2
  exit 2
fi
[[ $image == rootfs ]] || { echo "build.sh: the first argument must be rootfs" >&2; exit 2; }
[[ $arch == amd64 || $arch == arm64 ]] || { echo "build.sh: --arch must be amd64 or arm64" >&2; exit 2; }
tag=${tag:-localhost/battery-guest-$image:$arch}

declare -A v
while IFS= read -r line || [[ -n $line ]]; do
  [[ $line =~ ^([A-Za-z0-9_]+)=(.*)$ ]] && v[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done <"$here/$image/versions.env"
pin() {
  local value=${v[$1]:-}
  if [[ -z $value || $value == *PIN-ME* ]]; then
    echo "build.sh: $image/versions.env: $1 is not pinned (${value:-missing})" >&2
    exit 1
  fi
  printf '%s' "$value"
}
fill() {
  local t=$1 version=${2:-}
  local uarch=x86_64
  [[ $arch == arm64 ]] && uarch=aarch64
  t=${t//\{version\}/$version}
  t=${t//\{version_no_v\}/${version#v}}
  t=${t//\{arch\}/$arch}
  printf '%s' "${t//\{uarch\}/$uarch}"
}

# --timestamp: buildah 1.28 does not read SOURCE_DATE_EPOCH (docs/dev/decisions.md).
args=(--platform "linux/$arch" --timestamp "$created" --tag "$tag" --file "$here/$image/Containerfile")
args+=(--build-arg "BASE=$(pin BASE_IMAGE)@$(pin BASE_DIGEST)"
  --build-arg "PACKAGES=$(pin PACKAGES)"
  --build-arg "GUEST_AGENT_URL=$(fill "$(pin GUEST_AGENT_URL)" "$(pin GUEST_AGENT_VERSION)")"
  --build-arg "GUEST_AGENT_SHA256=$(pin "GUEST_AGENT_SHA256_$arch")")
if ((dry_run)); then
  printf 'buildah build'
  printf ' %q' "${args[@]}" "$here"
  printf '\n'
  exit 0
fi
exec buildah build "${args[@]}" "$here"
