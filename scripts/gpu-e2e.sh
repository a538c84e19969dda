#!/usr/bin/env bash
# End-to-end truth on a real GPU, in one run. From the repository root on a
# machine with an NVIDIA driver, nvcc and PyTorch, with build/ made by `make`
# (`make GOTAGS=nok8s` keeps the CLI small where build/ is copied over):
#     scripts/gpu-e2e.sh OUTDIR [SECTION...]
# Sections (default: all): decl counts simmodel hookmap torch bench contended green drvmem quota isolation nvmlprocs mpspods computecap quotabench lonebench ddpshare shares sharetrain sharegroup sharecombos sharemixed priority prioritygraph suspend remotefamilies
# (PAIRS="flexgv" runs only some of the priority sections' ways of sharing,
# PRIORITY_ROUNDS=3 runs them three times over, the request alone in each;
# REF_SHIM=PATH with PAIRS "ref" and "mpsref" runs flexgv's pairs again in
# the same rounds with that build of libflexgv.so, to compare two shims;
# SHARE_S=60 TRAIN_S=60 make the share runs last a minute each; REF_SHIM=PATH
# also runs sharemixed's pair with that libflexgv.so; SUSPEND_GIB and
# SUSPEND_STEPS size the suspend section's ballast and training; COMBOS
# picks sharecombos' runs among capshare caphigh capgroup server)
# Checks our driver declarations against the real headers, traces CUDA
# programs built with nvcc (static and shared cudart), checks every hooked
# variant against the real driver's resolver, runs PyTorch natively and under
# the shim (bit-identical losses), and benchmarks the shim against native.
# Exits non-zero on any mismatch; OUTDIR/gpu-e2e.log holds everything.
# OUTDIR (default: a new folder under $TMPDIR) belongs outside the
# repository: raw logs are not committed, their figures go into
# docs/MEASUREMENTS.md.
set -u -o pipefail
source "$(dirname "$0")/outdir.sh"
OUT=$(outdir gpu-e2e "${1:-}") || exit 2
shift || true
SECTIONS=${*:-decl counts simmodel hookmap torch bench contended green drvmem quota isolation nvmlprocs mpspods computecap quotabench lonebench ddpshare shares sharetrain sharegroup sharecombos sharemixed priority prioritygraph suspend remotefamilies}
ROUNDS=${ROUNDS:-7} # rounds of the throughput benchmarks
PAIRS=${PAIRS:-timeslice mps mps50 mpsflexgv mpssm mpssm25 flexgv} # how the priority sections share the GPU
PRIORITY_ROUNDS=${PRIORITY_ROUNDS:-1} # rounds of those pairs, one after another (their ratios compared round by round)
[[ $PRIORITY_ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "PRIORITY_ROUNDS=$PRIORITY_ROUNDS: give a whole number from 1"; exit 2; }
REF_SHIM=${REF_SHIM:-} # another libflexgv.so, for the pairs ref and mpsref
if [[ " $PAIRS " == *" ref "* || " $PAIRS " == *" mpsref "* ]] && [ ! -f "$REF_SHIM" ]; then
    echo "PAIRS names ref or mpsref: set REF_SHIM to the libflexgv.so to compare with (REF_SHIM=${REF_SHIM:-unset})"
    exit 2
fi
SHARE_S=${SHARE_S:-24} # seconds of the matmul share run (the change comes halfway)
TRAIN_S=${TRAIN_S:-15} # seconds of the training share run
MIX_LONG=${MIX_LONG:-64} MIX_SHORT=${MIX_SHORT:-4} # sharemixed's batches: long kernels at 30 %, short at 70 %
COMBOS=${COMBOS:-capshare caphigh capgroup server} # sharecombos' runs
for c in $COMBOS; do
    [[ " capshare caphigh capgroup server " == *" $c "* ]] ||
        { echo "COMBOS: unknown run $c (capshare caphigh capgroup server)"; exit 2; }
done
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
ROOT=$(pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda}
FLEXGV=$ROOT/build/bin/flexgv
WORK=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1
exec > >(tee "$OUT/gpu-e2e.log") 2>&1
echo "logs: $OUT"

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# json FILE EXPR: evaluate a Python expression over the summary's APIs.
json() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); c={a['name']:a['calls'] for a in s['apis']}; print($2)" "$1"; }

echo "== machine"
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$CUDA/bin/nvcc" --version | tail -2
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
[ -x "$FLEXGV" ] && [ -f build/lib/libflexgv.so ] || { echo "build/ is missing: run make first"; exit 2; }

if want decl; then
echo "== declarations against the real cuda.h / cudaTypedefs.h"
if gcc -std=gnu11 -Wall -Werror -I"$CUDA/include" -c scripts/gpu/declcheck_gen.c -o "$WORK/decl.o" 2>"$WORK/decl.err" &&
    gcc -std=gnu11 -Wall -Werror -I"$CUDA/include" -c scripts/gpu/declcheck_legacy_gen.c -o "$WORK/decl_legacy.o" 2>>"$WORK/decl.err"; then
    pass "every hooked signature and version matches its PFN typedef ($(cat scripts/gpu/declcheck*_gen.c | grep -c '^SAME') variants)"
else
    grep -E 'error' "$WORK/decl.err" | head -40
    fail "hooked signatures differ from the real header"
fi
gcc -std=gnu11 -Iinclude -o "$WORK/types_ours" scripts/gpu/typecheck_gen.c &&
    gcc -std=gnu11 -DREAL_CUDA_H -I"$CUDA/include" -o "$WORK/types_real" scripts/gpu/typecheck_gen.c &&
    "$WORK/types_ours" >"$WORK/ours.txt" && "$WORK/types_real" >"$WORK/real.txt"
# A runtime asks for the newest ABI of a name at its own version: a newer
# typedef of a hooked name, with other parameters than the variant we hook,
# would bypass the shim.
newer=$(python3 - "$CUDA/include/cudaTypedefs.h" scripts/gpu/declcheck*_gen.c <<'PY'
import re, sys
ours = {}
for f in sys.argv[2:]:
    for b, v, t in re.findall(r"PFN_(\w+?)_v(\d+)(_pt[sd][sz])?\b", open(f).read()):
        ours[b + t] = max(ours.get(b + t, 0), int(v))
params = {}
for b, v, t, p in re.findall(r"\*\s*PFN_(\w+?)_v(\d+)(_pt[sd][sz])?\s*\)\s*\((.*?)\)\s*;", open(sys.argv[1]).read(), re.S):
    # CUdevice_v1 and CUdevice are one type: compare types, not their aliases
    params[b + t, int(v)] = " ".join(re.sub(r"\b(CU\w+?)_v\d+\b", r"\1", p).split())
print(" ".join(sorted(f"{k}@{v}" for k, v in params if k in ours and v > ours[k] and params[k, v] != params.get((k, ours[k])))))
PY
)
if [ -z "$newer" ]; then
    pass "no hooked entry point has a newer ABI in cudaTypedefs.h"
else
    fail "newer ABIs of hooked entry points, not hooked (a runtime would bypass the shim): $newer"
fi
if diff "$WORK/real.txt" "$WORK/ours.txt"; then
    pass "enumerators, constants, sizes and field offsets match ($(wc -l <"$WORK/ours.txt") checked)"
else
    fail "our declarations differ from cuda.h (diff above: < real, > ours)"
fi

fi

echo "== nvcc builds"
"$CUDA/bin/nvcc" -O2 -o "$WORK/vectoradd_static" examples/vectoradd/vectoradd.cu &&
    "$CUDA/bin/nvcc" -O2 -cudart shared -o "$WORK/vectoradd_shared" examples/vectoradd/vectoradd.cu &&
    "$CUDA/bin/nvcc" -O2 -o "$WORK/launch_bench" bench/launch_bench.cu || fail "nvcc build"
cmake -S examples/vectoradd -B "$WORK/cmake" >/dev/null && cmake --build "$WORK/cmake" >/dev/null &&
    pass "examples/vectoradd builds with CMake" || fail "CMake build of examples/vectoradd"

if want counts; then
echo "== traced CUDA programs report exact counts"
for kind in static shared; do
    s="$WORK/va_$kind.json"
    "$FLEXGV" trace --json -o "$s" -- "$WORK/vectoradd_$kind" 25 >"$WORK/va_$kind.out" || fail "vectoradd ($kind) under trace"
    allocs=$(json "$s" 'c.get("cuMemAlloc_v2",0)')
    launches=$(json "$s" 'sum(v for k,v in c.items() if k.startswith("cuLaunchKernel"))')
    gpa=$(json "$s" 'c.get("cuGetProcAddress_v2",0)')
    if [ "$allocs" = 3 ] && [ "$launches" = 25 ]; then
        pass "vectoradd ($kind cudart): 3 allocations, 25 launches traced; $gpa entry points resolved through cuGetProcAddress_v2"
    else
        fail "vectoradd ($kind cudart): traced $allocs allocations and $launches launches, the program made 3 and 25"
    fi
done
"$FLEXGV" trace -- "$WORK/vectoradd_static" 25 2>&1 >/dev/null | head -12

fi

if want simmodel; then
echo "== the simulated GPU's model against the real one"
sim() { FLEXGV_SIM_STATE="$WORK/sim.state" LD_LIBRARY_PATH=build/sim "$@"; }
# same WHAT NAME: WORK/NAME.real and WORK/NAME.sim, what a program printed
# on the real GPU and on the simulated one, alike.
same() {
    if [ -s "$WORK/$2.real" ] && diff "$WORK/$2.real" "$WORK/$2.sim"; then
        pass "$1: the simulated GPU prints what the real one does ($(wc -l <"$WORK/$2.real") lines)"
    else
        fail "$1: the simulated GPU differs from the real one (diff above: < real, > simulated)"
    fi
}
# Host functions: what the program sees beyond order (the caller goes on,
# later work waits, a graph's host node runs at each launch).
if "$CUDA/bin/nvcc" -O2 -o "$WORK/hostfunc_async" scripts/gpu/hostfunc_async.cu; then
    "$WORK/hostfunc_async" >"$WORK/hostasync.real" 2>&1
    sim build/tests/hostfunc async >"$WORK/hostasync.sim" 2>&1
    same "host functions" hostasync
