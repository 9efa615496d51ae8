#!/usr/bin/env bash
# Times ratelimit_bench builds against one another (bench/README.md, "Comparing builds").
#
#   bench/ab/run.sh [-r ROUNDS] [-f FILTER] [-a ARG]... [-o DIR] BASE [OTHER...]
#
# BASE and OTHER are ratelimit_bench binaries (build each revision with the ci-release preset
# and copy its bench/ratelimit_bench aside). Every round runs each binary once, the filter's
# rows in one process at --benchmark_min_time=0.3, with each -a ARG added after (so it may
# override it); bench/ab/ratio.py then prints, per row and binary, the median of the per-round
# CPU-time ratios to BASE with a bootstrap 90 % interval. With BASE alone, the rounds are
# processes whose rows bench/ab/within.py compares with one another (what a limit set costs).
#
# - The order of the binaries rotates every round, and reverses every cycle of rotations, so
#   each binary runs before each other one as often as after it: in a fixed order the first
#   binary read 1-2 % faster. ROUNDS is rounded up to a multiple of twice the binaries' count
#   (where there are two or more).
# - Each round runs all binaries with the heap shifted by one random number of bytes
#   (heap_shift.c), drawn anew each round: in rotated runs without it, one row of the same two
#   builds read from 0.94 to 1.04 of its base, by what else ran in the process.
# - Where CPU 1 can be used, every run is pinned to it (taskset).
set -euo pipefail

usage() {
    sed -n '4p' "$0" | sed 's/^#  *//' >&2
    exit 2
}

ROUNDS=15
FILTER='BM_(TokenBucket|LeakyBucket|FixedWindow|SlidingCounter|SlidingLog)_Memory(_GivenNow)?/keys:1/denied:(0|1)/cost:1/real_time/threads:1$'
OUT=""
EXTRA=()
while getopts "r:f:a:o:" opt; do
    case "$opt" in
        r) ROUNDS=$OPTARG ;;
        f) FILTER=$OPTARG ;;
        a) EXTRA+=("$OPTARG") ;;
        o) OUT=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
if (($# < 1)) || ! [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]]; then
    usage
fi
BINS=()
for b in "$@"; do
    if [[ ! -x "$b" ]]; then
        echo "bench/ab/run.sh: $b is not an executable file" >&2
        exit 2
    fi
    BINS+=("$(realpath "$b")")
done
n=${#BINS[@]}
cycle=$((n > 1 ? 2 * n : 1))
ROUNDS=$((ROUNDS + (cycle - ROUNDS % cycle) % cycle))

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-ab-XXXXXX")}
mkdir -p "$OUT"
if compgen -G "$OUT/*.json" >/dev/null; then
    echo "bench/ab/run.sh: $OUT holds an earlier run's results; name an empty directory" >&2
    exit 2
fi
cc -O2 -shared -fPIC -o "$OUT/heap_shift.so" "$HERE/heap_shift.c"
PIN=()
if taskset -c 1 true 2>/dev/null; then
    PIN=(taskset -c 1)
fi

for ((r = 0; r < ROUNDS; ++r)); do
    shift_bytes=$(((RANDOM % 256) * 16))
    for ((i = 0; i < n; ++i)); do
        if (((r / n) % 2 == 0)); then
            k=$(((i + r) % n))
        else
            k=$(((n - 1 - i + r) % n))
        fi
        if ! HEAP_SHIFT=$shift_bytes LD_PRELOAD="$OUT/heap_shift.so" ${PIN[@]+"${PIN[@]}"} \
            "${BINS[$k]}" --benchmark_filter="$FILTER" --benchmark_min_time=0.3 \
            ${EXTRA[@]+"${EXTRA[@]}"} --benchmark_format=json \
            >"$OUT/$k.$r.json" 2>"$OUT/$k.$r.err"; then
            echo "bench/ab/run.sh: ${BINS[$k]} failed; see $OUT/$k.$r.err" >&2
            exit 1
        fi
    done
    echo "round $((r + 1)) of $ROUNDS (heap shift $shift_bytes bytes)" >&2
done
echo "results in $OUT" >&2
if ((n > 1)); then
    python3 "$HERE/ratio.py" "$OUT" "$@"
else
    echo "compare its rows with: bench/ab/within.py $OUT" >&2
fi
