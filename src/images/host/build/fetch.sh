#!/bin/bash
# Fetch the upstream binaries for one architecture into OUT, each checked against its sha256 in
# versions.env before it is unpacked or installed (HI-003, HI-004). Any mismatch or unpinned
# value fails the build.
#   fetch.sh --arch amd64|arm64 --versions versions.env --out DIR [--from DIR]
# --from takes the files from a folder instead of downloading (tests, offline mirrors).
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=lib.sh
. "$here/lib.sh"

arch="" versions="" out="" from=""
while (($#)); do
  case $1 in
  --arch) arch=$2; shift 2 ;;
  --versions) versions=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --from) from=$2; shift 2 ;;
  *) echo "fetch.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $arch == amd64 || $arch == arm64 ]] || { echo "fetch.sh: --arch must be amd64 or arm64" >&2; exit 2; }
versions_read "$versions"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# get COMPONENT: download (or copy) the file, check it, print its path.
get() {
  local component=$1 u sum file
  u=$(url "$component" "$arch")
  sum=$(pin "${component}_SHA256_${arch}")
  file=$work/${u##*/}
  if [[ -n $from ]]; then
    cp "$from/${u##*/}" "$file"
  else
    curl --fail --silent --show-error --location --retry 3 --output "$file" "$u"
  fi
  if ! echo "$sum  $file" | sha256sum --check --quiet --strict -; then
    echo "fetch.sh: $component ${u##*/}: sha256 is $(sha256sum "$file" | cut -d' ' -f1), versions.env pins $sum" >&2
    return 1
  fi
  printf '%s' "$file"
}

bin=$out/usr/bin
mkdir -p "$bin"

f=$(get CONTAINERD)
tar -xzf "$f" -C "$work" bin/
install -m 0755 "$work"/bin/* "$bin/"

f=$(get RUNC)
install -m 0755 "$f" "$bin/runc"

f=$(get FIRECRACKER)
tar -xzf "$f" -C "$work"
u=$(uarch "$arch")
install -m 0755 "$work"/release-*/firecracker-*-"$u" "$bin/firecracker"
install -m 0755 "$work"/release-*/jailer-*-"$u" "$bin/jailer"

f=$(get CLOUD_HYPERVISOR)
install -m 0755 "$f" "$bin/cloud-hypervisor-static"

f=$(get FLINTLOCK)
install -m 0755 "$f" "$bin/flintlockd"

echo "fetch.sh: $arch binaries checked and installed under $out" >&2
