#!/usr/bin/env bash
# Speed on one GPU beside PyTorch, in one call of under 9 minutes: for gpt d1600 L48 (1.64B) and d2048 L24 at micro
# 8 x 2 and at 16 x 1, and d4096 L32 (6.86B, micro 4 x 4: PyTorch's micro 8 does not fit), all with 16 sequences of
# 1024 tokens per step, V=50304, bf16, AdamW and synthetic data: Tandem's tokens/s, then PyTorch (the reference
# script, --mode single) compiled and eager, at the same micro-batch. Compiled PyTorch is fastest at micro 16 on the
# two smaller shapes, so the table's last lines compare each side's best micro-batch. The 1.64B also runs once with TANDEM_PROFILE=1 first: its per-op time breakdown is printed at the end. The
# first PyTorch run measures the bf16 GEMM peak (--probe), against which the table states each run's model TFLOP/s.
# With GPU_SPEED_MODELS="llama1b llama3b": Llama-3.2-1B (d2048 L16 h32 kv8 ffn 8192, micro 4 x 4) and -3B (d3072 L28
# h24 kv8 ffn 8192, micro 2 x 8), both V=128256 tied, rope_theta 500000 with llama3 rope scaling, 16 sequences of
# 2048 tokens per step, beside the Llama reference script (transformers' LlamaForCausalLM, its shapes 1b and 3b);
# the 1B's op profile runs last, when the budget leaves room for it.
# Usage: bash bench/gpu_speed.sh BIN_DIR PYTORCH_SCRIPT OUT_DIR [PYTORCH_LLAMA_SCRIPT]
#   BIN_DIR holds the tandem binary; OUT_DIR gets each run's config, log and folder, and results.json.
#   PYTORCH_SCRIPT is the gpt reference script; PYTORCH_LLAMA_SCRIPT (default pytorch_llama.py beside it) the Llama
#   one. When no gpt model runs, a one-block gpt run of the gpt script measures the GEMM peak (--probe).
#   GPU_SPEED_STEPS (default 5): Tandem's steps (its speed is the median of the steps after the second);
#   GPU_SPEED_TORCH_STEPS (default 3): PyTorch's timed steps after its 3 warm-up steps;
#   GPU_SPEED_BUDGET_S (default 520): a run starts only when it fits in what is left of this, so the whole call
#   ends in time; a run that does not fit is reported as skipped.
#   GPU_SPEED_MODELS (default "1b6 1b6m16 d2048 d2048m16 6b9"): which models run, of 1b6 1b6m16 d2048 d2048m16 6b9
#   llama1b llama3b (m16: micro 16 x 1);
#   GPU_SPEED_EAGER=0 leaves out the eager PyTorch runs (compiled is PyTorch's best configuration and the one the
#   ratio is taken against); GPU_SPEED_DRY_RUN=1 writes the configs and prints the commands without running them.
set -u
bin="$1"
anchor="$2"
out="$3"
llama_anchor="${4:-$(dirname "$anchor")/pytorch_llama.py}"
dry="${GPU_SPEED_DRY_RUN:-0}"
if [ "$dry" = 1 ]; then
  mkdir -p "$out"
else
  source "$(dirname "$0")/gpu_env.sh" "$out"
fi
steps="${GPU_SPEED_STEPS:-5}"
torch_steps="${GPU_SPEED_TORCH_STEPS:-3}"
budget="${GPU_SPEED_BUDGET_S:-520}"
models=" ${GPU_SPEED_MODELS:-1b6 1b6m16 d2048 d2048m16 6b9} "
known=" 1b6 1b6m16 d2048 d2048m16 6b9 llama1b llama3b "
for m in $models; do
  [[ $known == *" $m "* ]] || { echo "GPU_SPEED_MODELS: unknown model '$m' (choose among$known)"; exit 2; }
done
eager="${GPU_SPEED_EAGER:-1}"
started=$(date +%s)
status=0

source "$(dirname "$0")/budgeted_run.sh"

