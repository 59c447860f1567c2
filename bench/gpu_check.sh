#!/usr/bin/env bash
# The GPU check, run on a machine with 2 NVIDIA GPUs in one call: every CUDA op against the CPU op; a tiny gpt
# for 20 steps on 1 GPU and on 2 GPUs as dp2 ZeRO-3, pp2 and tp2 against the CPU backend at bf16 tolerance; a
# tiny grouped-query llama, tied, untied and as Qwen3, for 20 steps on 1 GPU against the CPU backend in bf16 and fp16;
# then gpt d1600 L48 (1.64B) on 2 GPUs beside PyTorch (the reference script) on the same model.
# Usage: bash bench/gpu_check.sh BUILD_DIR PYTORCH_SCRIPT OUT_DIR
#   BUILD_DIR is a CMake build folder with the CUDA backend (e.g. build/release); step 1 runs its tests labelled
#   gpu through ctest, the runs use BUILD_DIR/apps/tandem/tandem. OUT_DIR gets the logs and results.json.
#   GPU_CHECK_OPS=0 skips step 1, GPU_CHECK_GPT=0 step 2 (the tiny gpt), GPU_CHECK_LLAMA=0 step 3 (the tiny
#   llama); GPU_CHECK_BIG_STEPS (default 6) sets the steps of the 1.64B runs (step 4), 0 skips them. With
#   GPU_CHECK_GPT=0 and GPU_CHECK_BIG_STEPS=0 one GPU is enough.
#   Every bound is in bench/gpu/tolerances.h, read here through ops_check --print-tolerances.
set -u
build="$1"
anchor="$2"
out="$3"
source "$(dirname "$0")/gpu_env.sh" "$out"
bin="$build/apps/tandem"
tandem="$bin/tandem"
status=0

# The tolerance table, one "name bound" a line, for the loss comparisons of steps 2 and 3.
if ! "$build/bench/gpu/ops_check" --print-tolerances >"$out/tolerances.txt" 2>&1; then
  echo "cannot read the tolerances from $build/bench/gpu/ops_check (is BUILD_DIR a CUDA build?):"
  cat "$out/tolerances.txt"
  exit 1
fi

big_steps="${GPU_CHECK_BIG_STEPS:-6}"

if [ "${GPU_CHECK_OPS:-1}" != 0 ]; then
  echo "== 1. CUDA ops against the CPU ops (ctest -L gpu)"
  timeout 300 ctest --test-dir "$build" -L '^gpu$' --no-tests=error -V >"$out/ops_check.txt" 2>&1
  rc=$?
  grep -c '  PASS' "$out/ops_check.txt" | sed 's/^/rows passed: /'
  grep '  FAIL' "$out/ops_check.txt" | head -5
  grep -E 'tests passed|No tests were found' "$out/ops_check.txt"
  [ $rc -eq 0 ] || { echo "CUDA op checks FAILED (ctest exit $rc, log $out/ops_check.txt)"; status=1; }
fi

# The small runs of steps 2 and 3: run MODEL NAME trains OUT/MODEL.json into OUT/MODEL_NAME; CHECKS gets one
# "REFERENCE BOUND_NAME RUN..." line per comparison of losses, made after step 3.
checks=()
runs=()
run_small() {  # MODEL NAME N DEVICE PARALLEL ZERO [--set KEY=VALUE ...]
  local model="$1" name="$2" n="$3" device="$4" parallel="$5" zero="$6"
  shift 6
  local run="${model}_$name"
  runs+=("$run")
  timeout 75 "$tandem" train -n "$n" "$out/$model.json" --device "$device" --out "$out/$run" \
    --set "parallel=$parallel" --set zero_optimization.stage="$zero" "$@" >"$out/$run.log" 2>&1 ||
    { echo "$run: exit $?"; tail -6 "$out/$run.log"; }
}
fp16=(--set bf16.enabled=false --set fp16.enabled=true)

if [ "${GPU_CHECK_GPT:-1}" != 0 ]; then
  echo "== 2. tiny gpt, 20 steps: the CPU backend against 1 GPU and 2 GPUs (dp2 ZeRO-3, pp2, tp2, interleaved pp2"
  echo "   with activation checkpointing) in bf16; fp16 with dynamic loss scaling on 1 GPU and dp2 ZeRO-2"
  cat >"$out/tiny.json" <<'JSON'
{
  "model": { "type": "gpt", "vocab_size": 512, "seq_len": 128, "dim": 256, "layers": 4, "heads": 4 },
  "data": { "type": "synthetic" },
  "train_batch_size": 16, "gradient_accumulation_steps": 2, "steps": 20, "seed": 7,
  "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-3, "weight_decay": 0.1 } },
  "gradient_clipping": 1.0, "checkpoint": { "every": 0, "at_end": false }
}
JSON
  run_small tiny cpu 1 cpu '{}' 0
  run_small tiny gpu1 1 cuda '{}' 0
  run_small tiny dp2z3 2 cuda '{"virtual_gpus": 2}' 3
  run_small tiny pp2 2 cuda '{"pipeline": 2}' 0
  run_small tiny tp2 2 cuda '{"tensor": 2}' 0
  run_small tiny pp2v2ckpt 2 cuda '{"pipeline": 2, "schedule": "interleaved", "virtual_stages": 2, "activation_checkpointing": true}' 0
  run_small tiny cpu_fp16 1 cpu '{}' 0 "${fp16[@]}"
  run_small tiny gpu1_fp16 1 cuda '{}' 0 "${fp16[@]}"
  run_small tiny dp2z2_fp16 2 cuda '{"virtual_gpus": 2}' 2 "${fp16[@]}"
  checks+=("tiny_cpu loss_bf16 tiny_gpu1 tiny_dp2z3 tiny_pp2 tiny_tp2 tiny_pp2v2ckpt")
  checks+=("tiny_cpu_fp16 loss_fp16 tiny_gpu1_fp16 tiny_dp2z2_fp16")
