#!/usr/bin/env bash
# The GPU check, run on a machine with 2 NVIDIA GPUs in one call: every CUDA op against the CPU op; a tiny gpt
# for 20 steps on 1 GPU and on 2 GPUs as dp2 ZeRO-3, pp2 and tp2 against the CPU backend at bf16 tolerance;
# then gpt d1600 L48 (1.64B) on 2 GPUs beside PyTorch (the reference script) on the same model.
# Usage: bash bench/gpu_check.sh BUILD_DIR PYTORCH_SCRIPT OUT_DIR
#   BUILD_DIR is a CMake build folder with the CUDA backend (e.g. build/release); step 1 runs its tests labelled
#   gpu through ctest, the runs use BUILD_DIR/apps/tandem/tandem. OUT_DIR gets the logs and results.json.
#   GPU_CHECK_OPS=0 skips step 1; GPU_CHECK_BIG_STEPS (default 6) sets the steps of the 1.64B runs,
#   0 skips them. Every bound is in bench/gpu/tolerances.h, read here through ops_check --print-tolerances.
set -u
build="$1"
anchor="$2"
out="$3"
source "$(dirname "$0")/gpu_env.sh" "$out"
bin="$build/apps/tandem"
tandem="$bin/tandem"
status=0

# The tolerance table, one "name bound" a line, for the loss comparison of step 2.
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
run_tiny() {  # NAME N DEVICE PARALLEL ZERO [--set KEY=VALUE ...]
  local name="$1" n="$2" device="$3" parallel="$4" zero="$5"
  shift 5
  timeout 75 "$tandem" train -n "$n" "$out/tiny.json" --device "$device" --out "$out/tiny_$name" \
    --set "parallel=$parallel" --set zero_optimization.stage="$zero" "$@" >"$out/tiny_$name.log" 2>&1 ||
    { echo "$name: exit $?"; tail -6 "$out/tiny_$name.log"; }
}
fp16=(--set bf16.enabled=false --set fp16.enabled=true)
run_tiny cpu 1 cpu '{}' 0
run_tiny gpu1 1 cuda '{}' 0
run_tiny dp2z3 2 cuda '{"virtual_gpus": 2}' 3
run_tiny pp2 2 cuda '{"pipeline": 2}' 0
run_tiny tp2 2 cuda '{"tensor": 2}' 0
run_tiny pp2v2ckpt 2 cuda '{"pipeline": 2, "schedule": "interleaved", "virtual_stages": 2, "activation_checkpointing": true}' 0
run_tiny cpu_fp16 1 cpu '{}' 0 "${fp16[@]}"
run_tiny gpu1_fp16 1 cuda '{}' 0 "${fp16[@]}"
run_tiny dp2z2_fp16 2 cuda '{"virtual_gpus": 2}' 2 "${fp16[@]}"
python3 - "$out" <<'PY' || status=1
import json, sys
out = sys.argv[1]
bound = {line.split()[0]: float(line.split()[1]) for line in open(f"{out}/tolerances.txt") if line.strip()}
def losses(name):
    try:
        return [json.loads(l)["loss"] for l in open(f"{out}/tiny_{name}/metrics.jsonl")]
    except OSError:
        return []
ok = True
for ref_name, names, limit in [("cpu", ["gpu1", "dp2z3", "pp2", "tp2", "pp2v2ckpt"], bound["loss_bf16"]),
                               ("cpu_fp16", ["gpu1_fp16", "dp2z2_fp16"], bound["loss_fp16"])]:
    ref = losses(ref_name)
    ok &= len(ref) == 20
    print(f"{ref_name} reference: first %.4f last %.4f" % (ref[0], ref[-1]) if ref else f"no {ref_name} reference")
    for name in names:
        got = losses(name)
        worst = max((abs(a - b) / abs(b) for a, b in zip(got, ref)), default=float("inf"))
        good = len(got) == 20 and worst < limit
        ok &= good
        print(f"{name:10s} steps {len(got):2d} worst relative loss difference {worst:.2e} (bound {limit:g}) "
              f"{'PASS' if good else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
echo "-- planner's predicted peak against the measured peak (tiny runs)"
for n in cpu gpu1 dp2z3 pp2 tp2 pp2v2ckpt cpu_fp16 gpu1_fp16 dp2z2_fp16; do
  echo "$n: $(grep -h '^predicted' "$out/tiny_$n.log") | $(grep -h '^done' "$out/tiny_$n.log")"
done

[ "$big_steps" -gt 0 ] || exit $status
echo "== 3. gpt d1600 L48 (1.64B), seq 1024, micro-batch 8, bf16, on 2 GPUs: Tandem and PyTorch"
bash "$(dirname "$0")/gpu_runs.sh" "$bin" "$anchor" "$out/big" "$(dirname "$0")/runs/check_1b6.txt" "$big_steps" || status=1
exit $status
