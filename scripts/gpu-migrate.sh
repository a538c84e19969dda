#!/usr/bin/env bash
# A running PyTorch training moved between two GPU servers of this host
# (flexgv migrate), after make: an uninterrupted remote run, then the same
# run moved from server a to server b mid-run, over unix sockets and over
# loopback TCP, and to a server in a network namespace of its own (whose
# executors cannot reach this host's others' memory, as on another host),
# and with PAIRS=gpus from a server of GPU 0 to one of GPU 1 (--gpus, on a
# host of two): the losses bit for bit, the ballast intact, the pause the
# program saw and the device memory that moved. GRAPHED=1: each training
# step the replay of a CUDA graph captured once (torch_suspend.py graphed).
#     [PAIRS="unix tcp apart gpus"] [GRAPHED=1] scripts/gpu-migrate.sh [STEPS] [HOLD_GIB] [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-3000}
GIB=${2:-2}
source scripts/outdir.sh
OUT=$(outdir migrate "${3:-}") || exit 2 # made if it is not there
B=$PWD/build
FLEXGV=$B/bin/flexgv
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
pass() { echo "PASS: $*"; }
PAIRS=${PAIRS:-unix tcp apart}
serve() { env -u LD_LIBRARY_PATH ${4:-} "$FLEXGV" serve --listen "$1" ${2:-} >>"$OUT/migrate_serve_$3.log" 2>&1 & }
serve "unix://$tmp/a.sock" "" a
serve "unix://$tmp/b.sock" "" b
serve tcp://127.0.0.1:7181 --open ta
serve tcp://127.0.0.1:7182 --open tb
pairs=()
for p in $PAIRS; do
    case $p in
    unix) pairs+=("unix://$tmp/a.sock unix://$tmp/b.sock") ;;
    tcp) pairs+=("tcp://127.0.0.1:7181 tcp://127.0.0.1:7182") ;;
    apart)
        if unshare --net true 2>/dev/null; then
            serve "unix://$tmp/c.sock" "" c "unshare --net"
            pairs+=("unix://$tmp/a.sock unix://$tmp/c.sock")
        else
            echo "SKIP: no network namespace here (unshare --net), so no move as between hosts"
        fi ;;
    gpus)
        if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -ge 2 ]; then
            serve "unix://$tmp/g0.sock" "--gpus 0" g0
            serve "unix://$tmp/g1.sock" "--gpus 1" g1
            pairs+=("unix://$tmp/g0.sock unix://$tmp/g1.sock")
        else
            echo "SKIP: fewer than two GPUs here, so no move between GPUs"
        fi ;;
    *) echo "PAIRS: unknown pair $p (unix, tcp, apart, gpus)"; exit 2 ;;
    esac
done
sleep 2
train() { # ADDR PROGRESS JSON
    FLEXGV_REMOTE=$1 LD_LIBRARY_PATH=$B/remote python3 scripts/gpu/torch_suspend.py "$STEPS" "$GIB" "$2" ${GRAPHED:+graphed} >"$3"
}
echo "== the uninterrupted run, over unix://"
train "unix://$tmp/a.sock" "$tmp/ref.progress" "$tmp/ref.json" || fail "the uninterrupted run"
for pair in "${pairs[@]}"; do
    set -- $pair
    from=$1 to=$2
    echo "== moved from $from to $to mid-run ($GIB GiB of ballast beside the training)"
    rm -f "$tmp/run.progress"
    train "$from" "$tmp/run.progress" "$tmp/run.json" 2>"$tmp/run.err" &
    job=$!
    for i in $(seq 1200); do [ -s "$tmp/run.progress" ] && break; sleep 0.1; done
    sleep 2
    "$FLEXGV" migrate --server "$from" --to "$to" --all --wait 120s | tee "$tmp/cli.txt"
    mrc=${PIPESTATUS[0]}
    wait $job || fail "the training moved from $from (its stderr below)"
    grep "flexgv remote" "$tmp/run.err"
    grep -h "sums" "$OUT"/migrate_serve_*.log | sort | uniq -c
    [ "$mrc" = 0 ] && pass "flexgv migrate $from -> $to" || fail "flexgv migrate $from -> $to (exit $mrc)"
    python3 - "$tmp/ref.json" "$tmp/run.json" "$STEPS" <<'PY' || fail "the moved run's losses or ballast ($from)"
import json, sys
ref, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
same = ref["losses"] == got["losses"] and len(got["losses"]) == int(sys.argv[3])
print(f"  {len(got['losses'])} losses identical to the uninterrupted run: {same}; ballast intact: {got['ballast_intact']}; "
      f"longest gap between progress lines {got['max_gap_s']:.2f} s (uninterrupted {ref['max_gap_s']:.2f} s)")
sys.exit(0 if same and got["ballast_intact"] else 1)
PY
done
exit $failed
