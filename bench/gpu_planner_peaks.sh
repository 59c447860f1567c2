#!/usr/bin/env bash
# The GPU peaks that tests/plan/test_memory_model.cc's PlansTheGpuPeaksMeasuredOnAnH200 holds the planner to: each
# model of that test, bf16, 16 sequences a step at its micro-batch, for 2 steps on one GPU; prints each run's
# measured peak (the device's high-water mark, bytes) beside the planner's prediction, which must be equal.
# Usage: bash bench/gpu_planner_peaks.sh BIN_DIR OUT_DIR [BUDGET_S]
#   GPU_PEAKS_DRY=1 prints the commands and checks the configs with `tandem plan` (works without a GPU).
set -u
bin="$1"
out="$2"
budget="${3:-540}"
dry="${GPU_PEAKS_DRY:-0}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
if [ "$dry" = 1 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
else
  source "$here/gpu_env.sh" "$out"
fi
started=$(date +%s)
status=0
source "$here/budgeted_run.sh"

# peak NAME MICRO MODEL_JSON
peak() {
  cat >"$out/$1.json" <<JSON
{ "model": $3, "data": { "type": "synthetic" }, "train_batch_size": 16, "train_micro_batch_size_per_gpu": $2,
  "steps": 2, "seed": 1, "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4, "weight_decay": 0.1 } },
  "checkpoint": { "every": 0, "at_end": false } }
JSON
  if [ "$dry" = 1 ]; then
    "$bin/tandem" plan "$out/$1.json" --devices 1 --rates h200 | tail -2
    return
  fi
  run "$1" 150 "$bin/tandem" train "$out/$1.json" --device cuda --out "$out/$1" --overwrite
}
gpt() { echo "{\"type\": \"gpt\", \"vocab_size\": 50304, \"seq_len\": 1024, \"dim\": $1, \"layers\": $2, \"heads\": $3}"; }
llama() {
  echo "{\"type\": \"llama\", \"vocab_size\": 128256, \"seq_len\": 2048, \"hidden_size\": $1, \"num_hidden_layers\": $2,
    \"num_attention_heads\": $3, \"num_key_value_heads\": 8, \"intermediate_size\": 8192,
    \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000, \"tie_word_embeddings\": true,
    \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32, \"low_freq_factor\": 1, \"high_freq_factor\": 4,
      \"original_max_position_embeddings\": 8192}}"
}

peak gpt1b6_micro8 8 "$(gpt 1600 48 25)"
peak gpt1b6_micro16 16 "$(gpt 1600 48 25)"
peak gpt_d2048_l24_micro8 8 "$(gpt 2048 24 16)"
peak gpt_d2048_l24_micro16 16 "$(gpt 2048 24 16)"
peak gpt6b9_micro4 4 "$(gpt 4096 32 32)"
peak llama1b_micro4 4 "$(llama 2048 16 32)"
peak llama3b_micro2 2 "$(llama 3072 28 24)"

echo "== planner peaks ($(($(date +%s) - started)) s)"
[ "$dry" = 1 ] && exit 0
for f in "$out"/*.json; do
  name=$(basename "$f" .json)
  [ -f "$out/$name/metrics.jsonl" ] || {
    echo "$name: no metrics"
    continue
  }
  "${PYTHON:-python3}" - "$out/$name/metrics.jsonl" "$name" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peak = max(r["peak_bytes"] for r in rows)
predicted = rows[-1]["predicted_peak_bytes"]
print(f"{sys.argv[2]:24s} measured {peak} predicted {predicted} ({'equal' if peak == predicted else 'DIFFER'})")
PY
done
exit $status
