#!/usr/bin/env bash
# FP8 against bf16 on real text, the same data, seed and steps: the Llama 3.2 1B shape (d2048 L16 h32 kv8 ffn 8192,
# V 128256 tied) at T=2048 on the bytes of the Python standard library's sources, 4 sequences a step (micro 4 x 1),
# AdamW lr 3e-4 with 100 warm-up steps. Prints the two losses every 100th step and at the end with their relative
# difference, the worst of those, and writes OUT/curve.json (every step's two losses).
# Usage: bash bench/gpu_fp8_curve.sh BIN_DIR OUT_DIR [STEPS]   (STEPS default 1000; GPU_FP8_CURVE_LIMIT_S per run)
#   GPU_FP8_CURVE_RUNS (default "bf16 fp8"): which runs, of bf16, fp8, fp8e4 (fp8 with fp8.gradient_format e4m3) and
#   bf16nd (the control: bf16 with cuDNN's non-deterministic attention backward, TANDEM_NONDETERMINISTIC_ATTENTION=1,
#   a perturbation at bf16's rounding and nothing more, so its distance from bf16 is how far two runs of one function
#   drift apart on this text); the table compares each run that has finished with bf16's (a bf16 run of an earlier
#   call in OUT_DIR counts).
set -u
bin="$1"
out="$2"
steps="${3:-1000}"
limit="${GPU_FP8_CURVE_LIMIT_S:-280}"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh" "$out"
python="${PYTHON:-python3}"

# The text: every .py file of the standard library, in sorted order, as bytes.
text="$out/stdlib.txt"
"$python" - "$text" <<'PY'
import pathlib, sys, sysconfig
root = pathlib.Path(sysconfig.get_paths()["stdlib"])
with open(sys.argv[1], "wb") as f:
    for p in sorted(root.rglob("*.py")):
        if "site-packages" not in p.parts:
            f.write(p.read_bytes())
print(f"text: {pathlib.Path(sys.argv[1]).stat().st_size / 1e6:.1f} MB of the standard library's sources")
PY

for v in ${GPU_FP8_CURVE_RUNS:-bf16 fp8}; do
  cat >"$out/curve_$v.json" <<JSON
{ "model": { "type": "llama", "vocab_size": 128256, "seq_len": 2048, "hidden_size": 2048, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192, "rms_norm_eps": 1e-5,
    "rope_theta": 500000, "tie_word_embeddings": true },
  "data": { "type": "text", "path": "$text" }, "train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
  "steps": $steps, "seed": 1, "bf16": { "enabled": true }, "fp8": { "enabled": $([ "${v#bf16}" = "$v" ] && echo true || echo false),
    "gradient_format": "$([ $v = fp8e4 ] && echo e4m3 || echo e5m2)" },
  "optimizer": { "type": "AdamW", "params": { "lr": 3e-4, "weight_decay": 0.1 } },
  "scheduler": { "type": "WarmupLR", "params": { "warmup_num_steps": 100 } },
  "steps_per_print": 100, "checkpoint": { "every": 0, "at_end": false } }
JSON
  t0=$(date +%s)
  nd=0
  [ $v = bf16nd ] && nd=1
  TANDEM_NONDETERMINISTIC_ATTENTION=$nd timeout "$limit" "$bin/tandem" train "$out/curve_$v.json" --device cuda --out "$out/curve_$v" >"$out/curve_$v.log" 2>&1
  echo "$v: exit $? after $(($(date +%s) - t0)) s"
done

"$python" - "$out" <<'PY'
import json, sys
out = sys.argv[1]
import os
runs = {v: [json.loads(l) for l in open(f"{out}/curve_{v}/metrics.jsonl")] for v in ("bf16", "fp8", "fp8e4", "bf16nd")
        if os.path.exists(f"{out}/curve_{v}/metrics.jsonl")}
n = min(len(r) for r in runs.values())
loss = {v: [m["loss"] for m in r[:n]] for v, r in runs.items()}
speed = {v: sum(m["tokens_per_s"] * m["step_s"] for m in r[10:n]) / sum(m["step_s"] for m in r[10:n])
         for v, r in runs.items()}
b = loss["bf16"]
# The loss of one step of 4 sequences swings with its batch; the mean over the 100 steps before each mark is the
# curve's level. Both are printed.
for v in (x for x in ("fp8", "fp8e4", "bf16nd") if x in loss):
    f = loss[v]
    worst_step = worst_mean = 0
    print(f"{v} against bf16: step, bf16 and {v} at the step, their difference; the means of the 100 steps to it")
    for i in sorted(set(list(range(99, n, 100)) + [n - 1])):
        d = f[i] / b[i] - 1
        lo = max(0, i - 99)
        mb, mf = sum(b[lo:i + 1]) / (i + 1 - lo), sum(f[lo:i + 1]) / (i + 1 - lo)
        worst_step, worst_mean = max(worst_step, abs(d)), max(worst_mean, abs(mf / mb - 1))
        print(f"{i + 1:5d}  {b[i]:.4f}  {f[i]:.4f}  {d:+.2%}   {mb:.4f}  {mf:.4f}  {mf / mb - 1:+.2%}")
    print(f"{v}: worst at those steps {worst_step:.2%}, of the 100-step means {worst_mean:.2%} (target 0.5%); "
          f"{n} steps; tok/s bf16 {speed['bf16']:.0f}, {v} {speed[v]:.0f} ({speed[v] / speed['bf16']:.3f}x)")
json.dump({"loss": loss, "tokens_per_s": speed}, open(f"{out}/curve.json", "w"))
PY
