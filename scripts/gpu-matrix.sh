#!/usr/bin/env bash
# Compute sharing on mixed loads, in one command: pairs of the loads of
# scripts/gpu/share_load.py run together under each way of sharing the GPU,
# all in the same rounds, each load also alone in each round. From the
# repository root on a machine with an NVIDIA driver and PyTorch, with
# build/ made by `make`:
#     scripts/gpu-matrix.sh OUTDIR
# Loads: matmul (4096² products), conv (a small CNN's training), trainN (a
# 6-layer transformer's training, batch N), infer (batch-1 eager inference)
# and infer-graph (one CUDA-graph replay a request).
#   SHARE_PAIRS     "A:B ...": A at 30 % of the GPU beside B at 70 %
#   PRIORITY_PAIRS  "REQUEST:TRAINER ...": requests at MATRIX_RATE of their
#                   peak rate (default 0.5), high priority, beside a trainer
#                   of low priority
#   MECHANISMS      among timeslice (no flexgv), flexgv (--compute or
#                   --priority), mps (plain MPS), mpsthreads (MPS with
#                   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: 30/70, or the trainer
#                   at 50), mpsflexgv (flexgv under MPS)
#   MATRIX_PER_S    "REQUEST:N ...": requests a second for those request
#                   loads, instead of MATRIX_RATE of a peak measured in this
#                   run (a host's peak moves between machines and runs: a
#                   fixed rate compares runs)
#   MATRIX_S        seconds a pair runs together (default 15)
#   MATRIX_ROUNDS   rounds (default 1)
#   MATRIX_WARM     seconds a pair's processes get to set up, at most
#                   (default 60); they start together once both are
# The defaults take about half an hour (the script says how long at its
# start): fewer pairs or ways of sharing a run where time is short.
# Each run's output goes to OUTDIR/runs/KIND/A+B/MECHANISM/ROUND/; then
# scripts/gpu/matrix_report.py writes OUTDIR/matrix.md (the tables for
# docs/MEASUREMENTS.md) and an SVG a priority pair (p99 against the
# trainer's throughput, one point a way of sharing) under OUTDIR/svg/.
# MPS is started once a round, used only once a probe client has run under
# it, and stopped in the same round. Exits non-zero when a run failed.
set -u -o pipefail
source "$(dirname "$0")/outdir.sh"
OUT=$(outdir gpu-matrix "${1:-}") || exit 2
SHARE_PAIRS=${SHARE_PAIRS-matmul:train4 train64:train4 conv:train4 matmul:conv conv:train64}
PRIORITY_PAIRS=${PRIORITY_PAIRS-infer:matmul infer:conv infer:train32 infer-graph:matmul infer-graph:conv infer-graph:train32}
MECHANISMS=${MECHANISMS:-timeslice flexgv mps mpsthreads mpsflexgv}
MATRIX_S=${MATRIX_S:-15}
MATRIX_ROUNDS=${MATRIX_ROUNDS:-1}
MATRIX_RATE=${MATRIX_RATE:-0.5}
L=scripts/gpu/share_load.py
FLEXGV=$(pwd)/build/bin/flexgv
WORK=$(mktemp -d)
for m in $MECHANISMS; do
    [[ " timeslice flexgv mps mpsthreads mpsflexgv " == *" $m "* ]] ||
        { echo "MECHANISMS: unknown way of sharing $m (timeslice flexgv mps mpsthreads mpsflexgv)"; exit 2; }
done
[[ $MATRIX_S =~ ^[1-9][0-9]*$ && $MATRIX_ROUNDS =~ ^[1-9][0-9]*$ && ${MATRIX_WARM:-60} =~ ^[1-9][0-9]*$ ]] ||
    { echo "MATRIX_S=$MATRIX_S MATRIX_ROUNDS=$MATRIX_ROUNDS MATRIX_WARM=${MATRIX_WARM:-60}: give whole numbers from 1"; exit 2; }
