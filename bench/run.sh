#!/usr/bin/env bash
# Builds the benchmarks of the ci-release preset (Release, warnings as errors), runs the suite
# and writes bench/README.md (bench/report.py turns the JSON into the tables and the target
# checks). 3 to 5 minutes on a 2-core machine, the build included.
#
#   bench/run.sh                  the whole run
#   MIN_TIME=0.1 bench/run.sh     longer rows (Google Benchmark 1.7.1: seconds, no unit suffix)
#   bench/run.sh --peers [ROUNDS] the library beside its peers (Guava, Go x/time/rate,
#                                 rate-limiter-flexible, hiredis, redis-benchmark), ROUNDS
#                                 interleaved rounds (default 3): bench/peers/run.sh
#   bench/run.sh --install        installs the peers (apt-get, npm)
#
# What runs:
#   1. ratelimit_bench, every row once (the full matrix, absolute figures).
#   2. ratelimit_bench, the rows the targets compare, 5 repetitions interleaved at random,
#      aggregates only: every ratio is computed from medians.
#   3. ratelimit_redis_bench, 5 interleaved repetitions, twice: redis-server on CPU 0 and the
#      bench on CPU 1 ("across cores"), then both on CPU 0 ("one core").
#   4. redis-benchmark on the same FCALL (-c 1, and -c 8 -P 16), in both placements, against
#      a redis-server this script starts.
#   5. ratelimit_bench_memory: bytes per idle key.
set -euo pipefail

case "${1:-}" in
    --peers) shift; exec "$(dirname "$0")/peers/run.sh" "$@" ;;
    --install) exec "$(dirname "$0")/peers/run.sh" --install ;;
esac

cd "$(dirname "$0")/.."
ROOT=$PWD
PRESET=ci-release
BUILD="$ROOT/build/$PRESET/bench"
MIN_TIME=${MIN_TIME:-0.05}
RATIO_MIN_TIME=${RATIO_MIN_TIME:-0.1}
REPS=${REPS:-5}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-bench-XXXXXX")
COMMANDS="$OUT/commands.txt"
: >"$COMMANDS"
REDIS_PID=""
cleanup() {
    if [[ -n "$REDIS_PID" ]]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT

log() { printf '\n== %s\n' "$*" >&2; }
# Runs a command and records it, shell-quoted and relative to the repository, for the README.
run() {
    { printf '%q ' "$@" | sed "s|$ROOT/||g; s|$OUT/|\$OUT/|g; s| \$||"; echo; } >>"$COMMANDS"
    "$@"
}

START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

log "configure and build ($PRESET, benchmark targets)"
cmake --preset "$PRESET" >/dev/null
TARGETS=(ratelimit_bench ratelimit_bench_memory)
if [[ -d "$BUILD/CMakeFiles/ratelimit_redis_bench.dir" ]]; then  # ratelimit::redis exists
    TARGETS+=(ratelimit_redis_bench)
fi
cmake --build --preset "$PRESET" --target "${TARGETS[@]}"

log "1/5 ratelimit_bench: the full matrix, once"
run "$BUILD/ratelimit_bench" --benchmark_min_time="$MIN_TIME" \
    --benchmark_out="$OUT/sweep.json" --benchmark_out_format=json

log "2/5 ratelimit_bench: the ratio rows, $REPS interleaved repetitions"
RATIO_FILTER='keys:1/denied:0/cost:1/real_time/threads:[12]$'
RATIO_FILTER+='|keys:1/denied:1/cost:1/real_time/threads:1$'
RATIO_FILTER+='|keys:100000/denied:[01]/cost:1/real_time/threads:1$'
RATIO_FILTER+='|ClockRead/real_time/threads:1$'
run "$BUILD/ratelimit_bench" --benchmark_filter="$RATIO_FILTER" \
    --benchmark_min_time="$RATIO_MIN_TIME" --benchmark_repetitions="$REPS" \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUT/ratio.json" --benchmark_out_format=json

if [[ -x "$BUILD/ratelimit_redis_bench" ]]; then
    log "3/5 ratelimit_redis_bench: server CPU 0, bench CPU 1"
    run env RATELIMIT_BENCH_REDIS_CPUS=0 taskset -c 1 "$BUILD/ratelimit_redis_bench" \
        --benchmark_min_time="$RATIO_MIN_TIME" --benchmark_repetitions="$REPS" \
        --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
        --benchmark_out="$OUT/redis_across.json" --benchmark_out_format=json
    log "3/5 ratelimit_redis_bench: server and bench on CPU 0"
    run env RATELIMIT_BENCH_REDIS_CPUS=0 taskset -c 0 "$BUILD/ratelimit_redis_bench" \
        --benchmark_min_time="$RATIO_MIN_TIME" --benchmark_repetitions="$REPS" \
        --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
        --benchmark_out="$OUT/redis_one_core.json" --benchmark_out_format=json

    if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
        log "4/5 redis-benchmark on the token bucket's FCALL"
        "$BUILD/ratelimit_redis_bench" --dump-scripts="$OUT/scripts"
        SOCK="$OUT/redis.sock"
        taskset -c 0 redis-server --port 0 --unixsocket "$SOCK" --unixsocketperm 700 --save '' \
            --appendonly no --dir "$OUT" --logfile "$OUT/redis.log" &
        REDIS_PID=$!
        for _ in $(seq 100); do
            redis-cli -s "$SOCK" PING >/dev/null 2>&1 && break
            sleep 0.05
        done
        redis-cli -s "$SOCK" -x FUNCTION LOAD <"$OUT/scripts/token_bucket.library" >/dev/null
        mapfile -t FCALL <"$OUT/scripts/token_bucket.args"
        : >"$OUT/redis_benchmark.csv"
        for placement in across:1 one_core:0; do
            cpu=${placement#*:}
            for opts in "-c 1" "-c 8 -P 16"; do
                # shellcheck disable=SC2086 # $opts is a list of options
                line=$(run taskset -c "$cpu" redis-benchmark -s "$SOCK" -n 100000 $opts --csv \
                    "${FCALL[@]}" | tail -n 1)
                printf '%s,%s,%s\n' "${placement%%:*}" "$opts" "$line" >>"$OUT/redis_benchmark.csv"
            done
        done
        cleanup
        REDIS_PID=""
    fi
fi

log "5/5 ratelimit_bench_memory"
run "$BUILD/ratelimit_bench_memory" --json="$OUT/memory.json" | tee "$OUT/memory.md"

END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "writing bench/README.md"
python3 "$ROOT/bench/report.py" --dir "$OUT" --readme "$ROOT/bench/README.md" \
    --start "$START" --end "$END" --load "$LOAD_START" --preset "$PRESET" --reps "$REPS"
log "done: bench/README.md (raw results in $OUT)"
