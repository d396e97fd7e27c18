# shellcheck shell=bash
# Shared by the build scripts: read versions.env (parsed, never sourced) and the pins in it.

# versions_read FILE: set V_<KEY> for each KEY=value line.
versions_read() {
  local line
  while IFS= read -r line || [[ -n $line ]]; do
    [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
    [[ $line =~ ^([A-Za-z0-9_]+)=(.*)$ ]] || { echo "versions.env: not KEY=value: $line" >&2; return 1; }
    printf -v "V_${BASH_REMATCH[1]}" '%s' "${BASH_REMATCH[2]}"
  done <"$1"
}

# pin NAME: the value of NAME, failing the build when it is missing or still a placeholder
# (HI-004: nothing unpinned reaches an image).
pin() {
  local var="V_$1"
  local value=${!var:-}
  if [[ -z $value || $value == *PIN-ME* ]]; then
    echo "versions.env: $1 is not pinned (${value:-missing}); see the header of versions.env" >&2
    return 1
  fi
  printf '%s' "$value"
}

# uarch ARCH: x86_64 or aarch64.
uarch() {
  case $1 in
  amd64) echo x86_64 ;;
  arm64) echo aarch64 ;;
  *) echo "unknown architecture $1 (amd64 or arm64)" >&2; return 1 ;;
  esac
}

# url COMPONENT ARCH: the download URL with its placeholders filled in.
url() {
  local component=$1 arch=$2 template version ch_suffix=""
  template=$(pin "${component}_URL") || return 1
  version=$(pin "${component}_VERSION") || return 1
  [[ $arch == arm64 ]] && ch_suffix=-aarch64
  template=${template//\{version\}/$version}
  template=${template//\{version_no_v\}/${version#v}}
  template=${template//\{arch\}/$arch}
  template=${template//\{uarch\}/$(uarch "$arch")}
  template=${template//\{ch_suffix\}/$ch_suffix}
  printf '%s' "$template"
}
