#!/usr/bin/env bash
# Cost of remote calls on the simulated GPU with zero-length kernels,
# locally and through flexgv serve over a unix socket, the same in a tenant
# (the shim in the executor, --mem), the same socket dialled as shm://
# (calls through shared memory), loopback TCP and loopback TLS (with a
# certificate made by the openssl command):
#   launch      a queued call (cuLaunchKernel): sent without waiting; and
#               what a burst of them costs the calling thread, gathered
#               and each written at once (FLEXGV_REMOTE_BATCH_US=0)
#   round trip  a synchronous call (cuMemAlloc or cuMemFree): one round trip
#   upload      cuMemcpyHtoDAsync of 4 KiB: queued with its bytes
#   event       cuEventCreate and cuEventDestroy: queued, a shadow handle
#   latency     the round trip with 10 and 50 us added (FLEXGV_REMOTE_DELAY_US)
#   bandwidth   synchronous 64 MiB uploads and downloads, from and into
#               pageable and pinned memory
#   beside      a round trip while another thread waits for the GPU
#   failover    launches, round trips and downloads with a failover server
#               (flexgv run --failover: each call kept, each answer hashed)
# Each runs N and 2N times so that start-up cancels out; prints microseconds
# per call.
#     bench/remote-roundtrip.sh [N]        (after make)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
B=$PWD/build
[ -x "$B/remote/flexgv-executor" ] || { echo "run make first" >&2; exit 2; }
tmp=$(mktemp -d)
# A server run as root runs its executors as nobody, who must reach the
# simulated GPU's state here.
[ "$(id -u)" = 0 ] && chmod 777 "$tmp"
export FLEXGV_SIM_STATE=$tmp/gpu.state FLEXGV_SIM_KERNEL_US=0 FLEXGV_STATE_DIR=$tmp/tenants
port=$((20000 + RANDOM % 20000))
openssl rand -hex 32 >"$tmp/token"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
LD_LIBRARY_PATH=$B/sim "$B/bin/flexgv" serve --listen "unix://$tmp/gpu.sock" 2>/dev/null &
s1=$!
LD_LIBRARY_PATH=$B/sim "$B/bin/flexgv" serve --listen "tcp://127.0.0.1:$port" --open 2>/dev/null &
s2=$!
LD_LIBRARY_PATH=$B/sim "$B/bin/flexgv" serve --listen "tls://127.0.0.1:$((port + 1))" --open \
    --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" 2>/dev/null &
s3=$!
LD_LIBRARY_PATH=$B/sim "$B/bin/flexgv" serve --listen "unix://$tmp/tenant.sock" --tenant "bench:$tmp/token" --mem 8GiB 2>/dev/null &
s4=$!
LD_LIBRARY_PATH=$B/sim "$B/bin/flexgv" serve --listen "unix://$tmp/spare.sock" 2>/dev/null &
s5=$!
trap 'kill $s1 $s2 $s3 $s4 $s5 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
sleep 0.5

