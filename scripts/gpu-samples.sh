#!/usr/bin/env bash
# NVIDIA's CUDA samples on a real GPU, natively and through the remoting
# client: from the repository root of a GPU machine, after make (nvcc and
# CMake needed, Go not), given a checkout of github.com/NVIDIA/cuda-samples:
#     SAMPLES=DIR [CATEGORIES="0_Introduction ..."] [TRANSPORTS="unix shm tcp"] \
#         [LIMIT=S] [JOBS=N] [ONLY=REGEX] scripts/gpu-samples.sh [OUTDIR]
# Builds the samples of CATEGORIES (default: the single-GPU, non-graphics
# ones: 0_Introduction 1_Utilities 2_Concepts_and_Techniques 3_CUDA_Features
# 4_CUDA_Libraries 6_Performance; samples that need OpenGL, Vulkan, EGL or
# MPI are left out by CMake where those are missing) for this machine's GPU
# only, runs each natively from its own folder (its data files are
# there, beside what its build made) with LIMIT seconds (default 60), then, for those that pass natively,
# over each transport through flexgv serve. A sample passes remotely when it
# exits 0 and prints what it printed natively, numbers, addresses and the
# blanks between columns aside (timings differ), its lines in any order. JOBS samples run at once (default 8). A line per sample
# and transport, then a summary: how many of those that pass natively pass
# over each transport. OUTDIR (default: a new folder under $TMPDIR) gets
# results.tsv (sample, transport, result, reason) and, under runs/, the
# output of each native run and of each remote run that failed.
# Exit status 1 if any sample that passes natively fails remotely.
set -u -o pipefail
source "$(dirname "$0")/outdir.sh"
OUT=$(outdir samples "${1:-}") || exit 2
[ -d "${SAMPLES:-}/Samples" ] && [ -d "$SAMPLES/Common" ] ||
    { echo "SAMPLES=${SAMPLES:-} is not a cuda-samples checkout (no Samples/, Common/)" >&2; exit 2; }
SAMPLES=$(cd "$SAMPLES" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CUDA=${CUDA_HOME:-/usr/local/cuda}
B=$ROOT/build
LIMIT=${LIMIT:-60}
JOBS=${JOBS:-8}
export NCCL_NVLS_ENABLE=0 CUDA_PATH=$CUDA # NVRTC samples find the toolkit's headers by CUDA_PATH
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT

# A copy built for this GPU alone: the samples list a dozen architectures.
arch=$(nvidia-smi -i 0 --query-gpu=compute_cap --format=csv,noheader | tr -d .)
mkdir -p "$WORK/src/Samples"
cp -r "$SAMPLES/Common" "$SAMPLES/CMakeLists.txt" "$WORK/src/"
for c in ${CATEGORIES:-0_Introduction 1_Utilities 2_Concepts_and_Techniques 3_CUDA_Features 4_CUDA_Libraries 6_Performance}; do
    [ -d "$SAMPLES/Samples/$c" ] || { echo "CATEGORIES: $SAMPLES/Samples/$c does not exist" >&2; exit 2; }
    cp -r "$SAMPLES/Samples/$c" "$WORK/src/Samples/"
    echo "add_subdirectory($c)" >>"$WORK/src/Samples/CMakeLists.txt"
done
find "$WORK/src" -name CMakeLists.txt -exec sed -i "s/^\( *set(CMAKE_CUDA_ARCHITECTURES\) .*)/\1 $arch)/" {} +
echo "building the samples in $WORK/bld ($(nproc) jobs)"
t0=$(date +%s)
cmake -S "$WORK/src" -B "$WORK/bld" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$CUDA/bin/nvcc" >"$OUT/cmake.log" 2>&1 ||
    { echo "cmake failed:"; tail -n 20 "$OUT/cmake.log"; exit 1; }
cmake --build "$WORK/bld" -j "$(nproc)" -- -k >"$OUT/build.log" 2>&1
echo "built in $(($(date +%s) - t0)) s; targets that failed to build: $(grep -c '^make\[[0-9]*\]: \*\*\*.*Error' "$OUT/build.log")"

# Each executable with the folder of its sources: bld/Samples/C/NAME/NAME.
: >"$WORK/list"
while read -r exe; do
    rel=${exe#"$WORK/bld/"}
    dir=$WORK/src/$(dirname "$rel")
    [ -d "$dir" ] || continue
    name=$(basename "$exe")
    [[ "$name" =~ ${ONLY:-.} ]] || continue
    echo "$name $exe $dir" >>"$WORK/list"
done < <(find "$WORK/bld/Samples" -type f -executable ! -name '*.so' ! -path '*/CMakeFiles/*' | sort)
echo "$(wc -l <"$WORK/list") samples built"

env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen "unix://$WORK/gpu.sock" 2>"$OUT/serve-unix.log" &
env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen tcp://127.0.0.1:7073 --open 2>"$OUT/serve-tcp.log" &
for _ in $(seq 50); do [ -S "$WORK/gpu.sock" ] && break; sleep 0.1; done
ADDRS=""
for t in ${TRANSPORTS:-unix shm tcp}; do
    case $t in
    unix | shm) ADDRS+=" $t://$WORK/gpu.sock" ;;
    tcp) ADDRS+=" tcp://127.0.0.1:7073" ;;
    *) echo "TRANSPORTS: $t is none of unix, shm, tcp" >&2 && exit 2 ;;
    esac
