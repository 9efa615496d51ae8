#!/usr/bin/env bash
# clang-tidy 14 over the library's headers (each through its header-set translation unit), the
# tests and the examples, on a clang++ compile database (preset ci-tidy), with the repository's
# .clang-tidy (warnings are errors). Exits non-zero on any finding.
#
#   scripts/tidy.sh                  all of them
#   scripts/tidy.sh tests/limit      only translation units whose path matches the regex
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tidy=$(command -v run-clang-tidy-14 || command -v run-clang-tidy)
cmake --preset ci-tidy >/dev/null
filter=${1:-"verify_interface_header_sets/|/tests/|/examples/"}
"$tidy" -p build/ci-tidy -j "$(nproc)" -quiet "$filter"
