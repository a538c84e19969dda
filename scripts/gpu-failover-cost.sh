#!/usr/bin/env bash
# What a failover server costs a PyTorch training, after make: ROUNDS
# rounds, each of the same remote run (over unix sockets) plain, with
# --failover and a checkpoint only at the first call (calls kept, none
# taken after), and with --failover --checkpoint-every EVERY; the training
# time of each and its ratio to the plain run of its round, and the CPU
# time a step took of the client (the program's process, every thread)
# and of each server's executors (what the server reaped of its children).
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
apid=$!
env -u LD_LIBRARY_PATH "$FLEXGV" serve --listen "unix://$tmp/b.sock" >>"$OUT/failover_cost_b.log" 2>&1 &
bpid=$!
sleep 2
reaped() { # PID: the CPU seconds of the children it waited for
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($14 + $15) / hz }' "/proc/$1/stat"
}
train() { # FLEXGV-RUN-FLAGS...: "TRAIN_S CLIENT_CPU_S CLIENT_INSTRUCTIONS A_CPU_S B_CPU_S" of the training
    rm -f "$tmp/p"
    local a0 b0 t
    a0=$(reaped $apid) b0=$(reaped $bpid)
    t=$(FLEXGV_REMOTE_LOG=errors "$FLEXGV" run --remote "unix://$tmp/a.sock" "$@" -- python3 scripts/gpu/torch_suspend.py "$STEPS" 1 "$tmp/p" \
        2>>"$OUT/failover_cost_client.log" | python3 -c 'import json,sys; j = json.load(sys.stdin); print(j["train_s"], j["train_cpu_s"], j["train_instructions"] or 0)')
    sleep 1 # the executors end once the program's connections close
    echo "$t $(awk -v a="$(reaped $apid)" -v a0="$a0" -v b="$(reaped $bpid)" -v b0="$b0" 'BEGIN { print a - a0, b - b0 }')"
}
for r in $(seq "$ROUNDS"); do
    plain=$(train)
    kept=$(train --failover "unix://$tmp/b.sock" --checkpoint-every 24h)
    every=$(train --failover "unix://$tmp/b.sock" --checkpoint-every "$EVERY")
    awk -v r="$r" -v p="$plain" -v k="$kept" -v e="$every" -v ev="$EVERY" -v steps="$STEPS" 'BEGIN {
        split(p, P, " "); split(k, K, " "); split(e, E, " ")
        printf "round %d: plain %.2f s; failover, calls kept %.2f s (%.3f); failover, checkpoints every %s %.2f s (%.3f)\n",
            r, P[1], K[1], K[1] / P[1], ev, E[1], E[1] / P[1]
        printf "round %d, CPU us a step (client / executors of the server / of the failover server): plain %.0f / %.0f; calls kept %.0f / %.0f / %.0f; checkpoints %.0f / %.0f / %.0f\n",
            r, P[2] * 1e6 / steps, P[4] * 1e6 / steps, K[2] * 1e6 / steps, K[4] * 1e6 / steps, K[5] * 1e6 / steps,
            E[2] * 1e6 / steps, E[4] * 1e6 / steps, E[5] * 1e6 / steps
        if (P[3] > 0)
            printf "round %d, the client'"'"'s instructions a step (thousands): plain %.0f; calls kept %.0f (%.4f); checkpoints %.0f (%.4f)\n",
                r, P[3] / steps / 1e3, K[3] / steps / 1e3, K[3] / P[3], E[3] / steps / 1e3, E[3] / P[3] }'
done
grep -h "checkpoints on the failover" "$OUT/failover_cost_client.log" | tail -"$ROUNDS"
