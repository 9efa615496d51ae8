#!/usr/bin/env bash
# The quick start: installs a compiler and CMake if they are missing, then builds and runs
# examples/quickstart.cpp (the library is header-only: nothing else is needed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh demo
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DRATELIMIT_BUILD_TESTS=OFF \
    -DRATELIMIT_BUILD_TOOLS=OFF -DRATELIMIT_WITH_REDIS=OFF
cmake --build build/demo --target ratelimit_example_quickstart -j2
./build/demo/examples/ratelimit_example_quickstart
