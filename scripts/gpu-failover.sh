#!/usr/bin/env bash
# A PyTorch training whose GPU server is SIGKILLed mid-run goes on at its
# failover server (flexgv run --remote A --failover B), after make: an
# uninterrupted remote run; the same run with checkpoints every
# CHECKPOINT (what they cost); then, over unix sockets and over loopback
# TCP, and with the failover server in a network namespace of its own (as
# on another host: nothing moves device to device between the servers),
# the same run with its server killed mid-run: the losses bit for bit, the
# ballast intact, and what the program said.
# The server is killed KILL_AFTER seconds (default 14) after the first
# progress line. GRAPHED=1: each training step the replay of a CUDA graph
# captured once (torch_suspend.py graphed).
#     [PAIRS="unix tcp apart"] [KILL_AFTER=S] [GRAPHED=1] scripts/gpu-failover.sh [STEPS] [HOLD_GIB] [CHECKPOINT] [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-3000}
GIB=${2:-2}
EVERY=${3:-10s}
source scripts/outdir.sh
OUT=$(outdir failover "${4:-}") || exit 2 # made if it is not there
B=$PWD/build
FLEXGV=$B/bin/flexgv
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
pass() { echo "PASS: $*"; }
declare -A pid
serve() { env -u LD_LIBRARY_PATH ${4:-} "$FLEXGV" serve --listen "$1" ${2:-} >>"$OUT/failover_serve_$3.log" 2>&1 & pid[$3]=$!; }
serve "unix://$tmp/a.sock" "" a
serve "unix://$tmp/b.sock" "" b
serve tcp://127.0.0.1:7181 --open ta
serve tcp://127.0.0.1:7182 --open tb
pairs=()
for p in ${PAIRS:-unix tcp apart}; do
    case $p in
    unix) pairs+=("a b unix://$tmp/a.sock unix://$tmp/b.sock") ;;
    tcp) pairs+=("ta tb tcp://127.0.0.1:7181 tcp://127.0.0.1:7182") ;;
    apart)
        if unshare --net true 2>/dev/null; then
            serve "unix://$tmp/a2.sock" "" a2
            serve "unix://$tmp/c.sock" "" c "unshare --net"
            pairs+=("a2 c unix://$tmp/a2.sock unix://$tmp/c.sock")
        else
            echo "SKIP: no network namespace here (unshare --net), so no failover server as on another host"
        fi ;;
    *) echo "PAIRS: unknown pair $p (unix, tcp, apart)"; exit 2 ;;
    esac
done
sleep 2
train() { # PROGRESS JSON FLEXGV-RUN-FLAGS...
    local progress=$1 json=$2
    shift 2
    FLEXGV_REMOTE_LOG=errors "$FLEXGV" run "$@" -- python3 scripts/gpu/torch_suspend.py "$STEPS" "$GIB" "$progress" ${GRAPHED:+graphed} >"$json"
}
same() { # REF GOT: the losses and ballast, and the training's time against REF's
    python3 - "$1" "$2" "$STEPS" <<'PY'
import json, sys
ref, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
same = ref["losses"] == got["losses"] and len(got["losses"]) == int(sys.argv[3])
print(f"  {len(got['losses'])} losses identical to the uninterrupted run: {same}; ballast intact: {got['ballast_intact']}; "
      f"training {got['train_s']:.2f} s (uninterrupted {ref['train_s']:.2f} s, ratio {got['train_s'] / ref['train_s']:.4f}); "
      f"longest gap between progress lines {got['max_gap_s']:.2f} s (uninterrupted {ref['max_gap_s']:.2f} s)")
sys.exit(0 if same and got["ballast_intact"] else 1)
PY
}
echo "== the uninterrupted run, over unix://"
train "$tmp/ref.progress" "$tmp/ref.json" --remote "unix://$tmp/a.sock" || fail "the uninterrupted run"
echo "== checkpoints every $EVERY on unix://$tmp/b.sock, nothing killed"
train "$tmp/cp.progress" "$tmp/cp.json" --remote "unix://$tmp/a.sock" --failover "unix://$tmp/b.sock" \
    --checkpoint-every "$EVERY" 2>"$tmp/cp.err" || fail "the run with checkpoints"
grep -E "flexgv remote: (checkpoint|pid|no checkpoint|lost|going on)" "$tmp/cp.err"
same "$tmp/ref.json" "$tmp/cp.json" && pass "checkpoints every $EVERY" || fail "the run with checkpoints: losses or ballast"
for pair in "${pairs[@]}"; do
    set -- $pair
    name=$1 from=$3 to=$4
    echo "== $from SIGKILLed mid-run, failover $to ($GIB GiB of ballast beside the training, checkpoints every $EVERY)"
    rm -f "$tmp/run.progress"
    train "$tmp/run.progress" "$tmp/run.json" --remote "$from" --failover "$to" --checkpoint-every "$EVERY" \
        2>"$tmp/run.err" &
    job=$!
    for i in $(seq 1200); do [ -s "$tmp/run.progress" ] && break; sleep 0.1; done
    sleep "${KILL_AFTER:-14}"
    kill -KILL "${pid[$name]}"
    echo "  killed the server of $from at step $(tail -1 "$tmp/run.progress" | cut -d' ' -f1)"
    wait $job || fail "the training whose server was killed ($from; its stderr below)"
    grep -E "flexgv remote: (checkpoint|pid|no checkpoint|lost|going on|cannot go on)" "$tmp/run.err"
    same "$tmp/ref.json" "$tmp/run.json" && pass "went on at $to" || fail "the run that went on at $to: losses or ballast"
done
exit $failed
