#!/usr/bin/env bash
# CUDA runtime programs on a real GPU through the remoting client (after
# make; nvcc 13 needed, Go not): the client's integrity hash against the
# real driver's answer, then programs natively and through flexgv serve over
# unix://, shm:// and loopback tcp://, with a time limit, whose outputs must
# be the same (NAME for ONLY in brackets): examples/vectoradd built with
# static and with shared cudart (vectoradd-static, vectoradd-shared), 2D
# copies (memcpy2d), CUDA arrays, textures and surfaces read by kernels
# (textures), host functions and stream callbacks (hostfunc; and
# the caller going on while its function waits: hostfunc_async), a
# thread's wait that another thread's copy ends (waiters), copies under
# unified addressing (uva), copies of the program's memory captured into
# graphs (captured), pinned memory kernels use by its address (zerocopy),
# managed memory written by the host and kernels,
# prefetched and advised (managed), __managed__ variables (managedvar), a
# launch's parameters packed in one buffer (extra), occupancy with a host
# callback, the profiler's range, stream attributes and cuCtxCreate_v4
# through the runtime and -lcuda (families), green contexts on a group of
# the SMs (greenctx), every pointer attribute of every kind of memory, a
# pool made and a graph's debug print (pointers), graphs built node by node
# with every kind of node (graphs), and through cuGraphAddNode, a child
# graph moved into its node among them (graphgeneric), a
# cuBLAS program with stream capture (cublas), PyTorch training
# (torch-train: losses bit for bit, throughput over native, and with
# latency added; torch-segments: with expandable segments), batch-1 eager
# inference's latency over native's, with latency added too (torch-infer), Triton,
# torch.compile, CuPy and JAX (triton_add, torch_compile, cupy_check,
# jax_check); and measurements: round trips per
# training step remotely and natively (torch-trips), host-to-device and
# device-to-host bandwidth (h2d), the client's NVML and nvidia-smi (nvml), module images
# kept over TCP (modules), device memory placed by the client (arena), a
# tenant's quota with its executor unprivileged (tenant), executors' host
# memory bounded by a cgroup (cgroup), and DDP over NCCL with one rank
# (ddp-one).
# A PASS or FAIL line per check; exit status 1 if any failed. TRANSPORTS
# may also name failover: over unix:// with a failover server taking a
# checkpoint every CHECKPOINT_MS (default 200) milliseconds, the same output
# (the client's own lines left out); for the programs run by same alone.
#     [ONLY="NAME..."] [TRANSPORTS="unix shm tcp failover"] [LIMIT=SECONDS] scripts/gpu-remote-cudart.sh [CUDA_HOME]
set -uo pipefail
cd "$(dirname "$0")/.."
CUDA=${1:-${CUDA_HOME:-/usr/local/cuda}}
B=$PWD/build
LIMIT=${LIMIT:-120} # seconds per program
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
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

# The transports, all three unless TRANSPORTS names fewer.
ADDRS=()
for t in ${TRANSPORTS:-unix shm tcp}; do
    case $t in
    unix | shm) ADDRS+=("$t://$tmp/gpu.sock") ;;
    tcp) ADDRS+=(tcp://127.0.0.1:7072) ;;
    failover)
        ADDRS+=("failover://$tmp/gpu.sock")
        env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen "unix://$tmp/spare.sock" 2>"$tmp/serve-spare.log" &
        sleep 1
        ;;
    *) echo "TRANSPORTS: $t is none of unix, shm, tcp, failover" >&2 && exit 2 ;;
    esac
