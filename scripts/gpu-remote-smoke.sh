#!/usr/bin/env bash
# Remote GPUs on a real GPU (after make): the remoting client's extra
# declarations against the real headers, then scripts/gpu/remote_smoke.c
# natively and through flexgv serve over a unix socket, the same socket with
# shared memory (shm://) and loopback TCP; then CUDA runtime programs
# (scripts/gpu-remote-cudart.sh).
#     scripts/gpu-remote-smoke.sh [CUDA_HOME]
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA=${1:-${CUDA_HOME:-/usr/local/cuda}}
B=$PWD/build
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
gcc -std=gnu11 -Wall -Werror -I"$CUDA/include" -c scripts/gpu/declcheck_remote_gen.c -o "$tmp/decl.o"
echo "declarations: $(grep -c '^SAME' scripts/gpu/declcheck_remote_gen.c) remote-only entry points match their PFN typedefs"
# Linked like a program built with -lcuda; the library path picks the driver.
gcc -std=gnu11 -O2 -Wall -Werror -Iinclude -o "$tmp/smoke" scripts/gpu/remote_smoke.c -L"$B/remote" -lcuda
echo "== native"
env -u LD_LIBRARY_PATH "$tmp/smoke"
env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen "unix://$tmp/gpu.sock" &
env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen tcp://127.0.0.1:7071 --open &
sleep 1
for addr in "unix://$tmp/gpu.sock" "shm://$tmp/gpu.sock" tcp://127.0.0.1:7071; do
    echo "== remote $addr"
    FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote" "$tmp/smoke"
done
echo "== CUDA runtime programs"
bash scripts/gpu-remote-cudart.sh "$CUDA"
