#!/usr/bin/env bash
# Export-table census on a real GPU: which private tables of the driver
# (cuGetExportTable) the CUDA runtime and libraries are handed, what their
# slots hold and how often each workload calls each function slot. From the
# repository root of a GPU machine, after make (Go is not needed there):
#     scripts/gpu-census.sh OUTDIR [--compare OLD.json]
# Every workload runs natively and under flexgv census, each with a time
# limit, and must print the same (patching the tables must not change what a
# program computes or make the runtime refuse to start). OUTDIR gets one
# report per workload (NAME.json, NAME.md), all of them as one set
# (census.json) and docs-ready markdown (census.md), printed at the end
# (default OUTDIR: a new folder under $TMPDIR, outside the repository).
# --compare OLD.json: also list what differs from an earlier census (the
# alarm for a new CUDA version, see docs/EXPORT-TABLES.md); any difference
# makes the exit status non-zero, like any FAIL.
set -u -o pipefail
source "$(dirname "$0")/outdir.sh"
OUT=$(outdir census "${1:-}") || exit 2
shift || true
OLD=
if [ "${1:-}" = --compare ]; then
    [ -f "${2:-}" ] || { echo "usage: $0 OUTDIR [--compare OLD.json]"; exit 2; }
    OLD=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CUDA=${CUDA_HOME:-/usr/local/cuda}
FLEXGV=$ROOT/build/bin/flexgv
GPU=$ROOT/scripts/gpu
WORK=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
exec > >(tee "$OUT/gpu-census.log") 2>&1
echo "logs: $OUT"

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
reports=() # NAME=REPORT for flexgv census --combine
rows=()    # markdown rows: workload, command, result

# What is compared between the native run and the census run.
same_text() { cat "$1"; }
torch_losses() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["losses"])' "$1" 2>/dev/null; }
rank0_losses() { grep -oE 'loss [0-9]+ -?0x[0-9a-f.]+p[-+][0-9]+' "$1"; }
tables_in() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tables"]))' "$1" 2>/dev/null || echo 0; }

# census NAME LIMIT COMPARE WHAT CMD...: CMD natively, then under flexgv
# census; WHAT describes it in the docs.
census() {
    local name=$1 limit=$2 cmp=$3 what=$4 rn rs same n why
    shift 4
    echo "== $name: $*"
    timeout -k 10 "$limit" "$@" >"$WORK/$name.native.out" 2>"$WORK/$name.native.err"
    rn=$?
    timeout -k 10 "$limit" "$FLEXGV" census --json -o "$OUT/$name.json" -- "$@" \
        >"$WORK/$name.census.out" 2>"$WORK/$name.census.err"
    rs=$?
    "$cmp" "$WORK/$name.native.out" >"$WORK/$name.native.cmp"
    "$cmp" "$WORK/$name.census.out" >"$WORK/$name.census.cmp"
    if [ -s "$WORK/$name.native.cmp" ] && diff "$WORK/$name.native.cmp" "$WORK/$name.census.cmp" >"$WORK/$name.diff"; then
        same=same
    else
        same=different
    fi
    n=0
    [ -s "$OUT/$name.json" ] && n=$(tables_in "$OUT/$name.json")
    if [ $rn = 0 ] && [ $rs = 0 ] && [ $same = same ] && [ "$n" -gt 0 ]; then
        pass "$name: same output natively and under census ($(wc -l <"$WORK/$name.native.cmp") lines compared), $n tables"
        rows+=("| $name | $what | same output natively and under census; $n tables |")
    else
        echo "  diff (< native, > under census):"; head -20 "$WORK/$name.diff"
        echo "  native stderr:"; tail -5 "$WORK/$name.native.err"
        echo "  under census stderr:"; tail -15 "$WORK/$name.census.err"
        why="native exit $rn, under census exit $rs, outputs $same, $n tables"
        [ $rn = 124 ] || [ $rs = 124 ] && why="$why (124: timed out after ${limit}s)"
        fail "$name: $why"
        rows+=("| $name | $what | **FAIL**: $why |")
    fi
    if [ -s "$OUT/$name.json" ]; then
        reports+=("$name=$OUT/$name.json")
        "$FLEXGV" census --markdown "$OUT/$name.json" >"$OUT/$name.md"
    fi
}

# skipped NAME WHY
skipped() {
    echo "== $1: skipped: $2"
    rows+=("| $1 | | skipped: $2 |")
}

echo "== machine"
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$CUDA/bin/nvcc" --version | tail -2
[ -x "$FLEXGV" ] && [ -f build/lib/libflexgv.so ] || { echo "build/ is missing: run make first"; exit 2; }
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
toolkit=$("$CUDA/bin/nvcc" --version | grep -oE 'release [0-9.]+' | head -1)
pyver() { python3 -c "$1" 2>/dev/null || echo "not importable"; }
torchv=$(pyver 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(), "NCCL", ".".join(map(str, torch.cuda.nccl.version())))')
tritonv=$(pyver 'import triton; print(triton.__version__)')
jaxv=$(pyver 'import jax, jaxlib; print(jax.__version__, "jaxlib", jaxlib.__version__)')
echo "torch: $torchv; triton: $tritonv; jax: $jaxv"

echo "== nvcc builds"
nvcc_ok=1
"$CUDA/bin/nvcc" -O2 -o "$WORK/vectoradd_static" examples/vectoradd/vectoradd.cu &&
    "$CUDA/bin/nvcc" -O2 -cudart shared -o "$WORK/vectoradd_shared" examples/vectoradd/vectoradd.cu &&
    "$CUDA/bin/nvcc" -O2 -o "$WORK/cublas_capture" "$GPU/cublas_capture.cu" -lcublas || { fail "nvcc builds"; nvcc_ok=0; }

