#!/usr/bin/env bash
# FP8 on one GPU beside bf16 and torchao, in one call (issue targets in docs/benchmarks.md): the FP8 ops' checks and
# per-GEMM timings (ops_check's fp8 family), then for each Llama shape Tandem bf16, Tandem fp8 (tensorwise) and
# torchao float8 (tensorwise, each decoder layer compiled) on transformers' LlamaForCausalLM, each at the same
# sequences per step; then the table of tok/s, peaks and ratios.
# Usage: bash bench/gpu_fp8.sh BIN_DIR PYTORCH_LLAMA_SCRIPT OUT_DIR [BUDGET_S]
#   GPU_FP8_PARTS: any of "ops l1b l3b l8 full8" (default "ops l1b l8"):
#     l1b  Llama 3.2 1B (d2048 L16 h32 kv8 ffn 8192, V 128256 tied), micro 4 x 4;
#     l3b  Llama 3.2 3B (d3072 L28 h24 kv8 ffn 8192, tied), micro 2 x 8;
#     l8   the Llama-3-8B shape cut to 8 layers (d4096 h32 kv8 ffn 14336, V 128256 untied), micro 4 x 4;
#     full8  the full Llama-3-8B, micro 1 x 16 with activation checkpointing (Tandem only).
#   The torchao runs need torchao importable beside torch (pip install torchao); GPU_FP8_TORCH=0 leaves them out; GPU_FP8_STEPS (default 6) Tandem's steps (speed: the tokens of the
#   steps after the first over their time); torchao runs 3 timed steps after 3 warm-up steps.
#   GPU_FP8_RECIPES: the FP8 recipes Tandem runs (default "tensorwise"; any of "tensorwise rowwise blockwise"), each
#   as NAME_fp8 (tensorwise) or NAME_fp8_RECIPE.
#   GPU_FP8_DRY=1 prints the commands and checks the configs with `tandem plan` (works without a GPU).
set -u
bin="$1"
anchor="$2"
out="$3"
budget="${4:-540}"
parts=" ${GPU_FP8_PARTS:-ops l1b l8} "
dry="${GPU_FP8_DRY:-0}"
steps="${GPU_FP8_STEPS:-6}"
with_torch="${GPU_FP8_TORCH:-1}"
recipes="${GPU_FP8_RECIPES:-tensorwise}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
if [ "$dry" = 1 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
else
  source "$here/gpu_env.sh" "$out"
fi
started=$(date +%s)
status=0
source "$here/budgeted_run.sh"

# llama NAME HIDDEN LAYERS HEADS KV FFN TIED MICRO CKPT FP8 [RECIPE]: a Llama shape at T=2048, 16 sequences a step,
# bf16 around the products, FP8 (RECIPE, default tensorwise) when FP8 is true.
llama() {
  cat >"$out/$1.json" <<JSON
{ "model": { "type": "llama", "vocab_size": 128256, "seq_len": 2048, "hidden_size": $2, "num_hidden_layers": $3,
    "num_attention_heads": $4, "num_key_value_heads": $5, "intermediate_size": $6, "rms_norm_eps": 1e-5,
    "rope_theta": 500000, "tie_word_embeddings": $7 },
  "data": { "type": "synthetic" }, "train_batch_size": 16, "train_micro_batch_size_per_gpu": $8,
  "parallel": { "activation_checkpointing": $9 }, "steps": $steps, "seed": 1, "bf16": { "enabled": true },
  "fp8": { "enabled": ${10}, "recipe": "${11:-tensorwise}" },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4, "weight_decay": 0.1 } },
  "checkpoint": { "every": 0, "at_end": false } }
JSON
}

tandem() {  # NAME LIMIT_S
  if [ "$dry" = 1 ]; then
    "$bin/tandem" plan "$out/$1.json" --devices 1 --rates h200 | tail -2
    return
  fi
  run "$1" "$2" "$bin/tandem" train "$out/$1.json" --device cuda --out "$out/$1"
}

torchao() {  # NAME LIMIT_S ARGS...: torchao float8 (tensorwise) on the reference script, compiled
  local name="$1" limit="$2"
  shift 2
  run "$name" "$limit" torchrun --standalone --nproc_per_node=1 "$here/torchao_llama.py" "$anchor" --mode single \
    --seq 2048 --steps 3 --compile "$@"
}

# shape KEY HIDDEN LAYERS HEADS KV FFN TIED MICRO CKPT TORCH_SHAPE TANDEM_S TORCH_S: Tandem bf16 and fp8, then torchao.
shape() {
  local key="$1" micro="$8" ckpt="$9" torch_shape="${10}" tandem_s="${11}" torch_s="${12}"
  [[ $parts == *" $key "* ]] || return 0
  echo "== $key: d$2 L$3 h$4 kv$5 ffn $6, micro $micro x $((16 / micro))$([ "$ckpt" = true ] && echo ", checkpointing")"
  llama "${key}_bf16" "$2" "$3" "$4" "$5" "$6" "$7" "$micro" "$ckpt" false
  tandem "${key}_bf16" "$tandem_s"
  local recipe name
  for recipe in $recipes; do
    name="${key}_fp8"
    [ "$recipe" = tensorwise ] || name="${key}_fp8_$recipe"
    llama "$name" "$2" "$3" "$4" "$5" "$6" "$7" "$micro" "$ckpt" true "$recipe"
    tandem "$name" "$tandem_s"
  done
  if [ "$with_torch" = 1 ] && [ -n "$torch_shape" ]; then
    local layers=()
    [ "$torch_shape" = 8b ] && [ "$3" != 32 ] && layers=(--layers "$3")
    local ck=()
    [ "$ckpt" = true ] && ck=(--checkpoint)
    torchao "${key}_torchao" "$torch_s" --shape "$torch_shape" "${layers[@]}" --micro "$micro" \
      --accum $((16 / micro)) "${ck[@]}"
  fi
}

if [[ $parts == *" ops "* ]]; then
  echo "== FP8 ops: exactness against the CPU, SQNR against bf16, per-GEMM timings"
  run ops_fp8 200 "$bin/../../bench/gpu/ops_check" --family fp8
fi
shape l1b 2048 16 32 8 8192 true 4 false 1b 100 200
shape l3b 3072 28 24 8 8192 true 2 false 3b 130 220
shape l8 4096 8 32 8 14336 false 4 false 8b 110 200
shape full8 4096 32 32 8 14336 false 1 true "" 200 0

echo "== fp8 ($(($(date +%s) - started)) s)"
[ "$dry" = 1 ] && exit 0
"${PYTHON:-python3}" "$here/run_summary.py" --fp8 "$out"
exit $status
