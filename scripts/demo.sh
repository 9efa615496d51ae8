#!/usr/bin/env bash
# Builds and runs the quickstart example with the dev preset.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake --preset dev
cmake --build --preset dev --target ratelimit_example_quickstart -j2
./build/dev/examples/ratelimit_example_quickstart
