#!/usr/bin/env bash
# Simulated hosts for the collective benchmarks: N network namespaces `hcb-h<i>`, each with
# one data NIC `eth0` (10.77.0.<i+1>/24) on a bridge `hcbbr0` in the root namespace
# (10.77.0.254, so launchers outside the namespaces can reach them). With a rate, every
# host's link is shaped with tc in BOTH directions (host egress on its eth0, host ingress on
# the bridge side of its veth): a full-duplex NIC of that speed, like a real port.
#
#   netns.sh up N [RATE]   e.g. `netns.sh up 4 1gbit`, `netns.sh up 8 5gbit`, `netns.sh up 2`
#   netns.sh down          remove every hcb-* namespace, veth and the bridge
#   netns.sh ip I          print host I's data IP
#
# Needs root and iproute2. Addresses stay inside namespaces this script makes.
set -euo pipefail

PREFIX=hcb
BR=${PREFIX}br0
SUBNET=10.77.0

down() {
    for ns in $(ip netns list | awk '{print $1}' | grep "^${PREFIX}-h" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
        ip netns del "$ns"
    done
    for dev in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${PREFIX}-v" || true); do
        ip link del "$dev" 2>/dev/null || true
    done
    ip link del "$BR" 2>/dev/null || true
}

shape() { # dev rate
    # tbf: a token bucket at `rate`; the burst covers a 64 KiB GSO segment several times so
    # that large segments are not dropped, the queue limit (latency) keeps bufferbloat sane.
    tc qdisc replace dev "$1" root tbf rate "$2" burst "${BURST:-2mb}" latency 20ms
}

up() {
    local n=$1 rate=${2:-}
    down
    ip link add "$BR" type bridge
    ip addr add "${SUBNET}.254/24" dev "$BR"
    ip link set "$BR" up
    for ((i = 0; i < n; i++)); do
        local ns=${PREFIX}-h$i veth=${PREFIX}-v$i
        ip netns add "$ns"
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        ip link set "$veth" master "$BR" up
        ip -n "$ns" addr add "${SUBNET}.$((i + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        if [[ -n "$rate" ]]; then
            shape "$veth" "$rate"
            ip netns exec "$ns" bash -c "$(declare -f shape); shape eth0 $rate"
        fi
    done
}

case "${1:-}" in
up) up "${2:?hosts}" "${3:-}" ;;
down) down ;;
ip) echo "${SUBNET}.$((${2:?index} + 1))" ;;
*)
    echo "usage: $0 up N [RATE] | down | ip I" >&2
    exit 2
    ;;
esac
