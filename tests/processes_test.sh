#!/usr/bin/env bash
# Eight CLI processes at once, five rounds: each plans (running ptxas on a file of its own) and
# prints PTX; every run must succeed with the output one process alone gives.
set -uo pipefail
tf="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tf" plan bias_gelu >"$dir/plan.want" 2>&1 || { echo "FAIL: tilefuse plan bias_gelu alone"; exit 1; }
"$tf" ptx softmax >"$dir/ptx.want" 2>&1 || { echo "FAIL: tilefuse ptx softmax alone"; exit 1; }
fails=0
for round in 1 2 3 4 5; do
  pids=()
  for p in 1 2 3 4 5 6 7 8; do
    if [ $((p % 2)) -eq 0 ]; then
      "$tf" plan bias_gelu >"$dir/out.$p" 2>&1 &
    else
      "$tf" ptx softmax >"$dir/out.$p" 2>&1 &
    fi
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    p=$((i + 1))
    want=$([ $((p % 2)) -eq 0 ] && echo plan || echo ptx)
    if ! wait "${pids[$i]}"; then
      echo "FAIL round $round process $p: exit status $?"
      head -5 "$dir/out.$p"
      fails=$((fails + 1))
    elif ! cmp -s "$dir/out.$p" "$dir/$want.want"; then
      echo "FAIL round $round process $p: output differs from a lone run"
      fails=$((fails + 1))
    fi
  done
done
echo "8 processes × 5 rounds: $fails failed"
[ $fails -eq 0 ]