else
    fail "simmodel: nvcc build of hostfunc_async.cu"
fi
# Executable graphs updated from graphs of another topology: what the
# driver refuses, the node it names, what the executable then runs
# (tests/clients/graphnodes, its fill kernel built for the real GPU).
if "$CUDA/bin/nvcc" -cubin -arch=native -o "$WORK/fill.cubin" scripts/gpu/fill.cu; then
    FLEXGV_TEST_FILL_IMAGE=$WORK/fill.cubin build/tests/graphnodes topology >"$WORK/topology.real" 2>&1
    sim build/tests/graphnodes topology >"$WORK/topology.sim" 2>&1
    same "graph updates by topology" topology
else
    fail "simmodel: nvcc build of fill.cu"
fi
# A primary context reset and retained again: its handle.
build/tests/families primary 2>&1 | grep '^a primary context' >"$WORK/primary.real"
sim build/tests/families primary 2>&1 | grep '^a primary context' >"$WORK/primary.sim"
same "primary context reset" primary
# A two-plane (NV12) array: its planes, their layouts and texels, refusals.
build/tests/arrays planes >"$WORK/planes.real" 2>&1
sim build/tests/arrays planes >"$WORK/planes.sim" 2>&1
same "two-plane (NV12) arrays" planes
fi

if want hookmap; then
echo "== every hooked variant against the real driver's resolver"
build/tests/hookmap >"$WORK/hookmap_native.txt"; tail -1 "$WORK/hookmap_native.txt"
grep MISMATCH "$WORK/hookmap_native.txt" | head -20
if "$FLEXGV" run -- build/tests/hookmap shim >"$WORK/hookmap_shim.txt"; then
    pass "$(tail -1 "$WORK/hookmap_shim.txt") under the shim"
else
    grep MISMATCH "$WORK/hookmap_shim.txt" | head -20
    fail "hookmap under the shim: $(tail -1 "$WORK/hookmap_shim.txt")"
fi

fi

