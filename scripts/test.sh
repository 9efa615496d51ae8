#!/usr/bin/env bash
# The test command: installs what is missing, then configures, builds (including the
# header-set check) and runs every test with the ci-gcc preset (g++, Debug, warnings as errors).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake --preset ci-gcc
cmake --build --preset ci-gcc -j2
ctest --preset ci-gcc
