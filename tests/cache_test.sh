#!/usr/bin/env bash
# The disk cache of compiled kernels across processes: a second process compiles nothing for a
# plan the first compiled, and prints the same PTX; eight processes writing one cache at once
# leave only whole entries and each prints what a lone process prints; a damaged entry is
# recompiled; the size limit evicts; `cache time` reports each phase of a cold compile;
# TILEFUSE_CACHE=0 turns it off.
set -uo pipefail
tf="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export TILEFUSE_CACHE_DIR="$dir/cache"
unset TILEFUSE_CACHE TILEFUSE_CACHE_MAX_MB
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
report() { grep -o '[0-9]* compiled, [0-9]* from the disk cache' "$1"; }

TILEFUSE_CACHE=0 "$tf" ptx softmax >"$dir/want" 2>/dev/null || fail "tilefuse ptx softmax without a cache"
"$tf" ptx softmax --cache-report >"$dir/first" 2>"$dir/first.err" || fail "first process"
[ "$(report "$dir/first.err")" = "1 compiled, 0 from the disk cache" ] || fail "first process: $(cat "$dir/first.err")"
"$tf" ptx softmax --cache-report >"$dir/second" 2>"$dir/second.err" || fail "second process"
[ "$(report "$dir/second.err")" = "0 compiled, 1 from the disk cache" ] || fail "second process: $(cat "$dir/second.err")"
cmp -s "$dir/want" "$dir/first" && cmp -s "$dir/want" "$dir/second" || fail "cached PTX differs from compiled PTX"

# Concurrent writers: shared and distinct examples, three rounds on a fresh cache.
"$tf" cache clear >/dev/null
names=(bias_gelu softmax layernorm rmsnorm_bf16 column_sum matmul_bias_gelu bias_gelu softmax)
for n in "${names[@]}"; do TILEFUSE_CACHE=0 "$tf" ptx "$n" >"$dir/$n.want" 2>/dev/null; done
for round in 1 2 3; do
  pids=()
  for i in "${!names[@]}"; do
    "$tf" ptx "${names[$i]}" >"$dir/out.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || fail "round $round process $i exited $?"
    cmp -s "$dir/out.$i" "$dir/${names[$i]}.want" || fail "round $round process $i: PTX differs from a lone run"
  done
done
"$tf" cache stats >"$dir/stats" || fail "cache stats after concurrent writers: $(cat "$dir/stats")"
grep -q "  6 kernels" "$dir/stats" || fail "expected the 6 distinct kernels: $(cat "$dir/stats")"
[ -z "$(find "$TILEFUSE_CACHE_DIR" -name '.*.*')" ] || fail "temporary files left behind"

# A damaged entry is not served: the kernel is compiled again and the entry replaced.
entry=$(ls "$TILEFUSE_CACHE_DIR"/*/*.tfk | head -1)
head -c 100 "$entry" >"$entry.cut" && mv "$entry.cut" "$entry"
"$tf" cache stats >/dev/null && fail "cache stats does not count a damaged entry"
for n in bias_gelu softmax layernorm rmsnorm_bf16 column_sum matmul_bias_gelu; do
  "$tf" ptx "$n" >"$dir/again" 2>/dev/null && cmp -s "$dir/again" "$dir/$n.want" || fail "$n after damage"
done
"$tf" cache stats >/dev/null || fail "the damaged entry was not replaced"

# The size limit: these kernels with their LLVM IR (kept for a dump of it) take over 2 MB; under
# a 1 MB limit the oldest are evicted.
"$tf" cache clear >/dev/null
mkdir -p "$dir/dumps"
export TILEFUSE_DUMP=llvm TILEFUSE_DUMP_DIR="$dir/dumps"
compiled=0
for n in bias_gelu bias_gelu_bf16 softmax softmax_bf16 softmax_32k softmax_256k layernorm layernorm_bf16 rmsnorm \
         rmsnorm_bf16 column_sum matmul matmul_bias_gelu log_softmax; do
  for opts in "" "--target sm_80" "--no-fuse" "--library-gemm never"; do
    TILEFUSE_CACHE_MAX_MB=1 "$tf" ptx "$n" $opts --cache-report >/dev/null 2>"$dir/limit.err" || fail "ptx $n $opts under a 1 MB limit"
    compiled=$((compiled + $(report "$dir/limit.err" | cut -d' ' -f1)))
  done
done
bytes=$(find "$TILEFUSE_CACHE_DIR" -name '*.tfk' -printf '%s\n' | awk '{n += $1} END {print n + 0}')
entries=$(find "$TILEFUSE_CACHE_DIR" -name '*.tfk' | wc -l)
[ "$bytes" -le $((1 << 20)) ] || fail "cache holds $bytes bytes over its 1 MB limit"
[ "$entries" -lt "$compiled" ] || fail "nothing evicted: $entries entries of $compiled kernels compiled"
unset TILEFUSE_DUMP TILEFUSE_DUMP_DIR

# Cold and warm compile times: each phase through LLVM, within the cold total.
"$tf" cache time softmax >"$dir/time" 2>&1 || fail "cache time: $(cat "$dir/time")"
grep -q "1 through LLVM: Tile IR [0-9.]*, LLVM IR [0-9.]*, O3 [0-9.]*, PTX [0-9.]*), warm [0-9.]* ms (1 from the disk cache)" \
  "$dir/time" || fail "cache time: $(cat "$dir/time")"
sed -E 's/.*cold ([0-9.]+) ms .*Tile IR ([0-9.]+), LLVM IR ([0-9.]+), O3 ([0-9.]+), PTX ([0-9.]+)\).*/\1 \2 \3 \4 \5/' "$dir/time" |
  awk '{ if (NF != 5 || $2 + $3 + $4 + $5 > $1 + 0.05) exit 1 }' ||
  fail "cache time: the phases exceed the cold total: $(cat "$dir/time")"

# Off.
"$tf" cache clear >/dev/null
TILEFUSE_CACHE=0 "$tf" ptx softmax --cache-report >/dev/null 2>"$dir/off.err"
[ "$(report "$dir/off.err")" = "1 compiled, 0 from the disk cache" ] || fail "TILEFUSE_CACHE=0: $(cat "$dir/off.err")"
[ -z "$(find "$TILEFUSE_CACHE_DIR" -name '*.tfk')" ] || fail "TILEFUSE_CACHE=0 wrote entries"

echo "disk cache: $fails failed"
[ $fails -eq 0 ]
