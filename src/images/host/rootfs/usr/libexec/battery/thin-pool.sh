#!/bin/bash
# battery-thin-pool: containerd's devmapper thin pool, made once at boot (HI-020..HI-023).
#
#   thin-pool.sh          make the pool if it does not exist, then report ready
#   thin-pool.sh choose   print the device the pool would take (or exit 1 saying why not)
#
# The pool is LVM's: volume group THIN_POOL_VG, thin-pool volume THIN_POOL_LV, which
# device-mapper names THIN_POOL_NAME (what containerd and the Exec Agent look for). It takes 95%
# of the volume group, its metadata 1%, and 4% stays free for LVM's own use and for growing the
# metadata (the flintlock-thinpool LVM profile).
#
# The device is THIN_POOL_DEVICE from host.conf, or else the one disk that is an instance-store
# volume (by its model), unmounted, unused and blank. Neither is ever taken when it is mounted,
# holds the root filesystem, is held by another device (LVM, RAID, a partition in use), or
# carries any signature (filesystem, partition table, RAID, LVM) (HI-023). A disk that already
# backs the pool's volume group is the pool's device (HI-021).
set -euo pipefail
# shellcheck source=lib.sh
. "${BATTERY_LIB:-/usr/libexec/battery/lib.sh}"

unit=battery-thin-pool
sys_block=$(battery_path /sys/block)
mountinfo=$(battery_path /proc/self/mountinfo)
swaps=$(battery_path /proc/swaps)

# The major:minor of every mounted filesystem and active swap device.
in_use_devnums() {
  [[ -r $mountinfo ]] && awk '{print $3}' "$mountinfo"
  if [[ -r $swaps ]]; then
    local dev
    while read -r dev _; do
      [[ $dev == /dev/* ]] || continue
      stat -L -c '%Hr:%Lr' "$dev" 2>/dev/null || true
    done < <(tail -n +2 "$swaps")
  fi
}

# disk_problem NAME: why the disk /sys/block/NAME may not hold the pool, or nothing.
disk_problem() {
  local name=$1 dir=$sys_block/$1 used part sig
  [[ -d $dir ]] || { echo "/dev/$name is not a block device"; return; }
  used=$(in_use_devnums | sort -u)
  if grep -qxF "$(cat "$dir/dev")" <<<"$used"; then
    echo "/dev/$name is mounted"
    return
  fi
  for part in "$dir"/"$name"*/partition; do
    [[ -e $part ]] || continue
    part=$(dirname "$part")
    if grep -qxF "$(cat "$part/dev")" <<<"$used"; then
      echo "/dev/$name has a mounted partition ($(basename "$part"))"
      return
    fi
    echo "/dev/$name has partitions"
    return
  done
  local holders=("$dir"/holders/*)
  if [[ -e ${holders[0]} ]]; then
    echo "/dev/$name is in use by ${holders[*]##*/}"
    return
  fi
  if [[ $(cat "$dir/ro" 2>/dev/null || echo 0) != 0 ]]; then
    echo "/dev/$name is read-only"
    return
  fi
  # Any signature at all: blkid -p probes the device itself, not a cache (exit 2: none found).
  if sig=$(blkid -p -o export "$(battery_path "/dev/$name")" 2>/dev/null); then
    echo "/dev/$name is not blank ($(grep -E '^(TYPE|PTTYPE)=' <<<"$sig" | tr '\n' ' ' | sed 's/ $//'))"
    return
  fi
}

# The instance-store disks, in name order.
instance_store_disks() {
  local dir model
  for dir in "$sys_block"/*; do
    [[ -r $dir/device/model ]] || continue
    model=$(sed 's/[[:space:]]*$//' "$dir/device/model")
    [[ $model == "$INSTANCE_STORE_MODEL" ]] && basename "$dir"
  done
  return 0
}

# choose: print the device for the pool, or print why there is none and return 1.
choose() {
  local name problem problems=()
  if [[ -n ${THIN_POOL_DEVICE:-} ]]; then
    name=$(basename "$(readlink -f "$(battery_path "$THIN_POOL_DEVICE")" 2>/dev/null || echo "$THIN_POOL_DEVICE")")
    problem=$(disk_problem "$name")
    if [[ -n $problem ]]; then
      echo "THIN_POOL_DEVICE $THIN_POOL_DEVICE cannot be used: $problem"
      return 1
    fi
    echo "/dev/$name"
    return 0
  fi
  for name in $(instance_store_disks); do
    problem=$(disk_problem "$name")
    if [[ -z $problem ]]; then
      echo "/dev/$name"
      return 0
    fi
    problems+=("$problem")
  done
  if ((${#problems[@]} == 0)); then
    echo "no instance-store disk found and THIN_POOL_DEVICE is not set"
  else
    local joined
    joined=$(printf '%s; ' "${problems[@]}")
    echo "no usable instance-store disk: ${joined%; }"
  fi
  return 1
}

pool_exists() {
  lvs --noheadings "$THIN_POOL_VG/$THIN_POOL_LV" >/dev/null 2>&1
}

make_pool() {
  local dev=$1 extents meta_mb
  pvcreate --yes "$dev"
  vgcreate --yes "$THIN_POOL_VG" "$dev"
  # 1% of the group for metadata, in MiB (LVM's limit: 2 MiB to 16 GiB).
  meta_mb=$(vgs --noheadings --nosuffix --units m -o vg_size "$THIN_POOL_VG" | awk '{m=int($1/100); if (m<2) m=2; if (m>16384) m=16384; print m}')
  extents=95%VG
  lvcreate --yes --type thin-pool --name "$THIN_POOL_LV" --extents "$extents" \
    --poolmetadatasize "${meta_mb}m" --metadataprofile flintlock-thinpool \
    --zero n "$THIN_POOL_VG"
}

main() {
  battery_load_host_env
  if [[ ${1:-} == choose ]]; then
    choose
    return
  fi
  if pool_exists; then
    # HI-021: an existing pool is never recreated nor wiped.
    battery_ready "$unit"
    return 0
  fi
  if vgs --noheadings "$THIN_POOL_VG" >/dev/null 2>&1; then
    # HI-023: the disk already backing the group is the pool's; a boot cut short left the group
    # without its pool, so make only the pool.
    lvcreate --yes --type thin-pool --name "$THIN_POOL_LV" --extents 95%VG \
      --metadataprofile flintlock-thinpool --zero n "$THIN_POOL_VG"
    battery_ready "$unit"
    return 0
  fi
  local dev
  if ! dev=$(choose); then
    battery_not_ready "$unit" "no thin pool device is available: $dev"
    return 1
  fi
  make_pool "$dev"
  battery_ready "$unit"
}

main "$@"
