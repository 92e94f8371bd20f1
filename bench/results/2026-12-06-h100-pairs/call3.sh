#!/bin/bash
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh; export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader; cat bundle/COMMIT
echo "== tests"
timeout 150 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttention.PrefillScheduleMatchesTheUnfusedPlan:GpuAttention.WgmmaPlansMatchFloat64:GpuAttention.GridMatchesFloat64' > $OUT/tests.log 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|rror" $OUT/tests.log | tail -5
for n in attention_causal attention_n4097_causal; do echo "$n $(timeout 60 bundle/tilefuse run $n --bench --iters 50 2>&1 | grep -m1 median)"; done
R=clocks_event_reasons.active; nvidia-smi --query-gpu=$R --format=csv,noheader >/dev/null 2>&1 || R=clocks_throttle_reasons.active
summ() { python3 - $1 $2 <<'PY'
import sys, statistics
rows=[l.split(", ") for l in open(sys.argv[1]) if l.count(",")>=4]
busy=[r for r in rows if float(r[2].split()[0])>300]
if busy:
  c=[float(r[1].split()[0]) for r in busy]; p=[float(r[2].split()[0]) for r in busy]
  print(f"{sys.argv[2]}: {len(busy)} busy samples, SM clock median {statistics.median(c):.0f} MHz (min {min(c):.0f}), power median {statistics.median(p):.0f} W")
PY
}
echo "== power: ours, then cuDNN, each ~4 s of steps"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,$R --format=csv,noheader -lms 20 > $OUT/smi_ours.csv & p=$!
timeout 60 bundle/tilefuse run attention_train --bench --iters 240 2>&1 | grep -E "median" ; kill $p; summ $OUT/smi_ours.csv ours
sleep 5
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,$R --format=csv,noheader -lms 20 > $OUT/smi_cudnn.csv & p=$!
timeout 90 python3 - <<'PY'
import torch, time
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn(8, 32, 4096, 128, dtype=torch.bfloat16, device="cuda", requires_grad=True) for _ in range(3))
do = torch.randn(8, 32, 4096, 128, dtype=torch.bfloat16, device="cuda")
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    def step():
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        torch.autograd.grad(o, (q, k, v), do)
    for _ in range(5): step()
    torch.cuda.synchronize(); s = time.time(); n = 240
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n): step()
    e1.record(); torch.cuda.synchronize()
    print(f"cudnn fwd+bwd B8 H32 N4096 d128: {e0.elapsed_time(e1)/n:.3f} ms a step (mean of {n} back to back)")
PY
kill $p; summ $OUT/smi_cudnn.csv cudnn
echo "== fuzz"
timeout 170 bundle/tilefuse_fuzz --count 300 --gpu --jobs 12 --seconds 140 > $OUT/fuzz.log 2>&1; echo "fuzz rc=$?"; tail -5 $OUT/fuzz.log