fi

if [ "${GPU_CHECK_LLAMA:-1}" != 0 ]; then
  echo "== 3. tiny llama (d64 L2, 4 query heads over 2 kv heads, ffn 128, V 256, seq 32), 20 steps: the CPU backend"
  echo "   against 1 GPU in bf16, and in fp16 with dynamic loss scaling; tied with llama3 rope scaling, and untied"
  echo "   with attention biases and head_dim 32 (wider than hidden / heads); Qwen3's per-head norms of q and k on"
  echo "   that shape"
  for variant in tied untied qwen3; do
    if [ "$variant" = tied ]; then
      shape='"tie_word_embeddings": true, "rope_theta": 500000,
    "rope_scaling": { "rope_type": "llama3", "factor": 32, "low_freq_factor": 1, "high_freq_factor": 4,
      "original_max_position_embeddings": 8192 }'
    else
      shape='"tie_word_embeddings": false, "attention_bias": true, "head_dim": 32, "rope_scaling": null'
    fi
    [ "$variant" = qwen3 ] && shape="$shape"', "family": "qwen3"'
    cat >"$out/llama_$variant.json" <<JSON
{
  "model": { "type": "llama", "vocab_size": 256, "seq_len": 32, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
    $shape },
  "data": { "type": "synthetic" },
  "train_batch_size": 16, "gradient_accumulation_steps": 2, "steps": 20, "seed": 7,
  "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-3, "weight_decay": 0.1 } },
  "gradient_clipping": 1.0, "checkpoint": { "every": 0, "at_end": false }
}
JSON
    run_small "llama_$variant" cpu 1 cpu '{}' 0
    run_small "llama_$variant" gpu1 1 cuda '{}' 0
    run_small "llama_$variant" cpu_fp16 1 cpu '{}' 0 "${fp16[@]}"
    run_small "llama_$variant" gpu1_fp16 1 cuda '{}' 0 "${fp16[@]}"
    checks+=("llama_${variant}_cpu loss_bf16_llama llama_${variant}_gpu1")
    checks+=("llama_${variant}_cpu_fp16 loss_fp16_llama llama_${variant}_gpu1_fp16")
  done
fi

if [ ${#checks[@]} -gt 0 ]; then
  echo "-- every step's loss against the CPU backend's"
  printf '%s\n' "${checks[@]}" >"$out/checks.txt"
  python3 - "$out" <<'PY' || status=1
import json, sys
out = sys.argv[1]
bound = {line.split()[0]: float(line.split()[1]) for line in open(f"{out}/tolerances.txt") if line.strip()}
def losses(name):
    try:
        return [json.loads(l)["loss"] for l in open(f"{out}/{name}/metrics.jsonl")]
    except OSError:
        return []
ok = True
for line in open(f"{out}/checks.txt"):
    ref_name, bound_name, *names = line.split()
    # An ops_check built before the llama bounds prints only the gpt ones, which they equal.
    limit = bound.get(bound_name, bound.get(bound_name.removesuffix("_llama")))
    ref = losses(ref_name)
    ok &= len(ref) == 20
    print(f"{ref_name} reference: first %.4f last %.4f" % (ref[0], ref[-1]) if ref else f"no {ref_name} reference")
    for name in names:
        got = losses(name)
        worst = max((abs(a - b) / abs(b) for a, b in zip(got, ref)), default=float("inf"))
        good = len(got) == 20 and worst < limit
        ok &= good
        print(f"{name:22s} steps {len(got):2d} worst relative loss difference {worst:.2e} (bound {limit:g}) "
              f"{'PASS' if good else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
  echo "-- planner's predicted peak against the measured peak (small runs)"
  for n in "${runs[@]}"; do
    echo "$n: $(grep -h '^predicted' "$out/$n.log") | $(grep -h '^done' "$out/$n.log")"
  done
fi

[ "$big_steps" -gt 0 ] || exit $status
echo "== 4. gpt d1600 L48 (1.64B), seq 1024, micro-batch 8, bf16, on 2 GPUs: Tandem and PyTorch"
bash "$(dirname "$0")/gpu_runs.sh" "$bin" "$anchor" "$out/big" "$(dirname "$0")/runs/check_1b6.txt" "$big_steps" || status=1
exit $status
