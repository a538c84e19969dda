#!/usr/bin/env bash
# Start cost of a tenant's processes: 20 processes that initialize CUDA at
# the same moment, as members of one tenant and without a tenant, on the
# simulated GPU. Prints the wall time of each batch (3 rounds, alternating).
#     bench/tenant-startup.sh        (after make)
set -euo pipefail
cd "$(dirname "$0")/.."
B=$PWD/build
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH=$B/sim FLEXGV_SIM_STATE=$tmp/gpu.state FLEXGV_STATE_DIR=$tmp/tenants FLEXGV_SIM_CTX_MEM=64MiB

batch() { # batch FLEXGV-RUN-FLAGS...: 20 concurrent starts, prints seconds
    local t0 t1 pids=() failed=0
    t0=$(date +%s.%N)
    for i in $(seq 20); do
        "$B/bin/flexgv" run "$@" -- "$B/tests/memclient" info >/dev/null &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
    t1=$(date +%s.%N)
    [ $failed = 0 ] || { echo "$failed of 20 processes failed" >&2; exit 1; }
    echo "$t1 - $t0" | bc
}
# A member keeps the group alive across the batches.
mkfifo "$tmp/hold"
"$B/bin/flexgv" run --group bench --mem 8GiB -- "$B/tests/holder" 1 <"$tmp/hold" >/dev/null &
exec 3>"$tmp/hold"
sleep 0.5
for round in 1 2 3; do
    plain=$(batch)
    tenant=$(batch --group bench)
    echo "round $round: 20 processes without a tenant ${plain}s, as one tenant ${tenant}s, difference $(echo "$tenant - $plain" | bc)s"
done
exec 3>&-
wait
