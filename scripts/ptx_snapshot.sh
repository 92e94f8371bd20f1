#!/usr/bin/env bash
# Writes the PTX of every example under the default schedule, --split 0, --stages 0 and
# --target sm_80 into DIR, one file each: run it before and after a codegen change and compare
# the two folders (`diff -r`) to see which kernels the change touched.
#   bash scripts/ptx_snapshot.sh DIR [TILEFUSE]      (TILEFUSE: default build/tilefuse)
set -euo pipefail
dir=${1:?usage: ptx_snapshot.sh DIR [TILEFUSE]}
tf=${2:-build/tilefuse}
mkdir -p "$dir"
for e in $("$tf" list | awk '{print $1}'); do
  "$tf" ptx "$e" >"$dir/$e.ptx"
  "$tf" ptx "$e" --split 0 >"$dir/$e.split0.ptx" 2>/dev/null
  "$tf" ptx "$e" --stages 0 >"$dir/$e.stages0.ptx" 2>/dev/null
  "$tf" ptx "$e" --target sm_80 >"$dir/$e.sm80.ptx"
done
echo "$(ls "$dir" | wc -l) PTX files in $dir"
