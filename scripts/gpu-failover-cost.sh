#!/usr/bin/env bash
# What a failover server costs a PyTorch training, after make: ROUNDS
# rounds, each of the same remote run (over unix sockets) plain, with
# --failover and a checkpoint only at the first call (calls kept, none
# taken after), and with --failover --checkpoint-every EVERY; the training
# time of each and its ratio to the plain run of its round.
#     scripts/gpu-failover-cost.sh [STEPS] [ROUNDS] [EVERY] [OUT]
# OUT (made if needed; default: a new folder under $TMPDIR) gets the
# servers' and the client's logs.
set -uo pipefail
source "$(dirname "$0")/outdir.sh"
OUT=$(outdir failover-cost "${4:-}") || exit 2
cd "$(dirname "$0")/.."
STEPS=${1:-15000}
ROUNDS=${2:-3}
EVERY=${3:-10s}
B=$PWD/build
FLEXGV=$B/bin/flexgv
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
env -u LD_LIBRARY_PATH "$FLEXGV" serve --listen "unix://$tmp/a.sock" >>"$OUT/failover_cost_a.log" 2>&1 &
env -u LD_LIBRARY_PATH "$FLEXGV" serve --listen "unix://$tmp/b.sock" >>"$OUT/failover_cost_b.log" 2>&1 &
sleep 2
train_s() { # FLEXGV-RUN-FLAGS...: the training's seconds
    rm -f "$tmp/p"
    FLEXGV_REMOTE_LOG=errors "$FLEXGV" run --remote "unix://$tmp/a.sock" "$@" -- python3 scripts/gpu/torch_suspend.py "$STEPS" 1 "$tmp/p" \
        2>>"$OUT/failover_cost_client.log" | python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["train_s"])'
}
for r in $(seq "$ROUNDS"); do
    plain=$(train_s)
    kept=$(train_s --failover "unix://$tmp/b.sock" --checkpoint-every 24h)
    every=$(train_s --failover "unix://$tmp/b.sock" --checkpoint-every "$EVERY")
    awk -v r="$r" -v p="$plain" -v k="$kept" -v e="$every" -v ev="$EVERY" 'BEGIN {
        printf "round %d: plain %.2f s; failover, calls kept %.2f s (%.3f); failover, checkpoints every %s %.2f s (%.3f)\n",
            r, p, k, k / p, ev, e, e / p }'
done
grep -h "checkpoints on the failover" "$OUT/failover_cost_client.log" | tail -"$ROUNDS"
