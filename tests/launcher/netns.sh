#!/usr/bin/env bash
# Create / remove an isolated test network: one "switch" namespace with a bridge, and N host namespaces, each
# linked to the bridge by a veth pair. Nothing is added to the root namespace.
#
#   netns.sh up TAG OCTET N    -> namespaces TAG-c (bridge br0, 10.200.OCTET.1/24, the launcher runs here)
#                                 and TAG-h1..TAG-hN (eth0 = 10.200.OCTET.(10+i)/24)
#   netns.sh down TAG          -> deletes every TAG-* namespace (their veths go with them)
#
# Needs root and iproute2 (`ip`); bridge and veth kernel support.
set -euo pipefail

cmd=${1:?usage: netns.sh up TAG OCTET N | down TAG}
tag=${2:?TAG}

case "$cmd" in
  up)
    octet=${3:?OCTET}
    count=${4:?N}
    sw="${tag}-c"
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" addr add "10.200.${octet}.1/24" dev br0
    ip -n "$sw" link set br0 up
    for i in $(seq 1 "$count"); do
      ns="${tag}-h${i}"
      ip netns add "$ns"
      ip -n "$ns" link set lo up
      ip link add "eth0" netns "$ns" type veth peer name "port${i}" netns "$sw"
      ip -n "$sw" link set "port${i}" master br0
      ip -n "$sw" link set "port${i}" up
      ip -n "$ns" addr add "10.200.${octet}.$((10 + i))/24" dev eth0
      ip -n "$ns" link set eth0 up
    done
    ;;
  down)
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^${tag}-(c|h[0-9]+)$" || true); do
      ip netns del "$ns"
    done
    ;;
  *)
    echo "unknown command $cmd" >&2
    exit 2
    ;;
esac
