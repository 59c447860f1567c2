#!/usr/bin/env bash
# How long a large model takes to start on one GPU: the full Llama-3-8B (32 layers, 8.03B parameters, T 2048, bf16,
# micro 1 x 16 with activation checkpointing, random initial weights), 3 steps. Every line the run prints is stamped
# with the seconds since the launch; then the table: when the preflight, the layout, the model and the first step's
# line came, how long step 1 took against step 2 (the one-time costs inside step 1: GEMM timing, attention plans), and
# so when step 1 began.
# Usage: bash bench/gpu_start.sh BIN_DIR OUT_DIR [LAYERS]   (LAYERS: default 32; a smaller cut for a dry run)
#   START_DEVICE=cpu with a tiny LAYERS and START_SHAPE=tiny runs the same on the CPU (the script's own check).
set -u
bin="$1"
out="$2"
layers="${3:-32}"
device="${START_DEVICE:-cuda}"
if [ "$device" = cuda ]; then
  source "$(dirname "$0")/gpu_env.sh" "$out"
else
  mkdir -p "$out"
fi
if [ "${START_SHAPE:-8b}" = tiny ]; then
  shape='"vocab_size": 512, "seq_len": 64, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 128'
else
  shape='"vocab_size": 128256, "seq_len": 2048, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336'
fi
cat >"$out/start.json" <<JSON
{ "model": { "type": "llama", $shape, "num_hidden_layers": $layers, "rms_norm_eps": 1e-5,
    "rope_theta": 500000, "tie_word_embeddings": false },
  "data": { "type": "synthetic" }, "train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
  "parallel": { "activation_checkpointing": true }, "steps": 3, "seed": 1, "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4, "weight_decay": 0.1 } },
  "checkpoint": { "every": 0, "at_end": false } }
JSON
launched=$EPOCHREALTIME
timeout 400 "$bin/tandem" train "$out/start.json" --device "$device" --out "$out/start" --overwrite </dev/null 2>&1 |
  while IFS= read -r line; do
    printf '%s %s\n' "$EPOCHREALTIME" "$line"
  done >"$out/start.log"
python3 - "$out" "$launched" <<'PY'
import json, re, sys
out, launched = sys.argv[1], float(sys.argv[2])
lines = open(f"{out}/start.log").read().splitlines()
def when(prefix):
    for l in lines:
        t, _, text = l.partition(" ")
        if text.startswith(prefix): return float(t) - launched
    return None
steps = [json.loads(l) for l in open(f"{out}/start/metrics.jsonl")]
marks = [("predicted peak", "the preflight's line"), ("batch:", "the batch line"), ("model:", "the layout line"),
         ("step 1/", "step 1's line"), ("step 2/", "step 2's line")]
for prefix, name in marks:
    t = when(prefix)
    print(f"{name:22s} {t:8.2f} s after the launch" if t is not None else f"{name:22s} not printed")
s1, s2 = steps[0]["step_s"], steps[1]["step_s"]
print(f"step 1 took {s1:.2f} s, step 2 {s2:.2f} s: {s1 - s2:.2f} s of one-time costs inside step 1")
t1 = when("step 1/")
if t1 is not None:
    print(f"step 1 began {t1 - s1:.2f} s after the launch; training at step 2's pace began {t1 - s2:.2f} s after it")
PY
