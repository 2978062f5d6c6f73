#!/usr/bin/env bash
# Open MPI launch agent (`--mca plm_rsh_agent`) for the simulated hosts of netns.sh: instead
# of ssh-ing to HOST it runs the Open MPI daemon inside the network namespace named HOST.
# Open MPI calls it as `netns-rsh.sh [ssh-style options] HOST COMMAND...`.
set -euo pipefail
while [[ "${1:-}" == -* ]]; do shift; done
host=$1
shift
exec ip netns exec "$host" /bin/sh -c "$*"
