#!/bin/bash
# Pin the base image (HI-001): resolve the mirror tag in versions.env to its digest and write
# BASE_DIGEST. The mirror (BASE_IMAGE) holds copies of quay.io/fedora/fedora-bootc:44, which
# deletes old digests; copy a new one there first (skopeo copy --all), then run this by hand.
#   pin-base.sh [--tag TAG]
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=build/lib.sh
. "$here/build/lib.sh"
versions_read "$here/versions.env"
tag=${V_BASE_TAG}
[[ ${1:-} == --tag ]] && tag=$2
digest=$(skopeo inspect --format '{{.Digest}}' "docker://$(pin BASE_IMAGE):$tag")
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || { echo "pin-base.sh: no digest for $tag" >&2; exit 1; }
sed -i -e "s|^BASE_TAG=.*|BASE_TAG=$tag|" -e "s|^BASE_DIGEST=.*|BASE_DIGEST=$digest|" "$here/versions.env"
echo "BASE_DIGEST=$digest ($tag)"
