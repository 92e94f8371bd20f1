#!/usr/bin/env bash
# On the GPU machine: every timed bar of the matmul issue in one call. The GPU matmul and
# cuBLASLt tests; then ROUNDS (default 3) rounds, each torch's medians (cuBLAS through
# torch.matmul on each shape, cuBLASLt's tanh-GELU epilogue through torch._addmm_activation and
# eager gelu(a·w + b)) followed by tilefuse's own kernels on the same shapes; the products of 1
# and 16 rows against the copy ceiling; cold compile times (TESTS=0 skips the tests).
# $OUT/matmul_bars.log has every line, and the summary gives each shape's speedup over its peer
# per round. Needs bundle/ (scripts/build_bundle.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
gzip -dkf bundle/libtilefuse.so.gz 2>/dev/null
. scripts/gpu_env.sh
export TILEFUSE_CACHE_DIR=${TILEFUSE_CACHE_DIR:-/tmp/tilefuse-matmul-bars}
ROUNDS=${ROUNDS:-3}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
echo "bundle $(cat $B/COMMIT 2>/dev/null)"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 240 $B/tilefuse_tests --gtest_filter='GpuMatMul.*:GpuCublaslt.*' --gtest_brief=1 >"$OUT/matmul_tests.log" 2>&1
  echo "tests exit: $?"
  grep -E "FAILED|PASSED|Failure" "$OUT/matmul_tests.log" | head -10
fi
cat >"$OUT/matmul_peers.py" <<'PY'
import sys, torch
sys.path.insert(0, "bench")
from gpu_timing import median_ms
bf = torch.bfloat16
shapes = {"matmul": (8192, 8192, 8192), "matmul_4096": (4096, 4096, 4096), "matmul_ffn": (8192, 28672, 4096),
          "matmul_k1024": (16384, 4096, 1024), "matmul_odd": (8191, 4095, 4097), "matmul_m1": (1, 8192, 8192),
          "matmul_m16": (16, 8192, 8192)}
for name, (m, n, k) in shapes.items():
    a = torch.randn(m, k, dtype=bf, device="cuda"); b = torch.randn(k, n, dtype=bf, device="cuda")
    t = median_ms(lambda: a @ b, 50)
    print(f"peer {name} torch.matmul median {t:.4f} ms {2 * m * n * k / t / 1e9:.1f} TFLOP/s")
    del a, b
m, n, k = 16384, 4096, 1024
a = torch.randn(m, k, dtype=bf, device="cuda"); w = torch.randn(k, n, dtype=bf, device="cuda")
bias = torch.randn(n, dtype=bf, device="cuda")
t = median_ms(lambda: torch._addmm_activation(bias, a, w, use_gelu=True), 50)
print(f"peer matmul_bias_gelu_k1024 cuBLASLt-tanh-GELU median {t:.4f} ms")
t = median_ms(lambda: torch.nn.functional.gelu(a @ w + bias), 50)
print(f"peer matmul_bias_gelu_k1024 eager median {t:.4f} ms")
PY
CASES="matmul matmul_4096 matmul_ffn matmul_k1024 matmul_odd matmul_m1 matmul_m16 matmul_bias_gelu_k1024"
for r in $(seq "$ROUNDS"); do
  python3 "$OUT/matmul_peers.py" 2>&1 | sed "s/^/r$r /"
  for n in $CASES; do
    timeout 60 $B/tilefuse run "$n" --library-gemm never --bench --iters 50 2>&1 |
      grep -E "^  median|^  predicted|TFLOP|FAIL|rror" | tr -s ' \n' ' ' | sed "s/^/r$r own $n /"
    echo
  done
done | tee "$OUT/matmul_bars.log"
# The products of a few rows: bytes moved against the same call's copy ceiling (checked too).
timeout 120 $B/tilefuse bench --json "$OUT/matmul_few_rows.json" matmul_m1 matmul_m16 2>&1 |
  grep -E "copy ceiling|of copy|FAIL" | tee -a "$OUT/matmul_bars.log"
timeout 120 $B/tilefuse cache time matmul matmul_odd matmul_bias_gelu matmul_bias_gelu_k1024 --library-gemm never 2>&1 |
  tee -a "$OUT/matmul_bars.log"
python3 - "$OUT/matmul_bars.log" <<'PY'
import collections, re, sys
peer, own = collections.defaultdict(dict), collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m = re.match(r"r(\d+) peer (\S+) (\S+) median ([0-9.]+)", line)
    if m: peer[(m.group(2), m.group(3))][m.group(1)] = float(m.group(4))
    m = re.match(r"r(\d+) own (\S+) .*median ([0-9.]+)", line)
    if m: own[m.group(2)][m.group(1)] = float(m.group(3))
for (name, impl), rounds in sorted(peer.items()):
    mine = own.get(name, {})
    ratios = [rounds[r] / mine[r] for r in sorted(rounds) if r in mine]
    print(f"{name:24s} vs {impl:20s}: " + ", ".join(f"{x:.3f}x" for x in ratios) + "  (>1: tilefuse faster)")
PY
