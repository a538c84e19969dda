#!/usr/bin/env bash
# Instructions the shim adds per kernel launch, counted with callgrind on the
# simulated GPU (repeatable, unlike wall time). Each mode runs the launch loop
# with N and with 2N launches; differences divided by N give the cost of one
# launch with startup and teardown cancelled out. Reported: the whole
# program's instructions per launch, and those executed inside libflexgv.so.
#     bench/callgrind-launch.sh [N]        (after make)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
B=$PWD/build
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
[ -x "$B/tests/launchloop" ] || { echo "run make first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH=$B/sim FLEXGV_SIM_STATE=$tmp/gpu.state FLEXGV_SIM_KERNEL_US=0
# A trace region made by the CLI, kept for the traced valgrind runs.
"$B/bin/flexgv" trace -o /dev/null -- sh -c "cp \"\$FLEXGV_TRACE\" $tmp/region"

# count MODE LAUNCHES -> "TOTAL SHIM": instructions of the run, and of libflexgv.so in it
count() {
    local env=()
    case $1 in
    run) env=(LD_PRELOAD="$B/lib/libflexgv.so") ;;
    trace) env=(LD_PRELOAD="$B/lib/libflexgv.so" FLEXGV_TRACE="$tmp/region") ;;
    esac
    env "${env[@]}" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$B/tests/launchloop" "$2" 2>/dev/null
    callgrind_annotate --inclusive=no --threshold=100 "$tmp/cg.out" 2>/dev/null | awk '
        /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
        /libflexgv\.so\]/ { gsub(",", "", $1); shim += $1 }
        END { printf "%d %d\n", total, shim }'
}

declare -A per shim
for mode in native run trace; do
    read -r a sa < <(count $mode "$N")
    read -r b sb < <(count $mode $((2 * N)))
    per[$mode]=$(( (b - a) / N ))
    shim[$mode]=$(( (sb - sa) / N ))
    echo "$mode: ${per[$mode]} instructions per launch in the whole program, ${shim[$mode]} inside libflexgv.so"
done
echo "flexgv run:   +$(( per[run] - per[native] )) instructions per launch (${shim[run]} in the shim's wrapper)"
echo "flexgv trace: +$(( per[trace] - per[native] )) instructions per launch (${shim[trace]} in the shim)"
