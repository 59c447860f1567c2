#!/usr/bin/env bash
# A checkpoint written in the background on a GPU holds its own step's state. Its copies to host memory run on the
# GPU's copy stream beside the next step's forward and backward, and that step's update waits for them on the GPU.
# The check: the Llama-3-8B shape cut to LAYERS layers (1: 1.27B parameters, 15 GB of state), one sequence a step,
# so that the copies take longer than a forward and backward, checkpointed at step 4 while it runs on to step 8; a
# second run resumed from that checkpoint must give steps 5-8 the same losses and gradient norms, bit for bit. An
# update that did not wait would have changed the state under its copies.
# Usage: bash bench/gpu_resume_check.sh BIN_DIR OUT_DIR [LAYERS]
set -u
bin="$1"
out="$2"
layers="${3:-1}"
source "$(dirname "$0")/gpu_env.sh" "$out"
cat >"$out/resume.json" <<JSON
{ "model": { "type": "llama", "vocab_size": 128256, "seq_len": 2048, "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": $layers, "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
    "rope_theta": 500000, "tie_word_embeddings": false },
  "data": { "type": "synthetic" }, "train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "steps": 8, "seed": 1,
  "bf16": { "enabled": true }, "optimizer": { "type": "AdamW", "params": { "lr": 1e-4 } },
  "checkpoint": { "every": 4, "keep": 2, "at_end": false, "async": true } }
JSON
rm -rf "$out/whole" "$out/resumed"
status=0
"$bin/tandem" train "$out/resume.json" --device cuda --out "$out/whole" >"$out/whole.log" 2>&1 &&
  "$bin/tandem" train "$out/resume.json" --device cuda --resume "$out/whole/checkpoints/step_00000004" \
    --out "$out/resumed" >"$out/resumed.log" 2>&1 || status=$?
grep -E "^checkpoint|^saved|^resumed" "$out/whole.log" "$out/resumed.log"
if [ $status -ne 0 ]; then
  tail -5 "$out/whole.log" "$out/resumed.log"
  echo "resume check: a run failed (exit $status)"
  exit 1
fi
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
whole = {m["step"]: m for m in map(json.loads, open(f"{out}/whole/metrics.jsonl"))}
resumed = {m["step"]: m for m in map(json.loads, open(f"{out}/resumed/metrics.jsonl"))}
bad = 0
for s in range(5, 9):
    a, b = whole[s], resumed[s]
    same = a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"]
    bad += not same
    print(f"step {s}: loss {a['loss']!r} and {b['loss']!r}, grad norm {a['grad_norm']!r} and {b['grad_norm']!r}"
          f"{'' if same else '  DIFFER'}")
print("resume check:", "PASS (the same bits)" if not bad else f"FAIL ({bad} of 4 steps differ)")
sys.exit(1 if bad else 0)
PY
rc=$?
rm -rf "$out/whole" "$out/resumed"
exit $rc
