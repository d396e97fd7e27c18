#!/bin/bash
# HI-009: turn a pushed Host Image into an AMI of one architecture with bootc-image-builder
# (pinned by digest in versions.env), named with the architecture and tagged with the image
# digest, the Kubernetes version and the architecture. Never run by CI.
#   publish-ami.sh --image REF@sha256:DIGEST --arch amd64|arm64 --bucket BUCKET --region REGION [--dry-run]
# Needs podman (rootful, so sudo), the AWS CLI with credentials, an S3 bucket and the vmimport
# role. bootc-image-builder runs on a machine of the target architecture. An arm64 AMI needs a
# metal instance type (Graviton VM sizes have no nested virtualization).
# --dry-run prints every command instead of running it.
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=build/lib.sh
. "$here/build/lib.sh"

# Tag keys: batteryop.api.names (IMAGE_DIGEST_TAG, KUBERNETES_VERSION_TAG, HOST_IMAGE_TAG,
# ARCHITECTURE_TAG); tests/images check that they agree.
TAG_DIGEST=battery.liquidmetal-x.dev/image-digest
TAG_KUBERNETES=battery.liquidmetal-x.dev/kubernetes-version
TAG_HOST_IMAGE=battery.liquidmetal-x.dev/host-image
TAG_ARCH=battery.liquidmetal-x.dev/architecture

image="" arch="" bucket="" region="" dry_run=0
while (($#)); do
  case $1 in
  --image) image=$2; shift 2 ;;
  --arch) arch=$2; shift 2 ;;
  --bucket) bucket=$2; shift 2 ;;
  --region) region=$2; shift 2 ;;
  --dry-run) dry_run=1; shift ;;
  -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
  *) echo "publish-ami.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { echo "publish-ami.sh: $*" >&2; exit 2; }
[[ $arch == amd64 || $arch == arm64 ]] || die "--arch must be amd64 or arm64"
[[ $image =~ @sha256:([0-9a-f]{64})$ ]] || die "--image must be pinned by digest (REF@sha256:<64 hex>)"
digest=sha256:${BASH_REMATCH[1]}
[[ -n $bucket ]] || die "--bucket is required"
[[ -n $region ]] || die "--region is required"
versions_read "$here/versions.env"
k8s=$(pin KUBERNETES_VERSION)
builder="$(pin BOOTC_IMAGE_BUILDER)@$(pin BOOTC_IMAGE_BUILDER_DIGEST)"
name="battery-host-image-${arch}-${digest:7:12}"

run() {
  if ((dry_run)); then
    printf '%q ' "$@"
    printf '\n'
  else
    "$@"
  fi
}

run sudo podman pull --arch "$arch" "$image"
run sudo podman run --rm --privileged --pull=newer \
  --security-opt label=type:unconfined_t \
  -v /var/lib/containers/storage:/var/lib/containers/storage \
  "$builder" --type ami --target-arch "$(uarch "$arch")" \
  --aws-ami-name "$name" --aws-bucket "$bucket" --aws-region "$region" \
  "$image"
tags="Key=$TAG_DIGEST,Value=$digest Key=$TAG_KUBERNETES,Value=$k8s Key=$TAG_HOST_IMAGE,Value=true Key=$TAG_ARCH,Value=$arch"
if ((dry_run)); then
  echo "aws ec2 describe-images --region $region --filters Name=name,Values=$name --query Images[0].ImageId --output text"
  echo "aws ec2 create-tags --region $region --resources <ami-id> --tags $tags"
  exit 0
fi
ami=$(aws ec2 describe-images --region "$region" --filters "Name=name,Values=$name" \
  --query 'Images[0].ImageId' --output text)
# shellcheck disable=SC2086 # one tag per word
aws ec2 create-tags --region "$region" --resources "$ami" --tags $tags
echo "$ami"
