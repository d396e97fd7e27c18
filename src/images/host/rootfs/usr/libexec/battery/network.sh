#!/bin/bash
# battery-network: the guest bridge, forwarding, NAT and the Host's firewall for guests and for
# flintlockd (HI-030..HI-037, HI-069, HI-070, HI-075..HI-080, HI-083, HI-100).
#
#   network.sh           set it all up (again: every step replaces what it finds)
#   network.sh ruleset   print the nftables ruleset for this Host and exit
#
# Writes /run/battery/flintlockd.env with the Host's internal address, the one flintlockd
# serves on (HI-067). The rules live in one table, `inet battery`, replaced whole in one
# transaction. Frames between two guests cross only the bridge; with br_netfilter (loaded at
# boot, and required by kubeadm anyway) bridged IPv4 passes the forward hook too, where it is
# dropped (HI-100).
set -euo pipefail
# shellcheck source=lib.sh
. "${BATTERY_LIB:-/usr/libexec/battery/lib.sh}"

battery_load_host_env

# The interface of the IPv4 default route, and its first global address.
primary_interface() {
  ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}'
}
interface_address() {
  ip -4 -o addr show dev "$1" scope global | awk '{split($4, a, "/"); print a[1]; exit}'
}

# elements LIST: "a, b" from "a,b" for an nftables set ("" stays "").
elements() {
  local list=$1
  printf '%s' "${list//,/, }"
}

# set_def NAME TYPE FLAGS LIST: a named set, with its elements when there are any.
set_def() {
  local name=$1 type=$2 flags=$3 list=$4
  printf '  set %s {\n    type %s\n' "$name" "$type"
  [[ -z $flags ]] || printf '    flags %s\n' "$flags"
  [[ -z $list ]] || printf '    elements = { %s }\n' "$(elements "$list")"
  printf '  }\n'
}

ruleset() {
  local primary=$1 br=$BATTERY_BRIDGE gw=$GUEST_GATEWAY port=$FLINTLOCKD_PORT
  cat <<NFT
table inet battery
delete table inet battery

table inet battery {
$(set_def protected4 ipv4_addr interval "$PROTECTED_CIDRS4")
$(set_def protected6 ipv6_addr interval "$PROTECTED_CIDRS6")
$(set_def metadata4 ipv4_addr "" "$METADATA_ADDRESSES4")
$(set_def metadata6 ipv6_addr "" "$METADATA_ADDRESSES6")
$(set_def control_ports inet_service "" "$HOST_CONTROL_PORTS")
$(set_def gateway_ports inet_service "" "$GATEWAY_SERVICE_PORTS")
$(set_def flintlockd_clients4 ipv4_addr interval "$FLINTLOCKD_CLIENT_CIDRS4")

  # HI-076: a protected destination is dropped before any DNAT can rewrite it.
  chain prerouting {
    type filter hook prerouting priority dstnat - 10; policy accept;
    iifname "$br" ip daddr @protected4 drop
    iifname "$br" ip daddr @metadata4 drop
    iifname "$br" meta nfproto ipv6 drop
  }

  chain input {
    type filter hook input priority filter; policy accept;
    iifname "$br" jump guest_input
    tcp dport $port jump flintlockd_input
    # HI-079: gateway service ports answer only on the bridge and loopback.
    iifname != { "lo", "$br" } tcp dport @gateway_ports drop
    iifname != { "lo", "$br" } udp dport @gateway_ports drop
  }

  # What a guest may send to the Host itself: DHCP, DNS and the gateway service ports on the
  # gateway address, nothing else (HI-031, HI-034, HI-036, HI-077, HI-078).
  chain guest_input {
    ct state established,related accept
    udp sport 68 udp dport 67 accept
    ip daddr != $gw drop
    tcp dport @control_ports drop
    udp dport 53 accept
    tcp dport 53 accept
    tcp dport @gateway_ports accept
    drop
  }

  # HI-069: off the Host, flintlockd answers only the operator's pod network, over IPv4, never
  # from a guest. On the Host (lo) the output chain decides (HI-070).
  chain flintlockd_input {
    iifname "lo" accept
    iifname "$br" drop
    meta nfproto ipv6 drop
    ip saddr @flintlockd_clients4 accept
    drop
  }

  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname "$br" jump guest_forward
    oifname "$br" ct state established,related accept
    oifname "$br" drop
  }

  # HI-075: out of the primary interface only; HI-033, HI-035: never to metadata or protected
  # addresses.
  chain guest_forward {
    # HI-100: guests never reach each other (bridged IPv4, through br_netfilter).
    oifname "$br" drop
    oifname != "$primary" drop
    meta nfproto ipv6 drop
    ip daddr @metadata4 drop
    ip daddr @protected4 drop
    accept
  }

  chain output {
    type filter hook output priority filter; policy accept;
    # HI-070: on the Host, only the Exec Agent's UID connects to flintlockd.
    oifname "lo" tcp dport $port meta skuid != $EXEC_AGENT_UID reject with tcp reset
$(gateway_uid_rules)
  }

  # HI-032: guests leave with the Host's primary address.
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr $GUEST_SUBNET oifname "$primary" masquerade
  }
}
NFT
}

# HI-080: the gateway services' own traffic never reaches metadata or the Host's control ports.
gateway_uid_rules() {
  [[ -n $GATEWAY_SERVICE_UIDS ]] || return 0
  local uids
  uids=$(elements "$GATEWAY_SERVICE_UIDS")
  printf '    meta skuid { %s } ip daddr @metadata4 drop\n' "$uids"
  printf '    meta skuid { %s } ip6 daddr @metadata6 drop\n' "$uids"
  printf '    meta skuid { %s } tcp dport @control_ports drop\n' "$uids"
}

main() {
  local primary address
  primary=$(primary_interface)
  if [[ -z $primary ]]; then
    echo "battery-network: no IPv4 default route, so no primary interface" >&2
    return 1
  fi
  address=$(interface_address "$primary")
  if [[ -z $address ]]; then
    echo "battery-network: $primary has no global IPv4 address" >&2
    return 1
  fi
  if [[ ${1:-} == ruleset ]]; then
    ruleset "$primary"
    return 0
  fi

  # HI-030: the bridge holding the gateway address; flintlockd attaches the TAPs.
  ip link show "$BATTERY_BRIDGE" >/dev/null 2>&1 || ip link add "$BATTERY_BRIDGE" type bridge
  ip addr replace "$GUEST_GATEWAY/$GUEST_PREFIX_LEN" dev "$BATTERY_BRIDGE"
  ip link set "$BATTERY_BRIDGE" up
  # HI-032: forwarding, for IPv4 only; HI-100: bridged IPv4 through the forward hook.
  echo 1 >/proc/sys/net/ipv4/ip_forward
  echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
  ruleset "$primary" | nft -f -
  # HI-067: flintlockd listens on this address only.
  battery_write_file "$(battery_path "$BATTERY_FLINTLOCKD_ENV")" \
    "FLINTLOCKD_ADDRESS=$address
FLINTLOCKD_GRPC_ENDPOINT=$address:$FLINTLOCKD_PORT
PRIMARY_INTERFACE=$primary
"
}

main "$@"
