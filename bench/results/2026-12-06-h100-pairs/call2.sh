#!/bin/bash
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh; export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
R=clocks_event_reasons.active; nvidia-smi --query-gpu=$R --format=csv,noheader >/dev/null 2>&1 || R=clocks_throttle_reasons.active
echo "== tests (pair order)"
timeout 150 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttention.PrefillScheduleMatchesTheUnfusedPlan:GpuAttention.WgmmaPlansMatchFloat64' > $OUT/tests.log 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|rror|worst" $OUT/tests.log | tail -12
sample() {  # $1 tag, rest: command
  local tag=$1; shift
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,$R --format=csv,noheader -lms 20 > $OUT/smi_$tag.csv 2>&1 & local p=$!
  "$@" 2>&1 | grep -E "median" | head -5; kill $p; wait $p 2>/dev/null
  python3 - $OUT/smi_$tag.csv $tag <<'PY'
import sys, statistics
rows=[l.split(", ") for l in open(sys.argv[1]) if l.count(",")>=4]
busy=[r for r in rows if float(r[2].split()[0])>300]
if busy:
  c=[float(r[1].split()[0]) for r in busy]; p=[float(r[2].split()[0]) for r in busy]
  reasons={}
  for r in busy: reasons[r[4].strip()]=reasons.get(r[4].strip(),0)+1
  print(f"{sys.argv[2]}: {len(busy)} busy samples, SM clock median {statistics.median(c):.0f} MHz (min {min(c):.0f}), power median {statistics.median(p):.0f} W, reasons {reasons}")
PY
}
sample plan bundle/tilefuse run attention_train --bench --iters 40
sample keys_alone bundle/tilefuse_tests --gtest_filter=GpuAttentionBackward.TrainingShapeTimed
sample fwd bundle/tilefuse run attention --bench --iters 100
echo "== causal A/B, 3 rounds"
for r in 1 2 3; do
  for n in attention_causal attention_n4097_causal attention_gqa_causal; do
    echo "pairs $n $(timeout 60 bundle/tilefuse run $n --bench --iters 50 2>&1 | grep -m1 median)"
    echo "old $n $(TILEFUSE_AB_OLD_ORDER=1 timeout 60 bundle/tilefuse run $n --bench --iters 50 2>&1 | grep -m1 median)"
  done
  echo "pairs-nonpersistent attention_n4097_causal $(timeout 60 bundle/tilefuse run attention_n4097_causal --bench --iters 50 --attention-persistent 0 2>&1 | grep -m1 median)"
done | tee $OUT/ab.log
