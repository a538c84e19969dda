#!/usr/bin/env bash
# CUDA runtime programs on a real GPU through the remoting client (after
# make; nvcc 13 needed, Go not): the client's integrity hash against the
# real driver's answer, then examples/vectoradd built with static and with
# shared cudart, run natively and through flexgv serve over unix://, shm://
# and loopback tcp://, each with a time limit; the outputs must be the same.
# A PASS or FAIL line per check; exit status 1 if any failed.
#     scripts/gpu-remote-cudart.sh [CUDA_HOME]
set -uo pipefail
cd "$(dirname "$0")/.."
CUDA=${1:-${CUDA_HOME:-/usr/local/cuda}}
B=$PWD/build
LIMIT=${LIMIT:-120} # seconds per program
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=1; }

# Against the real driver: -lcuda from the toolkit's stubs, the machine's
# libcuda.so.1 at run time.
if gcc -std=gnu11 -O2 -Wall -Werror -I"$CUDA/include" -Iremote/client -o "$tmp/integrity" \
    scripts/gpu/integrity_check.c remote/client/integrity.c -L"$CUDA/lib64/stubs" -lcuda -lpthread; then
    env -u LD_LIBRARY_PATH timeout "$LIMIT" "$tmp/integrity" || failed=1
else
    fail "integrity: build"
fi

if ! "$CUDA/bin/nvcc" -O2 -o "$tmp/vectoradd_static" examples/vectoradd/vectoradd.cu ||
    ! "$CUDA/bin/nvcc" -O2 -cudart shared -o "$tmp/vectoradd_shared" examples/vectoradd/vectoradd.cu; then
    fail "vectoradd: nvcc builds"
    exit 1
fi

env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen "unix://$tmp/gpu.sock" 2>"$tmp/serve-unix.log" &
env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen tcp://127.0.0.1:7072 --open 2>"$tmp/serve-tcp.log" &
sleep 1

for kind in static shared; do
    prog=$tmp/vectoradd_$kind
    # The shared runtime comes from the toolkit, the driver from the path.
    t0=$(date +%s.%N)
    if ! LD_LIBRARY_PATH="$CUDA/lib64" timeout "$LIMIT" "$prog" 25 >"$tmp/native.out" 2>&1; then
        fail "vectoradd-$kind natively: exit $?"
        cat "$tmp/native.out"
        continue
    fi
    native=$(python3 -c "import time; print(f'{time.time() - $t0:.2f}')")
    for addr in "unix://$tmp/gpu.sock" "shm://$tmp/gpu.sock" tcp://127.0.0.1:7072; do
        name="vectoradd-$kind over ${addr%%://*}://"
        t0=$(date +%s.%N)
        FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" timeout "$LIMIT" "$prog" 25 >"$tmp/remote.out" 2>&1
        rc=$?
        took=$(python3 -c "import time; print(f'{time.time() - $t0:.2f}')")
        if [ $rc = 0 ] && cmp -s "$tmp/native.out" "$tmp/remote.out"; then
            pass "$name: the same output as natively (whole run ${took} s, natively ${native} s)"
        else
            fail "$name: exit $rc (124: over ${LIMIT}s)"
            diff "$tmp/native.out" "$tmp/remote.out" | head -20
            tail -n 5 "$tmp"/serve-*.log
        fi
    done
done
[ $failed = 0 ] && echo "PASS remote cudart: all checks" || echo "FAIL remote cudart: see the FAIL lines above"
exit $failed
