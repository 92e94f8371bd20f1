#!/usr/bin/env bash
# NVTX ranges without Nsight: an injection library (tests/nvtx_probe.cpp) logs every range the
# CLI pushes. Compiles are ranges everywhere; launches where a GPU is present.
set -uo pipefail
tf="$1"
probe="$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export NVTX_INJECTION64_PATH="$probe" TILEFUSE_NVTX_LOG="$dir/log" TILEFUSE_CACHE=0
fails=0
"$tf" ptx softmax_256k >/dev/null || { echo "FAIL: tilefuse ptx"; fails=$((fails + 1)); }
grep -qx "tilefuse: compile softmax_256k_k0" "$dir/log" || { echo "FAIL: no compile range:"; cat "$dir/log"; fails=$((fails + 1)); }
: >"$dir/log"
"$tf" run layernorm --seed 1 >/dev/null 2>&1
rc=$?
if [ $rc -eq 69 ]; then
  echo "no GPU: launch ranges not checked"
elif [ $rc -ne 0 ] || ! grep -qx "tilefuse: launch layernorm_k0" "$dir/log"; then
  echo "FAIL: run layernorm ($rc), no launch range:"; cat "$dir/log"; fails=$((fails + 1))
fi
echo "nvtx: $fails failed"
[ $fails -eq 0 ]