if [ $nvcc_ok = 1 ]; then
    census vectoradd-static 60 same_text "examples/vectoradd, nvcc (static cudart), 25 launches" "$WORK/vectoradd_static" 25
    census vectoradd-shared 60 same_text "examples/vectoradd, nvcc \`-cudart shared\`, 25 launches" "$WORK/vectoradd_shared" 25
    census cublas 120 same_text "scripts/gpu/cublas_capture.cu: cuBLAS, with stream capture" "$WORK/cublas_capture"
fi

if [[ "$torchv" == "not importable" ]]; then
    skipped torch-tensor "PyTorch is not importable"
    skipped torch-train "PyTorch is not importable"
    skipped ddp-nccl "PyTorch is not importable"
else
    # PyTorch alone, as the baseline of the workloads built on it.
    census torch-tensor 120 same_text "PyTorch: one tensor on the GPU, summed" python3 -c \
        'import torch; x = torch.arange(1 << 20, device="cuda", dtype=torch.float32); print("torch sum", float((2 * x).sum().item()).hex())'
    census torch-train 240 torch_losses "scripts/gpu/torch_train.py 30 5: conv net training steps (cuDNN)" \
        python3 "$GPU/torch_train.py" 30 5
    torchrun=(torchrun)
    command -v torchrun >/dev/null || torchrun=(python3 -m torch.distributed.run)
    if [ "$ngpu" -ge 2 ]; then
        census ddp-nccl 300 rank0_losses "scripts/gpu/ddp.py --steps 50 under torchrun, 2 ranks (NCCL)" \
            "${torchrun[@]}" --standalone --nproc_per_node 2 "$GPU/ddp.py" --steps 50
    else
        skipped ddp-nccl "one GPU; NCCL between two ranks needs two"
    fi
fi

if [[ "$tritonv" == "not importable" || "$torchv" == "not importable" ]]; then
    skipped triton "Triton (with PyTorch) is not importable"
else
    census triton 240 same_text "a Triton vector add (with PyTorch tensors), compiled afresh" python3 scripts/gpu/triton_add.py
fi

# CuPy's cuBLAS calls a word the others do not (21318c60 word 51).
if ! python3 -c 'import cupy' 2>/dev/null; then
    skipped cupy "CuPy is not importable"
else
    census cupy 240 same_text "CuPy: elementwise, a matrix product (cuBLAS), a raw kernel (NVRTC)" python3 scripts/gpu/cupy_check.py
fi

if [[ "$jaxv" == "not importable" ]]; then
    skipped jax "JAX is not importable"
elif [ "$(python3 -c 'import jax; print(jax.default_backend())' 2>/dev/null)" != gpu ]; then
    skipped jax "JAX has no GPU backend here (jax[cuda] not installed)"
else
    census jax 240 same_text "a jax.jit matrix product" python3 -c '
import jax, jax.numpy as jnp
x = jnp.arange(256.0).reshape(16, 16)
f = jax.jit(lambda a: (a @ a + jnp.sin(a) * 0).sum())
print("jax", jax.default_backend(), int(f(x)))'
fi

# cudart's integrity check hashes the integrity-check function's slot (left
# alone by default). Patched too, does the runtime still start?
integrity=()
if [ $nvcc_ok = 1 ]; then
    for kind in static shared; do
        timeout -k 10 60 "$FLEXGV" census --skip none --json -o "$WORK/integrity-$kind.json" -- \
            "$WORK/vectoradd_$kind" 25 >"$WORK/integrity-$kind.out" 2>"$WORK/integrity-$kind.err"
        rc=$?
        if [ $rc = 0 ] && diff -q "$WORK/vectoradd-$kind.native.out" "$WORK/integrity-$kind.out" >/dev/null; then
            integrity+=("- vectoradd ($kind cudart) under \`flexgv census --skip none\`: runs as natively (the runtime accepts a patched integrity-check slot)")
        else
            integrity+=("- vectoradd ($kind cudart) under \`flexgv census --skip none\`: exit $rc, output differs: $(tail -1 "$WORK/integrity-$kind.err")")
        fi
        echo "${integrity[-1]}"
    done
fi

echo "== census of all workloads"
md=$OUT/census.md
{
    echo "# Export-table census: CUDA $toolkit, driver $driver, $gpu"
    echo
    echo "Made by \`scripts/gpu-census.sh\` on $(date -u +%Y-%m-%d). PyTorch $torchv; Triton $tritonv; JAX $jaxv."
    echo
    echo "| workload | command | result |"
    echo "|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
} >"$md"
if [ ${#reports[@]} -gt 0 ] && "$FLEXGV" census --combine -o "$OUT/census.json" "${reports[@]}"; then
    "$FLEXGV" census --markdown "$OUT/census.json" >>"$md"
else
    fail "no census report to combine"
fi
if [ ${#integrity[@]} -gt 0 ]; then
    { echo; echo "Integrity-check slot:"; echo; printf '%s\n' "${integrity[@]}"; } >>"$md"
fi
if [ -n "$OLD" ] && [ -f "$OUT/census.json" ]; then
    echo "== compared with $OLD"
    if "$FLEXGV" census --compare "$OLD" "$OUT/census.json" | tee "$OUT/compare.txt"; then
        pass "same tables, layouts, called slots and refusals as $OLD"
    else
        fail "the census differs from $OLD (OUTDIR/compare.txt)"
    fi
fi
echo
cat "$md"
echo
echo "== $failures failures; reports in $OUT"
rm -rf "$WORK"
[ $failures = 0 ]
