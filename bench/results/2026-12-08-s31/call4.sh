#!/usr/bin/env bash
# Call 4 (bundle d9aabe2): Nsight Compute on two kernels the model and the clock disagree on —
# mlp_train's GELU, GELU' and db1 kernel (k2: 0.449 ms against 0.256 predicted) and the
# one-kernel backward with dQ summed by TMA's reductions (attention_train's k2 with
# --attention-dq-sums 1 --attention-dq-tma 1: 13.2 ms in the step against 6.6 + 5.1 for the two).
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
export TILEFUSE_CACHE=0
start=$SECONDS
timeout 150 ncu --clock-control none --set full -k regex:mlp_train_k2 --launch-skip 1 --launch-count 1 -f -o "$OUT/gelu" \
  bundle/tilefuse run mlp_train --bench --iters 2 >"$OUT/ncu_gelu_run.log" 2>&1; echo "ncu gelu exit $?"
timeout 240 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section SchedulerStats --section LaunchStats --section Occupancy -k regex:attention_train_k2 --launch-skip 1 --launch-count 1 -f -o "$OUT/dq_tma" \
  bundle/tilefuse run attention_train --bench --iters 2 --attention-dq-sums 1 --attention-dq-tma 1 >"$OUT/ncu_dq_run.log" 2>&1; echo "ncu dq exit $?"
for r in gelu dq_tma; do
  [ -f "$OUT/$r.ncu-rep" ] && ncu -i "$OUT/$r.ncu-rep" --page details >"$OUT/${r}_details.txt" 2>&1
done
grep -E "Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Compute \(SM\) Throughput|L2 Cache Throughput|Block Limit|Warp Cycles Per Issued|Stall|Executed Ipc" "$OUT"/*_details.txt | head -60
rm -f "$OUT"/*.ncu-rep
echo "all: $((SECONDS - start)) s"