[[ $MATRIX_RATE =~ ^(0\.[0-9]*[1-9][0-9]*|1(\.0*)?)$ ]] || { echo "MATRIX_RATE=$MATRIX_RATE: give a fraction of the peak rate, above 0 and at most 1"; exit 2; }
load_ok() { [[ $1 =~ ^(matmul|conv|train[1-9][0-9]*|infer|infer-graph)$ ]]; }
for p in ${MATRIX_PER_S:-}; do
    [[ $p =~ ^(infer|infer-graph):([1-9][0-9]*(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)$ ]] ||
        { echo "MATRIX_PER_S: $p: give REQUEST:N, N requests a second above 0, of infer or infer-graph"; exit 2; }
done
for p in $SHARE_PAIRS $PRIORITY_PAIRS; do
    [[ $p == *:* ]] && load_ok "${p%%:*}" && load_ok "${p#*:}" ||
        { echo "pair $p: give LOAD:LOAD of matmul conv trainN infer infer-graph"; exit 2; }
done
for p in $PRIORITY_PAIRS; do
    [[ ${p%%:*} == infer* && ${p#*:} != infer* ]] || { echo "PRIORITY_PAIRS: $p is not REQUEST:TRAINER"; exit 2; }
done
for p in $SHARE_PAIRS; do
    [[ $p != *infer* ]] || { echo "SHARE_PAIRS: $p has a request; shares are of throughput loads"; exit 2; }
done
[ -x "$FLEXGV" ] && [ -f build/lib/libflexgv.so ] || { echo "build/ is missing: run make first"; exit 2; }
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 FLEXGV_STATE_DIR=$WORK/state
exec > >(tee "$OUT/gpu-matrix.log") 2>&1
echo "logs: $OUT"
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
echo "MATRIX_S=$MATRIX_S MATRIX_ROUNDS=$MATRIX_ROUNDS MATRIX_RATE=$MATRIX_RATE MATRIX_PER_S=\"${MATRIX_PER_S:-}\" MECHANISMS=\"$MECHANISMS\""
echo "SHARE_PAIRS=\"$SHARE_PAIRS\" PRIORITY_PAIRS=\"$PRIORITY_PAIRS\""
R=$OUT/runs
FAILED=$OUT/failed.txt # one line a run that failed
rm -f "$FAILED"
WARM=${MATRIX_WARM:-60} # seconds for every process of a pair to be set up, at most
# each pair run takes its set-up (~10 s) and MATRIX_S; each load alone, its
# set-up (~5 s) and MATRIX_S
npairs=$(($(wc -w <<<"$SHARE_PAIRS $PRIORITY_PAIRS") * $(wc -w <<<"$MECHANISMS")))
nloads=$(printf '%s\n' $SHARE_PAIRS $PRIORITY_PAIRS | tr ':' '\n' | sort -u | wc -l)
echo "about $(((npairs * (10 + MATRIX_S + 2) + nloads * (MATRIX_S + 5)) * MATRIX_ROUNDS / 60 + 1)) minutes"
# release DIR N: once the N loads started with wait:DIR:OFFSET have said
# they are set up (or WARM seconds passed: one failed), their start, a
# second from now; prints it.
nstart=0
release() {
    local i=0 t
    while [ "$(find "$1" -name 'ready.*' | wc -l)" -lt "$2" ] && [ $i -lt $((WARM * 10)) ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ $i -lt $((WARM * 10)) ] || echo "not every load of $1 was set up in $WARM s" >&2
    t=$(($(date +%s) + 1))
    echo "$t" >"$1/go.tmp" && mv "$1/go.tmp" "$1/go"
    echo "$t"
}
# bounded FILE CMD...: CMD's output into FILE, ended if it overruns.
bounded() {
    local f=$1
    shift
    mkdir -p "$(dirname "$f")"
    timeout -k 5 $((WARM + 3 * MATRIX_S + 60)) "$@" >"$f" 2>"$f.err" ||
        { echo "exit $? of $*" >>"$f.err"; echo "failed: $f ($(tail -n 2 "$f.err" | tr '\n' ' '))" | tee -a "$FAILED"; }
}
# load NAME SECONDS START: the command line of one load.
load() {
    case $1 in
    train*) echo python3 $L train "$2" "$3" "${1#train}" ;;
    infer | infer-graph) echo python3 $L "$1" "$(cat "$R/peak/$1.txt")" "$2" "$3" ;;
    *) echo python3 $L "$1" "$2" "$3" ;;
    esac
}
# under MECHANISM ROLE: what a load runs under; ROLE a or b of a share pair
# (30 % or 70 %), req or trn of a priority pair.
under() {
    case $1/$2 in
    timeslice/* | mps/*) echo env ;;
    flexgv/a | mpsflexgv/a) echo "$FLEXGV" run --compute 30% -- ;;
    flexgv/b | mpsflexgv/b) echo "$FLEXGV" run --compute 70% -- ;;
    flexgv/req | mpsflexgv/req) echo "$FLEXGV" run --priority high -- ;;
    flexgv/trn | mpsflexgv/trn) echo "$FLEXGV" run --priority low -- ;;
    mpsthreads/a) echo env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 ;;
    mpsthreads/b) echo env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70 ;;
    mpsthreads/req) echo env ;;
    mpsthreads/trn) echo env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 ;;
    esac
}
# look DIR MECHANISM START: halfway through a pair flexgv schedules, its
# scheduler's view (hand-overs, waits, each tenant's time) into DIR/top.txt;
# and its region sampled every 20 ms throughout into DIR/watch.txt (each
# tenant's host-bound share and time kept from running beside it, beside
# the loads' own timelines: region_dump.py --every).
look() {
    [[ $2 == *flexgv ]] || return 0
    (python3 scripts/gpu/region_dump.py --every 20 $((MATRIX_S + 3)) "$FLEXGV_STATE_DIR" >"$1/watch.txt" 2>&1 &)
    sleep "$(python3 -c "import time; print(max(0, $3 + $MATRIX_S / 2 - time.time()))")"
    "$FLEXGV" top --once >"$1/top.txt" 2>&1
    python3 scripts/gpu/region_dump.py "$FLEXGV_STATE_DIR" >>"$1/top.txt" 2>&1
}
# pair ROUND MECHANISM: every pair of both kinds under MECHANISM, together:
# a pair's loads start once both are set up (release). A priority pair's
# request starts a second after its trainer and stops a second before, so
# that it meets the trainer's work throughout.
pair() {
    local round=$1 m=$2 p a b d S T pa
    [[ " $MECHANISMS " == *" $m "* ]] || return 0
    for p in $SHARE_PAIRS; do
        a=${p%%:*} b=${p#*:} d=$R/share/$a+$b/$m/$round S=$WORK/start/$((++nstart))
        echo "share $a:$b $m round $round ($(date +%T))"
        mkdir -p "$S"
        bounded "$d/a.txt" $(under "$m" a) $(load "$a" "$MATRIX_S" "wait:$S:0") &
        pa=$!
        bounded "$d/b.txt" $(under "$m" b) $(load "$b" "$MATRIX_S" "wait:$S:0") &
        T=$(release "$S" 2)
        look "$d" "$m" "$T"
        wait $pa $! # by pid: a bare wait would wait for the log's tee too
    done
    for p in $PRIORITY_PAIRS; do
        a=${p%%:*} b=${p#*:} d=$R/priority/$a+$b/$m/$round S=$WORK/start/$((++nstart))
        echo "priority $a:$b $m round $round ($(date +%T))"
        mkdir -p "$S"
        bounded "$d/trn.txt" $(under "$m" trn) $(load "$b" $((MATRIX_S + 2)) "wait:$S:0") &
        pa=$!
        bounded "$d/req.txt" $(under "$m" req) $(load "$a" "$MATRIX_S" "wait:$S:1") &
        T=$(release "$S" 2)
        look "$d" "$m" "$T"
        wait $pa $!
    done
}
mps_start() {
    export CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_LOG_DIRECTORY=$WORK/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if ! nvidia-cuda-mps-control -d; then
        echo "failed: MPS's control daemon did not start" | tee -a "$FAILED"
        return 1
    fi
    # a client it serves, or no MPS run at all (a wedged MPS hangs clients)
    if ! timeout 120 python3 -c 'import torch; torch.ones(1, device="cuda").sum().item()'; then
        echo "failed: MPS serves no client (a probe did not finish in 120 s); its runs are skipped" | tee -a "$FAILED"
        mps_stop
        return 1
    fi
}
mps_stop() {
    echo quit | timeout 20 nvidia-cuda-mps-control
    sleep 2
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

echo "== requests' peak rates, alone"
mkdir -p "$R" && echo "$MATRIX_RATE" >"$R/rate.txt"
mkdir -p "$R/peak"
for p in ${MATRIX_PER_S:-}; do
    echo "${p#*:}" >"$R/peak/${p%%:*}.txt"
done
for p in $PRIORITY_PAIRS; do
    a=${p%%:*}
    [ -s "$R/peak/$a.txt" ] && continue
    bounded "$R/peak/$a.peak" python3 $L "${a/infer/peak}" 5
    python3 -c "import sys; print(float(open(sys.argv[1]).read()) * float(sys.argv[2]))" "$R/peak/$a.peak" "$MATRIX_RATE" >"$R/peak/$a.txt" ||
        { echo "no peak rate for $a"; exit 1; }
done
for round in $(seq "$MATRIX_ROUNDS"); do
    echo "== round $round: each load alone ($(date +%T))"
    for l in $(printf '%s\n' $SHARE_PAIRS $PRIORITY_PAIRS | tr ':' '\n' | sort -u); do
        bounded "$R/alone/$l/$round.txt" $(load "$l" "$MATRIX_S" 0)
    done
    echo "== round $round: pairs ($(date +%T))"
    pair "$round" timeslice
    pair "$round" flexgv
    if [[ " $MECHANISMS " == *" mps"* ]] && mps_start; then
        pair "$round" mps
        pair "$round" mpsthreads
        pair "$round" mpsflexgv
        mps_stop
    fi
done
rm -rf "$WORK"
python3 scripts/gpu/matrix_report.py "$OUT" || echo "the report found runs without a result" >>"$FAILED"
[ ! -s "$FAILED" ] || { echo "$(wc -l <"$FAILED") failures (above)"; exit 1; }
