#!/usr/bin/env bash
# Builds the self-contained GPU bundle into bundle/: libtilefuse.so (LLVM linked statically,
# stripped) with the CLI and the test binary beside it, found through $ORIGIN. It runs where only
# the NVIDIA driver is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-bundle -DCMAKE_BUILD_TYPE=Release -DTILEFUSE_BUNDLE=ON >/dev/null
cmake --build build-bundle -j"$(nproc)" --target tilefuse tilefuse_cli tilefuse_tests tilefuse_fuzz tilefuse_nvtx_probe
rm -rf bundle && mkdir -p bundle
cp build-bundle/libtilefuse.so build-bundle/tilefuse build-bundle/tests/tilefuse_tests build-bundle/tilefuse_fuzz bundle/
# The NVTX injection library tests/nvtx_test.sh loads, for the launch ranges only a GPU shows.
cp build-bundle/tests/libtilefuse_nvtx_probe.so bundle/
strip bundle/tilefuse bundle/tilefuse_tests bundle/tilefuse_fuzz
# The GPU machine gets a copy of the tree without its history: record what was built.
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench' || echo -dirty)" >bundle/COMMIT
du -sh bundle/*
size=$(du -sm bundle | cut -f1)
[ "$size" -lt 64 ] || { echo "bundle is ${size} MiB: over the 64 MiB the GPU machine accepts" >&2; exit 1; }
echo "bundle: ${size} MiB; needs: $(ldd bundle/libtilefuse.so | awk '{print $1}' | tr '\n' ' ')"
