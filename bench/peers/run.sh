#!/usr/bin/env bash
# The library's rows beside its peers, in the same run: bench/run.sh --peers calls this.
#
#   bench/peers/run.sh [ROUNDS]      ROUNDS interleaved rounds (default 3), then medians and
#                                    ratios (bench/peers/compare.py) on stdout
#   bench/peers/run.sh --install     installs the peers (apt-get, npm), then exits
#   SECONDS_PER_CASE=0.5             how long each peer case runs (the library's rows:
#                                    --benchmark_min_time, the same value)
#
# Each round runs, in an order rotated every round: ratelimit_bench (the TokenBucket rows
# and the MutexMap, AtomicGcra and KeyedGcra baselines; then their 10^5-key rows once more with
# --key_order=shuffled, the case "keys_100k_shuffled"), ratelimit_redis_bench (TokenBucket
# and the bare hiredis FCALL loop), redis-benchmark on the library's token bucket FCALL (and the
# server's CPU per check of it and of reference_gcra.lua, from INFO commandstats), Go's
# x/time/rate, Guava's RateLimiter, and rate-limiter-flexible with ioredis. Redis peers use a
# redis-server this script starts on a unix socket in a temporary directory (CPU 0, clients on
# CPU 1, as ratelimit_redis_bench places its own). A peer whose tools are missing is skipped
# with a message. None of this is part of the library's build or of CI.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD
PEERS="$ROOT/bench/peers"
BUILD="$ROOT/build/ci-release/bench"
SECS=${SECONDS_PER_CASE:-0.5}

if [[ "${1:-}" == "--install" ]]; then
    apt-get update -qq
    packages=(golang-go golang-golang-x-time-dev default-jdk-headless libguava-java redis-server
        redis-tools)
    # A Node.js from outside Debian (NodeSource) bundles npm and conflicts with Debian's npm.
    command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}"
    (cd "$PEERS/node" && npm ci --no-audit --no-fund)
    exit 0
fi
ROUNDS=${1:-3}

