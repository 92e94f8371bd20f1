#!/usr/bin/env bash
# Builds and runs every test: unit, codegen (FileCheck, ptxas), reference, random graphs, CLI,
# and the GPU tests where a GPU is present (they skip elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure
