#!/usr/bin/env bash
# Configures and builds tilefuse (LLVM linked as a shared library) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
