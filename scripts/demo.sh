#!/usr/bin/env bash
# make demo: a sample CUDA workload under `flexgv trace --log`, then a
# memory quota and the GPU's time shared between tenants, on the simulated
# GPU. REAL_GPU=1 builds examples/vectoradd with nvcc and traces
# it on the machine's real driver instead.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${FLEXGV_BUILD:-$PWD/build} # FLEXGV_BUILD: another build folder, as the tests take

if [ "${REAL_GPU:-0}" = 1 ]; then
    NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    [ -x "$NVCC" ] || { echo "demo: REAL_GPU=1 needs nvcc (set NVCC=...)" >&2; exit 2; }
    "$NVCC" -O2 -o "$B/vectoradd" examples/vectoradd/vectoradd.cu
    exec "$B/bin/flexgv" trace --log -- "$B/vectoradd" 5
fi

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
export LD_LIBRARY_PATH=$B/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FLEXGV_SIM_STATE=$state/gpu.state FLEXGV_SIM_MEM=16GiB
echo "== A CUDA-runtime-style program (tests/clients/rtlike.c) on the simulated GPU, under"
echo "== flexgv trace --log: it resolves the driver through cuGetProcAddress_v2, allocates,"
echo "== copies, launches (legacy and per-thread streams) and checks the vector-add result."
echo
"$B/bin/flexgv" trace --log -- "$B/tests/rtlike" 2
echo
echo "== The same GPU shared: a tenant capped at 2 GiB (flexgv run --mem 2GiB). Its program sees a"
echo "== 2 GiB device (cuMemGetInfo, cuDeviceTotalMem), of which its context took its share;"
echo "== one byte more than what is left fails as on a full GPU, exactly what is left succeeds."
export FLEXGV_STATE_DIR=$state/tenants FLEXGV_SIM_CTX_MEM=300MiB
"$B/bin/flexgv" run --mem 2GiB -- "$B/tests/memclient" info
"$B/bin/flexgv" run --mem 2GiB -- "$B/tests/memclient" exact
echo
# spin share|latency LABEL CMD...: a spinner's result (tests/clients/spinner.c)
# as a sentence: its part of the device, and with latency how long each of
# its kernels took from launch to completion
spin() {
    local what=$1 label=$2
    shift 2
    "$@" </dev/null | awk -v w="$what" -v l="$label" '$1 == "kernels" {
        printf "%-40s %5.1f%% of the device", l ":", $6
        if (w == "latency") printf ", each 1 ms kernel done in p50 %.0f us, p99 %.0f us", $8, $10
        printf "\n" }'
}
S="$B/tests/spinner"
echo "== The same GPU's time shared (the simulated GPU time-slices processes as a GPU does):"
echo "== two tenants at --compute 30% and 70% keep it busy with 1 ms kernels for 3 s; flexgv top"
echo "== shows each share asked and achieved halfway."
spin share "--compute 30%" "$B/bin/flexgv" run --compute 30% -- "$S" 1000 3 >"$state/a.out" &
spin share "--compute 70%" "$B/bin/flexgv" run --compute 70% -- "$S" 1000 3 >"$state/b.out" &
sleep 1.5
"$B/bin/flexgv" top --once
wait
cat "$state/a.out" "$state/b.out"
echo
echo "== Alone, a share lends the idle time (work-conserving); a cap holds even then."
spin share "alone, --compute 30%" "$B/bin/flexgv" run --compute 30% -- "$S" 1000 2
spin share "alone, --compute-max 30%" "$B/bin/flexgv" run --compute-max 30% -- "$S" 1000 2
echo
echo "== Priority: a tenant waiting for each 1 ms kernel, next to one that keeps 16 queued."
spin latency "alone" "$S" 1000 1 1
"$S" 1000 2 16 </dev/null >/dev/null &
sleep 0.3
spin latency "next to it, no flexgv (time-slicing)" "$S" 1000 1 1
wait
"$B/bin/flexgv" run --priority low -- "$S" 1000 2 16 </dev/null >/dev/null &
sleep 0.3
spin latency "next to it, --priority high over low" "$B/bin/flexgv" run --priority high -- "$S" 1000 1 1
wait
echo
echo "== The node as NVML sees it (flexgv node):"
"$B/bin/flexgv" node
