#!/usr/bin/env bash
# On the GPU machine: attention's benchmark examples and family (dsl_examples/attention.cpp:
# head dimensions 64 and 256, N 4097, grouped heads, a softcap, ALiBi, a sliding window) timed by
# tilefuse and, in the same call, by PyTorch — SDPA's cuDNN and flash backends and FlexAttention
# under torch.compile (bench/attention_peers.py) — then one table of times and ratios; with
# NCU=1 also Nsight Compute's DRAM bytes of the headline kernel against those of q, k, v and o.
# Needs bundle/ (scripts/build_bundle.sh); NAMES picks graphs, FLAGS adds tilefuse options,
# ROUNDS repeats ours and the peers' in turn; logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
export TILEFUSE_CACHE=0
NAMES=${NAMES:-"attention attention_causal attention_gqa attention_gqa_causal attention_d64 attention_d64_causal
  attention_d256 attention_d256_causal attention_n4097 attention_n4097_causal attention_softcap attention_alibi
  attention_window"}
echo "bundle $(cat $B/COMMIT 2>/dev/null); $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)"
for round in $(seq 1 "${ROUNDS:-1}"); do
  for n in $NAMES; do
    # shellcheck disable=SC2086
    timeout 120 $B/tilefuse run "$n" --bench --iters "${ITERS:-30}" ${FLAGS:-} 2>&1 | grep -E "median|rror" | sed "s/^/tilefuse $n /"
  done | tee -a "$OUT/attention_family_tilefuse.log"
  # shellcheck disable=SC2086
  timeout 420 python3 bench/attention_peers.py $NAMES 2>&1 | grep -E "^peer" | tee -a "$OUT/attention_family_peers.log"
done
python3 - "$OUT/attention_family_tilefuse.log" "$OUT/attention_family_peers.log" <<'PY' | tee "$OUT/attention_family.md"
import re, statistics, sys
sys.path.insert(0, "bench")
from attention_peers import SHAPES
ours, peers = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"tilefuse (\S+) +median ([0-9.]+) ms", line)
    if m: ours.setdefault(m[1], []).append(float(m[2]))
for line in open(sys.argv[2]):
    m = re.match(r"peer (\S+) (\S+): ([0-9.]+) ms", line)
    if m: peers.setdefault((m[1], m[2]), []).append(float(m[3]))
print("| graph | tilefuse ms | TFLOP/s | cuDNN ms | ×cuDNN | flash ms | Flex ms | ×Flex |")
print("|---|---|---|---|---|---|---|---|")
for name, (b, hq, hkv, n, d, kind) in SHAPES.items():
    if name not in ours: continue
    t = statistics.median(ours[name])
    flops = 4 * b * hq * n * n * d / (2 if kind in ("causal", "alibi") else 1)
    def peer(p):
        v = peers.get((name, p))
        return statistics.median(v) if v else None
    f = lambda v: f"{v:.3f}" if v else "–"
    r = lambda v: f"{v / t:.2f}" if v else "–"
    c, fl, fx = peer("cudnn"), peer("flash"), peer("flex")
    tf = f"{flops / t / 1e9:.0f}" if kind != "window" else "–"
    print(f"| {name} | {t:.3f} | {tf} | {f(c)} | {r(c)} | {f(fl)} | {f(fx)} | {r(fx)} |")
print("(× = the peer's time over tilefuse's: above 1 tilefuse is faster; TFLOP/s of 4·B·H·N²·D, halved when causal)")
PY
if [ "${NCU:-0}" = 1 ]; then
  # q, k, v and o of B8 H32 N4096 d128 bf16: 4 × 268,435,456 bytes.
  timeout 120 ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum -k regex:attention_k0 -c 1 \
    $B/tilefuse run attention >"$OUT/ncu_attention_dram.txt" 2>&1
  echo "ncu exit $?; q, k, v and o: 1073741824 bytes"
  grep -E "dram__bytes" "$OUT/ncu_attention_dram.txt"
fi
