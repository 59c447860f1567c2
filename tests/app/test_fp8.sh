#!/usr/bin/env bash
# FP8 training end to end ("fp8": {"enabled": true}): a llama whose block projections run in FP8 trains beside the
# same run in bf16, says which projections run in FP8 (and, for a mixture of experts, that its experts do not), keeps
# its losses within a few percent of bf16's (with each recipe), a blockwise layer whose tensor-parallel share is not
# whole tiles and fp16 are refused before step 1.
# Usage: test_fp8.sh TANDEM_BINARY PYTHON. Prints one line per check and "N passed, M failed".
set -u
tandem="$1"
python="$2"
source "$(dirname "$0")/check_lib.sh"

cat >"$work/llama.json" <<'JSON'
{
  "model": { "type": "llama", "vocab_size": 256, "seq_len": 32, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2 },
  "data": { "type": "synthetic" },
  "train_batch_size": 8, "gradient_accumulation_steps": 2, "steps": 20, "seed": 5,
  "optimizer": { "type": "AdamW", "params": { "lr": 3e-3 } },
  "bf16": { "enabled": true }
}
JSON

run 300 "$tandem" train "$work/llama.json" --out "$work/bf16"
check "the bf16 reference trains" $rc "$(tail -3 "$work/out")"

run 300 "$tandem" train "$work/llama.json" --out "$work/fp8" --set fp8.enabled=true
check "the same run with fp8.enabled trains" $rc "$(tail -3 "$work/out")"
grep -q 'fp8 (tensorwise): 8 of this rank.s 8 block projections' "$work/out"
check "it says that all 8 block projections run in FP8" $? "$(grep fp8 "$work/out")"

# near_bf16 DIR: each step's loss within 1% of bf16's, the last at least 10% under the first (it learns).
near_bf16() {
  "$python" - "$work/bf16/metrics.jsonl" "$1/metrics.jsonl" <<'PY'
import json, sys
want, got = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
worst = max(abs(g - w) / w for g, w in zip(got, want))
print(f"fp8 against bf16: worst step {worst:.2%}; first {got[0]:.4f} last {got[-1]:.4f}")
sys.exit(0 if len(got) == len(want) == 20 and worst < 0.01 and got[-1] < 0.9 * got[0] else 1)
PY
}
near_bf16 "$work/fp8"
check "fp8 losses stay within 1% of bf16's at every step (0.17% measured) and fall" $?

# The per-row and per-tile recipes: the same run, the same bound.
for recipe in rowwise blockwise; do
  run 300 "$tandem" train "$work/llama.json" --out "$work/$recipe" --set fp8.enabled=true --set fp8.recipe=$recipe
  grep -q "fp8 ($recipe): 8 of this rank.s 8 block projections" "$work/out"
  check "fp8.recipe=$recipe trains all 8 block projections in FP8" $? "$(grep fp8 "$work/out"; tail -2 "$work/out")"
  near_bf16 "$work/$recipe"
  check "fp8.recipe=$recipe losses stay within 1% of bf16's at every step and fall" $?
done

run 300 "$tandem" train "$work/llama.json" --out "$work/min" --set fp8.enabled=true --set fp8.min_features=128
grep -q 'fp8 (tensorwise): 0 of this rank.s 8 block projections' "$work/out"
check "fp8.min_features 128 keeps every projection (each has the 64 hidden features) in bf16" $? "$(grep fp8 "$work/out")"

# A mixture of experts: its attention's projections in FP8, and the line says its experts stay in bf16.
run 120 "$tandem" train "$work/llama.json" --out "$work/moe" --set fp8.enabled=true --set steps=2 \
  --set model.family=qwen3_moe --set model.num_experts=4 --set model.num_experts_per_tok=2 \
  --set model.moe_intermediate_size=32
grep -q 'fp8 (tensorwise): 4 of this rank.s 4 block projections .*the routers and experts of the 2 MoE layers, the head and the loss in bf16' "$work/out"
check "a mixture of experts runs its 4 attention projections in FP8 and says its experts stay in bf16" $? \
  "$(grep fp8 "$work/out"; tail -2 "$work/out")"

# Two processes as one tensor-parallel pair: the same projections, the amaxes taken over the pair.
run 300 "$tandem" train -n 2 "$work/llama.json" --out "$work/tp" --set fp8.enabled=true --set parallel.tensor=2 \
  --set steps=3
check "fp8 over a tensor-parallel pair trains" $rc "$(tail -3 "$work/out")"

# 64 features over 2 slots are 32: not whole 128-wide tiles.
run 60 "$tandem" train -n 2 "$work/llama.json" --out "$work/refused" --set fp8.enabled=true --set fp8.recipe=blockwise \
  --set parallel.tensor=2
[ $rc -eq 1 ] && grep -q "must be whole tiles" "$work/out" && ! grep -q '^step 1/' "$work/out"
check "blockwise over a tensor-parallel pair of 32-feature shares is refused before step 1" $? "$(tail -2 "$work/out")"

for refused in 'fp16.enabled=true|fp8 with fp16.enabled'; do
  run 60 "$tandem" train "$work/llama.json" --out "$work/refused" --set fp8.enabled=true --set bf16.enabled=false \
    --set "${refused%%|*}"
  [ $rc -eq 1 ] && grep -q "${refused#*|}" "$work/out" && ! grep -q '^step 1/' "$work/out"
  check "--set ${refused%%|*} is refused before step 1" $? "$(tail -2 "$work/out")"
done

report
