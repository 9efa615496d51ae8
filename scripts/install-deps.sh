#!/usr/bin/env bash
# Installs the Debian 12 packages a task needs, but only those that are missing, so reruns are
# fast and offline.
#
#   scripts/install-deps.sh demo      a compiler and CMake: what the quick start needs
#   scripts/install-deps.sh [all]     also everything the tests, sanitizer, tidy, fuzz and
#                                     benchmark legs need
#   scripts/install-deps.sh all PKG…  and these packages too
set -euo pipefail

demo=(cmake g++ make)
all=(
    "${demo[@]}" pkg-config git ca-certificates python3
    catch2 libbenchmark-dev libhiredis-dev redis-server
    # clang 14 with its sanitizer and libFuzzer runtimes (Debian ships them apart from clang),
    # and llvm for llvm-symbolizer, so sanitizer and fuzzer reports name source lines.
    clang libclang-rt-14-dev llvm clang-format clang-tidy
    libcpp-httplib-dev wrk
    # valgrind: the release leg counts the compiler's instructions (bench/compile_time.sh).
    valgrind
    # ratelimit::prometheus and its scrape check (promtool), and the example dashboard's
    # browser test (headless Chromium).
    prometheus-cpp-dev prometheus chromium
)

set_name="${1:-all}"
shift || true
case "${set_name}" in
    demo) packages=("${demo[@]}") ;;
    all) packages=("${all[@]}" "$@") ;;
    *)
        echo "install-deps: unknown set '${set_name}' (demo or all)" >&2
        exit 2
        ;;
esac

is_installed() {
    dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'
}

missing=()
for package in "${packages[@]}"; do
    if ! is_installed "${package}"; then
        missing+=("${package}")
    fi
done

if ((${#missing[@]} == 0)); then
    echo "install-deps: all ${#packages[@]} packages present"
    exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if ((EUID != 0)); then
    if command -v sudo >/dev/null 2>&1; then
        sudo=(sudo)
    else
        echo "install-deps: not root and no sudo; install these yourself: ${missing[*]}" >&2
        exit 1
    fi
fi
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
