#!/usr/bin/env bash
# Frameworks' own test suites on a real GPU: natively, under the shim with a
# memory quota (flexgv run --mem), and through flexgv serve over unix://,
# shm:// and loopback tcp://. From the repository root of a GPU machine,
# after make (pytest, pytest-xdist and pytest-timeout needed, Go not):
#     [SUITES="cupy torch"] CUPY_TESTS=DIR TORCH_TESTS=DIR \
#         [MODES="native shim unix shm tcp"] [LIMIT=S] [JOBS=N] [TEST_LIMIT=S] \
#         [QUOTA=SIZE] scripts/gpu-suites.sh [OUTDIR]
# Suites: cupy (the tests folder of a CuPy checkout at the installed
# version, given by CUPY_TESTS; its cuda_tests and core_tests, slow ones
# left out; CUPY_SELECT picks other folders under cupy_tests, or paths with
# a slash under the tests folder: cupyx_tests/test_cusparse.py); torch
# (PyTorch's test files of its CUDA layer, from the test folder of a
# checkout near the installed version, given by TORCH_TESTS: test_cuda.py,
# or the files TORCH_SELECT names; tests marked slow skip themselves; what
# the files import that this torch lacks is stood in for, gpu/torch_standins.py). Each suite
# runs once per mode with pytest, JOBS workers (default 16), each test at
# most TEST_LIMIT seconds (default 120), the whole run at most LIMIT
# seconds (default 300: a run stopped there is interrupted, and what it
# reached counts). Every mode gets its own kernel caches, so each compiles
# and loads what it runs. QUOTA (default 40GiB) is the shim mode's --mem.
# A test counts against a mode when it passed natively and, run in that
# mode, did not pass. Per suite and mode: how many of the tests that passed
# natively passed, which did not (with pytest's reason), and how many the
# mode did not reach before LIMIT. OUTDIR (default: a new folder under
# $TMPDIR) gets results.tsv (suite, mode, test, outcome) and each run's
# output. Exit status 1 if any test passed natively and failed in a mode.
set -u -o pipefail
export LC_ALL=C # one order for sort and join
source "$(dirname "$0")/outdir.sh"
OUT=$(outdir suites "${1:-}") || exit 2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
B=$ROOT/build
LIMIT=${LIMIT:-300}
JOBS=${JOBS:-16}
TEST_LIMIT=${TEST_LIMIT:-120}
QUOTA=${QUOTA:-40GiB}
export NCCL_NVLS_ENABLE=0
for m in ${MODES:=native shim unix shm tcp}; do
    case $m in native | shim | unix | shm | tcp) ;; *)
        echo "MODES: $m is none of native, shim, unix, shm, tcp" >&2
        exit 2
        ;;
    esac
