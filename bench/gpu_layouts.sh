#!/usr/bin/env bash
# One model, every layout family of 2 GPUs, beside PyTorch in the same call: gpt d1600 L48 h25 T1024 V50304
# (1.64B parameters), bf16, global batch 16 sequences. For each Tandem layout it prints tokens/s, model TFLOP/s
# per GPU, the allocator's peak per GPU and the planner's prediction of both; for PyTorch (DDP, FSDP2, 1F1B) the
# reference script's figures; then the ratio of Tandem's best to PyTorch's best.
# Usage: bash bench/gpu_layouts.sh BIN_DIR PYTORCH_SCRIPT OUT_DIR [STEPS]
set -u
bin="$1"
anchor="$2"
out="$3"
steps="${4:-6}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
tandem="$bin/tandem"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpus.txt"

cat >"$out/model.json" <<JSON
{
  "model": { "type": "gpt", "vocab_size": 50304, "seq_len": 1024, "dim": 1600, "layers": 48, "heads": 25 },
  "data": { "type": "synthetic" },
  "train_batch_size": 16, "steps": $steps, "seed": 1,
  "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4 } },
  "checkpoint": { "every": 0, "at_end": false }
}
JSON

# GPU memory as the driver sees it (CUDA context, NCCL and library buffers included), sampled while a run lasts.
sample_memory() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$1" 2>/dev/null; }

run_tandem() {  # NAME DEVICES MICRO PARALLEL ZERO
  sample_memory "$out/$1.smi" &
  local sampler=$!
  timeout 120 "$tandem" train -n "$2" "$out/model.json" --device cuda --out "$out/$1" \
    --set train_micro_batch_size_per_gpu="$3" --set "parallel=$4" --set zero_optimization.stage="$5" \
    >"$out/$1.log" 2>&1 || { echo "$1: exit $?"; tail -5 "$out/$1.log"; }
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  echo "$1: $(grep -h '^predicted' "$out/$1.log") | $(grep -h 'tok/s' "$out/$1.log" | tail -1)"
}
run_torch() {  # NAME ARGS...
  local name="$1"
  shift
  timeout 150 torchrun --standalone --nproc_per_node=2 "$anchor" --steps "$steps" "$@" >"$out/$name.log" 2>&1 ||
    echo "$name: exit $?"
  grep -h RESULT "$out/$name.log"
}

run_tandem g1_z0 1 8 '{}' 0
run_tandem dp2_z1 2 8 '{"virtual_gpus": 2}' 1
run_tandem dp2_z2 2 8 '{"virtual_gpus": 2}' 2
run_tandem dp2_z3 2 8 '{"virtual_gpus": 2}' 3
run_tandem pp2_1f1b 2 2 '{"pipeline": 2, "schedule": "1f1b"}' 0
run_tandem pp2_v2 2 1 '{"pipeline": 2, "schedule": "interleaved", "virtual_stages": 2}' 0
run_tandem tp2 2 8 '{"tensor": 2}' 0
run_torch torch_ddp --mode ddp --micro 8
run_torch torch_fsdp --mode fsdp --fused --micro 8
run_torch torch_1f1b --mode 1f1b --micro 2 --chunks 8

python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
N, L, d, T = 1638172800, 48, 1600, 1024
flop = 6 * N + 12 * L * d * T
rows, res = [], {}
def smi_peak(name):
    try:
        vals = [int(x) for x in open(f"{out}/{name}.smi").read().split() if x.isdigit()]
        return max(vals) / 1024 if vals else None
    except OSError:
        return None
for log in sorted(glob.glob(f"{out}/*.log")):
    name = os.path.basename(log)[:-4]
    text = open(log).read()
    if name.startswith("torch_"):
        m = re.search(r"^RESULT (.*)$", text, re.M)
        r = json.loads(m.group(1)) if m else {"error": "no result"}
        res[name] = {"tokens_per_s": r.get("tokens_per_s"), "tflops_per_gpu": r.get("model_tflops_per_gpu"),
                     "peak_gib_per_gpu": r.get("peak_mem_GiB"), "error": r.get("error")}
        continue
    gpus = 1 if name.startswith("g1") else 2
    entry = {}
    try:
        ms = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
        steady = ms[2:] or ms
        tps = statistics.median(x["tokens_per_s"] for x in steady)
        entry = {"tokens_per_s": tps, "tflops_per_gpu": tps * flop / gpus / 1e12,
                 "peak_gib_per_gpu": max(x["peak_bytes"] for x in ms) / 2**30,
                 "loss_first": ms[0]["loss"], "loss_last": ms[-1]["loss"]}
    except Exception as e:
        entry = {"error": str(e)}
    m = re.search(r"predicted peak per device: ([0-9.]+) (GiB|MiB); predicted step ([0-9.]+) ms \(([0-9.e+]+)", text)
    if m:
        entry["predicted_peak_gib"] = float(m.group(1)) / (1024 if m.group(2) == "MiB" else 1)
        entry["predicted_tokens_per_s"] = float(m.group(4))
    entry["driver_peak_gib_per_gpu"] = smi_peak(name)
    res[name] = entry
print(f"{'run':10s} {'tok/s':>9s} {'TFLOP/s/GPU':>11s} {'peak GiB':>9s} {'pred GiB':>9s} {'err':>6s} "
      f"{'pred tok/s':>10s} {'driver GiB':>10s}")
for name, e in res.items():
    if e.get("tokens_per_s") is None:
        print(f"{name:10s} error: {e.get('error')}")
        continue
    pp, pt = e.get("predicted_peak_gib"), e.get("predicted_tokens_per_s")
    err = f"{(pp / e['peak_gib_per_gpu'] - 1) * 100:+.1f}%" if pp else "-"
    drv = e.get("driver_peak_gib_per_gpu")
    print(f"{name:10s} {e['tokens_per_s']:9.0f} {e['tflops_per_gpu']:11.1f} {e['peak_gib_per_gpu']:9.2f} "
          f"{pp if pp else float('nan'):9.2f} {err:>6s} {pt if pt else float('nan'):10.0f} "
          f"{drv if drv else float('nan'):10.1f}")
def best(of_torch):
    return max((e["tokens_per_s"] for n, e in res.items() if n.startswith("torch_") == of_torch
                and not n.startswith("g1") and e.get("tokens_per_s")), default=None)
t, p = best(False), best(True)
if t and p:
    res["ratio_best_tandem_over_best_torch"] = t / p
    print(f"best Tandem (2 GPUs) / best PyTorch: {t:.0f} / {p:.0f} = {t / p:.3f}")
json.dump(res, open(f"{out}/results.json", "w"), indent=1)
PY