if want torch; then
echo "== PyTorch: native vs under the shim"
python3 scripts/gpu/torch_train.py 100 >"$WORK/torch_native.json" || fail "torch native"
"$FLEXGV" run -- python3 scripts/gpu/torch_train.py 100 >"$WORK/torch_run.json" || fail "torch under flexgv run"
"$FLEXGV" trace --json -o "$WORK/torch_trace_summary.json" -- python3 scripts/gpu/torch_train.py 100 >"$WORK/torch_trace.json" || fail "torch under flexgv trace"
same=$(python3 -c '
import json,sys
l=[json.loads(open(f).read())["losses"] for f in sys.argv[1:]]
print(len(l[0]) if l[0]==l[1]==l[2] else 0)' "$WORK/torch_native.json" "$WORK/torch_run.json" "$WORK/torch_trace.json")
[ "$same" -gt 0 ] && pass "losses bit-identical natively, under run and under trace ($same steps)" || fail "losses differ under the shim"
launches=$(json "$WORK/torch_trace_summary.json" 'sum(v for k,v in c.items() if k.startswith("cuLaunchKernel"))')
dlsym_allocs=$(json "$WORK/torch_trace_summary.json" 'c.get("cuMemAlloc_v2",0)')
[ "$launches" -gt 1000 ] && [ "$dlsym_allocs" -gt 0 ] && pass "PyTorch: $launches launches and $dlsym_allocs cuMemAlloc_v2 traced" ||
    fail "PyTorch: only $launches launches / $dlsym_allocs allocations traced"
python3 -c "import json; s=json.load(open('$WORK/torch_trace_summary.json')); [print(f\"  {a['name']:32} {a['calls']:8}\") for a in s['apis'][:15]]"

fi

# Benchmarks: modes alternate within each round and are compared pairwise per
# round, so drift of the shared machine cancels. The launch loop is pinned to
# one core; PyTorch is not (its worker threads would then compete).
pin=(); command -v taskset >/dev/null && pin=(taskset -c 3)
if want bench; then
echo "== benchmark: launches (ns per launch, 200000 empty kernels, 9 rounds)"
for round in 1 2 3 4 5 6 7 8 9; do
    echo "$round native $("${pin[@]}" "$WORK/launch_bench" 200000)"
    echo "$round run $("${pin[@]}" "$FLEXGV" run -- "$WORK/launch_bench" 200000)"
    echo "$round trace $("${pin[@]}" "$FLEXGV" trace -o /dev/null -- "$WORK/launch_bench" 200000)"
done | tee "$WORK/launch.txt"
echo "== benchmark: PyTorch training throughput (2000 steps, $ROUNDS rounds)"
for round in $(seq "$ROUNDS"); do
    echo "$round native $(python3 scripts/gpu/torch_train.py 2000 50)"
    echo "$round run $("$FLEXGV" run -- python3 scripts/gpu/torch_train.py 2000 50)"
done >"$WORK/torch_bench.txt"
{ python3 scripts/gpu/paired.py "$WORK/launch.txt" "launch (ns per launch)"
  python3 scripts/gpu/paired.py "$WORK/torch_bench.txt" "PyTorch training"; } | tee "$OUT/bench.txt"
fi

if want contended; then
echo "== benchmark: a holder's launch path with an idle tenant present (5 rounds; eager inference, 3)"
# What scheduling costs the host of a holder that is not alone: launches
# of empty kernels, and back-to-back eager inference requests (host-bound),
# natively, alone under --priority high (the pass-through launch path) and
# beside an idle low-priority tenant (the scheduled one); and what the
# driver calls on that path cost by themselves.
[ -x "$WORK/launch_bench" ] || "$CUDA/bin/nvcc" -O2 -o "$WORK/launch_bench" bench/launch_bench.cu
"$CUDA/bin/nvcc" -O2 -o "$WORK/driver_calls" bench/driver_calls.cu -lcuda &&
    "${pin[@]}" "$WORK/driver_calls" | tee "$OUT/driver_calls.txt"
export FLEXGV_STATE_DIR=$WORK/contended-state
beside_idle() { # CMD...: CMD as a high-priority tenant, an idle low-priority one present
    "$FLEXGV" run --priority low -- python3 scripts/gpu/idle_tenant.py 300 >"$WORK/idle.out" &
    local p=$! i
    for i in $(seq 200); do grep -q present "$WORK/idle.out" 2>/dev/null && break; sleep 0.05; done
    "$FLEXGV" run --priority high -- "$@"
    kill $p && wait $p 2>/dev/null
}
native_beside_idle() { # CMD...: CMD natively, an idle process holding a context on the GPU
    python3 scripts/gpu/idle_tenant.py 300 >"$WORK/idle_native.out" &
    local p=$! i
    for i in $(seq 200); do grep -q present "$WORK/idle_native.out" 2>/dev/null && break; sleep 0.05; done
    "$@"
    kill $p && wait $p 2>/dev/null
}
for round in 1 2 3 4 5; do
    echo "$round native $("${pin[@]}" "$WORK/launch_bench" 200000)"
    echo "$round native_idle_context $(native_beside_idle "${pin[@]}" "$WORK/launch_bench" 200000)"
    echo "$round alone $("$FLEXGV" run --priority high -- "${pin[@]}" "$WORK/launch_bench" 200000)"
    echo "$round contended $(beside_idle "${pin[@]}" "$WORK/launch_bench" 200000)"
    echo "$round native_own_stream $("${pin[@]}" "$WORK/launch_bench" 200000 stream)"
    echo "$round contended_own_stream $(beside_idle "${pin[@]}" "$WORK/launch_bench" 200000 stream)"
done >"$WORK/contended_launch.txt"
peak() { echo "{\"steps_per_s\": $("$@" python3 scripts/gpu/share_load.py peak 5)}"; }
for round in 1 2 3; do
    echo "$round native $(peak env)"
    echo "$round alone $(peak "$FLEXGV" run --priority high --)"
    echo "$round contended $(peak beside_idle)"
done >"$WORK/contended_eager.txt"
{ python3 scripts/gpu/paired.py "$WORK/contended_launch.txt" "launch (ns per launch)"
  python3 scripts/gpu/paired.py "$WORK/contended_eager.txt" "eager inference (requests/s, back to back)"; } | tee "$OUT/contended.txt"
unset FLEXGV_STATE_DIR
fi

if want green; then
echo "== green contexts: a process's launches moved onto part of the SMs (natively, then under MPS)"
# What moving a tenant's launches onto a green context would cost and
# reach: bench/green_lane.cu, without MPS and as an MPS client.
"$CUDA/bin/nvcc" -O2 -o "$WORK/green_lane" bench/green_lane.cu -lcuda &&
    "${pin[@]}" "$WORK/green_lane" 64 | tee "$OUT/green_lane.txt"
export CUDA_MPS_PIPE_DIRECTORY=$WORK/mps-green CUDA_MPS_LOG_DIRECTORY=$WORK/mps-green-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if nvidia-cuda-mps-control -d; then
    echo "-- under MPS" | tee -a "$OUT/green_lane.txt"
    "${pin[@]}" "$WORK/green_lane" 64 | tee -a "$OUT/green_lane.txt"
    echo quit | timeout 20 nvidia-cuda-mps-control
    sleep 2
else
    fail "cannot start an MPS daemon"
fi
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
grep -q FAILED "$OUT/green_lane.txt" && fail "green contexts (above)"
fi

# watch CMD...: run CMD while NVML, outside the tenant, samples what GPU 0
# really holds; prints CMD's output, then leaves the peak in $WORK/peak.
watch() {
    touch "$WORK/watching"
    python3 scripts/gpu/nvml_watch.py "$WORK/watching" >"$WORK/peak.json" &
    local w=$!
    sleep 0.5
    "$@"
    local rc=$?
    rm -f "$WORK/watching"
    wait $w
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak"])' "$WORK/peak.json" >"$WORK/peak"
    return $rc
}
GiB=$((1 << 30))
Q=$((10 * GiB))
# filled FILE LABEL: whether torch_quota.py fill (FILE), watched, saw the
# 10 GiB quota, filled it and got OutOfMemoryError, NVML's peak inside it.
filled() {
    python3 - "$1" "$Q" "$(cat "$WORK/peak")" "$2" <<'PY'
import json, sys
r, q, peak, label = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
G = 1 << 30
print(f"  {label}: mem_get_info total {r['total']/G:.2f} GiB, free at start {r['free_start']/G:.2f} GiB "
      f"(context {(q - r['free_start'])/(1<<20):.0f} MiB), tensors allocated {r['allocated']/G:.2f} GiB, "
      f"then OutOfMemoryError: {r.get('oom', False)}; NVML peak of the device memory really held {peak/G:.3f} GiB")
sys.exit(0 if r["total"] == q and r.get("oom") and r["allocated"] >= q - 2 * G and peak <= q else 1)
PY
}

if want drvmem; then
echo "== memory as the driver spends it: scripts/gpu/memprobe.c natively, then each pattern under a quota"
# The probe's output is what include/flexgv/drvmem.h's entry for this
# driver is read from; each pattern below runs until refused and holds its
# peak, which NVML (nvml_watch.py, as nvidia-smi) must show within the quota.
P=$WORK/probe
mkdir -p "$P"
for g in "g1 1" "g4097 4097" "g2m1 2097153" "g1g 1073741824"; do
    set -- $g
    "$CUDA/bin/nvcc" -cubin -arch=sm_90 -O2 -DGLOBAL_BYTES=${2}ull -o "$P/$1.cubin" scripts/gpu/memprobe_kernels.cu || fail "nvcc $1.cubin"
done
"$CUDA/bin/nvcc" -cubin -arch=sm_90 -O2 -rdc=true -DWITH_CDP -DGLOBAL_BYTES=1ull -o "$P/cdp.cubin" scripts/gpu/memprobe_kernels.cu || fail "nvcc cdp.cubin"
gcc -O2 -I"$CUDA/include" -o "$WORK/memprobe" scripts/gpu/memprobe.c -L"$CUDA/lib64/stubs" -lcuda -lnvidia-ml &&
    gcc -O2 -I"$CUDA/include" -o "$WORK/drvquota" scripts/gpu/drvquota.c -L"$CUDA/lib64/stubs" -lcuda || fail "gcc memprobe/drvquota"
CUDA=$CUDA "$WORK/memprobe" "$P" >"$OUT/memprobe.txt" 2>&1 && pass "memprobe (figures in $OUT/memprobe.txt)" || fail "memprobe"
# dq QUOTA LABEL ARGS...: drvquota ARGS under --mem QUOTA, its NVML peak within it.
dq() {
    local quota=$1 label=$2
    shift 2
    watch "$FLEXGV" run --mem "$quota" -- "$WORK/drvquota" "$@" >"$WORK/dq.txt" 2>"$WORK/dq.err"
    local peak=$(cat "$WORK/peak") q=$(python3 -c "import sys; v=sys.argv[1]; print(int(v[:-3]) << (30 if v.endswith('GiB') else 20))" "$quota")
    echo "  $label under $quota: $(cat "$WORK/dq.txt"); NVML peak $((peak >> 20)) MiB"
    [ "$peak" -gt 0 ] && [ "$peak" -le "$q" ] && pass "$label: peak within the quota" || { cat "$WORK/dq.err"; fail "$label: peak $peak over $q"; }
}
for size in 1 512 513 4096 65537 1048577 2097151 2097152 2097153 67108865 1073741824 1073741825; do
    dq 2GiB "cuMemAlloc $size B" blocks $size
done
dq 2GiB "8192 blocks of 256 B" blocks 256 8192
dq 2GiB "pitched 4097 x 1024" pitch 4097 1024
dq 2GiB "1D arrays of 64 Ki floats" array1d 65536
dq 2GiB "2D arrays of 1000 x 1000 floats" array2d 1000 1000
dq 2GiB "stream-ordered 2 MiB + 1" pool 2097153
dq 2GiB "VMM" vmm
dq 1GiB "a 1 GiB __device__ global" module "$P/g1g.cubin"
dq 2GiB "a 1 GiB __device__ global" module "$P/g1g.cubin"
dq 4GiB "64 KiB of local memory per thread" local "$P/g1.cubin" local64k
dq 20GiB "64 KiB of local memory per thread" local "$P/g1.cubin" local64k
dq 2GiB "a module calling device malloc (the backstop's)" module "$P/g1.cubin"
dq 2GiB "65536 pending launches" pending 65536
for lib in cupy jax; do
    watch env XLA_PYTHON_CLIENT_PREALLOCATE=false "$FLEXGV" run --mem 4GiB -- python3 - "$lib" >"$WORK/fw.txt" 2>"$WORK/fw.err" <<'PY'
import sys
n = 0
try:
    if sys.argv[1] == "cupy":
        import cupy as cp
        xs = []
        while True:
            xs.append(cp.empty(64 << 20, dtype=cp.uint8))
            n += 1
    else:
        import jax.numpy as jnp
        xs = []
        while True:
            xs.append(jnp.ones(16 << 20, dtype=jnp.float32).block_until_ready())
            n += 1
except Exception as e:
    print(f"{n} blocks of 64 MiB, then {type(e).__name__}")
PY
    peak=$(cat "$WORK/peak")
    echo "  $lib under 4GiB: $(cat "$WORK/fw.txt"); NVML peak $((peak >> 20)) MiB"
    [ "$peak" -gt 0 ] && [ "$peak" -le $((4 << 30)) ] && pass "$lib: peak within the quota" || { tail -3 "$WORK/fw.err"; fail "$lib: peak $peak"; }
done
fi

if want quota; then
echo "== memory quota: PyTorch under --mem 10GiB"
for alloc in default expandable; do
    conf=""; [ $alloc = expandable ] && conf="expandable_segments:True"
    PYTORCH_CUDA_ALLOC_CONF=$conf watch "$FLEXGV" run --mem 10GiB -- python3 scripts/gpu/torch_quota.py fill >"$WORK/q_$alloc.json" || fail "torch fill ($alloc)"
    filled "$WORK/q_$alloc.json" "$alloc" && pass "PyTorch ($alloc allocator) inside the quota" || fail "PyTorch ($alloc allocator) quota"
done

echo "== memory quota: cudaMallocAsync pools"
"$CUDA/bin/nvcc" -O2 -o "$WORK/mallocasync" scripts/gpu/mallocasync.cu || fail "nvcc mallocasync"
watch "$FLEXGV" run --mem 10GiB -- "$WORK/mallocasync" >"$WORK/q_async.json" || fail "mallocasync"
python3 - "$WORK/q_async.json" "$Q" "$(cat "$WORK/peak")" <<'PY' && pass "cudaMallocAsync inside the quota" || fail "cudaMallocAsync quota"
import json, sys
r, q, peak = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
G = 1 << 30
print(f"  total {r['total']/G:.2f} GiB, {r['blocks']} blocks of 256 MiB then {r['error']}, free when full "
      f"{r['free_full']/(1<<20):.0f} MiB, free after freeing and synchronizing {r['free_after']/G:.2f} GiB "
      f"(at start {r['free_start']/G:.2f}); NVML peak {peak/G:.3f} GiB")
ok = (r["total"] == q and r["error"] == "cudaErrorMemoryAllocation" and r["blocks"] * 256 * (1 << 20) <= q
      and r["free_after"] == r["free_start"] and peak <= q)
sys.exit(0 if ok else 1)
PY

echo "== memory quota: two processes of one tenant"
rm -f "$WORK/held"
(watch "$FLEXGV" run --group pair --mem 10GiB -- python3 scripts/gpu/torch_quota.py hold 6 "$WORK/held" >"$WORK/q_hold.json") &
holder=$!
for i in $(seq 100); do [ -e "$WORK/held" ] && break; sleep 0.2; done
"$FLEXGV" ps
"$FLEXGV" run --group pair -- python3 scripts/gpu/torch_quota.py try 6 2 >"$WORK/q_try.json" || fail "second process"
rm -f "$WORK/held"
wait $holder
python3 - "$WORK/q_try.json" "$Q" "$(cat "$WORK/peak")" <<'PY' && pass "two processes share one quota" || fail "shared quota"
import json, sys
r, q, peak = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
print(f"  second process: sees total {r['total']/(1<<30):.2f} GiB, free {r['free_start']/(1<<30):.2f} GiB; "
      f"tries {r['results']}; NVML peak of both {peak/(1<<30):.3f} GiB")
sys.exit(0 if r["results"] == [["6", "OutOfMemoryError"], ["2", "ok"]] and peak <= q else 1)
PY
fi

if want isolation; then
echo "== memory isolation: graph memory, capture, PyTorch graphs, devices by UUID (scripts/gpu-isolation.sh)"
source scripts/gpu-isolation.sh "$OUT"
fi

if want nvmlprocs; then
echo "== NVML inside a tenant: its own processes only (tenant a in a PID namespace of its own)"
if gcc -std=gnu11 -O2 -Wall -I"$CUDA/include" -o "$WORK/nvmlprocs" tests/clients/nvmlprocs.c \
    -L"$CUDA/lib64/stubs" -lnvidia-ml; then
    export HOLD='import sys, time, torch
x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
t = time.time()
while time.time() - t < 30:
    a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()' W=$WORK
    ns=()
    unshare -pf --mount-proc true 2>/dev/null && ns=(unshare -pf --mount-proc)
    export FLEXGV_STATE_DIR=$WORK/nvml-state
    # Tenant a as a container: its holder and, later, its viewer share a PID
    # namespace (the viewer inherits the tenant from the shell).
    "$FLEXGV" run --group a --mem 16GiB -- "${ns[@]}" sh -c 'python3 -c "$HOLD" 1024 >"$W/hold-a.out" 2>&1 &
        for _ in $(seq 90); do [ -e "$W/go" ] && break; sleep 1; done
        "$W/nvmlprocs" >"$W/nvml-a.txt" 2>&1
        wait' &
    ha=$!
    for _ in $(seq 60); do grep -q ready "$WORK/hold-a.out" 2>/dev/null && break; sleep 1; done
    "$FLEXGV" run --group b --mem 16GiB -- python3 -c "$HOLD" 4096 >"$WORK/hold-b.out" 2>&1 &
    hb=$!
    for _ in $(seq 60); do grep -q ready "$WORK/hold-b.out" && break; sleep 1; done
    sleep 2
    "$WORK/nvmlprocs" >"$WORK/nvml-outside.txt" 2>&1
    "$FLEXGV" run --group b -- "$WORK/nvmlprocs" >"$WORK/nvml-b.txt" 2>&1
    "$FLEXGV" run --group a -- "$WORK/nvmlprocs" >"$WORK/nvml-a-host.txt" 2>&1
    touch "$WORK/go"
    for _ in $(seq 30); do [ -s "$WORK/nvml-a.txt" ] && break; sleep 1; done
    echo "tenant a in a PID namespace of its own: ${ns[*]:-no (unshare refused)}"
    for f in outside a b a-host; do echo "-- $f:" && cat "$WORK/nvml-$f.txt"; done
    if python3 - "$WORK"/nvml-{outside,a,b}.txt <<'PY'; then
import re, sys
def procs(f):
    m = re.search(r"^processes:(.*)$", open(f).read(), re.M)
    return {} if not m else {int(p): int(b) for p, b in re.findall(r"(\d+):(\d+)MiB", m.group(1))}
def busy(f):
    m = re.search(r"^busy:(.*)$", open(f).read(), re.M)
    return set() if not m else {int(p) for p in re.findall(r"\d+", m.group(1))}
out, a, b = (procs(f) for f in sys.argv[1:])
# a holds 1 GiB, b 4 GiB: outside both are listed, in each tenant its own alone
# (pids as the tenant's namespace has them)
ok = len(out) == 2 and len(a) == 1 and len(b) == 1
ok = ok and sorted(out.values()) == [list(a.values())[0], list(b.values())[0]]
ok = ok and busy(sys.argv[2]) <= set(a) and busy(sys.argv[3]) <= set(b)
sys.exit(0 if ok else 1)
PY
        pass "NVML in a tenant lists its own processes and their utilization alone"
    else
        fail "NVML in a tenant lists other tenants' processes, or not its own (above)"
    fi
    kill $ha $hb 2>/dev/null
    wait $ha $hb 2>/dev/null
    unset FLEXGV_STATE_DIR HOLD W
else
    fail "nvmlprocs: build"
fi
fi

if want mpspods; then
echo "== MPS for pods: the node daemon's MPS, a pod's processes in namespaces of their own (the chart's layout)"
# As the chart lays it out: the daemon runs MPS with its pipes in the node
# folder N/pipe; a pod given part of the SMs gets that folder at another
# path (CUDA_MPS_PIPE_DIRECTORY) and nothing else of MPS. unshare stands in
# for the containers: the daemon has a mount namespace of its own (its
# /dev/shm is N/shm, to look at), each pod PID and mount namespaces and a
# tmpfs /dev/shm of its own.
N=$WORK/mpsnode
M=$OUT/mpspods
mkdir -p "$N/pipe" "$N/shm" "$N/state" "$N/pod-pipe" "$M"
export FLEXGV_STATE_DIR=$N/state CUDA_MPS_PIPE_DIRECTORY=$N/pipe
# node_daemon [UNSHARE FLAGS...]: the daemon with its MPS, in the background,
# until its MPS answers.
node_daemon() {
    unshare -m --propagation private "$@" sh -c 'mount --bind "$0/shm" /dev/shm && exec "$1" daemon --mps --metrics-addr ""' \
        "$N" "$FLEXGV" >"$N/daemon.log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 50); do grep -q "MPS: started" "$N/daemon.log" && return 0; sleep 0.2; done
    cat "$N/daemon.log"
    return 1
}
stop_daemon() {
    # unshare --fork ignores SIGTERM while it waits: the daemon is its child
    pkill -TERM -x flexgv -P "$daemon_pid" || kill -TERM "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
    cat "$N/daemon.log" >>"$M/daemon.log"
}
# pod SECONDS CMD...: CMD as a pod given 25 % of the SMs and a 10 GiB quota.
pod() {
    local limit=$1
    shift
    timeout -k 5 "$limit" "$FLEXGV" run --mem 10GiB --sm 25 -- unshare -m -p -f --mount-proc --propagation private sh -c '
        mount -t tmpfs tmpfs /dev/shm && mount --bind "$0/pipe" "$0/pod-pipe" &&
        CUDA_MPS_PIPE_DIRECTORY=$0/pod-pipe exec "$@"' "$N" "$@"
}
# reach FILE...: each a pod's smreach output, a client running on at most
# 30 % of the SMs natively reached ($M/native.txt).
reach() {
    python3 - "$M/native.txt" "$@" <<'PY'
import re, sys
def read(f):
    m = re.search(r"mps_client (\d+) sms (\d+) reached (\d+)", open(f).read())
    return tuple(map(int, m.groups())) if m else None
native, pods = read(sys.argv[1]), [read(f) for f in sys.argv[2:]]
sys.exit(0 if native and all(p and p[0] == 1 and 0 < p[2] <= 0.3 * native[2] for p in pods) else 1)
PY
}
if "$CUDA/bin/nvcc" -O2 -o "$WORK/smreach" scripts/gpu/smreach.cu -lcuda && node_daemon; then
    env -u CUDA_MPS_PIPE_DIRECTORY "$WORK/smreach" >"$M/native.txt" 2>&1
    pod 60 "$WORK/smreach" >"$M/pod.txt" 2>&1
    echo "native: $(cat "$M/native.txt")"
    echo "pod at 25 %: $(cat "$M/pod.txt")"
    reach "$M/pod.txt" && pass "a pod's process is a client of the daemon's MPS and runs on its part of the SMs" ||
        fail "a pod given 25 % of the SMs (above)"
    watch pod 120 python3 scripts/gpu/torch_quota.py fill >"$M/quota.json" 2>"$M/quota.err" || { cat "$M/quota.err"; fail "PyTorch in an MPS pod"; }
    filled "$M/quota.json" "MPS pod" && pass "PyTorch in an MPS pod inside its quota" || fail "PyTorch in an MPS pod: quota"
    # What NVML and flexgv ps show of an MPS client holding 4 GiB.
    rm -f "$WORK/mps-held"
    pod 60 python3 scripts/gpu/torch_quota.py hold 4 "$WORK/mps-held" >"$M/hold.json" 2>&1 &
    holder=$!
    for _ in $(seq 100); do [ -e "$WORK/mps-held" ] && break; sleep 0.2; done
    { echo "-- nvidia-smi, a pod holding 4 GiB:"
      nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
      echo "-- flexgv ps:"
      "$FLEXGV" ps; } 2>&1 | tee "$M/holding.txt"
    rm -f "$WORK/mps-held"
    wait $holder
    # Training: one pod alone, then two at once, while the server's /dev/shm
    # is looked at; then pinned and pageable copies.
    pod 90 python3 scripts/gpu/torch_train.py 1000 20 >"$M/train-alone.json" 2>"$M/train-alone.err"
    trainers=()
    for i in 1 2; do
        pod 90 python3 scripts/gpu/torch_train.py 1000 20 >"$M/train-$i.json" 2>"$M/train-$i.err" &
        trainers+=($!)
    done
    sleep 4
    { echo "-- the MPS server's /dev/shm while two pods train:"; ls -la "$N/shm"
      nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader; } | tee "$M/shm.txt"
    wait "${trainers[@]}"
    python3 - "$M"/train-{alone,1,2}.json <<'PY' && pass "two MPS pods train at once, losses bit-identical to one alone" || fail "MPS pods training (above)"
import json, sys
runs = [json.load(open(f)) for f in sys.argv[1:]]
for f, r in zip(sys.argv[1:], runs):
    print(f"  {f.rsplit('/', 1)[1]}: {r['steps_per_s']:.0f} steps/s")
sys.exit(0 if all(r["losses"] == runs[0]["losses"] for r in runs[1:]) else 1)
PY
    pod 60 python3 scripts/gpu/h2d_bandwidth.py >"$M/h2d.json" 2>&1
    echo "copies in a pod (GB/s): $(cat "$M/h2d.json")"
    stop_daemon
    # A daemon in a PID namespace of its own: a pod without hostPID.
    if node_daemon -p -f --mount-proc --kill-child=SIGTERM; then
        pod 60 "$WORK/smreach" >"$M/pod-daemon-pidns.txt" 2>&1
        echo "daemon without the host's PIDs, pod at 25 %: $(cat "$M/pod-daemon-pidns.txt")"
        reach "$M/pod-daemon-pidns.txt" && pass "a daemon without the host's PIDs serves MPS pods" ||
            fail "a daemon without the host's PIDs (above)"
        stop_daemon
    else
        fail "a daemon without the host's PIDs: its MPS did not start"
    fi
else
    fail "MPS pods: nvcc smreach or the daemon's MPS"
fi
cp -r "$N/state/mps-log" "$M/" 2>/dev/null
echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1 # nothing left behind
unset FLEXGV_STATE_DIR CUDA_MPS_PIPE_DIRECTORY
fi

if want computecap; then
echo "== compute cap: matrix products per second, native vs --compute-max 30% and 50% (2 rounds)"
for round in 1 2; do
    n=$(python3 scripts/gpu/matmul_rate.py)
    c30=$("$FLEXGV" run --compute-max 30% -- python3 scripts/gpu/matmul_rate.py)
    c50=$("$FLEXGV" run --compute-max 50% -- python3 scripts/gpu/matmul_rate.py)
    echo "round $round: native $n, --compute-max 30% $c30 ($(python3 -c "print(f'{$c30/$n:.3f}')")), 50% $c50 ($(python3 -c "print(f'{$c50/$n:.3f}')"))"
    if python3 -c "import sys; sys.exit(0 if abs($c30/$n-0.30) <= 0.05 and abs($c50/$n-0.50) <= 0.05 else 1)"; then
        pass "compute cap within 5 pp (round $round)"
    else
        fail "compute cap off by more than 5 pp (round $round)"
    fi
done
# A cap brackets a busy period with timed events: every launch of a
# launch-and-synchronize loop begins one; a pipelined loop pays them once.
# Under --compute-max 100% the cap never throttles, so what is left is the
# capped path's cost, against native and the pass-through path of a lone
# tenant under a share.
echo "== compute cap: the cost of its timed events (empty kernels, 5 rounds)"
[ -x "$WORK/launch_bench" ] || "$CUDA/bin/nvcc" -O2 -o "$WORK/launch_bench" bench/launch_bench.cu
for round in 1 2 3 4 5; do
    echo "$round native $("${pin[@]}" "$WORK/launch_bench" 50000 sync)"
    echo "$round share_alone $("${pin[@]}" "$FLEXGV" run --compute 30% -- "$WORK/launch_bench" 50000 sync)"
    echo "$round cap100 $("${pin[@]}" "$FLEXGV" run --compute-max 100% -- "$WORK/launch_bench" 50000 sync)"
done >"$WORK/capsync.txt"
for round in 1 2 3 4 5; do
    echo "$round native $("${pin[@]}" "$WORK/launch_bench" 200000)"
    echo "$round cap100 $("${pin[@]}" "$FLEXGV" run --compute-max 100% -- "$WORK/launch_bench" 200000)"
done >"$WORK/cappipe.txt"
{ python3 scripts/gpu/paired.py "$WORK/capsync.txt" "launch and synchronize (ns per launch)"
  python3 scripts/gpu/paired.py "$WORK/cappipe.txt" "launches back to back (ns per launch)"; } | tee "$OUT/capcost.txt"
fi

if want lonebench; then
# (c) a lone tenant under a share or a priority launches on the pass-through
# path; paired rounds, since one 5 s run's noise is larger than the target
echo "== benchmark: a lone tenant, matrix products/s, native vs --compute 30% and --priority high ($ROUNDS rounds)"
for round in $(seq "$ROUNDS"); do
    for mode in native share priority; do
        case $mode in
        native) run=() ;;
        share) run=("$FLEXGV" run --compute 30% --) ;;
        priority) run=("$FLEXGV" run --priority high --) ;;
        esac
        echo "$round $mode {\"products_per_s\": $("${run[@]}" python3 scripts/gpu/matmul_rate.py 3)}"
    done