done

# one NAME EXE DIR: the sample natively, then over each transport; lines of
# results.tsv on stdout. Output compared with numbers (and their signs:
# differences of timings come out either way) and addresses as N.
one() {
    local name=$1 exe=$2 dir=$3 rc addr t o
    # Columns padded to a number's width are spaced apart as the numbers
    # are, so runs of blanks count as one.
    # UnifiedMemoryStreams seeds its task sizes with the time, which decide
    # whether a task runs on the host or the device.
    norm() { sed -E 's/0x[0-9a-fA-F]+/H/g; s/[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/N/g; s/-N/N/g; s/[[:space:]]+/ /g; s/ $//
        s/executing on (host|device) /executing on host or device /' "$1" |
        grep -v '^[[:space:]]*$'; }
    # Same lines, another order: what a sample's threads print comes in the
    # order they happened to run (UnifiedMemoryStreams' OpenMP tasks).
    same() { cmp -s <(norm "$1") <(norm "$2") || cmp -s <(norm "$1" | sort) <(norm "$2" | sort); }
    o=$OUT/runs/$name # one file per run, those of runs that passed removed
    mkdir -p "$OUT/runs"
    # Its sources and data beside what its build made (fatbins, PTX).
    cp -rsn "$dir"/. "$(dirname "$exe")"/ 2>/dev/null
    dir=$(dirname "$exe")
    # Why a run failed: its first line that says so, else its last.
    why() { { grep -iE -m 1 'error|fail|not supported|unsupported|flexgv' "$1" || grep -v '^[[:space:]]*$' "$1" | tail -n 1; } | cut -c1-160; }
    (cd "$dir" && LD_LIBRARY_PATH="$CUDA/lib64" timeout -k 5 "$LIMIT" "$exe" </dev/null >"$o.native.out" 2>&1)
    rc=$?
    if [ $rc != 0 ]; then
        printf '%s\tnative\tfails\texit %s: %s\n' "$name" "$rc" "$(why "$o.native.out")"
        return
    fi
    printf '%s\tnative\tpass\t\n' "$name"
    for addr in $ADDRS; do
        t=${addr%%://*}
        (cd "$dir" && FLEXGV_REMOTE=$addr LD_LIBRARY_PATH="$B/remote:$CUDA/lib64" timeout -k 5 "$LIMIT" "$exe" </dev/null \
            >"$o.$t.out" 2>&1)
        rc=$?
        if [ $rc = 0 ] && same "$o.native.out" "$o.$t.out"; then
            printf '%s\t%s\tpass\t\n' "$name" "$t"
            rm -f "$o.$t.out"
        elif [ $rc = 0 ]; then
            printf '%s\t%s\tfail\tanother output: %s\n' "$name" "$t" \
                "$(diff <(norm "$o.native.out") <(norm "$o.$t.out") | grep '^>' | head -n 1 | cut -c1-120)"
        else
            printf '%s\t%s\tfail\texit %s%s: %s\n' "$name" "$t" "$rc" "$([ $rc -gt 128 ] && [ $rc -lt 160 ] && echo " (signal $((rc - 128)))")" \
                "$(why "$o.$t.out")"
        fi
    done
}
export -f one
export OUT CUDA B LIMIT ADDRS
t0=$(date +%s)
xargs -P "$JOBS" -L 1 bash -c 'one "$@"' _ <"$WORK/list" >"$OUT/results.tsv"
sort -o "$OUT/results.tsv" "$OUT/results.tsv"
awk -F'\t' '$3 != "pass" || $2 != "native" {print ($3 == "pass" ? "PASS" : toupper($3)) " " $1 " " $2 ($4 ? ": " $4 : "")}' "$OUT/results.tsv"
native=$(awk -F'\t' '$2 == "native" && $3 == "pass"' "$OUT/results.tsv" | wc -l)
echo "ran in $(($(date +%s) - t0)) s; $(wc -l <"$WORK/list") built, $native pass natively"
failed=0
for addr in $ADDRS; do
    t=${addr%%://*}
    n=$(awk -F'\t' -v t="$t" '$2 == t && $3 == "pass"' "$OUT/results.tsv" | wc -l)
    echo "over $t://: $n of $native pass"
    [ "$n" = "$native" ] || failed=1
done
exit $failed