done
[[ " $MODES " == *" native "* ]] || { echo "MODES must include native: the other modes are judged against it" >&2; exit 2; }
python3 -c 'import pytest, xdist, pytest_timeout' 2>/dev/null ||
    { echo "pytest, pytest-xdist and pytest-timeout are needed" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT

env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen "unix://$WORK/gpu.sock" 2>"$OUT/serve-unix.log" &
env -u LD_LIBRARY_PATH "$B/bin/flexgv" serve --listen tcp://127.0.0.1:7074 --open 2>"$OUT/serve-tcp.log" &
for _ in $(seq 50); do [ -S "$WORK/gpu.sock" ] && break; sleep 0.1; done

# suite NAME: sets DIR (where pytest runs) and ARGS (what it collects).
suite() {
    case $1 in
    cupy)
        [ -d "${CUPY_TESTS:-}/cupy_tests" ] ||
            { echo "cupy: CUPY_TESTS=${CUPY_TESTS:-} is not a CuPy tests folder (no cupy_tests/)" >&2; return 1; }
        DIR=$(cd "$CUPY_TESTS" && pwd)
        PYPATH=
        ARGS=(-m "not slow")
        local sel
        for sel in ${CUPY_SELECT:-cuda_tests core_tests}; do
            case $sel in */*) ARGS+=("$sel") ;; *) ARGS+=("cupy_tests/$sel") ;; esac
        done
        ;;
    torch)
        [ -f "${TORCH_TESTS:-}/test_cuda.py" ] ||
            { echo "torch: TORCH_TESTS=${TORCH_TESTS:-} is not a PyTorch test folder (no test_cuda.py)" >&2; return 1; }
        DIR=$(cd "$TORCH_TESTS" && pwd)
        # names a newer test file imports that this torch lacks, stood in for
        PYPATH=$ROOT/scripts/gpu
        ARGS=(-p torch_standins)
        read -r -a sel <<<"${TORCH_SELECT:-test_cuda.py}"
        ARGS+=("${sel[@]}")
        ;;
    *)
        echo "SUITES: $1 is neither cupy nor torch" >&2
        return 1
        ;;
    esac
}

# run SUITE MODE: the suite in one mode; its outcomes appended to
# results.tsv, pytest's output in OUT/SUITE.MODE.out.
run() {
    local s=$1 m=$2 pre=() o=$OUT/$1.$2 t0
    case $m in
    native) ;;
    shim) pre=("$B/bin/flexgv" run --mem "$QUOTA" --) ;;
    unix | shm) pre=("$B/bin/flexgv" run --remote "$m://$WORK/gpu.sock" --) ;;
    tcp) pre=("$B/bin/flexgv" run --remote tcp://127.0.0.1:7074 --) ;;
    esac
    mkdir -p "$WORK/cache.$s.$m"
    t0=$(date +%s)
    # SIGINT at LIMIT: pytest stops and still prints its summary.
    (cd "$DIR" && CUPY_CACHE_DIR=$WORK/cache.$s.$m NUMBA_CACHE_DIR=$WORK/cache.$s.$m \
        PYTHONPATH=$PYPATH${PYTHONPATH:+:$PYTHONPATH} \
        timeout -s INT -k 30 "$LIMIT" "${pre[@]}" python3 -m pytest -p no:cacheprovider -v -rfE \
        -n "$JOBS" --timeout "$TEST_LIMIT" "${ARGS[@]}" </dev/null >"$o.out" 2>&1)
    echo "$s $m: pytest exit $? in $(($(date +%s) - t0)) s"
    # xdist's lines: "[gw3] [ 12%] PASSED path::Class::test".
    sed -nE 's/^\[gw[0-9]+\] \[ *[0-9]+%\] (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.*[^ ]) *$/\2\t\1/p' "$o.out" |
        sort -u | awk -F'\t' -v s="$s" -v m="$m" '{print s "\t" m "\t" $1 "\t" $2}' >>"$OUT/results.tsv"
}

: >"$OUT/results.tsv"
failed=0
for s in ${SUITES:-cupy}; do
    suite "$s" || { failed=1; continue; }
    for m in $MODES; do run "$s" "$m"; done
    # What each mode lost of what passed natively.
    awk -F'\t' -v s="$s" '$1 == s && $2 == "native" && $4 == "PASSED" {print $3}' "$OUT/results.tsv" | sort >"$WORK/pass"
    echo "$s: $(wc -l <"$WORK/pass") tests pass natively"
    for m in $MODES; do
        [ "$m" = native ] && continue
        awk -F'\t' -v s="$s" -v m="$m" '$1 == s && $2 == m {print $3 "\t" $4}' "$OUT/results.tsv" | sort >"$WORK/mode"
        lost=$(join -t $'\t' "$WORK/pass" "$WORK/mode" | awk -F'\t' '$2 != "PASSED" && $2 != "XPASS"')
        reached=$(join -t $'\t' "$WORK/pass" "$WORK/mode" | wc -l)
        n=$(join -t $'\t' "$WORK/pass" "$WORK/mode" | awk -F'\t' '$2 == "PASSED"' | wc -l)
        echo "$s over $m: $n of $reached reached pass ($(($(wc -l <"$WORK/pass") - reached)) not reached)"
        if [ -n "$lost" ]; then
            failed=1
            while IFS=$'\t' read -r t r; do
                # pytest's reason: "FAILED path::test - reason".
                why=$(grep -F -m 1 -- "$r $t - " "$OUT/$s.$m.out" | sed 's/^[A-Z]* [^ ]* - //' | cut -c1-160)
                echo "  $r $t${why:+: $why}"
            done <<<"$lost"
        fi
    done
done
exit $failed
