#!/usr/bin/env bash
# Cost of a forwarded call: kernel launches (synchronous, one round trip
# each in this version of the protocol) locally and through flexgv serve
# over a unix socket and loopback TCP, on the simulated GPU with zero-length
# kernels. Runs N and 2N launches so that start-up cancels out, and prints
# microseconds per launch.
#     bench/remote-roundtrip.sh [N]        (after make)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
B=$PWD/build
[ -x "$B/remote/flexgv-executor" ] || { echo "run make first" >&2; exit 2; }
tmp=$(mktemp -d)
export FLEXGV_SIM_STATE=$tmp/gpu.state FLEXGV_SIM_KERNEL_US=0 FLEXGV_STATE_DIR=$tmp/tenants
port=$((20000 + RANDOM % 20000))
LD_LIBRARY_PATH=$B/sim "$B/bin/flexgv" serve --listen "unix://$tmp/gpu.sock" 2>/dev/null &
s1=$!
LD_LIBRARY_PATH=$B/sim "$B/bin/flexgv" serve --listen "tcp://127.0.0.1:$port" 2>/dev/null &
s2=$!
trap 'kill $s1 $s2 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
sleep 0.5

secs() { # secs ENV... CMD...: wall seconds of one run
    local t0 t1
    t0=$(date +%s.%N)
    env "$@" >/dev/null
    t1=$(date +%s.%N)
    awk "BEGIN { print $t1 - $t0 }"
}
# per_launch N ENV...: launches N and 2N, so that start-up cancels out.
per_launch() {
    local n=$1 a b
    shift
    a=$(secs "$@" "$B/tests/launchloop" "$n")
    b=$(secs "$@" "$B/tests/launchloop" $((2 * n)))
    awk "BEGIN { printf \"%.2f\", ($b - $a) * 1000000 / $n }"
}
# Local launches take well under a microsecond: more of them.
local_us=$(per_launch $((50 * N)) LD_LIBRARY_PATH="$B/sim")
unix_us=$(per_launch "$N" LD_LIBRARY_PATH="$B/remote" FLEXGV_REMOTE="unix://$tmp/gpu.sock")
tcp_us=$(per_launch "$N" LD_LIBRARY_PATH="$B/remote" FLEXGV_REMOTE="tcp://127.0.0.1:$port")
echo "launch: local $local_us us, unix socket $unix_us us, loopback TCP $tcp_us us"
