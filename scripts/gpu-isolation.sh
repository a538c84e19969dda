#!/usr/bin/env bash
# Isolation on a real GPU: CUDA graph memory nodes, cuBLAS inside stream
# capture, PyTorch CUDA graphs and torch.compile, PyTorch in a quota smaller
# than its own context, and DDP over NCCL (two GPUs, and one GPU picked with
# CUDA_VISIBLE_DEVICES), each natively and under a memory quota, while NVML,
# outside the tenant, records what the GPUs really held.
# From the repository root of a GPU machine, after make:
#     scripts/gpu-isolation.sh OUTDIR
# or as a section of a script that defines pass and fail (gpu-e2e.sh):
#     source scripts/gpu-isolation.sh OUTDIR
# Ends with a summary; exit (or return) status non-zero on any FAIL. Run on
# its own it logs to OUTDIR/gpu-isolation.log; the programs' outputs and NVML
# samples are kept in OUTDIR/isolation/ (default OUTDIR: a new folder under
# $TMPDIR, outside the repository).

iso_sourced=0
[[ "${BASH_SOURCE[0]}" != "$0" ]] && iso_sourced=1
source "$(dirname "${BASH_SOURCE[0]}")/outdir.sh"
iso_out=$(outdir isolation "${1:-}") || { [ "$iso_sourced" = 1 ] && return 2; exit 2; }
iso_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
iso_cuda=${CUDA_HOME:-/usr/local/cuda}
iso_flexgv=$iso_root/build/bin/flexgv
iso_gpu=$iso_root/scripts/gpu
iso_work=$(mktemp -d)
iso_results=()
iso_fails=0
iso_G=$((1 << 30))
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1

if [ "$iso_sourced" = 0 ]; then
    set -u -o pipefail
    exec > >(tee "$iso_out/gpu-isolation.log") 2>&1
    echo "logs: $iso_out"
    failures=0
    pass() { echo "PASS: $*"; }
    fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
fi
ipass() { pass "$@"; iso_results+=("PASS: $*"); }
ifail() { fail "$@"; iso_results+=("FAIL: $*"); iso_fails=$((iso_fails + 1)); }
iso_gib() { awk -v b="${1:-0}" 'BEGIN { printf "%.3f", b / 1073741824 }'; }

# Every run has a time limit: a hang under the shim is a failure, not a stuck
# script. timeout signals the whole process group, so ranks go too.
iso_limit() { timeout -k 10 "$@"; }

# iso_watch NAME CMD...: run CMD (stdout, stderr to NAME.out, NAME.err) while
# nvml_watch.py samples, from outside the tenant, what processes hold on GPU
# 0; the peak in bytes goes to NAME.peak (empty when NVML gave nothing).
iso_watch() {
    local name=$1 w rc
    shift
    touch "$iso_work/$name.watching"
    python3 "$iso_gpu/nvml_watch.py" "$iso_work/$name.watching" >"$iso_work/$name.nvml.json" &
    w=$!
    sleep 0.5
    "$@" >"$iso_work/$name.out" 2>"$iso_work/$name.err"
    rc=$?
    rm -f "$iso_work/$name.watching"
    wait "$w"
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak"])' "$iso_work/$name.nvml.json" \
        >"$iso_work/$name.peak" 2>/dev/null || : >"$iso_work/$name.peak"
    return $rc
}

