#!/bin/sh
# GI-004: every line of config-fragment is in the kernel's .config, built in.
#   check-config.sh FRAGMENT KERNEL_CONFIG
set -eu
fragment=$1 config=$2
missing=0
while IFS= read -r line; do
  case $line in '#'* | '') continue ;; esac
  if ! grep -qx "$line" "$config"; then
    echo "check-config: $config lacks $line" >&2
    missing=$((missing + 1))
  fi
done <"$fragment"
[ "$missing" -eq 0 ] || exit 1
echo "check-config: every required option is built in"