done
elapsed() { python3 -c "import time; print(f'{time.time() - $1:.2f}')"; }
# same NAME FILTER CMD...: CMD natively, then remotely over each transport;
# FILTER (a command over its output) must print the same. A program whose
# output has "steps_per_s" also gets its remote throughput over native.
same() {
    local name=$1 filter=$2 t0 native rc took
    shift 2
    wanted "$name" || return 0
    t0=$(date +%s.%N)
    # The toolkit's runtime libraries from the path, and the driver.
    LD_LIBRARY_PATH="$CUDA/lib64" timeout "$LIMIT" "$@" >"$tmp/native.out" 2>&1
    rc=$?
    if [ $rc != 0 ]; then
        fail "$name natively: exit $rc"
        tail -n 20 "$tmp/native.out"
        return
    fi
    native=$(elapsed "$t0")
    for addr in "${ADDRS[@]}"; do
        [ -n "${OVER:-}" ] && [[ " $OVER " != *" ${addr%%://*} "* ]] && continue
        local label="$name over ${addr%%://*}://" envs=(FLEXGV_REMOTE="$addr") said=""
        if [[ $addr == failover://* ]]; then
            envs=(FLEXGV_REMOTE="unix://${addr#failover://}" FLEXGV_REMOTE_FAILOVER="unix://$tmp/spare.sock"
                FLEXGV_REMOTE_CHECKPOINT_MS="${CHECKPOINT_MS:-200}" FLEXGV_REMOTE_LOG=errors)
        fi
        t0=$(date +%s.%N)
        env "${envs[@]}" LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" timeout "$LIMIT" "$@" >"$tmp/remote.out" 2>&1
        rc=$?
        took=$(elapsed "$t0")
        if [[ $addr == failover://* ]]; then
            said=$(grep -E '^flexgv remote: (pid .*checkpoints|no checkpoint)' "$tmp/remote.out" | cut -c1-240 | tr '\n' ' ')
            grep -v '^flexgv remote: ' "$tmp/remote.out" >"$tmp/remote.kept" && mv "$tmp/remote.kept" "$tmp/remote.out"
        fi
        if [ $rc = 0 ] && cmp -s <($filter "$tmp/native.out") <($filter "$tmp/remote.out"); then
            pass "$label: the same output as natively (whole run ${took} s, natively ${native} s)$(rate)${said:+; $said}"
        else
            if [ $rc = 0 ]; then
                fail "$label: another output than natively"
            else
                fail "$label: exit $rc (124: over ${LIMIT}s)"
            fi
            diff <($filter "$tmp/native.out") <($filter "$tmp/remote.out") | cut -c1-200 | head -8
            echo "its last lines:"
            tail -n 8 "$tmp/remote.out" | cut -c1-300
            tail -n 3 "$tmp"/serve-*.log
            # Again, saying what the server refused and which lookups found nothing.
            # (cuBLAS and cuBLASLt say their own failures too.)
            CUBLAS_LOGINFO_DBG=1 CUBLAS_LOGDEST_DBG=stderr CUBLASLT_LOG_LEVEL=5 \
                FLEXGV_REMOTE_LOG=errors FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" timeout "$LIMIT" "$@" \
                >"$tmp/logged.out" 2>&1
            echo "errors said: $(grep -c '^flexgv remote: cu' "$tmp/logged.out"), of which lookups that found" \
                "nothing: $(grep -c '^flexgv remote: cuGetProcAddress' "$tmp/logged.out"); the other last ones, then the names looked up:"
            grep '^flexgv remote: ' "$tmp/logged.out" | grep -v cuGetProcAddress | tail -n 10
            grep -i 'cublas' "$tmp/logged.out" | grep -iv 'api\]\|trace' | tail -n 12 | cut -c1-300
            cp "$tmp/logged.out" "${LOGS:-$tmp}/$name-${addr%%://*}.log" 2>/dev/null
            grep '^flexgv remote: cuGetProcAddress' "$tmp/logged.out" | sed 's/.*cuGetProcAddress("\([^"]*\)".*/\1/' |
                sort -u | tr '\n' ' ' | cut -c1-2000
            echo
        fi
    done
}
# Throughput remote / native, from the programs' JSON lines.
rate() {
    python3 - "$tmp/native.out" "$tmp/remote.out" <<'PY' 2>/dev/null
import json, sys
def sps(f):
    for line in open(f):
        if line.startswith("{"):
            return json.loads(line)["steps_per_s"]
n, r = sps(sys.argv[1]), sps(sys.argv[2])
print(f"; {r:.1f} steps/s against {n:.1f} natively: {r / n:.3f}", end="")
PY
}
# What must match: everything, or a training run's losses (bit for bit).
whole() { cat "$1"; }
noreadback() { grep -vE '^(cuGraphNodeGetParams: |read back: |batch node: )' "$1"; }
# What JAX printed, without XLA's log lines (they name the client's NVML).
jaxout() { grep '^jax ' "$1"; }
# What CuPy printed, without the client's notice that NVRTC's private
# table is refused (NVRTC then compiles without it).
cupyout() { grep '^cupy: ' "$1"; }
# What a program printed but its "how: " lines (what may differ remotely).
nohow() { grep -v '^how: ' "$1"; }
# Pointer attributes but GPUDirect RDMA and hardware decompression (15,
# 21), which a remote program does not have: the server's driver says so.
nordma() { sed -E 's/ (15|21)=[^ ]+//g' "$1"; }
losses() { python3 -c 'import json,sys; print([json.loads(l)["losses"] for l in open(sys.argv[1]) if l.startswith("{")])' "$1"; }

same vectoradd-static whole "$tmp/vectoradd_static" 25
same vectoradd-shared whole "$tmp/vectoradd_shared" 25
# [FILTER=F] [OVER="TRANSPORT..."] cu NAME SOURCE [NVCC ARGS...]: a CUDA
# runtime program, built with nvcc and run by same (its whole output
# compared, or what F keeps; over those transports alone).
cu() {
    local name=$1 src=$2
    shift 2
    wanted "$name" || return 0
    if "$CUDA/bin/nvcc" -O2 -o "$tmp/$name" "$src" "$@"; then
        same "$name" "${FILTER:-whole}" "$tmp/$name"
    else
        fail "$name: nvcc build"
    fi
}
cu memcpy2d scripts/gpu/memcpy2d.cu
cu textures scripts/gpu/textures.cu
cu hostfunc scripts/gpu/hostfunc.cu
cu hostfunc_async scripts/gpu/hostfunc_async.cu
cu waiters scripts/gpu/waiters.cu
cu uva scripts/gpu/uva.cu
FILTER=nohow cu captured scripts/gpu/captured.cu
cu zerocopy scripts/gpu/zerocopy.cu
FILTER=nohow cu managed scripts/gpu/managed.cu
cu managedvar scripts/gpu/managedvar.cu
# Graphs node by node (conditional IF and WHILE nodes last, a body
# captured into, an executable updated).
cu graphs scripts/gpu/graphs.cu
# Driver 580 lacks cuGraphNodeGetParams (CUDA 13.1's), which the client
# answers from each kind's own entry points: its read-backs are compared
# on the simulated GPU (TestRemoteGraphNodesOfEveryKind), not here.
FILTER=noreadback cu graphgeneric scripts/gpu/graphgeneric.cu -lcuda
cu extra scripts/gpu/extra.cu -lcuda
cu families scripts/gpu/families.cu -lcuda
# Pointer attributes of every kind of memory, a pool made, a graph printed.
FILTER=nordma cu pointers scripts/gpu/pointers.cu -lcuda
cu greenctx scripts/gpu/greenctx.cu -lcuda
cu cublas scripts/gpu/cublas_capture.cu -lcublas
if ! wanted torch-train && ! wanted torch-trips && ! wanted torch-segments; then
    :
elif python3 -c 'import torch' 2>/dev/null; then
    same torch-train losses python3 scripts/gpu/torch_train.py 300 20
    cp "$tmp/native.out" "$tmp/torch-native.out" 2>/dev/null
    # The caching allocator growing segments by mapping (cuMemCreate,
    # cuMemMap, cuMemSetAccess, and the export it tries first).
    same torch-segments losses env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
        python3 scripts/gpu/torch_train.py 100 20
    # Synchronous round trips per training step, from two runs that differ
    # only in their number of steps: natively (flexgv trace), then over
    # shm:// and tcp:// counted by the client, with the writes they took
    # (torch-trips).
    wanted torch-trips && for n in 100 300; do
        LD_LIBRARY_PATH="$CUDA/lib64" timeout "$LIMIT" "$B/bin/flexgv" trace --json -o "$tmp/native$n.json" -- \
            python3 scripts/gpu/torch_train.py "$n" 20 >/dev/null 2>&1
    done
    wanted torch-trips && python3 - "$tmp/native100.json" "$tmp/native300.json" <<'PY'
import json, sys
a, b = ({x["name"]: x["calls"] for x in json.load(open(f))["apis"]} for f in sys.argv[1:])
d = sorted(((b[k] - a.get(k, 0)) / 200, k) for k in b)
syncs = [f"{k} {n:.2f}" for n, k in reversed(d) if n > 0 and ("Synchronize" in k or "DtoH" in k or "Query" in k)]
print("torch-train natively, per step: " + (", ".join(syncs) or "no synchronizing call"))
PY
    # LABEL ENV...: training remotely with ENV, its rate over the native run's.
    trained() {
        local label=$1
        shift
        env "$@" LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" timeout "$LIMIT" python3 scripts/gpu/torch_train.py 300 20 \
            >"$tmp/variant.out" 2>&1
        python3 - "$tmp/torch-native.out" "$tmp/variant.out" "$label" <<'PY'
import json, sys
def sps(f):
    for line in open(f):
        if line.startswith("{"):
            return json.loads(line)["steps_per_s"]
n, r = sps(sys.argv[1]), sps(sys.argv[2])
print(f"torch-train {sys.argv[3]}: " + (f"{r:.1f} steps/s against {n:.1f} natively: {r / n:.3f}" if r else "FAILED"))
PY
    }
    # Over loopback TCP with latency added to every round trip; over the
    # sockets with each queued call written at once (not gathered).
    if wanted torch-train; then
        for us in 10 50; do
            trained "over tcp:// with $us us added per round trip" FLEXGV_REMOTE_DELAY_US=$us FLEXGV_REMOTE=tcp://127.0.0.1:7072
        done
        for addr in "${ADDRS[@]}"; do
            [[ $addr == shm://* ]] && continue
            trained "over ${addr%%://*}:// with each queued call written at once" FLEXGV_REMOTE_BATCH_US=0 FLEXGV_REMOTE=$addr
            trained "over ${addr%%://*}:// gathered, again" FLEXGV_REMOTE=$addr
        done
    fi
    wanted torch-trips && for addr in "shm://$tmp/gpu.sock" tcp://127.0.0.1:7072; do
        for n in 100 300; do
            FLEXGV_REMOTE_LOG=calls FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" \
                timeout "$LIMIT" python3 scripts/gpu/torch_train.py "$n" 20 >"$tmp/calls$n.out" 2>&1
        done
        python3 scripts/gpu/roundtrips.py "$tmp/calls100.out" "$tmp/calls300.out" 200 "torch-train ${addr%%://*}://" step
    done
else
    echo "SKIP torch-train: no PyTorch here"
fi
# Batch-1 eager inference of a small transformer (a request every 10 ms,
# each synchronized), natively and remotely, and over tcp:// with latency
# added to every round trip: request latency p50 / p99 against native's;
# then the round trips a request takes (tcp://, from runs of 300 and 600).
if wanted torch-infer && python3 -c 'import torch' 2>/dev/null; then
    infer() { env "$@" timeout "$LIMIT" python3 scripts/gpu/share_load.py infer 100 6 2>&1 | grep '^latency_ms' || echo "latency_ms FAILED"; }
    native_lat=$(infer LD_LIBRARY_PATH="$CUDA/lib64")
    echo "torch-infer natively: $native_lat"
    for v in "${ADDRS[@]/#/FLEXGV_REMOTE=}" "FLEXGV_REMOTE=tcp://127.0.0.1:7072 FLEXGV_REMOTE_DELAY_US=10" \
        "FLEXGV_REMOTE=tcp://127.0.0.1:7072 FLEXGV_REMOTE_DELAY_US=50"; do
        # shellcheck disable=SC2086 # v is the variant's assignments
        lat=$(infer $v LD_LIBRARY_PATH="$B/remote:$CUDA/lib64")
        python3 - "$native_lat" "$lat" "$v" <<'PY'
import sys
n, r = (a.split() for a in sys.argv[1:3])
if len(n) < 4 or len(r) < 4:
    print(f"FAIL torch-infer {sys.argv[3]}: no latency ({' '.join(r)})")
else:
    print(f"torch-infer {sys.argv[3]}: p50 {r[1]} ms ({float(r[1]) / float(n[1]):.3f} of native), "
          f"p99 {r[2]} ms ({float(r[2]) / float(n[2]):.3f}), {r[3]} requests")
PY
    done
    for sec in 3 6; do
        FLEXGV_REMOTE_LOG=calls FLEXGV_REMOTE=tcp://127.0.0.1:7072 LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" \
            timeout "$LIMIT" python3 scripts/gpu/share_load.py infer 100 "$sec" >"$tmp/icalls$sec.out" 2>&1
    done
    python3 scripts/gpu/roundtrips.py "$tmp/icalls3.out" "$tmp/icalls6.out" 300 "torch-infer tcp://" request
fi
# Host-to-device bandwidth through PyTorch, remote over native.
if wanted h2d && python3 -c 'import torch' 2>/dev/null; then
    LD_LIBRARY_PATH="$CUDA/lib64" timeout "$LIMIT" python3 scripts/gpu/h2d_bandwidth.py >"$tmp/bw-native.out" 2>&1
    for addr in "${ADDRS[@]}"; do
        FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" timeout "$LIMIT" \
            python3 scripts/gpu/h2d_bandwidth.py >"$tmp/bw.out" 2>&1
        python3 - "$tmp/bw-native.out" "$tmp/bw.out" "${addr%%://*}" <<'PY'
import json, sys
def bw(f):
    for line in open(f):
        if line.startswith("{"):
            return json.loads(line)
    return None
n, r = bw(sys.argv[1]), bw(sys.argv[2])
if not n or not r:
    print(f"FAIL h2d over {sys.argv[3]}://: no figure (native {n}, remote {r})")
else:
    print(f"h2d over {sys.argv[3]}://: " + ", ".join(
        f"{k[:-5]} {r[k]:.2f} GB/s against {n[k]:.2f} natively: {r[k] / n[k]:.3f}" for k in n))
PY
    done
fi
# The client's NVML against the server's: the GPU's utilization (any value
# answered; what the server's NVML says of the same GPU printed beside it).
if wanted nvml; then
    for addr in "${ADDRS[@]}"; do
        util=$(FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote" timeout "$LIMIT" "$B/tests/nvmlremote" 2>&1 | grep '^utilization: ')
        native=$(nvidia-smi --query-gpu=utilization.gpu,utilization.memory --format=csv,noheader -i 0 2>/dev/null)
        case $util in
        "utilization: Success "*) pass "NVML over ${addr%%://*}://: $util (nvidia-smi: $native)" ;;
        *) fail "NVML over ${addr%%://*}://: ${util:-no answer}" ;;
        esac
    done
    # FlexGV's nvidia-smi on the driver's NVML against NVIDIA's: the same
    # lines for the fields that do not move, in each CSV form, and -L.
    SMI_FIXED=index,count,name,uuid,driver_version,pci.bus_id,pci.domain,pci.bus,pci.device,pci.device_id,pci.sub_device_id,compute_cap,persistence_mode,compute_mode,memory.total,power.limit,enforced.power.limit,clocks.max.sm,clocks.max.memory,clocks.max.graphics,fan.speed,serial
    for args in "--query-gpu=$SMI_FIXED --format=csv" "--query-gpu=$SMI_FIXED --format=csv,noheader,nounits" \
        "--query-gpu=memory.total,power.limit --format=csv,nounits" "-L" \
        "--query-compute-apps=pid,process_name,used_gpu_memory --format=csv"; do
        theirs=$(env -u LD_LIBRARY_PATH nvidia-smi $args 2>&1)
        ours=$(env -u LD_LIBRARY_PATH timeout "$LIMIT" "$B/remote/bin/nvidia-smi" $args 2>&1)
        if [ "$theirs" = "$ours" ]; then
            pass "nvidia-smi $args natively: as NVIDIA's"
        else
            fail "nvidia-smi $args natively: '$ours', NVIDIA's '$theirs'"
        fi
    done
    env -u LD_LIBRARY_PATH nvidia-smi | sed 's|^|NVIDIA nvidia-smi: |'
    env -u LD_LIBRARY_PATH "$B/remote/bin/nvidia-smi" | sed 's|^|FlexGV nvidia-smi: |'
    # The readings monitors ask, against the same program on the real NVML:
    # the same answers and refusals, the same fixed values (power limit,
    # maximum clocks), a temperature within 5 degrees.
    env -u LD_LIBRARY_PATH timeout "$LIMIT" "$B/tests/nvmlremote" >"$tmp/nvml.native" 2>&1
    for addr in "${ADDRS[@]}"; do
        FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote" timeout "$LIMIT" "$B/tests/nvmlremote" >"$tmp/nvml.remote" 2>&1
        if why=$(python3 - "$tmp/nvml.native" "$tmp/nvml.remote" <<'PY'
import re, sys
def lines(p):
    t = open(p).read()
    get = lambda k: next((l for l in t.splitlines() if l.startswith(k)), "")
    return get("readings: "), get("readings refused: ")
(n, nr), (r, rr) = lines(sys.argv[1]), lines(sys.argv[2])
if not n or not r:
    sys.exit(f"no readings (native {n!r}, remote {r!r})")
if nr != rr:
    sys.exit(f"refusals differ: native {nr!r}, remote {rr!r}")
num = re.compile(r"\d+")
if num.sub("N", n) != num.sub("N", r):
    sys.exit(f"answers differ: native {n!r}, remote {r!r}")
fixed = lambda l: re.findall(r"(?:limit|max) \w+ (\d+)", l)
if fixed(n) != fixed(r):
    sys.exit(f"fixed values differ: native {fixed(n)}, remote {fixed(r)}")
temp = lambda l: int(re.search(r"temperature \w+ (\d+)", l).group(1))
if abs(temp(n) - temp(r)) > 5:
    sys.exit(f"temperature {temp(r)} against {temp(n)} natively")
print(r)
PY
        ); then
            pass "NVML readings over ${addr%%://*}:// as natively: $why"
        else
            fail "NVML readings over ${addr%%://*}://: $why"
        fi
        # FlexGV's nvidia-smi through the client's NVML (NVIDIA's refuses
        # it): the fields that do not move, as NVIDIA's prints them natively.
        # Not the PCI device ids and the serial number (CUDA does not tell
        # them), nor the memory (the tenant's view, as CUDA gives it).
        q=${SMI_FIXED/,pci.device_id,pci.sub_device_id/}
        q=${q/,memory.total/}
        q=${q/,serial/}
        native=$(env -u LD_LIBRARY_PATH nvidia-smi --query-gpu=$q --format=csv -i 0 2>&1)
        remote=$(FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote" timeout "$LIMIT" "$B/remote/bin/nvidia-smi" --query-gpu=$q --format=csv -i 0 2>&1)
        if [ "$native" = "$remote" ]; then
            pass "nvidia-smi over ${addr%%://*}://: $(tail -1 <<<"$remote")"
        else
            fail "nvidia-smi over ${addr%%://*}://: '$remote', NVIDIA's natively '$native'"
        fi
        # Its summary, printed (not judged).
        FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote" timeout "$LIMIT" "$B/remote/bin/nvidia-smi" 2>&1 | head -30 |
            sed "s|^|nvidia-smi over ${addr%%://*}://: |"
    done
fi
# Module images kept by the server over TCP: a second PyTorch run sends
# hashes where the first sent images (the start-up times of both).
if wanted modules && python3 -c 'import torch' 2>/dev/null; then
    env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen tcp://127.0.0.1:7073 --open --module-cache "$tmp/modules" \
        2>"$tmp/serve-modules.log" &
    sleep 1
    for run in first second; do
        t0=$(date +%s.%N)
        FLEXGV_REMOTE=tcp://127.0.0.1:7073 LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" timeout "$LIMIT" \
            python3 scripts/gpu/torch_train.py 20 5 >"$tmp/modules-$run.out" 2>&1
        echo "modules kept, $run run over tcp://: exit $?, $(elapsed "$t0") s, $(ls "$tmp/modules/open" | wc -l) images" \
            "($(du -sh "$tmp/modules/open" | cut -f1)) kept"
    done
    if cmp -s <(losses "$tmp/modules-first.out") <(losses "$tmp/modules-second.out") && [ -n "$(ls "$tmp/modules/open")" ]; then
        pass "modules kept: the second run's losses are the first's"
    else
        fail "modules kept: the runs differ or nothing was kept"
        tail -n 5 "$tmp/modules-second.out" "$tmp/serve-modules.log"
    fi
fi
# A tenant's quota, enforced by the server's shim in the tenant's executor
# (run as the unprivileged user when the server is root): PyTorch over
# unix:// fills the GPU 64 MiB at a time until refused; what it got and
# what NVML shows the executor holding stay within the quota.
if wanted tenant && python3 -c 'import torch' 2>/dev/null; then
    python3 -c 'import secrets; print(secrets.token_hex(32))' >"$tmp/t.token" && chmod 600 "$tmp/t.token"
    env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen "unix://$tmp/tenant.sock" --tenant "t:$tmp/t.token" --mem 2GiB \
        2>"$tmp/serve-tenant.log" &
    for _ in $(seq 50); do [ -S "$tmp/tenant.sock" ] && break; sleep 0.1; done
    FLEXGV_REMOTE=unix://$tmp/tenant.sock FLEXGV_REMOTE_TOKEN_FILE=$tmp/t.token LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" \
        timeout "$LIMIT" python3 -c '
import os, sys, time, torch
held = []
try:
    while True:
        held.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
print(f"held {len(held) * 64} MiB", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.1)' "$tmp/tenant.done" >"$tmp/tenant.out" 2>&1 &
    client=$!
    for _ in $(seq 100); do grep -q '^held' "$tmp/tenant.out" && break; sleep 0.2; done
    exe=$(grep -o 'connected: executor pid [0-9]*' "$tmp/serve-tenant.log" | tail -n 1 | awk '{print $4}')
    user=$(ps -o user= -p "${exe:-0}" 2>/dev/null)
    nvml=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', *' -v p="${exe:-0}" '$1 == p {print $2}')
    touch "$tmp/tenant.done"
    wait $client
    echo "tenant with --mem 2GiB over unix://: $(grep -m 1 '^held' "$tmp/tenant.out"); executor $exe as ${user:-?}, NVML ${nvml:-?} MiB"
    if [[ $(grep -m 1 '^held' "$tmp/tenant.out") =~ ^held\ ([0-9]+)\ MiB$ ]] && [ "${BASH_REMATCH[1]}" -le 2048 ] &&
        [ "${BASH_REMATCH[1]}" -ge 1024 ] && [ -n "$nvml" ] && [ "$nvml" -le 2048 ] &&
        { [ "$(id -u)" != 0 ] || [ "$user" != root ]; }; then
        pass "tenant: the quota holds (NVML within it), the executor not root"
    else
        fail "tenant: quota or executor user (above)"
        tail -n 5 "$tmp/tenant.out" "$tmp/serve-tenant.log"
    fi
fi
# Executors' host memory bounded by the kernel (--executor-memory, cgroup
# v2): with the server alone in a cgroup made for it (as root), a program
# runs under a 4 GiB limit, its executor's cgroup saying the limit and its
# peak; under 64 MiB the executor (46 MB at its peak on an H200 for this
# program) runs within it, or is killed past it, and the server serves on.
if wanted cgroup && [ "$(id -u)" = 0 ] && [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    echo +memory >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    for max in 4GiB 64MiB; do
        # A cgroup each: once a server gave its children the memory
        # controller, no process may join its own.
        cg=/sys/fs/cgroup/flexgv-check-$$-$max limit= peak=
        mkdir -p "$cg"
        sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec env -u LD_LIBRARY_PATH "$@"' sh "$cg" "$B/bin/flexgv" serve \
            --listen "unix://$tmp/cg-$max.sock" --executor-memory $max 2>"$tmp/serve-cg-$max.log" &
        srv=$!
        for _ in $(seq 50); do [ -S "$tmp/cg-$max.sock" ] && break; sleep 0.1; done
        (FLEXGV_REMOTE=unix://$tmp/cg-$max.sock LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" timeout "$LIMIT" \
            "$tmp/vectoradd_static" 25 >"$tmp/cg-$max.out" 2>&1; echo "exit $?" >>"$tmp/cg-$max.out") &
        client=$!
        for _ in $(seq 100); do
            exe=$(grep -o 'connected: executor pid [0-9]*' "$tmp/serve-cg-$max.log" | awk '{print $4}')
            d=/sys/fs/cgroup$(cut -d: -f3 "/proc/${exe:-0}/cgroup" 2>/dev/null)
            [ -n "$exe" ] && [ -f "$d/memory.max" ] && limit=$(cat "$d/memory.max") && peak=$(cat "$d/memory.peak" 2>/dev/null)
            kill -0 $client 2>/dev/null || break
            sleep 0.1
        done
        wait $client
        echo "executor memory $max: program $(tail -n 1 "$tmp/cg-$max.out"), executor cgroup memory.max ${limit:-?}, peak seen ${peak:-?};" \
            "server: $(grep -c 'ended (signal: killed)' "$tmp/serve-cg-$max.log") executor(s) killed, $(grep -c 'not limited' "$tmp/serve-cg-$max.log") refusal(s)"
        case $max in
        4GiB) if [ "$(tail -n 1 "$tmp/cg-$max.out")" = "exit 0" ] && [ "${limit:-}" = 4294967296 ]; then pass "cgroup: a program under a 4 GiB executor limit"; else fail "cgroup: 4 GiB"; tail -n 5 "$tmp/cg-$max.out" "$tmp/serve-cg-$max.log"; fi ;;
        64MiB) if [ "${limit:-}" = 67108864 ] && { [ "$(tail -n 1 "$tmp/cg-$max.out")" = "exit 0" ] || grep -q 'ended (signal: killed)' "$tmp/serve-cg-$max.log"; } &&
            kill -0 $srv 2>/dev/null; then pass "cgroup: under 64 MiB the executor ran within it or was killed, the server serves on"; else fail "cgroup: 64 MiB"; tail -n 5 "$tmp/cg-$max.out" "$tmp/serve-cg-$max.log"; fi ;;
        esac
        kill $srv 2>/dev/null
        wait $srv 2>/dev/null
        for d in "$cg"/*/ "$cg"; do rmdir "$d" 2>/dev/null; done
    done
fi
# DistributedDataParallel over NCCL with one rank (NCCL's start, its
# threads and memory, its all-reduce kernels; two ranks need two GPUs):
# rank 0's losses, bit for bit.
ddplosses() { grep '^loss ' "$1"; }
if wanted ddp-one && python3 -c 'import torch.distributed' 2>/dev/null; then
    same ddp-one ddplosses torchrun --standalone --nproc_per_node 1 scripts/gpu/ddp.py --steps 50
fi
# Triton, torch.compile (Inductor), CuPy and JAX: the same output.
for prog in triton_add torch_compile cupy_check jax_check; do
    mod=${prog%%_*}
    [ "$mod" = torch ] && mod=torch._inductor
    if python3 -c "import $mod" 2>/dev/null; then
        filter=whole
        [ "$prog" = jax_check ] && filter=jaxout
        [ "$prog" = cupy_check ] && filter=cupyout
        same "$prog" "$filter" python3 "scripts/gpu/$prog.py"
    else
        echo "SKIP $prog: $mod is not importable here"
    fi
done
# What the words the client does not emulate yet do on the real driver
# (informational: PyTorch, Triton and JAX call them).
if gcc -std=gnu11 -O2 -Wall -Werror -I"$CUDA/include" -o "$tmp/xt_probe" scripts/gpu/xt_probe.c \
    -L"$CUDA/lib64/stubs" -lcuda; then
    for w in 69a28e9f-2449-8b47-b030-c5da330ea4e9:{19,21,24,25}; do
        env -u LD_LIBRARY_PATH timeout 30 "$tmp/xt_probe" "${w%:*}" "${w#*:}"
    done
fi
# Device memory at addresses the client chooses: what a program sees of it
# (natively and remotely it must print tests/data/arena.out, as on the
# simulated GPU) and where the first allocation lands, then the cost of a
# cudaMalloc and cudaFree pair remote over native, the client placing it and
# the server's driver (FLEXGV_REMOTE_ARENA=off), by size.
if wanted arena; then
    LD_LIBRARY_PATH="$CUDA/lib64" timeout "$LIMIT" python3 scripts/gpu/arena.py >"$tmp/arena-native.out" 2>&1
    if cmp -s "$tmp/arena-native.out" tests/data/arena.out; then
        pass "arena natively: tests/data/arena.out"
    else
        fail "arena natively: another output"
        diff tests/data/arena.out "$tmp/arena-native.out" | head -20
    fi
    where='import ctypes; cu = ctypes.CDLL("libcuda.so.1"); c, p = ctypes.c_void_p(), ctypes.c_uint64(); cu.cuInit(0)
cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), 0); cu.cuCtxSetCurrent(c); cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 20); print(hex(p.value))'
    line="arena: a first allocation natively at $(LD_LIBRARY_PATH="$CUDA/lib64" python3 -c "$where")"
    for addr in "${ADDRS[@]}"; do
        line+=", over ${addr%%://*} at $(FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" python3 -c "$where" 2>&1 | tr '\n' ' ')"
    done
    echo "$line (the client asks for its range at 0x100000000000)"
    for addr in "${ADDRS[@]}"; do
        FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" timeout "$LIMIT" python3 scripts/gpu/arena.py \
            >"$tmp/arena.out" 2>&1
        if cmp -s "$tmp/arena.out" tests/data/arena.out; then
            pass "arena over ${addr%%://*}://: tests/data/arena.out"
        else
            fail "arena over ${addr%%://*}://: another output"
            diff tests/data/arena.out "$tmp/arena.out" | head -20
        fi
    done
    if "$CUDA/bin/nvcc" -O2 -o "$tmp/alloc_bench" bench/alloc_bench.cu; then
        for bytes in 1024 1048576 67108864; do
            n=$((bytes > 1048576 ? 500 : 2000))
            native=$(LD_LIBRARY_PATH="$CUDA/lib64" "$tmp/alloc_bench" $n $bytes | awk '{print $2}')
            line="alloc+free of $bytes bytes: native ${native} ns"
            for addr in "${ADDRS[@]}"; do
                for arena in on off; do
                    ns=$(FLEXGV_REMOTE_ARENA=$arena FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" \
                        timeout "$LIMIT" "$tmp/alloc_bench" $n $bytes | awk '{print $2}')
                    line+="; ${addr%%://*} $arena ${ns} ns ($(python3 -c "print(f'{$ns / $native:.2f}')" 2>/dev/null)x)"
                done
            done
            echo "$line"
        done
    else
        fail "arena: nvcc build of bench/alloc_bench.cu"
    fi
fi
# The executors' check of the driver's parameter layouts against the
# cubins the programs loaded (EIATTR_KPARAM_INFO): a kernel with another
# number of parameters fails; other sizes alone are shown (the driver
# gives XLA's pointer parameters as 128 bytes, its cubins as 8, and JAX
# prints its native output).
checks=$(cat "$tmp"/serve-*.log | grep -c "checked against their cubins")
grep -h "EIATTR_KPARAM_INFO [0-9]" "$tmp"/serve-*.log | sed 's/^.*: kernel /other sizes: kernel /' | sort -u
if grep -hE "gives ([0-9]+) parameter.*EIATTR_KPARAM_INFO ([0-9]+)" "$tmp"/serve-*.log |
    sed -E 's/.*gives ([0-9]+) parameter.*EIATTR_KPARAM_INFO ([0-9]+) .*/\1 \2/' | awk '$1 != $2 {bad = 1} END {exit !bad}'; then
    fail "parameter layouts: the driver and a cubin give another number of parameters (above)"
else
    pass "parameter layouts: $checks connection(s) checked their kernels against the cubins, none differ; $(cat "$tmp"/serve-*.log |
        grep -o "layouts of [0-9]* kernel" | awk '{n += $3} END {print n + 0}') kernel layouts checked"
fi
[ $failed = 0 ] && echo "PASS remote cudart: all checks" || echo "FAIL remote cudart: see the FAIL lines above"
exit $failed
