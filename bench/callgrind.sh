#!/usr/bin/env bash
# Instructions the shim adds, counted with callgrind on the simulated GPU
# (repeatable, unlike wall time): per kernel launch (pass-through, tracing, under a quota,
# and a tenant with a compute share alone on its GPU) and per cuMemAlloc/cuMemFree pair (pass-through and under a
# quota). Each case runs N and 2N iterations; the difference divided by N is
# the cost of one iteration with startup and teardown cancelled out.
# Reported: the whole program's instructions, and those inside libflexgv.so.
#     bench/callgrind.sh [N]        (after make)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
B=$PWD/build
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
[ -x "$B/tests/launchloop" ] || { echo "run make first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH=$B/sim FLEXGV_SIM_STATE=$tmp/gpu.state FLEXGV_SIM_KERNEL_US=0 FLEXGV_STATE_DIR=$tmp/tenants
# A trace region and a tenant made by the CLI, kept for the valgrind runs.
"$B/bin/flexgv" trace -o /dev/null -- sh -c "cp \"\$FLEXGV_TRACE\" $tmp/region"
"$B/bin/flexgv" run --mem 8GiB -- sh -c "cp \"\$FLEXGV_TENANT\" $tmp/tenant"

# count MODE ITERATIONS CLIENT ARGS... -> "TOTAL SHIM" instructions
count() {
    local mode=$1 n=$2 env=() pre=()
    shift 2
    case $mode in
    share) pre=("$B/bin/flexgv" run --compute 50% --) ;;
    run) env=(LD_PRELOAD="$B/lib/libflexgv.so") ;;
    trace) env=(LD_PRELOAD="$B/lib/libflexgv.so" FLEXGV_TRACE="$tmp/region") ;;
    quota) env=(LD_PRELOAD="$B/lib/libflexgv.so" FLEXGV_TENANT="$tmp/tenant") ;;
    esac
    "${pre[@]}" env "${env[@]}" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$@" "$n" 2>/dev/null
    callgrind_annotate --inclusive=no --threshold=100 "$tmp/cg.out" 2>/dev/null | awk '
        /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
        /libflexgv\.so\]/ { gsub(",", "", $1); shim += $1 }
        END { printf "%d %d\n", total, shim }'
}

# measure WHAT MODES... -- CLIENT ARGS...
measure() {
    local what=$1 modes=() base=""
    shift
    while [ "$1" != -- ]; do modes+=("$1"); shift; done
    shift
    for mode in "${modes[@]}"; do
        read -r a sa < <(count "$mode" "$N" "$@")
        read -r b sb < <(count "$mode" $((2 * N)) "$@")
        local per=$(( (b - a) / N )) shim=$(( (sb - sa) / N ))
        [ -z "$base" ] && base=$per
        echo "$what, $mode: $per instructions per iteration ($(( per - base >= 0 ? per - base : 0 )) more than native), $shim inside libflexgv.so"
    done
}

measure "launch" native run trace share quota -- "$B/tests/launchloop"
measure "alloc/free pair" native run quota -- "$B/tests/memclient" allocloop