OUT=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-peers-XXXXXX")
REDIS_PID=""
cleanup() {
    if [[ -n "$REDIS_PID" ]]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT
log() { printf '== %s\n' "$*" >&2; }
skip() { log "skipped: $*"; }

log "build: ratelimit's benchmarks (preset ci-release)"
cmake --preset ci-release >/dev/null
TARGETS=(ratelimit_bench ratelimit_bench_memory)
if [[ -d "$BUILD/CMakeFiles/ratelimit_redis_bench.dir" ]]; then
    TARGETS+=(ratelimit_redis_bench)
fi
cmake --build --preset ci-release --target "${TARGETS[@]}" >/dev/null

RUNNERS=(lib_memory)
[[ -x "$BUILD/ratelimit_redis_bench" ]] && RUNNERS+=(lib_redis)

if command -v go >/dev/null && [[ -d /usr/share/gocode/src/golang.org/x/time/rate ]]; then
    log "build: Go peer"
    (cd "$PEERS/go" && GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS='' \
        GOCACHE="$OUT/gocache" go build -o "$OUT/peer-go" .)
    RUNNERS+=(peer_go)
else
    skip "Go x/time/rate (needs golang-go golang-golang-x-time-dev: bench/run.sh --install)"
fi
if command -v javac >/dev/null && [[ -f /usr/share/java/guava.jar ]]; then
    log "build: Guava peer"
    javac -cp /usr/share/java/guava.jar -d "$OUT/java" "$PEERS/java/GuavaPeer.java"
    RUNNERS+=(peer_guava)
else
    skip "Guava RateLimiter (needs default-jdk-headless libguava-java: bench/run.sh --install)"
fi

SOCK=""
if command -v redis-server >/dev/null; then
    SOCK="$OUT/redis.sock"
    taskset -c 0 redis-server --port 0 --unixsocket "$SOCK" --unixsocketperm 700 --save '' \
        --appendonly no --dir "$OUT" --logfile "$OUT/redis.log" &
    REDIS_PID=$!
    for _ in $(seq 100); do
        redis-cli -s "$SOCK" PING >/dev/null 2>&1 && break
        sleep 0.05
    done
    if command -v redis-benchmark >/dev/null && [[ -x "$BUILD/ratelimit_redis_bench" ]]; then
        "$BUILD/ratelimit_redis_bench" --dump-scripts="$OUT/scripts"
        redis-cli -s "$SOCK" -x FUNCTION LOAD <"$OUT/scripts/token_bucket.library" >/dev/null
        mapfile -t FCALL <"$OUT/scripts/token_bucket.args"
        # The yardstick of the server's CPU: a minimal GCRA, admitting every call as the
        # library's rows do (1 µs per token, a tolerance of 10^12 µs).
        REFERENCE_SHA=$(redis-cli -s "$SOCK" -x SCRIPT LOAD <"$PEERS/reference_gcra.lua")
        REFERENCE=(EVALSHA "$REFERENCE_SHA" 1 'rl:reference{15:user:0000000000}' 1 1000000000000 1)
        RUNNERS+=(redis_benchmark)
    else
        skip "redis-benchmark (needs redis-tools and ratelimit_redis_bench)"
    fi
    if command -v node >/dev/null && [[ -d "$PEERS/node/node_modules/rate-limiter-flexible" ]]; then
        RUNNERS+=(peer_node)
    else
        skip "rate-limiter-flexible + ioredis (needs node and npm ci in bench/peers/node)"
    fi
else
    skip "every Redis peer (needs redis-server: bench/run.sh --install)"
fi

lib_memory() {
    "$BUILD/ratelimit_bench" --benchmark_min_time="$SECS" --benchmark_format=json \
        --benchmark_filter='^BM_(TokenBucket_Memory|Baseline_MutexMap|Baseline_AtomicGcra|Baseline_KeyedGcra)/keys:(1/denied:0/cost:1/real_time/threads:[12]|100000/denied:0/cost:1/real_time/threads:1)$' \
        >"$1/lib_memory.json"
    python3 "$PEERS/compare.py" gbench "$1/lib_memory.json"
    "$BUILD/ratelimit_bench" --benchmark_min_time="$SECS" --benchmark_format=json \
        --key_order=shuffled \
        --benchmark_filter='^BM_(TokenBucket_Memory|Baseline_MutexMap|Baseline_KeyedGcra)/keys:100000/denied:0/cost:1/real_time/threads:1$' \
        >"$1/lib_memory_shuffled.json"
    python3 "$PEERS/compare.py" gbench "$1/lib_memory_shuffled.json"
}
lib_redis() {
    env RATELIMIT_BENCH_REDIS_CPUS=0 taskset -c 1 "$BUILD/ratelimit_redis_bench" \
        --benchmark_min_time="$SECS" --benchmark_format=json \
        --benchmark_filter='^BM_(TokenBucket_Redis|Baseline_HiredisFcall_TokenBucket)/keys:1/real_time/threads:(1|8)$' \
        >"$1/lib_redis.json"
    python3 "$PEERS/compare.py" gbench "$1/lib_redis.json"
}
peer_go() { "$OUT/peer-go" "$SECS"; }
peer_guava() { java -cp "/usr/share/java/guava.jar:$OUT/java" GuavaPeer "$SECS"; }
peer_node() { taskset -c 1 node "$PEERS/node/peer.js" "$SOCK" "$SECS"; }
redis_benchmark() {
    local name opts rps
    for spec in "redis_seq:-c 1" "redis_8:-c 8" "redis_50:-c 50" "redis_ceiling:-c 8 -P 16"; do
        name=${spec%%:*}
        opts=${spec#*:}
        # shellcheck disable=SC2086 # $opts is a list of options
        rps=$(taskset -c 1 redis-benchmark -s "$SOCK" -n 20000 $opts --csv "${FCALL[@]}" \
            | tail -n 1 | cut -d, -f2 | tr -d '"')
        awk -v n="$name" -v r="$rps" 'BEGIN { printf "redis-benchmark\t%s\t%.3f\tus\n", n, 1e6 / r }'
    done
    server_cpu "ratelimit" "${FCALL[@]}"
    server_cpu "reference-gcra-script" "${REFERENCE[@]}"
}
# The server's CPU per check of one script: INFO commandstats' usec_per_call of its command
# (FCALL or EVALSHA, the first word) over one sequential redis-benchmark run of it (the
# statistics reset just before).
server_cpu() {
    local peer=$1
    shift
    redis-cli -s "$SOCK" CONFIG RESETSTAT >/dev/null
    taskset -c 1 redis-benchmark -s "$SOCK" -n 20000 -c 1 --csv "$@" >/dev/null
    redis-cli -s "$SOCK" INFO commandstats | awk -F'[=,]' -v p="$peer" \
        -v c="cmdstat_${1,,}" '$1 == c ":calls" { printf "%s\tredis_server_cpu\t%s\tus\n", p, $6 }'
}

for ((round = 1; round <= ROUNDS; ++round)); do
    dir="$OUT/round-$round"
    mkdir -p "$dir"
    n=${#RUNNERS[@]}
    for ((i = 0; i < n; ++i)); do
        runner=${RUNNERS[$(((i + round - 1) % n))]}
        log "round $round/$ROUNDS: $runner"
        "$runner" "$dir" | tee "$dir/$runner.tsv" >&2
    done
done

log "ratelimit_bench_memory (deterministic: once)"
"$BUILD/ratelimit_bench_memory" --json="$OUT/memory.json" >/dev/null
python3 "$PEERS/compare.py" memory "$OUT/memory.json" >"$OUT/memory.tsv"

python3 "$PEERS/compare.py" "$OUT"
log "raw results in $OUT"