# The same, sampling every GPU: peak per GPU (sum over its processes) and per
# process per GPU ("GPU:PID"), as JSON in NAME.nvml.json.
iso_sampler='
import json, os, sys, time
import pynvml
pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
gpu, proc, samples = [0] * len(handles), {}, 0
while os.path.exists(sys.argv[1]):
    for i, h in enumerate(handles):
        held = [(p.pid, p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
        gpu[i] = max(gpu[i], sum(b for _, b in held))
        for pid, b in held:
            key = "%d:%d" % (i, pid)
            proc[key] = max(proc.get(key, 0), b)
    samples += 1
    time.sleep(0.01)
print(json.dumps({"gpu": gpu, "proc": proc, "samples": samples}))
'
iso_watch_gpus() {
    local name=$1 w rc
    shift
    touch "$iso_work/$name.watching"
    python3 -c "$iso_sampler" "$iso_work/$name.watching" >"$iso_work/$name.nvml.json" &
    w=$!
    sleep 0.5
    "$@" >"$iso_work/$name.out" 2>"$iso_work/$name.err"
    rc=$?
    rm -f "$iso_work/$name.watching"
    wait "$w"
    return $rc
}

# iso_within NAME [DEV=GIB...]: print NAME's NVML peaks, per GPU and per
# process; true when every GPU given, and each process on it, stayed within
# its GiB.
iso_within() {
    python3 - "$iso_work/$1.nvml.json" "${@:2}" <<'PY'
import json, sys
G = 1 << 30
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("  no NVML samples")
    sys.exit(1)
limits = {int(d): float(g) * G for d, g in (a.split("=") for a in sys.argv[2:])}
ok = True
for i, peak in enumerate(r["gpu"]):
    procs = sorted((int(k.split(":")[1]), v) for k, v in r["proc"].items() if k.split(":")[0] == str(i))
    lim = limits.get(i)
    if lim is not None:
        ok = ok and peak <= lim and all(v <= lim for _, v in procs)
    per = ", ".join(f"pid {p} {v / G:.3f} GiB" for p, v in procs) or "no process"
    quota = "" if lim is None else f" (quota {lim / G:g} GiB)"
    print(f"  GPU {i}: NVML peak {peak / G:.3f} GiB{quota}; per process: {per}")
print(f"  ({r['samples']} NVML samples)")
sys.exit(0 if ok else 1)
PY
}

# iso_gpu_peak NAME GPU: NAME's NVML peak on GPU, in bytes.
iso_gpu_peak() {
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu"][int(sys.argv[2])])' \
        "$iso_work/$1.nvml.json" "$2" 2>/dev/null || echo 0
}

# Rank 0's losses (torchrun may prefix lines; the pattern is anchored on ours).
iso_losses() { grep -oE 'loss [0-9]+ -?0x[0-9a-f.]+p[-+][0-9]+' "$iso_work/$1.out"; }

# iso_same NAME GIB SECONDS CMD...: CMD natively, then under flexgv run
# --mem GIBGiB with NVML watching. Asserts: both exit 0 with identical stdout;
# the NVML peak under the quota is within it.
iso_same() {
    local name=$1 q=$2 secs=$3 rn rs peak same
    shift 3
    iso_limit "$secs" "$@" >"$iso_work/$name.native.out" 2>"$iso_work/$name.native.err"
    rn=$?
    iso_watch "$name.quota" iso_limit "$secs" "$iso_flexgv" run --mem "${q}GiB" -- "$@"
    rs=$?
    peak=$(cat "$iso_work/$name.quota.peak")
    diff "$iso_work/$name.native.out" "$iso_work/$name.quota.out" >"$iso_work/$name.diff" && same=identical || same=different
    if [ $rn = 0 ] && [ $rs = 0 ] && [ $same = identical ]; then
        ipass "$name: output identical natively and under --mem ${q}GiB ($(wc -l <"$iso_work/$name.native.out") lines)"
    else
        echo "  diff (< native, > under --mem ${q}GiB):"; head -20 "$iso_work/$name.diff"
        echo "  native stderr:"; tail -5 "$iso_work/$name.native.err"
        echo "  under --mem stderr:"; tail -15 "$iso_work/$name.quota.err"
        ifail "$name: native exit $rn, under --mem ${q}GiB exit $rs, outputs $same"
    fi
    if [ -n "$peak" ] && [ "$peak" -le $((q * iso_G)) ]; then
        ipass "$name: NVML peak under --mem ${q}GiB $(iso_gib "$peak") GiB"
    else
        ifail "$name: NVML peak under --mem ${q}GiB ${peak:-unknown} bytes ($(iso_gib "$peak") GiB)"
    fi
}

iso_main() {
    echo "== isolation: machine"
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
    [ -x "$iso_flexgv" ] && [ -f "$iso_root/build/lib/libflexgv.so" ] || { ifail "build/ is missing: run make first"; return 1; }
    python3 -c 'import pynvml' || ifail "pynvml is missing: NVML peaks cannot be sampled"

    echo "== isolation: nvcc builds"
    local have_graphmem=0 have_cublas=0 rn rs rc peak q total probe ngpu
    local torchrun=(torchrun) ddp=$iso_gpu/ddp.py
    "$iso_cuda/bin/nvcc" -O2 -o "$iso_work/graphmem" "$iso_gpu/graphmem.cu" && have_graphmem=1 || ifail "nvcc graphmem.cu"
    "$iso_cuda/bin/nvcc" -O2 -o "$iso_work/cublas_capture" "$iso_gpu/cublas_capture.cu" -lcublas && have_cublas=1 ||
        ifail "nvcc cublas_capture.cu"

    if [ $have_graphmem = 1 ]; then
        echo "== isolation: CUDA graph memory nodes (captured, explicit, trim), native vs --mem 8GiB"
        iso_same graphmem 8 120 "$iso_work/graphmem"
        grep -E '^(graph memory|graphmem:)' "$iso_work/graphmem.quota.out" | sed 's/^/  /'

        echo "== isolation: a graph allocating 16 GiB, native vs --mem 8GiB"
        iso_limit 120 "$iso_work/graphmem" big 16384 >"$iso_work/big.native.out" 2>&1
        rn=$?
        iso_watch big.quota iso_limit 120 "$iso_flexgv" run --mem 8GiB -- "$iso_work/graphmem" big 16384
        rs=$?
        peak=$(cat "$iso_work/big.quota.peak")
        echo "  native (exit $rn): $(grep -E '^(big result|big: checksum)' "$iso_work/big.native.out" | paste -sd ';' -)"
        echo "  --mem 8GiB (exit $rs): $(grep -E '^step big' "$iso_work/big.quota.out" | grep -v ': cudaSuccess$' | paste -sd ';' -)"
        grep -q '^big result: cudaSuccess$' "$iso_work/big.native.out" && [ $rn = 0 ] &&
            ipass "graph of 16 GiB natively: instantiated, uploaded, launched, checksum correct" ||
            ifail "graph of 16 GiB natively (exit $rn): $(grep '^big result' "$iso_work/big.native.out")"
        grep -q '^big result: cudaErrorMemoryAllocation$' "$iso_work/big.quota.out" && [ $rs != 0 ] &&
            ipass "graph of 16 GiB under --mem 8GiB: refused with cudaErrorMemoryAllocation at $(grep -m1 -E '^step big.*: cudaErrorMemoryAllocation$' "$iso_work/big.quota.out" | sed 's/^step \(.*\): .*/\1/')" ||
            { tail -5 "$iso_work/big.quota.err"; ifail "graph of 16 GiB under --mem 8GiB (exit $rs): $(grep '^big result' "$iso_work/big.quota.out")"; }
        [ -n "$peak" ] && [ "$peak" -le $((8 * iso_G)) ] &&
            ipass "graph of 16 GiB under --mem 8GiB: NVML peak $(iso_gib "$peak") GiB" ||
            ifail "graph of 16 GiB under --mem 8GiB: NVML peak $(iso_gib "$peak") GiB"
    fi

    if [ $have_cublas = 1 ]; then
        echo "== isolation: cuBLAS captured (global and thread-local), native vs --mem 8GiB"
        iso_same cublas 8 120 "$iso_work/cublas_capture"
        grep -E 'PASS|FAIL|replays' "$iso_work/cublas.quota.out" | sed 's/^/  /'
    fi

    echo "== isolation: PyTorch CUDA graphs and torch.compile(mode=reduce-overhead), native vs --mem 8GiB"
    # A first run fills torch.compile's caches, so the two compared runs
    # load the same compiled kernels (compiling takes extra memory, so the
    # first run's max_memory_reserved is larger).
    iso_limit 400 python3 "$iso_gpu/torch_graphs.py" >"$iso_work/torch_graphs.prime.out" 2>"$iso_work/torch_graphs.prime.err" ||
        { tail -15 "$iso_work/torch_graphs.prime.err"; echo "  (the first run failed)"; }
    iso_same torch_graphs 8 400 python3 "$iso_gpu/torch_graphs.py"
    echo "  the first (compiling) run differed from the native run in: $(diff "$iso_work/torch_graphs.prime.out" "$iso_work/torch_graphs.native.out" |
        grep '^<' | cut -c3- | paste -sd ';' -)"
    echo "  $(grep -c ' loss ' "$iso_work/torch_graphs.quota.out") losses; $(grep max_memory_reserved "$iso_work/torch_graphs.quota.out" | paste -sd ';' -)"

    echo "== isolation: PyTorch under --mem 256MiB (less than one CUDA context)"
    iso_limit 120 "$iso_flexgv" run --mem 256MiB -- python3 "$iso_gpu/torch_small.py" >"$iso_work/small.out" 2>&1
    rc=$?
    echo "  what the user sees (stdout and stderr), exit status $rc:"
    tail -40 "$iso_work/small.out" | sed 's/^/  | /'
    if [ $rc = 1 ] && grep -q '^raised ' "$iso_work/small.out"; then
        ipass "PyTorch under --mem 256MiB: $(grep -m1 '^raised ' "$iso_work/small.out" | cut -c1-160)"
    elif [ $rc = 0 ]; then
        ifail "PyTorch under --mem 256MiB allocated on cuda:0, though one context is larger than the quota"
    else
        ifail "PyTorch under --mem 256MiB: exit status $rc without a Python exception"
    fi

    echo "== isolation: a tenant's process in its own PID namespace (as in a container: NVML reports host pids)"
    # With a /proc of its own (pid 1 inside), as in a container: the driver
    # needs that, and reports the host pid to NVML. --ctx-mem 100MiB is the
    # estimate the shim charges when it cannot measure a context; measured,
    # one takes ~518 MiB on an H200.
    pidns_py='import torch; f, t = torch.cuda.mem_get_info(); print(f"used {(t - f) >> 20} MiB of {t >> 20} MiB")'
    if unshare --pid --fork --mount-proc true 2>/dev/null; then
        iso_limit 120 "$iso_flexgv" run --mem 10GiB --ctx-mem 100MiB -- unshare --pid --fork --mount-proc python3 -c "$pidns_py" \
            >"$iso_work/pidns.out" 2>&1
        rc=$?
        used=$(sed -n 's/^used \([0-9]*\) MiB.*/\1/p' "$iso_work/pidns.out")
        echo "  $(cat "$iso_work/pidns.out")"
        if [ $rc = 0 ] && [ -n "$used" ] && [ "$used" -ge 400 ]; then
            ipass "PID namespace: the context was measured (${used} MiB charged), not the 100 MiB estimate"
        else
            ifail "PID namespace: exit $rc, ${used:-no} MiB charged for the context (the estimate is 100 MiB)"
        fi
    else
        echo "  skipped: unshare --pid is not permitted here"
    fi

    command -v torchrun >/dev/null || torchrun=(python3 -m torch.distributed.run)
    ngpu=$(nvidia-smi -L | grep -c '^GPU ')
    if [ "$ngpu" -ge 2 ]; then
        echo "== isolation: DDP over NCCL on 2 GPUs, native vs --mem 0=20GiB,1=20GiB"
        iso_watch_gpus ddp2.native iso_limit 300 "${torchrun[@]}" --standalone --nproc_per_node 2 "$ddp"
        rn=$?
        iso_watch_gpus ddp2.quota iso_limit 300 "$iso_flexgv" run --mem 0=20GiB,1=20GiB -- "${torchrun[@]}" --standalone --nproc_per_node 2 "$ddp"
        rs=$?
        grep '^info ' "$iso_work/ddp2.native.out" "$iso_work/ddp2.quota.out" | sed "s|$iso_work/||; s/^/  /"
        if [ $rn = 0 ] && [ $rs = 0 ] && [ "$(iso_losses ddp2.native | wc -l)" -gt 0 ] &&
            diff <(iso_losses ddp2.native) <(iso_losses ddp2.quota) >/dev/null; then
            ipass "DDP, 2 GPUs: $(iso_losses ddp2.native | wc -l) rank-0 losses bit-identical natively and under --mem 0=20GiB,1=20GiB"
        else
            tail -15 "$iso_work/ddp2.quota.err"
            ifail "DDP, 2 GPUs: native exit $rn, under the quota exit $rs, $(iso_losses ddp2.native | wc -l) / $(iso_losses ddp2.quota | wc -l) losses, not identical"
        fi
        echo "  natively:"; iso_within ddp2.native
        echo "  under --mem 0=20GiB,1=20GiB:"
        iso_within ddp2.quota 0=20 1=20 && ipass "DDP, 2 GPUs: every GPU and every process within 20 GiB" ||
            ifail "DDP, 2 GPUs: NVML saw more than the 20 GiB quota"

        echo "== isolation: one GPU picked by CUDA_VISIBLE_DEVICES=1; quotas name NVML devices"
        for q in 1 0; do
            iso_watch_gpus "cvd1.q$q" iso_limit 300 env CUDA_VISIBLE_DEVICES=1 "$iso_flexgv" run --mem "$q=12GiB" -- \
                "${torchrun[@]}" --standalone --nproc_per_node 1 "$ddp" --probe-gib 16
            rc=$?
            total=$(sed -n 's/^.*info rank 0\/1: .* total \([0-9]*\) free.*$/\1/p' "$iso_work/cvd1.q$q.out" | head -1)
            probe=$(sed -n 's/^.*probe 16 GiB: \([A-Za-z]*\).*$/\1/p' "$iso_work/cvd1.q$q.out" | head -1)
            peak=$(iso_gpu_peak "cvd1.q$q" 1)
            echo "  --mem $q=12GiB (exit $rc): cuda:0 reports total $(iso_gib "${total:-0}") GiB; 16 GiB probe: ${probe:-none}; NVML peak on GPU 1 $(iso_gib "$peak") GiB"
            iso_within "cvd1.q$q"
            [ $rc = 0 ] || { tail -15 "$iso_work/cvd1.q$q.err"; ifail "CUDA_VISIBLE_DEVICES=1, --mem $q=12GiB: exit status $rc"; }
        done
        # --mem 1=12GiB: physical GPU 1, the program's cuda:0, is limited.
        total=$(sed -n 's/^.*info rank 0\/1: .* total \([0-9]*\) free.*$/\1/p' "$iso_work/cvd1.q1.out" | head -1)
        probe=$(sed -n 's/^.*probe 16 GiB: \([A-Za-z]*\).*$/\1/p' "$iso_work/cvd1.q1.out" | head -1)
        peak=$(iso_gpu_peak cvd1.q1 1)
        [ "${total:-0}" = $((12 * iso_G)) ] && [ "$probe" = OutOfMemoryError ] && [ "$peak" -gt 0 ] && [ "$peak" -le $((12 * iso_G)) ] &&
            ipass "CUDA_VISIBLE_DEVICES=1, --mem 1=12GiB: cuda:0 is 12 GiB, 16 GiB refused, NVML peak on GPU 1 $(iso_gib "$peak") GiB" ||
            ifail "CUDA_VISIBLE_DEVICES=1, --mem 1=12GiB: total ${total:-?} bytes, 16 GiB probe ${probe:-none}, NVML peak on GPU 1 $(iso_gib "$peak") GiB"
        # --mem 0=12GiB: GPU 0 is not used, GPU 1 has no quota.
        total=$(sed -n 's/^.*info rank 0\/1: .* total \([0-9]*\) free.*$/\1/p' "$iso_work/cvd1.q0.out" | head -1)
        probe=$(sed -n 's/^.*probe 16 GiB: \([A-Za-z]*\).*$/\1/p' "$iso_work/cvd1.q0.out" | head -1)
        peak=$(iso_gpu_peak cvd1.q0 1)
        [ "${total:-0}" -gt $((12 * iso_G)) ] && [ "$probe" = ok ] &&
            ipass "CUDA_VISIBLE_DEVICES=1, --mem 0=12GiB: GPU 1 unlimited (cuda:0 total $(iso_gib "$total") GiB, 16 GiB allocated, NVML peak $(iso_gib "$peak") GiB)" ||
            ifail "CUDA_VISIBLE_DEVICES=1, --mem 0=12GiB: GPU 1 limited (total ${total:-?} bytes, 16 GiB probe ${probe:-none})"
        [ "$(iso_losses cvd1.q1 | wc -l)" -gt 0 ] && diff <(iso_losses cvd1.q1) <(iso_losses cvd1.q0) >/dev/null &&
            ipass "CUDA_VISIBLE_DEVICES=1: losses bit-identical under --mem 1=12GiB and --mem 0=12GiB" ||
            ifail "CUDA_VISIBLE_DEVICES=1: losses differ between --mem 1=12GiB and --mem 0=12GiB"
    else
        echo "== isolation: DDP over NCCL, one process ($ngpu GPU: the two-GPU and CUDA_VISIBLE_DEVICES checks need 2), native vs --mem 8GiB"
        iso_watch_gpus ddp1.native iso_limit 300 "${torchrun[@]}" --standalone --nproc_per_node 1 "$ddp"
        rn=$?
        iso_watch_gpus ddp1.quota iso_limit 300 "$iso_flexgv" run --mem 8GiB -- "${torchrun[@]}" --standalone --nproc_per_node 1 "$ddp"
        rs=$?
        if [ $rn = 0 ] && [ $rs = 0 ] && [ "$(iso_losses ddp1.native | wc -l)" -gt 0 ] &&
            diff <(iso_losses ddp1.native) <(iso_losses ddp1.quota) >/dev/null; then
            ipass "DDP, 1 process: $(iso_losses ddp1.native | wc -l) losses bit-identical natively and under --mem 8GiB"
        else
            tail -15 "$iso_work/ddp1.quota.err"
            ifail "DDP, 1 process: native exit $rn, under --mem 8GiB exit $rs, losses not identical"
        fi
        iso_within ddp1.quota 0=8 && ipass "DDP, 1 process: within 8 GiB" || ifail "DDP, 1 process: NVML saw more than 8 GiB"
    fi

    echo "== isolation summary"
    printf '  %s\n' "${iso_results[@]}"
    echo "== isolation: $iso_fails failure(s)"
    mkdir -p "$iso_out/isolation"
    cp "$iso_work"/*.out "$iso_work"/*.err "$iso_work"/*.json "$iso_work"/*.diff "$iso_out/isolation/" 2>/dev/null
    rm -rf "$iso_work"
    return $((iso_fails > 0))
}

if [ "$iso_sourced" = 1 ]; then
    iso_main
else
    iso_main
    exit $?
fi
