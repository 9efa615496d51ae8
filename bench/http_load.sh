#!/usr/bin/env bash
# Load figure of examples/http_server.cpp (issue 6): wrk over loopback against the example with
# and without the limiter, alternating runs, and the ratio of their median requests per second.
#
#   bench/http_load.sh                     builds the ci-release example, 3 rounds of 10 s each
#   ROUNDS=5 DURATION=20s bench/http_load.sh
#
# The limited server applies one rule to GET /api with a limit no run can reach (every request
# is admitted and answered with the rate-limit fields), all connections from 127.0.0.1: one hot
# key, the limiter's worst case for contention. The server runs on CPU 0, wrk (1 thread,
# CONNECTIONS connections, 8 by default: cpp-httplib's thread pool holds one thread per
# keep-alive connection, 8 of them) on CPU 1. Prints a Markdown table and the ratio; writes them to
# $OUT/http_load.md too. Needs wrk (Debian: wrk).
set -euo pipefail
cd "$(dirname "$0")/.."

PRESET=${PRESET:-ci-release}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-8}
SERVER="build/$PRESET/examples/ratelimit_example_http_server"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-http-load-XXXXXX")
PID=""
cleanup() {
    if [[ -n "$PID" ]]; then
        kill "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT

command -v wrk >/dev/null || { echo "http_load: wrk not found (apt-get install wrk)" >&2; exit 1; }
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    cmake --preset "$PRESET" >/dev/null
    cmake --build --preset "$PRESET" --target ratelimit_example_http_server >/dev/null
fi
cat >"$OUT/rules" <<'RULES'
GET /api 1000000000000/s name=api
RULES

# Starts the server with "$@", waits for its first line, runs wrk, prints requests per second.
measure() {
    : >"$OUT/server.out"
    taskset -c 0 "$SERVER" --port 0 "$@" >"$OUT/server.out" 2>&1 &
    PID=$!
    for _ in $(seq 100); do
        grep -q '^listening on' "$OUT/server.out" && break
        sleep 0.05
    done
    local port
    port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$OUT/server.out")
    [[ -n "$port" ]] || { echo "http_load: the server did not start" >&2; exit 1; }
    taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" "http://127.0.0.1:$port/api/items" \
        >"$OUT/wrk.txt"
    kill "$PID"
    wait "$PID" 2>/dev/null || true
    PID=""
    awk '/^Requests\/sec:/ {print $2}' "$OUT/wrk.txt"
}

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
without=()
with=()
for round in $(seq "$ROUNDS"); do
    without+=("$(measure --no-limit)")
    with+=("$(measure --rules "$OUT/rules")")
    echo "round $round: without ${without[-1]} req/s, with ${with[-1]} req/s" >&2
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m0=$(median "${without[@]}")
m1=$(median "${with[@]}")
ratio=$(awk -v a="$m1" -v b="$m0" 'BEGIN {printf "%.2f", a / b}')
# Each round's two runs are neighbours in time, so their ratio shares the machine's load of the
# moment: the median of these paired ratios is the steadier figure on a busy machine.
paired=()
for i in "${!with[@]}"; do
    paired+=("$(awk -v a="${with[$i]}" -v b="${without[$i]}" 'BEGIN {printf "%.2f", a / b}')")
done
pairedMedian=$(median "${paired[@]}")
{
    echo "| server | requests/s (median of $ROUNDS × $DURATION) | runs |"
    echo "| --- | --- | --- |"
    echo "| \`--no-limit\` | $m0 | ${without[*]} |"
    echo "| with the limiter (\`--rules\`, one hot key) | $m1 | ${with[*]} |"
    echo
    echo "ratio with / without: **$pairedMedian** (median of the paired rounds: ${paired[*]});"
    echo "ratio of the medians: $ratio. wrk -t1 -c$CONNECTIONS, server on CPU 0, wrk on CPU 1;"
    echo "load average before: $LOAD"
} | tee "$OUT/http_load.md"
