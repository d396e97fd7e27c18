#!/bin/sh
# GI-002, GI-032: a guest kernel has its architecture's format: an x86-64 ELF vmlinux on amd64,
# an arm64 Image (magic "ARM\x64" at byte 56) on arm64. POSIX sh and od only, so it runs in a
# minimal check image.
#   check-kernel.sh amd64|arm64 FILE
set -eu
arch=$1 file=$2
[ -s "$file" ] || { echo "check-kernel: $file is missing or empty" >&2; exit 1; }
bytes() { od -A n -t x1 -j "$1" -N "$2" "$file" | tr -d ' \n'; }
case $arch in
amd64)
  [ "$(bytes 0 4)" = 7f454c46 ] || { echo "check-kernel: $file is not an ELF file" >&2; exit 1; }
  [ "$(bytes 4 1)" = 02 ] || { echo "check-kernel: $file is not a 64-bit ELF" >&2; exit 1; }
  # e_machine, little-endian: 0x3e is x86-64.
  [ "$(bytes 18 2)" = 3e00 ] || { echo "check-kernel: $file is not built for x86-64" >&2; exit 1; }
  ;;
arm64)
  [ "$(bytes 56 4)" = 41524d64 ] || { echo "check-kernel: $file is not an arm64 Image" >&2; exit 1; }
  ;;
*)
  echo "check-kernel: unknown architecture $arch (amd64 or arm64)" >&2
  exit 2
  ;;
esac
echo "check-kernel: $file is a $arch kernel"
