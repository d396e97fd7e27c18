#!/bin/bash
# A guest root filesystem from Debian's packages, with the same layout, files and checks as the
# Ubuntu image (rootfs/Containerfile), for one architecture, with nothing run from the packages:
#   build-rootfs.sh --arch amd64|arm64 --out DIR [--cache DIR] [--guest-agent DIR]
# 1. apt resolves the packages of rootfs/versions.env (plus Debian's essential set) for ARCH
#    with a private apt state, and downloads them (every .deb checked by apt against the
#    signed index);
# 2. dpkg-deb -x unpacks each into DIR (no maintainer script runs: foreign architectures need
#    no emulator);
# 3. the accounts and the files maintainer scripts would have made (sshd's among them), then
#    rootfs/files and configure-rootfs.sh, as in the image.
# 4. GI-020, GI-026: with --guest-agent DIR (flintlock's guest agent for ARCH, `guest-agent` and
#    upstream's `guest-agent.service`, as batteryop.testing.guest_agent builds them from the
#    pinned source), the agent where its .deb puts it, its unit enabled by configure-rootfs.sh.
#    Without it the tree has no agent and check-rootfs.sh needs --without-agent.
# `python -m batteryop.release.guest_rootfs` packs the trees of both architectures as one OCI
# image index with the release images' buildah recipe (GI-030).
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
rootfs=$here/../rootfs
arch="" out="" agent="" cache=${XDG_CACHE_HOME:-$HOME/.cache}/batteryop/guest-debian
while (($#)); do
  case $1 in
  --arch) arch=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --cache) cache=$2; shift 2 ;;
  --guest-agent) agent=$2; shift 2 ;;
  *) echo "build-rootfs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $arch == amd64 || $arch == arm64 ]] || { echo "build-rootfs.sh: --arch must be amd64 or arm64" >&2; exit 2; }
[[ -n $out ]] || { echo "build-rootfs.sh: --out is required" >&2; exit 2; }
if [[ -n $agent ]] && ! [[ -x $agent/guest-agent && -f $agent/guest-agent.service ]]; then
  echo "build-rootfs.sh: --guest-agent $agent holds no guest-agent and guest-agent.service" >&2
  exit 2
fi

packages=$(sed -n 's/^PACKAGES=//p' "$rootfs/versions.env")
# Debian's essential set: what every Debian system has before anything else is installed.
essential="base-files base-passwd bash coreutils dash debianutils diffutils dpkg findutils grep gzip hostname init-system-helpers libc-bin login mawk ncurses-base ncurses-bin perl-base sed sysvinit-utils tar util-linux"

state=$cache/$arch
mkdir -p "$state/lists/partial" "$state/archives/partial" "$state/etc"
: >"$state/status"
apt_opts=(
  -o "APT::Architecture=$arch" -o "APT::Architectures=$arch"
  -o "Dir::State=$state" -o "Dir::State::Lists=$state/lists" -o "Dir::State::status=$state/status"
  -o "Dir::Cache=$state" -o "Dir::Cache::archives=$state/archives"
  -o "Dir::Etc::preferences=/dev/null" -o "Dir::Etc::preferencesparts=$state/etc"
  -o "APT::Install-Recommends=false" -o "Debug::NoLocking=true"
)
# The index is refreshed once a day at most (the stamp's age; the lists keep the server's times).
if [[ -z $(find "$state" -maxdepth 1 -name updated -mtime -1 -print -quit) ]]; then
  apt-get "${apt_opts[@]}" -qq update
  touch "$state/updated"
fi
# shellcheck disable=SC2086 # package lists are words
apt-get "${apt_opts[@]}" -qq -y --download-only install $essential $packages >/dev/null

rm -rf "$out"
mkdir -p "$out"
count=0
for deb in "$state"/archives/*.deb; do
  dpkg-deb -x "$deb" "$out"
  count=$((count + 1))
done

# Debian 12's merged /usr (what debootstrap makes): /bin, /sbin and /lib are links into /usr,
# so /usr/lib/systemd/... (the paths the Ubuntu image's files name) exist here too.
for dir in bin sbin lib lib32 lib64 libx32; do
  if [[ -d $out/$dir && ! -L $out/$dir ]]; then
    mkdir -p "$out/usr/$dir"
    cp -a "$out/$dir/." "$out/usr/$dir/"
    rm -rf "${out:?}/$dir"
    ln -s "usr/$dir" "$out/$dir"
  fi
done

# What base-passwd's and systemd's maintainer scripts would have written.
cp "$out/usr/share/base-passwd/passwd.master" "$out/etc/passwd"
cp "$out/usr/share/base-passwd/group.master" "$out/etc/group"
sed 's/^\([^:]*\):.*/\1:*:19000:0:99999:7:::/' "$out/etc/passwd" >"$out/etc/shadow"
chmod 0640 "$out/etc/shadow"
mkdir -p "$out/var/lib/dbus"
# GI-027: what openssh-server's maintainer script would have made: the privilege separation
# account `sshd` (a free system uid from 100, group nogroup, home /run/sshd, which ssh.service's
# RuntimeDirectory makes) and /etc/ssh/sshd_config from the package's template. Not the host
# keys: every MicroVM makes its own at first boot (ssh-host-key.service).
uid=100
while cut -d: -f3 "$out/etc/passwd" | grep -qx "$uid"; do uid=$((uid + 1)); done
echo "sshd:x:$uid:65534::/run/sshd:/usr/sbin/nologin" >>"$out/etc/passwd"
echo "sshd:*:19000:0:99999:7:::" >>"$out/etc/shadow"
install -m 0644 "$out/usr/share/openssh/sshd_config" "$out/etc/ssh/sshd_config"
# What libpam-runtime's pam-auth-update would have written from usr/share/pam-configs/unix:
# without them login (the console's autologin) fails with "PAM Failure".
for kind in auth account password session session-noninteractive; do
  case $kind in
  auth) rule="auth [success=1 default=ignore] pam_unix.so nullok" ;;
  account) rule="account [success=1 new_authtok_reqd=done default=ignore] pam_unix.so" ;;
  password) rule="password [success=1 default=ignore] pam_unix.so obscure yescrypt" ;;
  session*) rule="session [default=1] pam_permit.so" ;;
  esac
  {
    echo "# Written by build-rootfs.sh as pam-auth-update writes it (Unix authentication)."
    echo "$rule"
    echo "${rule%% *} requisite pam_deny.so"
    echo "${rule%% *} required pam_permit.so"
    [[ $kind != session* ]] || echo "session required pam_unix.so"
  } >"$out/etc/pam.d/common-$kind"
done

cp -r "$rootfs/files/." "$out/"
# GI-020, GI-026: the paths the agent's .deb installs (merged /usr: /lib is usr/lib).
if [[ -n $agent ]]; then
  install -D -m 0755 "$agent/guest-agent" "$out/usr/local/bin/guest-agent"
  install -D -m 0644 "$agent/guest-agent.service" "$out/usr/lib/systemd/system/guest-agent.service"
fi
sh "$rootfs/configure-rootfs.sh" --root "$out"
echo "build-rootfs.sh: $arch root filesystem from $count packages in $out" >&2