done >"$OUT/lone.txt"
python3 scripts/gpu/paired.py "$OUT/lone.txt" "a lone tenant's matrix products" | tee "$OUT/lonebench.txt"
fi

if want ddpshare; then
# Two DDP jobs (two ranks each, over NCCL) on the same two GPUs. Turns are
# taken GPU by GPU: a rank's collective runs on until its peer on the other
# GPU gets a turn there, and an equal waiter takes a holder blocked so past
# 1.5 quanta. Measured here: no job hangs, and what each keeps.
echo "== compute sharing across GPUs: two DDP jobs on the same two GPUs ($(date +%T))"
if [ "$(nvidia-smi -L | wc -l)" -lt 2 ]; then
    echo "SKIP: needs two GPUs (kind nvidia-h200-x2)"
else
    D=$OUT/ddpshare
    mkdir -p "$D"
    torchrun=(torchrun)
    command -v torchrun >/dev/null || torchrun=(python3 -m torch.distributed.run)
    ddpjob() { # NAME PREFIX...: rank 0's "rate" in NAME.out
        local name=$1
        shift
        timeout -k 10 240 "$@" "${torchrun[@]}" --standalone --nproc_per_node 2 scripts/gpu/ddp.py --steps 3000 --rate \
            >"$D/$name.out" 2>"$D/$name.err" || echo "$name: exit $?" >>"$D/failed.txt"
    }
    ddppair() { # NAME A-PREFIX B-PREFIX: the two jobs at once
        local name=$1 a b
        read -r -a a <<<"$2"
        read -r -a b <<<"$3"
        ddpjob "$name-a" "${a[@]}" &
        local pa=$!
        ddpjob "$name-b" "${b[@]}"
        wait $pa # (a bare wait would wait for the log's tee too)
    }
    ddpjob alone env
    ddppair timeslice env env
    ddppair share50 "$FLEXGV run --compute 50% --" "$FLEXGV run --compute 50% --"
    ddppair share30 "$FLEXGV run --compute 30% --" "$FLEXGV run --compute 70% --"
    ddppair priority "$FLEXGV run --priority high --" "$FLEXGV run --priority low --"
    rate() { awk '$1 == "rate" { print $2 }' "$D/$1.out"; }
    solo=$(rate alone)
    for name in timeslice share50 share30 priority; do
        echo "$name: a $(rate $name-a) b $(rate $name-b) steps/s, together $(awk -v a="$(rate $name-a)" -v b="$(rate $name-b)" -v s="$solo" 'BEGIN { if (s > 0) printf "%.2f", (a + b) / s }') of one alone ($solo)"
    done | tee "$D/rates.txt"
    if [ -s "$D/failed.txt" ]; then
        cat "$D/failed.txt"
        fail "a DDP job sharing two GPUs failed or hung (above)"
    else
        pass "two DDP jobs share two GPUs under shares and priorities, none hangs"
    fi
