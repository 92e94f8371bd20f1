#!/usr/bin/env bash
# The CLI's contract: clear messages and non-zero exits on bad input; dumps; the no-GPU answer.
set -uo pipefail
tf="$1"
fails=0
expect() {  # expect NAME WANT_RC PATTERN -- CMD...
  local name=$1 want=$2 pattern=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: exit $rc (want $want), output lacks /$pattern/:"
    echo "$out" | head -20
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
expect list 0 "bias_gelu_bf16" -- "$tf" list
expect graph 0 'output "y" = %3' -- "$tf" graph bias_gelu
expect plan 0 "unfused +2 +2 +1,073,774,592" -- "$tf" plan bias_gelu
expect plan-json 0 '"verdict": "fused"' -- "$tf" plan bias_gelu --json
expect unknown-example 2 "unknown graph 'nope'; known: bias_gelu" -- "$tf" plan nope
expect unknown-flag 2 "unknown option '--frob'" -- "$tf" plan bias_gelu --frob
expect unknown-command 2 "unknown command 'explode'" -- "$tf" explode
expect no-command 2 "no command given" -- "$tf"
expect bad-int 2 "--max-registers needs an integer from 1 to 255, got 'x'" -- "$tf" plan bias_gelu --max-registers x
expect bad-target 2 "unknown target 'sm_75'" -- "$tf" ptx bias_gelu --target sm_75
expect bad-kernel 2 "has no kernel 'k9'; its kernels: bias_gelu_k0" -- "$tf" ptx bias_gelu --kernel k9
expect two-names 2 "takes one example name" -- "$tf" graph bias_gelu bias_gelu_bf16
expect bad-cluster 2 "--max-cluster needs an integer from 1 to 16, got '17'" -- "$tf" plan softmax_256k --max-cluster 17
expect split-plan 0 "rows split into [0-9]+ parts that meet in global memory, 1 blocks per SM, persistent: [0-9]+ parts ahead in shared memory by bulk copies \([0-9]+ KiB per stage\)" -- "$tf" plan softmax_256k
expect claimed-plan 0 "persistent: [0-9]+ rows? ahead in shared memory by bulk copies \([0-9]+ KiB per stage\), rows after the first [0-9]+ rounds claimed from a counter" -- "$tf" plan softmax_32k_bf16
expect cluster-plan 0 "clusters of [0-9]+ blocks per row \(an exchange a pass\), a block barrier a pass, 1 blocks per SM, persistent: [0-9]+ rows? ahead in shared memory by bulk copies \([0-9]+ KiB per stage\), each stage refilled as soon as read" -- "$tf" plan softmax_256k --split 0
expect bad-split 2 "--split needs an integer from 0 to 1, got '2'" -- "$tf" plan softmax_256k --split 2
expect register-cluster-plan 0 "clusters of [0-9]+ blocks per row, 2 blocks per SM, 4-wide" -- "$tf" plan softmax_256k --stages 0
expect bad-stages 2 "--stages needs an integer from 0 to 4, got '5'" -- "$tf" plan softmax_256k --stages 5
expect negative-stages 2 "--stages needs an integer from 0 to 4, got '-1'" -- "$tf" plan softmax_256k --stages -1
expect bad-overlap 2 "--attention-overlap needs an integer from 0 to 1 or auto, got 'x'" -- "$tf" plan attention --attention-overlap x
expect auto-overlap 0 "the softmax overlapped with the previous tile's P·V" -- "$tf" plan attention --attention-overlap auto --kv-splits auto --wgmma auto
expect bad-rows 2 "--attention-rows needs 64 or 128, got '96'" -- "$tf" plan attention --attention-rows 96
expect two-warpgroups 0 "128 query rows per block" -- "$tf" plan attention --attention-rows 128
expect odd-threads 2 "block_threads \(--block-threads 33\) must be a power of two" -- "$tf" plan bias_gelu --block-threads 33
expect no-cluster-plan 0 "a loop of [0-9]+ column tiles" -- "$tf" plan softmax_256k --max-cluster 1 --split 0
expect sm80-plan 0 "a loop of [0-9]+ column tiles" -- "$tf" plan softmax_256k --target sm_80
expect sm80-no-cluster 0 "threads, [0-9]+ blocks\), (a block barrier a pass, )?4-wide vectors" -- "$tf" plan softmax_32k --target sm_80
expect bench-needs-json 2 "bench needs --json FILE" -- "$tf" bench
expect explain 0 "max 2, sum 1.3678794: probabilities \[0, 0.26894143, 0, 0.7310586\]" -- "$tf" explain softmax
expect explain-row 0 "probabilities \[0.5, 0.5\]" -- "$tf" explain softmax --row 3,3 --tile 1
expect explain-bad-row 2 "--row takes comma-separated numbers" -- "$tf" explain softmax --row 1,x
expect explain-attention 0 "float64: +\[-0.477329, 0.47465, -0.103957, 0.383321\]" -- "$tf" explain attention
expect explain-causal 0 "keys 0..2: s \[1.375, -inf, -inf\].*O / l = \[-2, 0, 2, -1\]" -- sh -c "'$tf' explain attention --causal --tile 3 | tr '\n' ' '"
expect explain-unknown 2 "explain knows 'softmax' and 'attention'" -- "$tf" explain layernorm
# Failures become messages and exit 1, never an abort; output that cannot be written is an error.
expect full-stdout-ptx 1 "No space left on device" -- sh -c "'$tf' ptx softmax >/dev/full"
expect full-stdout-list 1 "No space left on device" -- sh -c "'$tf' list >/dev/full"
expect bad-tmpdir 1 "set TMPDIR to a writable directory" -- env TMPDIR=/nonexistent "$tf" plan bias_gelu
expect bad-ptxas 1 "cannot run ptxas at /nonexistent \(TILEFUSE_PTXAS\)" -- env TILEFUSE_PTXAS=/nonexistent "$tf" plan bias_gelu
expect bench-bad-path 1 "bench: cannot write /nonexistent/dir/x.json" -- "$tf" bench --json /nonexistent/dir/x.json bias_gelu
# Hints no kernel takes and dump stages tilefuse does not know are reported.
expect ignored-hint 0 "note: --rows-per-thread 3 changes no kernel's schedule" -- "$tf" plan softmax --rows-per-thread 3
expect bogus-dump 0 "TILEFUSE_DUMP names an unknown stage 'bogus'" -- env TILEFUSE_DUMP=bogus "$tf" tile bias_gelu
# Seeds are 64-bit; rows take any f32 (subnormals too) and refuse what f32 cannot hold.
expect seed-64 0 "output \"y\"" -- "$tf" graph bias_gelu --seed 18446744073709551615
expect seed-negative 2 "--seed needs an integer from 0 to 18446744073709551615" -- "$tf" graph bias_gelu --seed -1
expect row-subnormal 0 "probabilities \[0.26894143, 0.7310586\]" -- "$tf" explain softmax --row 1e-40,1
expect row-overflow 2 "1e40 is beyond the range of f32" -- "$tf" explain softmax --row 1e40
# The kernel's numbers beside float64: the GPU's, or without one its Tile IR run on the host.
expect explain-kernel 0 "(GPU kernel|kernel on the host): +\[0, 0.26894143, 0, 0.7310586\]" -- "$tf" explain softmax
expect explain-attention-kernel 0 "(GPU kernel \(bf16\)|kernel on host): +\[-0.4765" -- "$tf" explain attention
expect run-host 0 "on the host \(each kernel's Tile IR interpreted\), 1 kernel, inputs seeded 5.*output o: relative error.*ok" -- sh -c "'$tf' run attention_small --host --check --seed 5 | tr '\n' ' '"
expect run-host-bench 2 "--bench times the GPU's kernels; --host runs them on the host" -- "$tf" run attention_small --host --bench
if [ ! -e /dev/nvidia0 ] && ! ldconfig -p 2>/dev/null | grep -q libcuda.so.1; then
  expect run-no-gpu 69 "no GPU present" -- "$tf" run bias_gelu --check
  expect measured-profile-no-gpu 69 "no GPU present" -- "$tf" plan bias_gelu --measured-profile
fi
dir=$(mktemp -d)
TILEFUSE_DUMP=graph,plan,tile,llvm,ptx TILEFUSE_DUMP_DIR=$dir "$tf" ptx gelu_two_consumers >/dev/null
for f in gelu_two_consumers.graph gelu_two_consumers.plan gelu_two_consumers_k0.tile gelu_two_consumers_k0.llvm gelu_two_consumers_k0.ptx; do
  if [ -s "$dir/$f" ]; then echo "ok   dump $f"; else echo "FAIL dump $f missing"; fails=$((fails + 1)); fi
done
rm -rf "$dir"
[ $fails -eq 0 ]
