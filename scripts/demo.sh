#!/usr/bin/env bash
# make demo: a sample CUDA workload under `flexgv trace --log`, on the
# simulated GPU. REAL_GPU=1 builds examples/vectoradd with nvcc and traces
# it on the machine's real driver instead.
set -euo pipefail
cd "$(dirname "$0")/.."
B=$PWD/build

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
echo "== The node as NVML sees it (flexgv node):"
"$B/bin/flexgv" node
