#!/usr/bin/env bash
# The executor's request decoders under coverage-guided fuzzers, for as long
# as asked: what a hostile client sends (remote mode's threat model) must
# give a refusal or an answer, never a crash, a read past a buffer or a
# reply that lies about its length. From the repository root (Go and
# clang needed; AFL++ too for the stateful run):
#     [FUZZERS="libfuzzer afl"] scripts/fuzz-executor.sh [SECONDS] [OUTDIR]
# Builds remote/fuzz/native/harness.c over the fake driver of
# remote/fuzz/fake.c: with libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer (every input in one process: fast, the
# executor's state carried from input to input), and with AFL++ (each input
# in a fresh process forked after set-up: a sequence of requests, or a
# moved state loaded first, replays exactly). Inputs start from the fuzz
# package's well-formed requests (go run ./remote/fuzz/seeds). Each fuzzer
# runs SECONDS (default 300) on a core of its own; then every input AFL++
# kept is run again under the sanitizers. OUTDIR (default: a new folder
# under $TMPDIR) keeps the corpora and what was found: crash-* files
# (libFuzzer's) and afl/default/crashes. A finding goes into
# remote/fuzz/testdata/native/, which go test then replays (TestNativeInputs);
# build/fuzz/replay FILE... reproduces one under the sanitizers.
# Exit status 1 if anything was found.
set -u -o pipefail
source "$(dirname "$0")/outdir.sh"
SECONDS_EACH=${1:-300}
[[ "$SECONDS_EACH" =~ ^[1-9][0-9]*$ ]] || { echo "SECONDS must be a positive whole number, not $SECONDS_EACH" >&2; exit 2; }
OUT=$(outdir fuzz "${2:-}") || exit 2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
FUZZERS=${FUZZERS:-libfuzzer afl}
for f in $FUZZERS; do
    case $f in
    libfuzzer) command -v clang >/dev/null || { echo "libfuzzer: clang with its libFuzzer runtime is needed (Debian 12: clang libclang-rt-14-dev)" >&2; exit 2; } ;;
    afl) command -v afl-clang-fast >/dev/null && command -v afl-fuzz >/dev/null ||
        { echo "afl: AFL++ is needed (Debian: afl++)" >&2; exit 2; } ;;
    *) echo "FUZZERS: $f is none of libfuzzer, afl" >&2; exit 2 ;;
    esac
done
SRC=(remote/fuzz/*.c remote/fuzz/native/harness.c)
INC=(-std=gnu11 -g -Iinclude -Iinclude/flexgv -Iremote/fuzz)
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
mkdir -p build/fuzz "$OUT/seeds"
go run ./remote/fuzz/seeds "$OUT/seeds" || exit 1
# The reproducer: every file named, in one process, under the sanitizers.
clang -O1 "${INC[@]}" "${SAN[@]}" "${SRC[@]}" -o build/fuzz/replay || exit 1
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
pids=()
if [[ " $FUZZERS " == *" libfuzzer "* ]]; then
    clang -O1 -DFLEXGV_LIBFUZZER "${INC[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined "${SRC[@]}" -o build/fuzz/libfuzzer || exit 1
    mkdir -p "$OUT/libfuzzer"
    # (the executor's tables hold what requests made: not leaks)
    (cd "$OUT" && "$ROOT/build/fuzz/libfuzzer" -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 -use_value_profile=1 \
        -print_final_stats=1 libfuzzer seeds >libfuzzer.log 2>&1) &
    pids+=($!)
fi
if [[ " $FUZZERS " == *" afl "* ]]; then
    # Without sanitizers, for speed; what it keeps is run under them below.
    AFL_QUIET=1 afl-clang-fast -O2 "${INC[@]}" "${SRC[@]}" -o build/fuzz/afl 2> >(grep -v 'dlopen' >&2) || exit 1
    env -u ASAN_OPTIONS -u UBSAN_OPTIONS AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 \
        afl-fuzz -V "$SECONDS_EACH" -i "$OUT/seeds" -o "$OUT/afl" -- build/fuzz/afl >"$OUT/afl.log" 2>&1 &
    pids+=($!)
fi
wait "${pids[@]}"
found=0
if [[ " $FUZZERS " == *" libfuzzer "* ]]; then
    grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$OUT/libfuzzer.log" | sed 's/^/libfuzzer: /'
    grep -m1 -E 'cov: [0-9]+' "$OUT/libfuzzer.log" >/dev/null &&
        echo "libfuzzer: $(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9/a-zA-Z]+' "$OUT/libfuzzer.log" | tail -n 1)"
    for c in "$OUT"/crash-* "$OUT"/timeout-* "$OUT"/oom-*; do
        [ -e "$c" ] || continue
        echo "libfuzzer found: $c"
        found=1
    done
fi
if [[ " $FUZZERS " == *" afl "* ]]; then
    s=$OUT/afl/default/fuzzer_stats
    [ -f "$s" ] && awk -F' *: *' '/^(execs_done|corpus_count|edges_found|saved_crashes|saved_hangs) /{printf "afl: %s %s\n", $1, $2}' "$s"
    for c in "$OUT"/afl/default/crashes/id:* "$OUT"/afl/default/hangs/id:*; do
        [ -e "$c" ] || continue
        echo "afl found: $c"
        found=1
    done
    # Each kept input in a process of its own, as AFL++ ran it.
    n=0
    for q in "$OUT"/afl/default/queue/id:*; do
        [ -e "$q" ] || continue
        n=$((n + 1))
        if ! build/fuzz/replay "$q" >/dev/null 2>"$OUT/replay.err"; then
            echo "under the sanitizers: $q"
            head -n 5 "$OUT/replay.err"
            found=1
        fi
    done
    echo "afl: $n kept inputs run again under the sanitizers"
fi
exit $found