secs() { # secs ENV... CMD...: wall seconds of one run
    local t0 t1
    t0=$(date +%s.%N)
    env "$@" >/dev/null
    t1=$(date +%s.%N)
    awk "BEGIN { print $t1 - $t0 }"
}
# per_call N CALLS_PER_ITERATION "CLIENT [ARGS]" ENV...: microseconds per call
per_call() {
    local n=$1 k=$2 cmd a b
    read -ra cmd <<<"$3"
    shift 3
    a=$(secs "$@" "$B/tests/${cmd[0]}" "${cmd[@]:1}" "$n")
    b=$(secs "$@" "$B/tests/${cmd[0]}" "${cmd[@]:1}" $((2 * n)))
    awk "BEGIN { printf \"%.2f\", ($b - $a) * 1000000 / ($n * $k) }"
}
local_env=(LD_LIBRARY_PATH="$B/sim")
unix_env=(LD_LIBRARY_PATH="$B/remote" FLEXGV_REMOTE="unix://$tmp/gpu.sock")
shm_env=(LD_LIBRARY_PATH="$B/remote" FLEXGV_REMOTE="shm://$tmp/gpu.sock")
tcp_env=(LD_LIBRARY_PATH="$B/remote" FLEXGV_REMOTE="tcp://127.0.0.1:$port")
tls_env=(LD_LIBRARY_PATH="$B/remote" FLEXGV_REMOTE="tls://127.0.0.1:$((port + 1))" FLEXGV_REMOTE_CA_FILE="$tmp/cert.pem")
failover_env=("${unix_env[@]}" FLEXGV_REMOTE_FAILOVER="unix://$tmp/spare.sock" FLEXGV_REMOTE_CHECKPOINT_MS=3600000)
tenant_env=(LD_LIBRARY_PATH="$B/remote" FLEXGV_REMOTE="unix://$tmp/tenant.sock" FLEXGV_REMOTE_TOKEN_FILE="$tmp/token")
# Local calls take well under a microsecond: more of them.
echo "launch (queued): local $(per_call $((50 * N)) 1 launchloop "${local_env[@]}") us," \
    "unix socket $(per_call $((10 * N)) 1 launchloop "${unix_env[@]}") us," \
    "shared memory $(per_call $((10 * N)) 1 launchloop "${shm_env[@]}") us," \
    "unix socket in a tenant $(per_call $((10 * N)) 1 launchloop "${tenant_env[@]}") us," \
    "loopback TCP $(per_call $((10 * N)) 1 launchloop "${tcp_env[@]}") us," \
    "loopback TLS $(per_call $((10 * N)) 1 launchloop "${tls_env[@]}") us"
# What a burst of 1000 launches costs the calling thread (the median of
# five runs): queued calls gathered, and each written at once.
issue() { for _ in 1 2 3 4 5; do env "$@" "$B/tests/launchloop" issue 1000; done | sort -n | sed -n 3p; }
echo "launch (queued), the caller's time in a burst: local $(issue "${local_env[@]}") us," \
    "unix socket $(issue "${unix_env[@]}") us ($(issue "${unix_env[@]}" FLEXGV_REMOTE_BATCH_US=0) written at once)," \
    "shared memory $(issue "${shm_env[@]}") us," \
    "loopback TCP $(issue "${tcp_env[@]}") us ($(issue "${tcp_env[@]}" FLEXGV_REMOTE_BATCH_US=0) written at once)," \
    "loopback TLS $(issue "${tls_env[@]}") us ($(issue "${tls_env[@]}" FLEXGV_REMOTE_BATCH_US=0) written at once)"
echo "round trip (cuMemAlloc/cuMemFree): local $(per_call $((5 * N)) 2 "memclient allocloop" "${local_env[@]}") us," \
    "unix socket $(per_call "$N" 2 "memclient allocloop" "${unix_env[@]}") us," \
    "shared memory $(per_call "$N" 2 "memclient allocloop" "${shm_env[@]}") us," \
    "unix socket in a tenant $(per_call "$N" 2 "memclient allocloop" "${tenant_env[@]}") us," \
    "loopback TCP $(per_call "$N" 2 "memclient allocloop" "${tcp_env[@]}") us," \
    "loopback TLS $(per_call "$N" 2 "memclient allocloop" "${tls_env[@]}") us"
echo "upload (cuMemcpyHtoDAsync, 4 KiB, queued): local $(per_call $((5 * N)) 1 "memclient uploadloop" "${local_env[@]}") us," \
    "unix socket $(per_call "$N" 1 "memclient uploadloop" "${unix_env[@]}") us," \
    "shared memory $(per_call "$N" 1 "memclient uploadloop" "${shm_env[@]}") us," \
    "loopback TCP $(per_call "$N" 1 "memclient uploadloop" "${tcp_env[@]}") us," \
    "loopback TLS $(per_call "$N" 1 "memclient uploadloop" "${tls_env[@]}") us"
echo "event (cuEventCreate/cuEventDestroy, queued): local $(per_call $((5 * N)) 2 "memclient eventloop" "${local_env[@]}") us," \
    "unix socket $(per_call "$N" 2 "memclient eventloop" "${unix_env[@]}") us," \
    "shared memory $(per_call "$N" 2 "memclient eventloop" "${shm_env[@]}") us," \
    "loopback TCP $(per_call "$N" 2 "memclient eventloop" "${tcp_env[@]}") us"
