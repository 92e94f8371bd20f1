#!/usr/bin/env bash
# Both of this session's measurements in one call, in order of need (each step's output lands
# under $OUT as it finishes, so a call cut short keeps what ran): the softcap/ALiBi call
# (call.sh: tests, A/B against 774f33b, peers), then the 8192³ GEMM call
# (../2026-12-06-matmul-8192/call.sh: schedules interleaved with cuBLAS, clocks, Nsight Compute).
cd "$(dirname "$0")/../../.."
bash bench/results/2026-12-06-softcap/call.sh 2>&1 | tee "${OUT:-/tmp}/softcap.log"
bash bench/results/2026-12-06-matmul-8192/call.sh 2>&1 | tee "${OUT:-/tmp}/matmul.log"
