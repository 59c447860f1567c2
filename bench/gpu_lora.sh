#!/usr/bin/env bash
# LoRA on one GPU beside transformers + PEFT, in one call: the Llama-3-8B shape (32 layers, hidden 4096, 32 heads
# over 8 kv heads, ffn 14336, vocab 128256 untied) with a LoRA adapter of r 16 (lora_alpha 32) on all seven
# projections, T 2048, the base frozen in bf16, activation checkpointing, micro 2 x 8 (16 sequences per optimizer
# step on both sides), AdamW on the adapters, random weights and tokens. Tandem first (its preflight predicts the
# peak), then bench/pytorch_peft_lora.py compiled; prints both tokens/s, the ratio, Tandem's measured and predicted
# peak and PEFT's peak, and writes OUT_DIR/lora.json.
# Usage: bash bench/gpu_lora.sh BIN_DIR OUT_DIR
#   LORA_BENCH_SHAPE=tiny LORA_BENCH_DEVICE=cpu: the same runs on a tiny shape (d64 L2, V 512, T 64, micro 2 x 2) on
#   the CPU, uncompiled: the dry run that shows the script works end to end without a GPU.
#   LORA_BENCH_STEPS (default 5): Tandem's steps (its speed is the median of those after the second);
#   LORA_BENCH_TORCH_STEPS (default 3): PEFT's timed steps after its 3 warm-up steps;
#   LORA_BENCH_COMPILE (default 1 on cuda, 0 on cpu): torch.compile each decoder layer of the PEFT model.
set -u
bin="$1"
out="$2"
here=$(cd "$(dirname "$0")" && pwd)
shape="${LORA_BENCH_SHAPE:-8b}"
device="${LORA_BENCH_DEVICE:-cuda}"
steps="${LORA_BENCH_STEPS:-5}"
torch_steps="${LORA_BENCH_TORCH_STEPS:-3}"
compile="${LORA_BENCH_COMPILE:-$([ "$device" = cuda ] && echo 1 || echo 0)}"
python="${PYTHON:-python3}"
if [ "$device" = cuda ]; then
  source "$here/gpu_env.sh" "$out"
else
  mkdir -p "$out"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
fi
case "$shape" in
  8b) model='"vocab_size": 128256, "seq_len": 2048, "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336'
    seq=2048 micro=2 accum=8 ;;
  tiny) model='"vocab_size": 512, "seq_len": 64, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128'
    seq=64 micro=2 accum=2 ;;
  *) echo "LORA_BENCH_SHAPE: '$shape' is not 8b or tiny"; exit 2 ;;
esac
status=0

# The reference script's shapes: rope_theta 500000, rms_norm_eps 1e-5, no biases, untied.
cat >"$out/tandem_lora.json" <<JSON
{ "model": { "type": "llama", $model, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5, "rope_theta": 500000, "tie_word_embeddings": false, "attention_bias": false },
  "lora": { "r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
    "up_proj", "down_proj"] },
  "data": { "type": "synthetic" }, "train_batch_size": $((micro * accum)), "train_micro_batch_size_per_gpu": $micro,
  "steps": $steps, "seed": 1, "bf16": { "enabled": true },
  "parallel": { "activation_checkpointing": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4 } }, "checkpoint": { "every": 0, "at_end": false } }
JSON

echo "== Tandem: llama $shape, LoRA r 16 on 7 projections, T $seq, bf16 base, checkpointing, micro $micro x $accum"
timeout 400 "$bin/tandem" train "$out/tandem_lora.json" --device "$device" --out "$out/tandem_lora" --overwrite \
  </dev/null >"$out/tandem_lora.log" 2>&1
rc=$?
echo "tandem: exit $rc"
[ $rc -eq 0 ] || { status=1; grep -v "^  " "$out/tandem_lora.log" | tail -3; }

echo "== transformers + PEFT$([ "$compile" = 1 ] && echo ", compiled"): the same shape and settings"
torch_args=(--shape "$shape" --device "$device" --seq "$seq" --micro "$micro" --accum "$accum" --steps "$torch_steps"
  --r 16 --alpha 32 --checkpoint)
[ "$compile" = 1 ] && torch_args+=(--compile)
timeout 400 "$python" "$here/pytorch_peft_lora.py" "${torch_args[@]}" </dev/null >"$out/torch_peft.log" 2>&1
rc=$?
echo "peft: exit $rc"
[ $rc -eq 0 ] || { status=1; tail -3 "$out/torch_peft.log"; }

"$python" - "$out" <<'PY' || status=1
import json, re, statistics, sys
out = sys.argv[1]
log = open(f"{out}/tandem_lora.log").read()
try:
    steps = [json.loads(l) for l in open(f"{out}/tandem_lora/metrics.jsonl")]
except OSError:
    steps = []
pred = re.search(r"predicted peak per device: ([0-9.]+ [KMG]iB)", log)  # as the preflight rounds it
t = {"tokens_per_s": statistics.median(s["tokens_per_s"] for s in (steps[2:] or steps)) if steps else None,
     "peak_bytes": max(s["peak_bytes"] for s in steps) if steps else None,
     "predicted_peak": pred.group(1) if pred else None}
m = re.search(r"^RESULT (.*)$", open(f"{out}/torch_peft.log").read(), re.M)
p = json.loads(m.group(1)) if m else {"error": "no RESULT line"}
fmt = lambda v, f: format(v, f) if isinstance(v, (int, float)) else "-"
peak_gib = t["peak_bytes"] / 2**30 if t["peak_bytes"] else None
print(f"Tandem: {fmt(t['tokens_per_s'], '.0f')} tok/s, peak {fmt(t['peak_bytes'], ',d')} bytes = "
      f"{fmt(peak_gib, '.3f')} GiB (planner predicted {t['predicted_peak']})")
print(f"transformers + PEFT ({p.get('mode', '-')}): {fmt(p.get('tokens_per_s'), '.0f')} tok/s, peak "
      f"{fmt(p.get('peak_mem_GiB'), '.2f')} GiB" + (" (out of memory)" if p.get("oom") else ""))
ratio = t["tokens_per_s"] / p["tokens_per_s"] if t["tokens_per_s"] and p.get("tokens_per_s") else None
print(f"Tandem / PEFT: {fmt(ratio, '.3f')}x")
json.dump({"tandem": t, "peft": p, "ratio": ratio}, open(f"{out}/lora.json", "w"), indent=1)
sys.exit(0 if ratio else 1)
PY
exit $status
