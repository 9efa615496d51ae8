#!/usr/bin/env bash
# clang-tidy 14 with the repository's .clang-tidy (warnings are errors) on the clang++ compile
# database of preset ci-tidy, in two passes that run side by side:
#   - every public header, once, through the header-set translation unit of the umbrella
#     <ratelimit/redis.hpp> (which includes them all), with the static analyzer also starting
#     from functions defined in headers: by default it starts only from the main file's
#     functions, and a header-set unit's main file has none;
#   - the tests, the fuzz targets, the examples and the tools, with their own headers.
# Exits non-zero on any finding.
#
#   scripts/tidy.sh                  all of it
#   scripts/tidy.sh REGEX            only the units whose path matches REGEX (the umbrella unit's
#                                    path ends in ratelimit/redis.hpp.cxx)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tidy=$(command -v run-clang-tidy-14 || command -v run-clang-tidy)
cmake --preset ci-tidy >/dev/null
root="$(pwd)"
filter="${1:-.}"

umbrella="${root}/build/ci-tidy/ratelimit_redis_verify_interface_header_sets/ratelimit/redis.hpp.cxx"
mapfile -t sources < <(
    python3 -c 'import json, sys; print("\n".join(e["file"] for e in json.load(sys.stdin)))' \
        <build/ci-tidy/compile_commands.json |
        awk -v tests="${root}/tests/" -v examples="${root}/examples/" -v tools="${root}/tools/" \
            'index($0, tests) == 1 || index($0, examples) == 1 || index($0, tools) == 1' |
        grep -E -- "${filter}" | sort -u || true
)

# run-clang-tidy takes regexes: match each path exactly.
exactly() {
    local path
    for path in "$@"; do
        printf '^%s$\n' "$(sed 's/[][\.*^$+?(){}|]/\\&/g' <<<"${path}")"
    done
}

status=0
pids=()
if grep -qE -- "${filter}" <<<"${umbrella}"; then
    # One unit: it runs beside the other pass.
    "${tidy}" -p build/ci-tidy -quiet -extra-arg=-Xclang \
        -extra-arg=-analyzer-opt-analyze-headers "$(exactly "${umbrella}")" &
    pids+=($!)
fi
if ((${#sources[@]} > 0)); then
    mapfile -t patterns < <(exactly "${sources[@]}")
    "${tidy}" -p build/ci-tidy -j "$(nproc)" -quiet "${patterns[@]}" || status=$?
fi
for pid in "${pids[@]}"; do
    wait "${pid}" || status=$?
done
exit "${status}"