# tandem_config NAME DIM LAYERS HEADS MICRO: the run's config, OUT/NAME.json.
tandem_config() {
  cat >"$out/$1.json" <<JSON
{ "model": { "type": "gpt", "vocab_size": 50304, "seq_len": 1024, "dim": $2, "layers": $3, "heads": $4 },
  "data": { "type": "synthetic" }, "train_batch_size": 16, "train_micro_batch_size_per_gpu": $5,
  "steps": $steps, "seed": 1, "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4 } }, "checkpoint": { "every": 0, "at_end": false } }
JSON
}

# llama_config NAME HIDDEN LAYERS HEADS KV_HEADS INTERMEDIATE MICRO: a Llama 3.2 shape (V=128256, tied, rope_theta
# 500000 with llama3 scaling as the released configs; rms_norm_eps 1e-5 as they and the reference script) at
# T=2048, 16 sequences per step, OUT/NAME.json.
llama_config() {
  cat >"$out/$1.json" <<JSON
{ "model": { "type": "llama", "vocab_size": 128256, "seq_len": 2048, "hidden_size": $2, "num_hidden_layers": $3,
    "num_attention_heads": $4, "num_key_value_heads": $5, "intermediate_size": $6, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "rope_theta": 500000,
    "rope_scaling": { "rope_type": "llama3", "factor": 32, "low_freq_factor": 1, "high_freq_factor": 4,
      "original_max_position_embeddings": 8192 },
    "tie_word_embeddings": true, "attention_bias": false },
  "data": { "type": "synthetic" }, "train_batch_size": 16, "train_micro_batch_size_per_gpu": $7,
  "steps": $steps, "seed": 1, "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4 } }, "checkpoint": { "every": 0, "at_end": false } }
JSON
}

tandem() {  # NAME LIMIT_S
  run "$1" "$2" "$bin/tandem" train "$out/$1.json" --device cuda --out "$out/$1"
}

torch() {  # NAME LIMIT_S ARGS...
  local name="$1" limit="$2"
  shift 2
  run "$name" "$limit" torchrun --standalone --nproc_per_node=1 "$anchor" --mode single --steps "$torch_steps" "$@"
}

torch_llama() {  # NAME LIMIT_S ARGS...: the Llama reference script (no wrapper, one GPU)
  local name="$1" limit="$2"
  shift 2
  run "$name" "$limit" torchrun --standalone --nproc_per_node=1 "$llama_anchor" --mode single --seq 2048 \
    --steps "$torch_steps" "$@"
}

probe=--probe  # the first PyTorch run measures the GEMM peak

# gpt_row KEY DIM LAYERS HEADS MICRO TANDEM_S TORCH_S EAGER_S: when KEY is among the models, Tandem (tandem_KEY) and
# PyTorch compiled and eager (torch_KEY_compile, torch_KEY_eager) at micro MICRO x 16/MICRO, each under its limit.
gpt_row() {
  local key="$1" dim="$2" layers="$3" heads="$4" micro="$5" tandem_s="$6" torch_s="$7" eager_s="$8"
  [[ $models == *" $key "* ]] || return 0
  local shape=(--dim "$dim" --layers "$layers" --heads "$heads" --micro "$micro" --accum $((16 / micro)))
  echo "== gpt d$dim L$layers h$heads, micro $micro x $((16 / micro))"
  tandem_config "tandem_$key" "$dim" "$layers" "$heads" "$micro"
  tandem "tandem_$key" "$tandem_s"
  torch "torch_${key}_compile" "$torch_s" "${shape[@]}" --compile $probe
  probe=
  [ "$eager" = 0 ] || torch "torch_${key}_eager" "$eager_s" "${shape[@]}"
}

if [[ $models == *" 1b6 "* ]]; then
  echo "== gpt d1600 L48 h25 (1.64B), micro 8 x 2, with TANDEM_PROFILE=1 (its op table below)"
  tandem_config profile_1b6 1600 48 25 8
  TANDEM_PROFILE=1 tandem profile_1b6 90
fi
gpt_row 1b6 1600 48 25 8 90 150 60
gpt_row 1b6m16 1600 48 25 16 90 150 60
gpt_row d2048 2048 24 16 8 80 120 60
gpt_row d2048m16 2048 24 16 16 80 120 60
gpt_row 6b9 4096 32 32 4 110 150 70

if [[ $models == *" llama"* && -n $probe ]]; then
  echo "== the bf16 GEMM peak (gpt reference script --probe on a one-block gpt)"
  torch torch_probe 60 --dim 256 --layers 1 --heads 4 --micro 1 --probe
fi

# The Llama shapes: Tandem's micro-batch and accumulation are the reference script's --micro and --accum.
if [[ $models == *" llama1b "* ]]; then
  echo "== llama 3.2 1B (d2048 L16 h32 kv8 ffn 8192, V 128256 tied), T=2048, micro 4 x 4"
  llama_config tandem_llama1b 2048 16 32 8 8192 4
  tandem tandem_llama1b 100
  torch_llama torch_llama1b_compile 200 --shape 1b --micro 4 --accum 4 --compile
  [ "$eager" = 0 ] || torch_llama torch_llama1b_eager 70 --shape 1b --micro 4 --accum 4
fi

if [[ $models == *" llama3b "* ]]; then
  echo "== llama 3.2 3B (d3072 L28 h24 kv8 ffn 8192, V 128256 tied), T=2048, micro 2 x 8"
  llama_config tandem_llama3b 3072 28 24 8 8192 2
  tandem tandem_llama3b 130
  torch_llama torch_llama3b_compile 220 --shape 3b --micro 2 --accum 8 --compile
  [ "$eager" = 0 ] || torch_llama torch_llama3b_eager 90 --shape 3b --micro 2 --accum 8
fi

if [[ $models == *" llama1b "* ]]; then
  echo "== llama 3.2 1B once more with TANDEM_PROFILE=1 (its op table below)"
  llama_config profile_llama1b 2048 16 32 8 8192 4
  TANDEM_PROFILE=1 tandem profile_llama1b 100
fi

echo "== speed ($(($(date +%s) - started)) s)"
if [ "$dry" = 1 ]; then
  python3 "$(dirname "$0")/run_summary.py" --speed "$out"
  echo "dry run: configs in $out, nothing run"
  exit 0
fi
python3 "$(dirname "$0")/run_summary.py" --speed "$out" || status=1
for key in 1b6 llama1b; do
  [ -f "$out/profile_$key.log" ] || continue
  echo "== where the $key step goes (TANDEM_PROFILE=1: Tandem's ops timed by CUDA events)"
  sed -n '/^op profile (/,/not timed)$/p' "$out/profile_$key.log"
done
exit $status
