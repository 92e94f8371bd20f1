#!/usr/bin/env bash
# Third call: why the backward's kernels run ~9% slower in attention_train's plan than alone on
# random row values (TrainingShapeTimed). Nsight Compute, clocks not locked, on the plan's dK/dV
# and dQ kernels and on the test's wgmma kernels (non-causal: the launches after the mma.sync
# ones): time, SM clock, cycles, instructions, L2 and DRAM bytes. bundle/ at fc5061e.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,smsp__inst_executed.sum,lts__t_bytes.sum,dram__bytes_read.sum
for k in attention_train_k2 attention_train_k3; do
  timeout 150 ncu --clock-control none --metrics $M -k regex:$k -c 1 bundle/tilefuse run attention_train 2>&1 |
    grep -E "^  [a-z_0-9]+ \(|gpu__|sm__|smsp__|lts__|dram__"
done | tee "$OUT/ncu_plan.log"
# The test: mma.sync's 2 × (11 + 11) launches, then wgmma's dK/dV (11) and dQ (11).
timeout 300 ncu --clock-control none --metrics $M -k regex:attention_backward --launch-skip 44 --launch-count 13 \
  bundle/tilefuse_tests --gtest_filter=GpuAttentionBackward.TrainingShapeTimed 2>&1 |
  grep -E "^  [a-z_0-9]+ \(|gpu__|sm__cycles_elapsed.avg.per|smsp__|lts__|dram__|backward" | tee "$OUT/ncu_test.log" | tail -60