fi
fi

# Compute sharing: tenants' work from scripts/gpu/share_load.py, each run
# bounded in time; figures from scripts/gpu/share_report.py.
L=scripts/gpu/share_load.py
S=$OUT/shares
mkdir -p "$S"
at() { echo $(($(date +%s) + $1)); } # a start time S seconds from now
sleep_until() { sleep "$(python3 -c "import time; print(max(0, $1 - time.time()))")"; }
bounded() { timeout -k 5 $((90 + SHARE_S + TRAIN_S)) "$@" || echo "exit $? after at most $((90 + SHARE_S + TRAIN_S)) s: $*" >>"$S/timeouts.txt"; }
# The scheduler's view 5 and 12 s into a run started at T: hand-overs,
# each tenant's time held and charged (scripts/gpu/region_dump.py).
observe() { # NAME T
    local t
    for t in 5 12; do
        sleep_until $(($2 + t)) && "$FLEXGV" top --once >>"$S/top_$1.txt" &&
            python3 scripts/gpu/region_dump.py "$FLEXGV_STATE_DIR" >>"$S/region_$1.txt"
    done
}
# A group's later processes join it: wait for its first to have made it.
group_made() { for _ in $(seq 300); do "$FLEXGV" ps | awk 'NR > 1 {print $1}' | grep -qx "$1" && return; sleep 0.1; done; fail "group $1 was not made"; }
if want shares || want sharetrain || want sharegroup || want sharecombos || want sharemixed || want priority || want prioritygraph; then
    export FLEXGV_STATE_DIR=$WORK/share-state
    bounded python3 $L matmul 5 >"$S/mm_alone.txt"
    bounded python3 $L train 5 >"$S/tr_alone.txt"
fi

if want shares; then
echo "== compute shares: a lone tenant, 50/50 changed live to 30/70 ($(date +%T))"
# (c) a lone tenant under a share: the whole GPU, nothing lost
bounded "$FLEXGV" run --compute 30% -- python3 $L matmul 5 >"$S/mm_lone.txt"
bounded "$FLEXGV" run --compute 30% -- python3 $L train 5 >"$S/tr_lone.txt"
# (a) 50/50, changed live to 30/70 through the daemon halfway
"$FLEXGV" daemon --metrics-addr "" 2>"$S/daemon.log" &
dpid=$!
sleep 1
T=$(at 20)
bounded "$FLEXGV" run --group a --compute 50% -- python3 $L matmul "$SHARE_S" "$T" >"$S/mm_a.txt" &
pa=$!
bounded "$FLEXGV" run --group b --compute 50% -- python3 $L matmul "$SHARE_S" "$T" >"$S/mm_b.txt" &
pb=$!
sleep_until "$T"
"$FLEXGV" bench share --duration "${SHARE_S}s" --svg "$S/share.svg" --csv "$S/share.csv" --title "H200: 50/50, then 30/70 (live)" >"$S/bench.txt" 2>&1 &
bpid=$!
sleep_until $((T + SHARE_S / 2))
"$FLEXGV" update b --compute 20% >/dev/null && "$FLEXGV" update a --compute 30% >/dev/null && "$FLEXGV" update b --compute 70% >/dev/null ||
    fail "flexgv update during the share run"
