#!/usr/bin/env bash
# Call 2: bundle/ (the backward reading M = −L·log2 e as autodiff now gives it; d 256
# overlapped and persistent as options) against build-base/ (445df71). GPU checks first; then the
# training step A/B, interleaved, with cuDNN's step in the same call; then d 256's four schedules
# interleaved with SDPA's cuDNN and flash on the same shapes.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
start=$SECONDS
timeout 60 bundle/tilefuse_tests --gtest_filter='GpuAttentionBackward.FusedPlansMatchFloat64:GpuAttention.WgmmaPlansMatchFloat64' >"$OUT/gpu_tests.log" 2>&1; echo "tests exit $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure" "$OUT/gpu_tests.log" | head -20
echo "check attention_train_small: $(timeout 20 bundle/tilefuse run attention_train_small --check 2>&1 | grep -iE 'error|fail' | head -4 | tr '\n' ' ')"
echo "checks: $((SECONDS - start)) s"
OLD=build-base NAMES="attention_train attention_train_causal" ROUNDS=2 ITERS=20 timeout $((150 - SECONDS)) bash scripts/gpu_ab.sh 2>&1 | tail -4
mv "$OUT/ab.log" "$OUT/ab_train.log"; mv "$OUT/ab.md" "$OUT/ab_train.md"
timeout 30 python3 bench/attention_train_peers.py cudnn 2>&1 | tee "$OUT/train_peers.log"
echo "train: $((SECONDS - start)) s"
for round in 1 2; do
  [ $SECONDS -lt 200 ] || break
  for n in attention_d256 attention_d256_causal; do
    for cfg in "plain:" "overlap:--attention-overlap 1" "persistent:--attention-persistent 1" "both:--attention-overlap 1 --attention-persistent 1"; do
      # shellcheck disable=SC2086
      timeout 30 bundle/tilefuse run $n --bench --iters 20 ${cfg#*:} 2>&1 | grep -E "median|rror" | sed "s/^/${cfg%%:*} $n /"
    done
  done
  timeout 30 python3 bench/attention_peers.py attention_d256 attention_d256_causal 2>&1 | grep -E "^peer"
  echo "round $round: $((SECONDS - start)) s"
done > "$OUT/d256.log"
python3 - "$OUT/d256.log" <<'PY' | tee "$OUT/d256.md"
import re, statistics, sys
runs, peers = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) (\S+) +median ([0-9.]+) ms \(min ([0-9.]+)", line)
    if m: runs.setdefault((m[2], m[1]), []).append((float(m[3]), float(m[4])))
    m = re.match(r"peer (\S+) (\S+): ([0-9.]+) ms", line)
    if m: peers.setdefault((m[1], m[2]), []).append(float(m[3]))
print("| graph | schedule | median (min) ms | ×cuDNN by median | by min | /plain (median) |")
print("|---|---|---|---|---|---|")
for (name, cfg), r in runs.items():
    med, mn = statistics.median(x[0] for x in r), min(x[1] for x in r)
    c = min(peers.get((name, "cudnn"), [float("nan")]))
    base = statistics.median(x[0] for x in runs.get((name, "plain"), r))
    print(f"| {name} | {cfg} | {med:.3f} ({mn:.3f}) | {c / med:.3f} | {c / mn:.3f} | {med / base:.3f} |")
for (name, label), t in peers.items(): print(f"peer {name} {label}: {', '.join(f'{x:.3f}' for x in t)} ms")
PY
grep round "$OUT/d256.log"
echo "all: $((SECONDS - start)) s"
