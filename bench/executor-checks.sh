#!/usr/bin/env bash
# What the executor's checks of handles and device addresses cost, counted
# with callgrind (repeatable): bench/executor_checks.c decodes queued
# cuMemsetD8Async, cuMemcpyDtoDAsync_v2 and cuEventRecord requests over a
# driver that does nothing, for a connection holding H streams, H events
# and R allocations. Runs N and 2N rounds; the difference over 3N is one
# request. Prints instructions per request: decoding and dispatch in all
# (fgr_serve, inclusive), and of those the checks (fgr_has, fgr_mem_in) and
# the translation of the client's names for handles (fgr_in).
#     bench/executor-checks.sh [N]        (needs valgrind; after make)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
checks=$PWD/build/bench/executor-checks
[ -x "$checks" ] || { echo "run make first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# count ROUNDS H R -> "SERVE CHECKS" inclusive instructions
count() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$checks" "$1" "$2" "$3" 2>/dev/null
    callgrind_annotate --inclusive=yes --threshold=100 "$tmp/cg.out" 2>/dev/null | awk '
        /:fgr_serve \[/ { gsub(",", "", $1); serve = $1 }
        /:fgr_has \[/ { gsub(",", "", $1); checks += $1 }
        /:fgr_mem_in \[/ { gsub(",", "", $1); checks += $1 }
        /:fgr_in \[/ { gsub(",", "", $1); checks += $1 }
        END { printf "%d %d\n", serve, checks }'
}
for size in "10 10" "1000 1000" "100000 10000"; do
    read -r h r <<<"$size"
    read -r s1 c1 < <(count "$N" "$h" "$r")
    read -r s2 c2 < <(count $((2 * N)) "$h" "$r")
    awk -v s1="$s1" -v s2="$s2" -v c1="$c1" -v c2="$c2" -v n="$N" -v h="$h" -v r="$r" 'BEGIN {
        s = (s2 - s1) / (3 * n); c = (c2 - c1) / (3 * n)
        printf "%6d handles, %5d allocations: %.0f instructions per request, %.0f of them checks (%.0f%%)\n", h, r, s, c, 100 * c / s }'
done
