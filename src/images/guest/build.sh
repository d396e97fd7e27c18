#!/bin/bash
# Build a guest image for one architecture with buildah, every pin of its versions.env passed
# as a build argument; refuses a placeholder (GI-031). Run from this folder's context.
#   build.sh kernel|rootfs --arch amd64|arm64 [--tag TAG] [--dry-run]
# GI-030: build both architectures, then join them into one multi-arch index.
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
image=${1:-}
shift || true
arch="" tag="" dry_run=0
while (($#)); do
  case $1 in
  --arch) arch=$2; shift 2 ;;
  --tag) tag=$2; shift 2 ;;
  --dry-run) dry_run=1; shift ;;
  *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $image == kernel || $image == rootfs ]] || { echo "build.sh: the first argument must be kernel or rootfs" >&2; exit 2; }
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

args=(--platform "linux/$arch" --tag "$tag" --file "$here/$image/Containerfile")
if [[ $image == kernel ]]; then
  args+=(--build-arg "CHECK_BASE=$(pin CHECK_IMAGE)@$(pin CHECK_DIGEST)"
    --build-arg "KERNEL_URL=$(fill "$(pin KERNEL_URL)")"
    --build-arg "KERNEL_SHA256=$(pin "KERNEL_SHA256_$arch")")
else
  args+=(--build-arg "BASE=$(pin BASE_IMAGE)@$(pin BASE_DIGEST)"
    --build-arg "PACKAGES=$(pin PACKAGES)"
    --build-arg "GUEST_AGENT_URL=$(fill "$(pin GUEST_AGENT_URL)" "$(pin GUEST_AGENT_VERSION)")"
    --build-arg "GUEST_AGENT_SHA256=$(pin "GUEST_AGENT_SHA256_$arch")")
fi
if ((dry_run)); then
  printf 'buildah build'
  printf ' %q' "${args[@]}" "$here"
  printf '\n'
  exit 0
fi
exec buildah build "${args[@]}" "$here"
