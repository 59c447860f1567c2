#!/usr/bin/env bash
# The GPU check, run on a machine with 2 NVIDIA GPUs in one call: every CUDA op against the CPU op; a tiny gpt
# for 20 steps on 1 GPU and on 2 GPUs as dp2 ZeRO-3, pp2 and tp2 against the CPU backend at bf16 tolerance;
# then gpt d1600 L48 (1.64B) on 2 GPUs beside PyTorch (the reference script) on the same model.
# Usage: bash bench/gpu_check.sh BIN_DIR PYTORCH_SCRIPT OUT_DIR
#   BIN_DIR holds the tandem and ops_check binaries; OUT_DIR gets the logs and results.json.
#   GPU_CHECK_OPS=0 skips step 1; GPU_CHECK_BIG_STEPS (default 6) sets the steps of the 1.64B runs.
set -u
bin="$1"
anchor="$2"
out="$3"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
tandem="$bin/tandem"
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpus.txt"

big_steps="${GPU_CHECK_BIG_STEPS:-6}"

if [ "${GPU_CHECK_OPS:-1}" != 0 ]; then
  echo "== 1. CUDA ops against the CPU ops"
  timeout 240 "$bin/ops_check" --no-bench >"$out/ops_check.txt" 2>&1
  rc=$?
  grep -c PASS "$out/ops_check.txt" | sed 's/^/rows passed: /'
  grep FAIL "$out/ops_check.txt" | head -5
  [ $rc -eq 0 ] || { echo "ops_check FAILED (exit $rc)"; status=1; }
fi

echo "== 2. tiny gpt, 20 steps: CPU bf16 reference against 1 GPU and 2 GPUs (dp2 ZeRO-3, pp2, tp2)"
cat >"$out/tiny.json" <<'JSON'
{
  "model": { "type": "gpt", "vocab_size": 512, "seq_len": 128, "dim": 256, "layers": 4, "heads": 4 },
  "data": { "type": "synthetic" },
  "train_batch_size": 16, "gradient_accumulation_steps": 2, "steps": 20, "seed": 7,
  "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-3, "weight_decay": 0.1 } },
  "gradient_clipping": 1.0
}
JSON
run_tiny() {  # NAME N DEVICE PARALLEL ZERO
  timeout 75 "$tandem" train -n "$2" "$out/tiny.json" --device "$3" --out "$out/tiny_$1" \
    --set "parallel=$4" --set zero_optimization.stage="$5" >"$out/tiny_$1.log" 2>&1 || { echo "$1: exit $?"; tail -6 "$out/tiny_$1.log"; }
}
run_tiny cpu 1 cpu '{}' 0
run_tiny gpu1 1 cuda '{}' 0
run_tiny dp2z3 2 cuda '{"virtual_gpus": 2}' 3
run_tiny pp2 2 cuda '{"pipeline": 2}' 0
run_tiny tp2 2 cuda '{"tensor": 2}' 0
python3 - "$out" <<'PY' || status=1
import json, sys
out = sys.argv[1]
def losses(name):
    try:
        return [json.loads(l)["loss"] for l in open(f"{out}/tiny_{name}/metrics.jsonl")]
    except OSError:
        return []
ref = losses("cpu")
ok = len(ref) == 20
print("cpu bf16 reference: first %.4f last %.4f" % (ref[0], ref[-1]) if ref else "no cpu reference")
for name in ["gpu1", "dp2z3", "pp2", "tp2"]:
    got = losses(name)
    worst = max((abs(a - b) / abs(b) for a, b in zip(got, ref)), default=float("inf"))
    good = len(got) == 20 and worst < 2e-2
    ok &= good
    print(f"{name:6s} steps {len(got):2d} worst relative loss difference {worst:.2e} {'PASS' if good else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
echo "-- planner's predicted peak against the measured peak (tiny runs)"
for n in cpu gpu1 dp2z3 pp2 tp2; do
  echo "$n: $(grep -h '^predicted' "$out/tiny_$n.log") | $(grep -h '^done' "$out/tiny_$n.log")"
done

echo "== 3. gpt d1600 L48 (1.64B), seq 1024, micro-batch 8, bf16, on 2 GPUs: Tandem and PyTorch"
cat >"$out/big.json" <<'JSON'
{
  "model": { "type": "gpt", "vocab_size": 50304, "seq_len": 1024, "dim": 1600, "layers": 48, "heads": 25 },
  "data": { "type": "synthetic" },
  "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "steps": BIG_STEPS, "seed": 1,
  "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4 } },
  "checkpoint": { "every": 0, "at_end": false }
}
JSON
sed -i "s/BIG_STEPS/$big_steps/" "$out/big.json"
timeout 240 "$tandem" train -n 2 "$out/big.json" --device cuda --out "$out/big_dp2" --set train_batch_size=16 \
  --set 'parallel={"virtual_gpus": 2}' --set zero_optimization.stage=1 >"$out/big_dp2.log" 2>&1 || echo "tandem dp2: exit $?"
grep -E "^predicted|^error|^done" "$out/big_dp2.log"; tail -3 "$out/big_dp2.log"
timeout 150 torchrun --standalone --nproc_per_node=2 "$anchor" --mode ddp --micro 8 --steps "$big_steps" >"$out/torch_ddp.log" 2>&1 ||
  echo "torch ddp: exit $?"
grep RESULT "$out/torch_ddp.log"
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
N, L, d, T = 1638172800, 48, 1600, 1024
flop_per_token = 6 * N + 12 * L * d * T
res = {}
try:
    rows = [json.loads(l) for l in open(f"{out}/big_dp2/metrics.jsonl")]
    steady = rows[3:] or rows
    tps = statistics.median(r["tokens_per_s"] for r in steady)
    res["tandem_dp2_zero1"] = {"tokens_per_s": tps, "tflops_per_gpu": tps * flop_per_token / 2 / 1e12,
                               "peak_gib_per_gpu": max(r["peak_bytes"] for r in rows) / 2**30,
                               "loss_first": rows[0]["loss"], "loss_last": rows[-1]["loss"]}
except Exception as e:
    res["tandem_dp2_zero1"] = {"error": str(e)}
for line in open(f"{out}/torch_ddp.log"):
    if line.startswith("RESULT "):
        r = json.loads(line[7:])
        res["torch_ddp"] = {"tokens_per_s": r.get("tokens_per_s"), "tflops_per_gpu": r.get("model_tflops_per_gpu"),
                            "peak_gib_per_gpu": r.get("peak_mem_GiB"), "error": r.get("error")}
t, p = res.get("tandem_dp2_zero1", {}), res.get("torch_ddp", {})
if t.get("tokens_per_s") and p.get("tokens_per_s"):
    res["ratio_tandem_over_torch"] = t["tokens_per_s"] / p["tokens_per_s"]
json.dump(res, open(f"{out}/results.json", "w"), indent=1)
print(json.dumps(res, indent=1))
PY
exit $status
