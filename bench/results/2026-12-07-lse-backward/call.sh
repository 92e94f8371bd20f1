#!/usr/bin/env bash
# One call: bundle/ at b3ded09 (the attention backward in the log-sum-exp form, aeac034), build-ef9/
# at ef98fe9 (the backward before it: c and h read, the log in each dK/dV and dQ step). The card
# first; the backward's GPU tests; the A/B of the training pair with each kernel's time; SDPA's
# training peers and the headline forward pair with cuDNN in the same call.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
echo "check attention_train_small: $(timeout 30 bundle/tilefuse run attention_train_small --check 2>&1 | grep -iE 'error|fail' | head -3 | tr '\n' ' ')"
timeout 200 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttentionBackward.*' >"$OUT/backward_tests.log" 2>&1
echo "backward tests exit $?"; grep -E "FAILED|PASSED|Failure|backward|worst" "$OUT/backward_tests.log" | head -12
OLD=build-ef9 NAMES="attention_train attention_train_causal" ROUNDS=2 ITERS=10 timeout 200 bash scripts/gpu_ab.sh >/dev/null 2>&1
cat "$OUT/ab.md"; grep -E "_k[0-9]: median" "$OUT/ab.log" | sort | awk '{print $1, $3, $5}' | sort | uniq -c | head -40
# (ran as an inline copy of what bench/attention_train_peers.py now is, cuDNN only)
timeout 120 python3 bench/attention_train_peers.py cudnn 2>&1 | tee "$OUT/attention_train_peers.log"
for n in attention attention_causal; do timeout 40 bundle/tilefuse run $n --bench --iters 30 2>&1 | grep -E "^  median" | sed "s/^/$n /"; done
timeout 100 python3 bench/attention_peers.py attention attention_causal 2>&1 | grep -E "^peer.*cudnn"