echo "changed at $(date +%s.%N) (start $T)" >"$S/changed.txt"
wait $pa $pb $bpid
kill $dpid && wait $dpid
fi

if want sharetrain; then
echo "== compute shares: training 30/70 ($(date +%T))"
T=$(at 20)
bounded "$FLEXGV" run --compute 30% -- python3 $L train "$TRAIN_S" "$T" >"$S/tr_30.txt" &
p30=$!
bounded "$FLEXGV" run --compute 70% -- python3 $L train "$TRAIN_S" "$T" >"$S/tr_70.txt" &
p70=$!
# hand-overs and GPU time held, 10 s apart: where time goes; and each
# tenant's time held against what it was charged (scripts/gpu/region_dump.py)
sleep_until $((T + 3)) && "$FLEXGV" top --once >"$S/top_train.txt" &&
    python3 scripts/gpu/region_dump.py "$FLEXGV_STATE_DIR" >"$S/region_train.txt"
sleep_until $((T + 13)) && "$FLEXGV" top --once >>"$S/top_train.txt" &&
    python3 scripts/gpu/region_dump.py "$FLEXGV_STATE_DIR" >>"$S/region_train.txt"
wait $p30 $p70 # by pid: a bare wait would also wait for the log's tee
fi

if want sharegroup; then
# A tenant's two processes share its turns side by side: together its
# share, each about half of it, beside a tenant of one.
echo "== compute shares: a tenant of two processes beside a tenant of one, 50/50 ($(date +%T))"
T=$(at 20)
bounded "$FLEXGV" run --group ga --compute 50% -- python3 $L matmul "$TRAIN_S" "$T" >"$S/mm_g1.txt" &
p1=$!
group_made ga
bounded "$FLEXGV" run --group ga -- python3 $L matmul "$TRAIN_S" "$T" >"$S/mm_g2.txt" &
p2=$!
bounded "$FLEXGV" run --group gb --compute 50% -- python3 $L matmul "$TRAIN_S" "$T" >"$S/mm_g3.txt" &
p3=$!
observe group "$T"
wait $p1 $p2 $p3
# the same three processes time-sliced, without flexgv: what three
# contexts on the GPU together lose to its switches between them
T=$(at 20) pt=()
for i in 1 2 3; do
    bounded python3 $L matmul "$TRAIN_S" "$T" >"$S/mm_t$i.txt" &
    pt+=($!)
done
wait "${pt[@]}"
fi

