# shellcheck shell=bash
# Shared by every script under /usr/libexec/battery: the image's names, the Host's settings,
# and the not-ready contract. Sourced, never run.
#
# BATTERY_ROOT (empty on a Host) prefixes every filesystem path the scripts read or write, so
# the tests run them against a tree of their own; /proc/sys and the network are left as they
# are (the tests give each run its own network namespace).

BATTERY_ROOT=${BATTERY_ROOT:-}

# battery_read_env FILE PREFIX: set PREFIX<KEY> for each KEY=value line of an env file the image
# or a boot step wrote. The file is parsed, never sourced: nothing in it runs.
battery_read_env() {
  local file=$1 prefix=${2:-} key value
  while IFS= read -r line || [[ -n $line ]]; do
    [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
    if [[ $line =~ ^([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]]; then
      key=${BASH_REMATCH[1]}
      value=${BASH_REMATCH[2]}
      printf -v "${prefix}${key}" '%s' "$value"
    fi
  done <"$file"
}

# The image's names (bridge, ports, paths), defined once in image.env.
battery_read_env "${BATTERY_ROOT}${BATTERY_IMAGE_ENV:-/usr/share/battery/image.env}"

# battery_path PATH: where PATH lives under BATTERY_ROOT.
battery_path() {
  printf '%s%s' "$BATTERY_ROOT" "$1"
}

# The not-ready contract (EA-033, HI-011, HI-022): /run/battery/not-ready.d/<unit> holds one
# line, the reason, and exists exactly while the condition holds. Written whole (a temporary
# file renamed over it), so the Exec Agent never reads half a line.
battery_not_ready() {
  local unit=$1 reason=$2 dir
  dir=$(battery_path "$BATTERY_NOT_READY_DIR")
  mkdir -p "$dir"
  reason=${reason//$'\n'/ }
  printf '%s\n' "$reason" >"$dir/.$unit.tmp"
  mv -f "$dir/.$unit.tmp" "$dir/$unit"
  echo "$unit: not ready: $reason" >&2
}

battery_ready() {
  rm -f "$(battery_path "$BATTERY_NOT_READY_DIR")/$1"
}

# battery_load_host_env: the Host's settings as written by battery-host-config (host.env).
battery_load_host_env() {
  local file
  file=$(battery_path "$BATTERY_HOST_ENV")
  if [[ ! -r $file ]]; then
    echo "$file is missing: battery-host-config has not run" >&2
    return 1
  fi
  battery_read_env "$file"
}

# battery_write_file PATH TEXT: replace PATH whole.
battery_write_file() {
  local path=$1 text=$2
  mkdir -p "$(dirname "$path")"
  printf '%s' "$text" >"$path.tmp"
  mv -f "$path.tmp" "$path"
}
