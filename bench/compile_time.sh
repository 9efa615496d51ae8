#!/usr/bin/env bash
# Compile time is part of a header-only library's cost: the CPU time of `g++ -std=c++20 -O2 -c`
# of a file that includes <ratelimit/limiter.hpp> and makes one TokenBucket<> call, and of the
# same file including <ratelimit/ratelimit.hpp>, against a file that includes only <map>,
# <string> and <mutex> and uses them. The runs are interleaved and each figure is the least
# CPU time (user + system) of its runs, so a busy machine slows all three alike.
#
#   bench/compile_time.sh [RUNS]                  prints the three times and the two ratios
#   bench/compile_time.sh --check BOUND [RUNS]    also counts the instructions the compiler
#                                                 runs for limiter.hpp's file and for the
#                                                 baseline (valgrind), and fails when their
#                                                 ratio is above BOUND (CI: a tripwire, so
#                                                 the cost cannot creep up unnoticed), or when
#                                                 limiter.hpp includes the standard streams
#                                                 (in C++20, <chrono> and <memory> bring them;
#                                                 see include/ratelimit/detail/chrono.hpp)
#
# The check counts instructions rather than seconds because the count does not depend on the
# machine's speed or load: the same headers measured 2.74-2.95x in seconds on one CI guest and
# 3.33-4.05x on another, and a tripwire that trips on the guest it lands on guards nothing. The
# count moves by well under 1 % between runs (the compiler hashes addresses).
# CXX picks the compiler (default g++).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bound=""
if [[ "${1:-}" == "--check" ]]; then
    bound="$2"
    shift 2
fi
runs="${1:-7}"
cxx="${CXX:-g++}"
include="$(pwd)/include"
work="$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-compile-time.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

cat >"${work}/baseline.cpp" <<'CPP'
#include <map>
#include <mutex>
#include <string>
bool check(const std::string& key) {
    static std::mutex mutex;
    static std::map<std::string, int> counts;
    const std::lock_guard<std::mutex> lock(mutex);
    return ++counts[key] <= 10;
}
CPP
cat >"${work}/limiter.cpp" <<'CPP'
#include <ratelimit/limiter.hpp>
bool check(std::string_view key) {
    static ratelimit::TokenBucket<> limiter{ratelimit::Limit::perMinute(10)};
    return limiter.tryAcquire(key).allowed;
}
CPP
sed 's|ratelimit/limiter.hpp|ratelimit/ratelimit.hpp|' "${work}/limiter.cpp" >"${work}/umbrella.cpp"

# A compile that fails ends the script: in a command substitution bash does not stop on errors,
# so a failed compile would otherwise yield a figure.
fail() {
    echo "compile-time: $*" >&2
    exit 1
}

# CPU seconds (user + system) of one compilation.
cpu() {
    local TIMEFORMAT='%U %S'
    local times
    # The compiler's own output goes to stderr (fd 3), and only `time`'s into the figure.
    times=$({ time "${cxx}" -std=c++20 -O2 -I"${include}" -c "${work}/$1.cpp" \
        -o "${work}/$1.o" >&3 2>&3; } 3>&2 2>&1) || fail "${cxx} failed on $1.cpp"
    awk '{ printf "%.2f\n", $1 + $2 }' <<<"${times}"
}

# The standard streams first, before the timed runs: -H prints each included file, one dot per
# level of nesting, so the chain of headers down to the first stream header names the include
# to mend.
if [[ -n "${bound}" ]]; then
    command -v valgrind >/dev/null ||
        fail "--check counts instructions with valgrind, which is not installed" \
            "(scripts/install-deps.sh installs it)"
    "${cxx}" -std=c++20 -O2 -I"${include}" -fsyntax-only -H "${work}/limiter.cpp" \
        2>"${work}/includes.txt" || { cat "${work}/includes.txt" >&2; exit 1; }
    streams="$(awk '/^\.+ / { chain[length($1)] = $2 }
        !found && /^\.+ / && $2 ~ /\/(sstream|istream|ostream)$/ {
            for (d = 1; d < length($1); ++d) print "  " chain[d]
            print "  " $2; found = 1 }' "${work}/includes.txt")"
    if [[ -n "${streams}" ]]; then
        echo "compile-time: <ratelimit/limiter.hpp> includes the standard streams, through" >&2
        echo "${streams}" >&2
        exit 1
    fi
fi

declare -A best=()
for ((i = 0; i < runs; ++i)); do
    for file in baseline limiter umbrella; do
        t="$(cpu "${file}")"
        if [[ -z "${best[${file}]:-}" ]] || awk -v t="${t}" -v b="${best[${file}]}" \
            'BEGIN { exit !(t < b) }'; then
            best[${file}]="${t}"
        fi
    done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
limiter_ratio="$(ratio "${best[limiter]}" "${best[baseline]}")"
umbrella_ratio="$(ratio "${best[umbrella]}" "${best[baseline]}")"
echo "compile-time: ${cxx} -O2, least CPU time of ${runs} interleaved runs"
echo "compile-time:   <map> <string> <mutex>      ${best[baseline]} s"
echo "compile-time:   <ratelimit/limiter.hpp>     ${best[limiter]} s  (${limiter_ratio}x)"
echo "compile-time:   <ratelimit/ratelimit.hpp>   ${best[umbrella]} s  (${umbrella_ratio}x)"
[[ -n "${bound}" ]] || exit 0

# Instructions the compiler (the driver, cc1plus and the assembler) runs for one file: one
# valgrind log per process, each with its count.
instructions() {
    local logs="${work}/$1.valgrind"
    mkdir "${logs}"
    valgrind --tool=cachegrind --cache-sim=no --trace-children=yes \
        --cachegrind-out-file=/dev/null --log-file="${logs}/%p" \
        "${cxx}" -std=c++20 -O2 -I"${include}" -c "${work}/$1.cpp" -o "${work}/$1.o" >&2 ||
        fail "${cxx} failed on $1.cpp under valgrind:" "$(cat "${logs}"/*)"
    cat "${logs}"/* | awk '/I +refs:/ { gsub(",", "", $NF); sum += $NF; ++counted }
        END { if (counted < 2 || sum == 0) exit 1; printf "%.0f\n", sum }' ||
        fail "no instruction counts in valgrind's logs of $1.cpp"
}

baseline_instructions="$(instructions baseline)"
limiter_instructions="$(instructions limiter)"
instruction_ratio="$(ratio "${limiter_instructions}" "${baseline_instructions}")"
millions() { awk -v n="$1" 'BEGIN { printf "%.0fM", n / 1e6 }'; }
echo "compile-time: instructions the compiler runs (valgrind)"
echo "compile-time:   <map> <string> <mutex>      $(millions "${baseline_instructions}")"
echo "compile-time:   <ratelimit/limiter.hpp>     $(millions "${limiter_instructions}")" \
    " (${instruction_ratio}x)"
if awk -v r="${instruction_ratio}" -v b="${bound}" 'BEGIN { exit !(r > b) }'; then
    echo "compile-time: <ratelimit/limiter.hpp> costs ${instruction_ratio}x the baseline's" \
        "instructions, above the bound ${bound}x" >&2
    exit 1
fi