# What latency on the path costs: FLEXGV_REMOTE_DELAY_US adds to every
# round trip (queued calls are not held up).
echo "round trip with latency added: unix socket +0 $(per_call "$N" 2 "memclient allocloop" "${unix_env[@]}") us," \
    "+10 $(per_call "$N" 2 "memclient allocloop" "${unix_env[@]}" FLEXGV_REMOTE_DELAY_US=10) us," \
    "+50 $(per_call "$N" 2 "memclient allocloop" "${unix_env[@]}" FLEXGV_REMOTE_DELAY_US=50) us;" \
    "launch (queued) +50: $(per_call $((10 * N)) 1 launchloop "${unix_env[@]}" FLEXGV_REMOTE_DELAY_US=50) us"
# Bandwidth of synchronous 64 MiB uploads (the simulated GPU's copy is a memmove).
gbps() { awk "BEGIN { printf \"%.2f\", 64 * 1048576 / ($1 * 1000) }"; }
echo "upload 64 MiB (cuMemcpyHtoD): local $(gbps "$(per_call 8 1 "memclient copyloop" "${local_env[@]}")") GB/s," \
    "unix socket $(gbps "$(per_call 8 1 "memclient copyloop" "${unix_env[@]}")") GB/s," \
    "shared memory $(gbps "$(per_call 8 1 "memclient copyloop" "${shm_env[@]}")") GB/s," \
    "loopback TCP $(gbps "$(per_call 8 1 "memclient copyloop" "${tcp_env[@]}")") GB/s," \
    "shared memory +50 us $(gbps "$(per_call 8 1 "memclient copyloop" "${shm_env[@]}" FLEXGV_REMOTE_DELAY_US=50)") GB/s"
echo "download 64 MiB (cuMemcpyDtoH): local $(gbps "$(per_call 8 1 "memclient copybackloop" "${local_env[@]}")") GB/s," \
    "unix socket $(gbps "$(per_call 8 1 "memclient copybackloop" "${unix_env[@]}")") GB/s," \
    "shared memory $(gbps "$(per_call 8 1 "memclient copybackloop" "${shm_env[@]}")") GB/s," \
    "loopback TCP $(gbps "$(per_call 8 1 "memclient copybackloop" "${tcp_env[@]}")") GB/s"
# From and into pinned memory (over shared memory, the heap both sides map).
for way in copyloop copybackloop; do
    echo "pinned $([ $way = copyloop ] && echo upload || echo download) 64 MiB:" \
        "local $(gbps "$(per_call 8 1 "memclient pinned$way" "${local_env[@]}")") GB/s," \
        "unix socket $(gbps "$(per_call 8 1 "memclient pinned$way" "${unix_env[@]}")") GB/s," \
        "shared memory $(gbps "$(per_call 8 1 "memclient pinned$way" "${shm_env[@]}")") GB/s"
done
# A round trip while another thread of the program waits for 20 ms kernels,
# one after the other: its median and 99th percentile.
beside() { env "$@" "$B/tests/waiters" beside 3 | awk '{ printf "%s/%s us", $4, $6 }'; }
echo "round trip beside a thread waiting for the GPU (p50/p99): local $(beside "${local_env[@]}")," \
    "unix socket $(beside "${unix_env[@]}"), shared memory $(beside "${shm_env[@]}")," \
    "loopback TCP $(beside "${tcp_env[@]}"), loopback TLS $(beside "${tls_env[@]}")"
# With a failover server (one checkpoint, at the first call): what keeping
# each call and hashing each answer adds.
echo "with a failover server, unix socket: launch (queued) $(per_call $((10 * N)) 1 launchloop "${unix_env[@]}") us," \
    "with $(per_call $((10 * N)) 1 launchloop "${failover_env[@]}" 2>/dev/null) us;" \
    "round trip $(per_call "$N" 2 "memclient allocloop" "${unix_env[@]}") us," \
    "with $(per_call "$N" 2 "memclient allocloop" "${failover_env[@]}" 2>/dev/null) us;" \
    "download 64 MiB $(gbps "$(per_call 8 1 "memclient copybackloop" "${unix_env[@]}")") GB/s," \
    "with $(gbps "$(per_call 8 1 "memclient copybackloop" "${failover_env[@]}" 2>/dev/null)") GB/s"
