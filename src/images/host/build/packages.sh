#!/bin/bash
# Fedora's packages and the kubelet/kubeadm RPMs (HI-003). The Kubernetes repository's key is
# checked against its pinned sha256 before dnf trusts it (HI-004).
#   packages.sh --versions versions.env
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=lib.sh
. "$here/lib.sh"
[[ ${1:-} == --versions ]] || { echo "usage: packages.sh --versions FILE" >&2; exit 2; }
versions_read "$2"

arch=$(uname -m)
case $arch in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; esac
key=/etc/pki/rpm-gpg/kubernetes.key
curl --fail --silent --show-error --location --output "$key" "$(pin KUBERNETES_REPO_KEY_URL)"
echo "$(pin "KUBERNETES_REPO_KEY_SHA256_$arch")  $key" | sha256sum --check --quiet --strict -
cat >/etc/yum.repos.d/kubernetes.repo <<REPO
[kubernetes]
name=Kubernetes $(pin KUBERNETES_VERSION)
baseurl=$(pin KUBERNETES_REPO)
enabled=1
gpgcheck=1
gpgkey=file://$key
REPO

k8s=$(pin KUBERNETES_VERSION)
dnf -y install \
  "cloud-init-$(pin CLOUD_INIT_VERSION)*" \
  dnsmasq nftables lvm2 device-mapper-persistent-data iproute procps-ng \
  policycoreutils checkpolicy \
  "kubelet-${k8s#v}" "kubeadm-${k8s#v}" "cri-tools" \
  conntrack-tools socat ethtool
dnf clean all
rm -rf /var/cache/dnf /var/log/dnf*