if want sharecombos; then
# Policies combined, matmul each: a capped share beside a share; a capped
# high priority beside a low one; a tenant of two processes capped at 50 %
# beside a tenant at 50 %; shares of 30/70 beside a high-priority server
# (eager inference at half its peak rate).
echo "== compute shares: policies combined ($(date +%T))"
combo() { # NAME FLAGS... [:: FLAGS...]...   one matmul tenant per group of flags
    local name=$1 T=$(at 20) i=0 f=() pids=()
    [[ " $COMBOS " == *" $name "* ]] || return 0
    shift
    while [ $# -gt 0 ]; do
        f=()
        while [ $# -gt 0 ] && [ "$1" != :: ]; do f+=("$1"); shift; done
        [ $# -gt 0 ] && shift
        i=$((i + 1))
        bounded "$FLEXGV" run "${f[@]}" -- python3 $L matmul "$TRAIN_S" "$T" >"$S/cb_${name}_$i.txt" &
        pids+=($!)
        [ "${f[0]}" = --group ] && group_made "${f[1]}"
    done
    observe "$name" "$T"
    wait "${pids[@]}"
}
combo capshare --compute 60% --compute-max 60% :: --compute 40%
combo caphigh --priority high --compute-max 30% :: --priority low
combo capgroup --group gc --compute 50% --compute-max 50% :: --group gc :: --group gd --compute 50%
if [[ " $COMBOS " == *" server "* ]]; then
    bounded python3 $L peak 5 >"$S/cb_peak.txt"
    rate=$(python3 -c "print(float(open('$S/cb_peak.txt').read()) / 2)")
    T=$(at 20)
    bounded "$FLEXGV" run --priority high -- python3 $L infer "$rate" "$TRAIN_S" "$((T + 1))" >"$S/cb_server_inf.txt" &
    ps=$!
    bounded "$FLEXGV" run --compute 30% -- python3 $L matmul "$TRAIN_S" "$T" >"$S/cb_server_1.txt" &
    p1=$!
    bounded "$FLEXGV" run --compute 70% -- python3 $L matmul "$TRAIN_S" "$T" >"$S/cb_server_2.txt" &
    p2=$!
    wait $ps $p1 $p2
fi
fi

if want sharemixed; then
# Mixed kernel lengths: a training of large batches (long kernels) at 30 %
# beside one of small batches (short kernels) at 70 %, each judged against
# its own rate alone (trm_alone_B.txt); with REF_SHIM, the same pair again
# under that shim (trm_ref_*), to compare two shims on the same machine.
echo "== compute shares: trainings of batch $MIX_LONG at 30% and $MIX_SHORT at 70% ($(date +%T))"
for b in "$MIX_LONG" "$MIX_SHORT"; do
    bounded "$FLEXGV" run --compute 30% -- python3 $L train "$TRAIN_S" 0 "$b" >"$S/trm_alone_$b.txt"
done
mixed() { # PREFIX [SHIM]
    local T=$(at 20) shim=()
    [ -n "${2:-}" ] && shim=(--shim "$2")
    bounded "$FLEXGV" run "${shim[@]}" --compute 30% -- python3 $L train "$TRAIN_S" "$T" "$MIX_LONG" >"$S/${1}30.txt" &
    local p30=$!
    bounded "$FLEXGV" run "${shim[@]}" --compute 70% -- python3 $L train "$TRAIN_S" "$T" "$MIX_SHORT" >"$S/${1}70.txt" &
    local p70=$!
    sleep_until $((T + 5)) && "$FLEXGV" top --once >"$S/top_${1%_}.txt" &&
        python3 scripts/gpu/region_dump.py "$FLEXGV_STATE_DIR" >"$S/region_${1%_}.txt"
    wait $p30 $p70
}
mixed trm_
[ -n "$REF_SHIM" ] && [ -f "$REF_SHIM" ] && mixed trm_ref_ "$REF_SHIM"
echo "batches $MIX_LONG $MIX_SHORT" >"$S/trm_batches.txt"
fi

# (b) priority: inference KIND (infer or infer-graph) at half its peak rate
# next to training, under time-slicing, MPS, MPS with the trainer at 50 %
# of the threads, flexgv priorities (under MPS too, and with the trainer
# given 50 % of the SMs by --sm under the daemon's MPS, or 25 % without
# priorities), and flexgv priorities; files inf_P*/tr_P* with prefix P.
priority_bench() { # KIND PREFIX
    local kind=$1 p=$2
    bounded python3 $L "${kind/infer/peak}" 5 >"$S/${p}peak.txt"
    local rate=$(python3 -c "print(float(open('$S/${p}peak.txt').read()) / 2)")
    bounded python3 $L "$kind" "$rate" 15 >"$S/inf_${p}alone.txt"
    pair() { # NAME INFER-PREFIX... :: TRAIN-PREFIX...   (round $R)
        local name=$p$1${R#1} pre=() tpre=()
        [[ " $PAIRS " == *" $1 "* ]] || return 0
        shift
        while [ "$1" != :: ]; do pre+=("$1"); shift; done
        shift
        tpre=("$@")
        local T=$(at 20)
        echo "$name ($(date +%T))"
        bounded "${tpre[@]}" python3 $L train 17 "$T" >"$S/tr_$name.txt" &
        local tp=$!
        bounded "${pre[@]}" python3 $L "$kind" "$rate" 15 "$((T + 1))" >"$S/inf_$name.txt" &
        local ip=$!
        # the regions' view, twice, when flexgv schedules: hand-overs, waits
        # and each tenant's host-bound measure and MPS clients
        if [[ $name == *flexgv* ]]; then
            sleep_until $((T + 5)) && "$FLEXGV" top --once >"$S/top_$name.txt" &&
                python3 scripts/gpu/region_dump.py "$FLEXGV_STATE_DIR" >"$S/region_$name.txt"
            sleep_until $((T + 12)) && "$FLEXGV" top --once >>"$S/top_$name.txt" &&
                python3 scripts/gpu/region_dump.py "$FLEXGV_STATE_DIR" >>"$S/region_$name.txt"
        fi
        wait $tp $ip
    }
    local R
    for R in $(seq "$PRIORITY_ROUNDS"); do
        [ "$R" = 1 ] || R=.$R # the first round's files keep their names
        # each later round measures the request alone again: one stall of
        # the host moves a 15 s run's p99 more than any way of sharing does
        [ "$R" = 1 ] || bounded python3 $L "$kind" "$rate" 15 >"$S/inf_${p}alone$R.txt"
        pair timeslice env :: env
        export CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_LOG_DIRECTORY=$WORK/mps-log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        if [[ " $PAIRS " != *" mps"* ]]; then
            : # no MPS pair asked for
        elif nvidia-cuda-mps-control -d; then
            pair mps env :: env
            pair mps50 env :: env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
            pair mpsflexgv "$FLEXGV" run --priority high -- :: "$FLEXGV" run --priority low --
            pair mpsref "$FLEXGV" run --shim "$REF_SHIM" --priority high -- :: "$FLEXGV" run --shim "$REF_SHIM" --priority low --
            echo quit | timeout 20 nvidia-cuda-mps-control
            sleep 2
        else
            fail "cannot start an MPS daemon"
        fi
        # MPS run by the node daemon, the trainer confined to part of the SMs
        # (--sm): with priorities, and alone at a quarter of the SMs.
        if [[ " $PAIRS " == *" mpssm"* ]]; then
            "$FLEXGV" daemon --mps --metrics-addr "" 2>"$S/${p}daemon-mps.log" &
            local dpid=$!
            sleep 3
            pair mpssm "$FLEXGV" run --priority high -- :: "$FLEXGV" run --priority low --sm 50% --
            pair mpssm25 env :: "$FLEXGV" run --sm 25% --
            kill $dpid && wait $dpid
            sleep 2
        fi
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        pair flexgv "$FLEXGV" run --priority high -- :: "$FLEXGV" run --priority low --
        pair ref "$FLEXGV" run --shim "$REF_SHIM" --priority high -- :: "$FLEXGV" run --shim "$REF_SHIM" --priority low --
    done
}
if want priority; then
    echo "== priority: eager inference at half its peak rate next to training ($(date +%T))"
    priority_bench infer ""
fi
if want prioritygraph; then
    echo "== priority: CUDA-graph inference at half its peak rate next to training ($(date +%T))"
    priority_bench infer-graph g_
fi

if want shares || want sharetrain || want sharegroup || want sharecombos || want sharemixed || want priority || want prioritygraph; then
    python3 scripts/gpu/share_report.py "$S" || fail "compute shares off target (above)"
    [ -s "$S/timeouts.txt" ] && cat "$S/timeouts.txt" && fail "share runs timed out"
    unset FLEXGV_STATE_DIR
fi

if want suspend; then
SUSPEND_GIB=${SUSPEND_GIB:-10}   # device memory the suspended process holds beside its training
SUSPEND_STEPS=${SUSPEND_STEPS:-20000} # training steps: enough to be under way across the suspension
echo "== the checkpoint API's answers on this driver, as the simulated GPU gives them (TestSimCheckpointAPIFollowsTheDriversStates)"
if gcc -std=gnu11 -O2 -Wall -Iinclude -Iinclude/flexgv -o "$WORK/ckptctl" tests/clients/ckptctl.c -L"$CUDA/lib64/stubs" -lcuda -ldl; then
    rm -f "$WORK/ckpt_in" && mkfifo "$WORK/ckpt_in"
    CUDA_VISIBLE_DEVICES=0 python3 -c 'import torch; x = torch.ones(1 << 28, device="cuda"); torch.cuda.synchronize(); print("ready", flush=True); input()' \
        <"$WORK/ckpt_in" >"$WORK/ckpt_target.txt" &
    tgt=$!
    exec 7>"$WORK/ckpt_in"
    for i in $(seq 600); do grep -q ready "$WORK/ckpt_target.txt" 2>/dev/null && break; sleep 0.1; done
    { "$WORK/ckptctl" "$tgt" state checkpoint restore unlock lock lock state checkpoint checkpoint unlock state restore state unlock state
      "$WORK/ckptctl" $(((1 << 22) + 1)) state lock; } >"$WORK/ckpt_real.txt" 2>&1
    "$WORK/ckptctl" "$tgt" restore unlock >/dev/null 2>&1 # whatever the answers, not left locked
    exec 7>&-
    kill -9 "$tgt" 2>/dev/null; wait "$tgt" 2>/dev/null
    printf '%s\n' "state CUDA_SUCCESS 0" "checkpoint CUDA_ERROR_ILLEGAL_STATE" "restore CUDA_ERROR_ILLEGAL_STATE" \
        "unlock CUDA_ERROR_ILLEGAL_STATE" "lock CUDA_SUCCESS" "lock CUDA_ERROR_ILLEGAL_STATE" "state CUDA_SUCCESS 1" \
        "checkpoint CUDA_SUCCESS" "checkpoint CUDA_ERROR_ILLEGAL_STATE" "unlock CUDA_ERROR_ILLEGAL_STATE" "state CUDA_SUCCESS 2" \
        "restore CUDA_SUCCESS" "state CUDA_SUCCESS 1" "unlock CUDA_SUCCESS" "state CUDA_SUCCESS 0" \
        "state CUDA_ERROR_OPERATING_SYSTEM -1" "lock CUDA_ERROR_OPERATING_SYSTEM" >"$WORK/ckpt_sim.txt"
    if diff "$WORK/ckpt_sim.txt" "$WORK/ckpt_real.txt"; then
        pass "the driver answers the checkpoint API from each state as the simulated GPU does"
    else
        fail "the driver answers the checkpoint API otherwise than the simulated GPU (above: < simulated, > real)"
    fi
    cp "$WORK/ckpt_real.txt" "$OUT/ckpt_answers.txt"
    echo "== restore with GPU pairs (CUDA 13.0): a GPU no device has, then GPU 0 onto itself (TestSimCheckpointRemapOnOneGPU)"
    CUDA_VISIBLE_DEVICES=0 python3 -c 'import torch; x = torch.ones(1 << 28, device="cuda"); torch.cuda.synchronize(); print("ready", flush=True); input()' \
        <"$WORK/ckpt_in" >"$WORK/ckpt_target.txt" &
    tgt=$!
    exec 7>"$WORK/ckpt_in"
    for i in $(seq 600); do grep -q ready "$WORK/ckpt_target.txt" 2>/dev/null && break; sleep 0.1; done
    "$WORK/ckptctl" "$tgt" lock checkpoint "restore:0>9" state "restore:0>0" state unlock >"$WORK/ckpt_remap_real.txt" 2>&1
    "$WORK/ckptctl" "$tgt" restore unlock >/dev/null 2>&1
    exec 7>&-
    kill -9 "$tgt" 2>/dev/null; wait "$tgt" 2>/dev/null
    printf '%s\n' "lock CUDA_SUCCESS" "checkpoint CUDA_SUCCESS" "restore:0>9 CUDA_ERROR_INVALID_VALUE" "state CUDA_SUCCESS 2" \
        "restore:0>0 CUDA_SUCCESS" "state CUDA_SUCCESS 1" "unlock CUDA_SUCCESS" >"$WORK/ckpt_remap_sim.txt"
    if diff "$WORK/ckpt_remap_sim.txt" "$WORK/ckpt_remap_real.txt"; then
        pass "the driver answers a restore with GPU pairs as the simulated GPU does"
    else
        fail "the driver answers a restore with GPU pairs otherwise than the simulated GPU (above: < simulated, > real)"
    fi
    cp "$WORK/ckpt_remap_real.txt" "$OUT/ckpt_remap_answers.txt"
    echo "== the driver's own pace: a process holding 1 and $SUSPEND_GIB GiB checkpointed twice and restored (ms per operation),"
    echo "   then $SUSPEND_GIB GiB with the shim preloaded (its host copy on huge pages, populated behind the driver's copy)"
    for gib in 1 "$SUSPEND_GIB" "shim$SUSPEND_GIB"; do
        pre=; [ "${gib#shim}" != "$gib" ] && pre=$PWD/build/lib/libflexgv.so
        LD_PRELOAD=$pre CUDA_VISIBLE_DEVICES=0 python3 -c 'import sys, torch; x = torch.ones(int(sys.argv[1]) << 28, device="cuda"); torch.cuda.synchronize(); print("ready", flush=True); input()' \
            "${gib#shim}" <"$WORK/ckpt_in" >"$WORK/ckpt_target.txt" &
        tgt=$!
        exec 7>"$WORK/ckpt_in"
        for i in $(seq 600); do grep -q ready "$WORK/ckpt_target.txt" 2>/dev/null && break; sleep 0.1; done
        "$WORK/ckptctl" -t "$tgt" lock checkpoint restore checkpoint restore unlock | tee "$OUT/ckpt_pace_${gib}GiB.txt"
        exec 7>&-
        kill -9 "$tgt" 2>/dev/null; wait "$tgt" 2>/dev/null
    done
else
    fail "gcc ckptctl"
fi
echo "== suspend and resume: PyTorch training beside $SUSPEND_GIB GiB, taken off the GPU and back"
# nvml_mib: the device memory NVML lists processes on GPU 0 with, in MiB
# (the suspended one is alone there; its pid may be another namespace's).
nvml_mib() { nvidia-smi -i 0 --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', *' '{s += $2} END {print s + 0}'; }
gpu_used_mib() { nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits; }
steps_done() { tail -n 1 "$1" 2>/dev/null | cut -d' ' -f1; }
now_ms() { date +%s%3N; }
smem=$((SUSPEND_GIB + 8))GiB
rm -f "$WORK/susp_ref.progress" "$WORK/susp.progress"
CUDA_VISIBLE_DEVICES=0 "$FLEXGV" run --group suspref --mem "0=$smem" -- python3 scripts/gpu/torch_suspend.py "$SUSPEND_STEPS" "$SUSPEND_GIB" \
    "$WORK/susp_ref.progress" >"$WORK/susp_ref.json" || fail "the uninterrupted run"
CUDA_VISIBLE_DEVICES=0 "$FLEXGV" run --group susp --mem "0=$smem" -- python3 scripts/gpu/torch_suspend.py "$SUSPEND_STEPS" "$SUSPEND_GIB" \
    "$WORK/susp.progress" >"$WORK/susp.json" &
job=$!
for i in $(seq 1200); do [ -s "$WORK/susp.progress" ] && break; sleep 0.1; done
sleep 2
pid=$("$FLEXGV" ps --json | python3 -c 'import json,sys; print(next((t["processes"][0]["pid"] for t in json.load(sys.stdin) if t["name"] == "susp" and t["processes"]), 0))')
before_mib=$(nvml_mib); gpu_before=$(gpu_used_mib)
t0=$(now_ms); "$FLEXGV" suspend susp | tee "$WORK/susp_cli.txt"; src=${PIPESTATUS[0]}; t1=$(now_ms)
during_mib=$(nvml_mib); gpu_during=$(gpu_used_mib)
"$FLEXGV" ps | tee "$WORK/susp_ps.txt"
s1=$(steps_done "$WORK/susp.progress"); sleep 3; s2=$(steps_done "$WORK/susp.progress")
rrc=1
if [ "$src" = 0 ]; then
    # --gpu: an unknown UUID is refused and leaves it suspended; GPU 0's own
    # UUID restores it through the driver's GPU pairs (onto itself).
    nogpu=GPU-00000000-0000-0000-0000-000000000000
    "$FLEXGV" resume susp --gpu "$nogpu" >"$WORK/susp_nogpu.txt" 2>&1; nrc=$?
    cat "$WORK/susp_nogpu.txt"
    if [ "$nrc" = 1 ] && grep -qxF "flexgv resume: no GPU $nogpu on this node (flexgv node lists them); tenant susp stays suspended" "$WORK/susp_nogpu.txt" &&
        "$FLEXGV" ps | grep -q "suspended)"; then
        pass "resume --gpu with an unknown UUID refused, the tenant still suspended"
    else
        fail "resume --gpu with an unknown UUID (exit $nrc, above)"
    fi
    uuid0=$(nvidia-smi -i 0 --query-gpu=uuid --format=csv,noheader)
    t2=$(now_ms); "$FLEXGV" resume susp --gpu "$uuid0" | tee -a "$WORK/susp_cli.txt"; rrc=${PIPESTATUS[0]}; t3=$(now_ms)
    grep -q "back on GPU 0 ($uuid0)" "$WORK/susp_cli.txt" && pass "resume --gpu with GPU 0's own UUID" || fail "resume --gpu $uuid0 (exit $rrc)"
    sleep 1
    after_mib=$(nvml_mib)
fi
if [ "$src" != 0 ] || [ "$rrc" != 0 ]; then
    fail "flexgv suspend (exit $src) or resume (exit $rrc)"
    [ "$src" = 0 ] && [ "$pid" -gt 0 ] && kill -9 "$pid" # suspended for good: it would never end
fi
wait $job || fail "the training that was suspended"
python3 - "$WORK/susp_ref.json" "$WORK/susp.json" "$SUSPEND_GIB" "$SUSPEND_STEPS" "$pid" "$before_mib" "$during_mib" "${after_mib:-0}" \
    "$gpu_before" "$gpu_during" "$s1" "$s2" "$((t1 - t0))" "$((${t3:-0} - ${t2:-0}))" "$OUT/suspend.json" <<'PY' &&
import json, sys
a = sys.argv
ref, got = json.load(open(a[1])), json.load(open(a[2]))
gib, steps, pid = int(a[3]), int(a[4]), int(a[5])
before, during, after, gpu_before, gpu_during = (int(v) for v in a[6:11])
s1, s2 = int(a[11] or -1), int(a[12] or -1)
r = {"pid": pid, "hold_gib": gib, "steps": steps, "suspend_ms": int(a[13]), "resume_ms": int(a[14]),
     "nvml_process_mib": {"before": before, "suspended": during, "after": after},
     "gpu_used_mib": {"before": gpu_before, "suspended": gpu_during},
     "steps_while_suspended": [s1, s2], "longest_gap_s": got["max_gap_s"],
     "same_losses": ref["losses"] == got["losses"], "ballast_intact": got["ballast_intact"] and ref["ballast_intact"]}
json.dump(r, open(a[15], "w"), indent=1)
print(f"  suspend {r['suspend_ms']} ms, resume {r['resume_ms']} ms (flexgv suspend/resume, cuInit included); "
      f"NVML: the process {before} MiB, suspended {during} MiB, resumed {after} MiB; GPU used {gpu_before} -> {gpu_during} MiB")
print(f"  step {s1} when suspended, {s2} three seconds later; longest gap between progress lines {got['max_gap_s']:.2f} s; "
      f"{len(got['losses'])} losses identical to the uninterrupted run: {r['same_losses']}; ballast intact: {r['ballast_intact']}")
checks = {
    "the process held its ballast before": before >= gib * 1024,
    "NVML lists none of it while suspended": during == 0,
    "the GPU got the ballast back": gpu_during <= gpu_before - gib * 1024,
    "it was still training when suspended (else raise SUSPEND_STEPS)": 0 <= s1 < steps - 10,
    "no step while suspended": s1 == s2,
    "its memory is back after resume": after >= gib * 1024,
    "the same losses as without a suspension": r["same_losses"] and len(got["losses"]) == steps,
    "every ballast byte as written": r["ballast_intact"],
}
for what, ok in checks.items():
    if not ok:
        print(f"  not so: {what}")
sys.exit(0 if all(checks.values()) else 1)
PY
    pass "suspend and resume: memory off the GPU and back, no progress between, same losses" || fail "suspend and resume"
fi

if want remotefamilies; then
echo "== remote GPUs: what NVIDIA's samples need (issue 34)"
# Every driver entry point of the spec exported by the remoting library and
# resolved by cuGetProcAddress_v2 at 13000, against the real driver's
# server; then scripts/gpu/families.cu (runtime and -lcuda) natively and
# over unix://, shm:// and tcp://, whose outputs must be the same.
grep -hoE '^(cu[A-Za-z0-9_]+|[0-9]+ +cu[A-Za-z0-9_]+\()' api/cuda.api api/remote.api | sed -E 's/^[0-9]+ +//; s/\($//' \
    >"$WORK/spec_names.txt"
env -u LD_LIBRARY_PATH "$FLEXGV" serve --listen "unix://$WORK/families.sock" 2>"$WORK/families-serve.log" &
fam_srv=$!
sleep 1
names=$(FLEXGV_REMOTE="unix://$WORK/families.sock" LD_LIBRARY_PATH="$ROOT/build/remote" "$ROOT/build/tests/procnames" \
    <"$WORK/spec_names.txt" 2>&1)
kill "$fam_srv" 2>/dev/null; wait "$fam_srv" 2>/dev/null
if [[ $names == *"missing 0" ]]; then
    pass "remote: every driver entry point of the spec exported and resolved at 13000 (${names##*$'\n'})"
else
    echo "$names" | tail -n 20
    fail "remote: entry points of the spec missing"
fi
# api/cuda13.names against the real typedef headers, then every variant
# they give resolved by the client at its own version.
if python3 scripts/gpu/driver_names.py "$CUDA/include" api/cuda13.names "$WORK/typedef_variants.txt"; then
    pass "api/cuda13.names is what the driver's headers declare"
else
    fail "api/cuda13.names differs from the driver's headers (above)"
fi
variants=$(FLEXGV_REMOTE="unix://$WORK/none.sock" LD_LIBRARY_PATH="$ROOT/build/remote" "$ROOT/build/tests/procnames" \
    <"$WORK/typedef_variants.txt" 2>&1)
if [[ $variants == *"missing 0" ]]; then
    pass "remote: every variant of the driver's headers resolves at its version (${variants##*$'\n'})"
else
    echo "$variants" | grep missing | head -n 40
    fail "remote: variants of the driver's headers that do not resolve"
fi
if ONLY=families bash scripts/gpu-remote-cudart.sh "$CUDA" | tee "$WORK/families.txt"; then
    pass "remote: families the same over every transport as natively"
else
    fail "remote: families (see above)"
fi
# tests/clients/copy3d.c (3D copies, and their batches) built against the
# real driver prints what it prints on the simulated GPU.
if gcc -std=gnu11 -O2 -Iinclude -Iinclude/flexgv -o "$WORK/copy3d" tests/clients/copy3d.c -L"$CUDA/lib64/stubs" -lcuda -ldl; then
    "$WORK/copy3d" >"$WORK/copy3d_native.txt" 2>&1
    FLEXGV_SIM_STATE="$WORK/sim3d.state" LD_LIBRARY_PATH=build/sim build/tests/copy3d >"$WORK/copy3d_sim.txt" 2>&1
    if diff "$WORK/copy3d_sim.txt" "$WORK/copy3d_native.txt"; then
        pass "copy3d: 3D copies and their batches as on the simulated GPU"
    else
        fail "copy3d: the simulated GPU differs from the driver (above: < simulated, > driver)"
    fi
else
    fail "copy3d: build against the driver"
fi
fi

if want quotabench; then
echo "== benchmark: cudaMalloc/cudaFree pairs (1 MiB), native vs --mem, 7 rounds"
"$CUDA/bin/nvcc" -O2 -o "$WORK/alloc_bench" bench/alloc_bench.cu
for round in 1 2 3 4 5 6 7; do
    echo "$round native $("${pin[@]}" "$WORK/alloc_bench" 20000)"
    echo "$round quota $("${pin[@]}" "$FLEXGV" run --mem 100GiB -- "$WORK/alloc_bench" 20000)"
done >"$WORK/alloc.txt"
echo "== benchmark: PyTorch throughput, native vs --mem 100GiB (2000 steps, $ROUNDS rounds)"
for round in $(seq "$ROUNDS"); do
    echo "$round native $(python3 scripts/gpu/torch_train.py 2000 50)"
    echo "$round quota $("$FLEXGV" run --mem 100GiB -- python3 scripts/gpu/torch_train.py 2000 50)"
done >"$WORK/torch_quota_bench.txt"
{ python3 scripts/gpu/paired.py "$WORK/alloc.txt" "cudaMalloc/cudaFree pair"
  python3 scripts/gpu/paired.py "$WORK/torch_quota_bench.txt" "PyTorch training"; } | tee "$OUT/quotabench.txt"
fi

echo "== $failures failure(s)"
cp "$WORK"/va_static.json "$WORK"/torch_trace_summary.json "$WORK"/q_*.json "$OUT"/ 2>/dev/null
exit $((failures > 0))
