#!/bin/bash
# HI-008: the check stage, run inside the built image (or, with --root, against a tree): fails
# unless every component reports its pinned version, every unit the Host needs is enabled, and
# the image's invariants hold. Prints one line per failure and a summary.
#   check.sh [--root DIR] [VERSIONS_FILE]
set -uo pipefail
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=lib.sh
. "$here/lib.sh"

root=/
if [[ ${1:-} == --root ]]; then root=$2; shift 2; fi
versions=${1:-$root/usr/share/battery/versions.env}
versions_read "$versions" || exit 1
failures=0
fail() { echo "check: FAIL: $*" >&2; failures=$((failures + 1)); }
bin() { printf '%s' "$root/usr/bin/$1"; }

# expect_version NAME EXPECTED COMMAND...: the command's output names the pinned version.
expect_version() {
  local name=$1 want=$2 got
  shift 2
  if ! got=$("$@" 2>&1); then
    fail "$name: '$*' failed: $got"
  elif [[ $got != *"$want"* ]]; then
    fail "$name: reports '${got%%$'\n'*}', versions.env pins $want"
  fi
}

# HI-003, HI-008: versions.
k8s=${V_KUBERNETES_VERSION:-}
expect_version containerd "$V_CONTAINERD_VERSION" "$(bin containerd)" --version
expect_version runc "${V_RUNC_VERSION#v}" "$(bin runc)" --version
expect_version firecracker "$V_FIRECRACKER_VERSION" "$(bin firecracker)" --version
expect_version jailer "$V_FIRECRACKER_VERSION" "$(bin jailer)" --version
expect_version cloud-hypervisor "${V_CLOUD_HYPERVISOR_VERSION#v}" "$(bin cloud-hypervisor-static)" --version
expect_version flintlockd "${V_FLINTLOCK_VERSION#v}" "$(bin flintlockd)" version
expect_version kubelet "$k8s" "$(bin kubelet)" --version
expect_version kubeadm "$k8s" "$(bin kubeadm)" version -o short
expect_version cloud-init "$V_CLOUD_INIT_VERSION" "$(bin cloud-init)" --version

# HI-008: every unit the preset enables is enabled; HI-062: bootc never updates itself.
preset=$root/usr/lib/systemd/system-preset/80-battery.preset
while read -r verb unit; do
  state=$(systemctl --root="$root" is-enabled "$unit" 2>/dev/null)
  case $verb in
  enable) [[ $state == enabled ]] || fail "$unit is ${state:-unknown}, not enabled" ;;
  disable) [[ $state == masked ]] || fail "$unit is ${state:-unknown}, not masked" ;;
  esac
done < <(grep -E '^(enable|disable) ' "$preset")

# HI-083: the bridge's name is on Calico's default exclude list.
bridge=$(sed -n 's/^BATTERY_BRIDGE=//p' "$root/usr/share/battery/image.env")
[[ $bridge =~ ^virbr ]] || fail "bridge '$bridge' is not on Calico's exclude list (^virbr.*)"

# HI-082: the links into /var.
for pair in /opt:/var/opt /usr/local:/var/usrlocal /usr/libexec/kubernetes:/var/libexec/kubernetes; do
  link=${pair%%:*} target=${pair#*:}
  [[ $(readlink "$root$link") == "$target" ]] || fail "$link does not link to $target"
done

# HI-081: registry configuration is read from certs.d, and none is shipped.
grep -q 'config_path = "/etc/containerd/certs.d"' "$root/etc/containerd/config.toml" ||
  fail "containerd does not read /etc/containerd/certs.d"
shipped=$(find "$root/etc/containerd/certs.d" -mindepth 1 ! -name README 2>/dev/null)
[[ -z $shipped ]] || fail "the image ships registry configuration: $shipped"

# HI-006: no private key, token or credential.
keys=$(grep -rlE -- '-----BEGIN ([A-Z]+ )?PRIVATE KEY-----' "$root/etc" "$root/usr/share/battery" "$root/usr/libexec/battery" 2>/dev/null)
[[ -z $keys ]] || fail "private keys in the image: $keys"

# HI-051: with no host.conf the boot step writes every default.
tmp=$(mktemp -d)
if PYTHONPATH=$root/usr/lib/battery/python python3 -P -m batteryop.hostimage host-env \
  --conf "$tmp/absent" --out "$tmp/host.env"; then
  grep -q '^GUEST_SUBNET=10.220.0.0/16$' "$tmp/host.env" || fail "host.env without host.conf lacks the default subnet"
else
  fail "the host-env boot step failed without host.conf"
fi
rm -rf "$tmp"

if ((failures)); then
  echo "check: $failures failure(s)" >&2
  exit 1
fi
echo "check: the Host Image passed every check" >&2
