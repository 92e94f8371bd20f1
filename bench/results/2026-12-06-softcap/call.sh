#!/usr/bin/env bash
# The softcap's tanh in its absolute-error form (math::tanh_absolute) and ALiBi's scores as one fma on
# a per-row positions difference, one call: this bundle against
# the previous one (bench/tmp/old, 774f33b) on the softcap and the headline, interleaved; SDPA's
# cuDNN and FlexAttention on the same shapes; first the GPU tests that check it — the new tanh's
# bound (GpuMath) and every attention test, the softcap and ALiBi chains of the 288-case grid
# among them.
cd "$(dirname "$0")/../../.."
export TILEFUSE_CACHE=0 OUT=${OUT:-/tmp}
[ -f bundle/libtilefuse.so ] || gzip -dk bundle/libtilefuse.so.gz
timeout 200 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuMath.*:GpuAttention.*' >"$OUT/tests.log" 2>&1
echo "tests exit $?"
grep -E "score tanh|F32 tanh|FAILED|PASSED|Failure" "$OUT/tests.log" | head -20
OLD=bench/tmp/old ROUNDS=2 ITERS=30 NAMES="attention_softcap attention_alibi attention" bash scripts/gpu_ab.sh >/dev/null
cat "$OUT/ab.md"
timeout 150 python3 bench/attention_peers.py attention_softcap attention_alibi attention 2>&1 | grep -E "^peer" | tee "$OUT/peers.log"
