#!/usr/bin/env bash
# Scaling of one gpt (T=1024, V=50304, bf16, global batch 16 sequences a GPU) over 1, 2, 4, ... GPUs of this
# machine, each run in the layout the planner picks ("parallel": "auto"), and PyTorch FSDP2 on every GPU in
# the same call: tokens/s, tokens/s per GPU, model TFLOP/s per GPU, peak GiB per GPU, the planner's predictions.
# Usage: bash bench/gpu_scaling.sh BIN_DIR PYTORCH_SCRIPT OUT_DIR DIM LAYERS HEADS [TORCH_MICRO] [STEPS]
set -u
bin="$1"
anchor="$2"
out="$3"
dim="$4"
layers="$5"
heads="$6"
torch_micro="${7:-4}"
steps="${8:-5}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
gpus=$(nvidia-smi -L | grep -c '^GPU')

for n in 1 2 4 8; do
  [ "$n" -le "$gpus" ] || break
  cat >"$out/g$n.json" <<JSON
{
  "model": { "type": "gpt", "vocab_size": 50304, "seq_len": 1024, "dim": $dim, "layers": $layers, "heads": $heads },
  "data": { "type": "synthetic" }, "parallel": "auto",
  "train_batch_size": $((16 * n)), "steps": $steps, "seed": 1, "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4 } }, "checkpoint": { "every": 0, "at_end": false }
}
JSON
  timeout 240 "$bin/tandem" train -n "$n" "$out/g$n.json" --device cuda --out "$out/g$n" >"$out/g$n.log" 2>&1 ||
    { echo "g$n: exit $?"; grep -v "^  " "$out/g$n.log" | tail -4; }
  echo "g$n: $(grep -h '^parallel: auto' "$out/g$n.log") | $(grep -h '^predicted' "$out/g$n.log")"
done
timeout 240 torchrun --standalone --nproc_per_node="$gpus" "$anchor" --mode fsdp --fused --dim "$dim" --layers "$layers" \
  --heads "$heads" --micro "$torch_micro" --steps "$steps" >"$out/torch_fsdp.log" 2>&1 || echo "torch fsdp: exit $?"
grep -h RESULT "$out/torch_fsdp.log"

python3 - "$out" "$dim" "$layers" <<'PY'
import glob, json, re, statistics, sys
out, d, L = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
T, V = 1024, 50304
N = V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d + d * V
flop = 6 * N + 12 * L * d * T
print(f"gpt d{d} L{L}: {N / 1e9:.2f}B parameters")
print(f"{'run':10s} {'layout':34s} {'tok/s':>8s} {'tok/s/GPU':>9s} {'TFLOP/s/GPU':>11s} {'peak GiB':>8s} "
      f"{'pred GiB':>8s} {'pred tok/s':>10s}")
res = {}
for log in sorted(glob.glob(f"{out}/g*.log"), key=lambda p: int(re.search(r"g(\d+)\.log", p).group(1))):
    n = int(re.search(r"g(\d+)\.log", log).group(1))
    text = open(log).read()
    lay = re.search(r"^parallel: auto -> (\S+)", text, re.M)
    pred = re.search(r"predicted peak per device: ([0-9.]+) (GiB|MiB).*predicted step [0-9.]+ ms \(([0-9.e+]+)", text)
    try:
        ms = [json.loads(l) for l in open(f"{out}/g{n}/metrics.jsonl")]
        tps = statistics.median(x["tokens_per_s"] for x in (ms[2:] or ms))
        peak = max(x["peak_bytes"] for x in ms) / 2**30
    except Exception as e:
        print(f"g{n:<9d} error: {e}")
        continue
    e = {"gpus": n, "layout": lay.group(1) if lay else "?", "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / n,
         "tflops_per_gpu": tps * flop / n / 1e12, "peak_gib_per_gpu": peak}
    if pred:
        e["predicted_peak_gib"] = float(pred.group(1)) / (1024 if pred.group(2) == "MiB" else 1)
        e["predicted_tokens_per_s"] = float(pred.group(3))
    res[f"tandem_g{n}"] = e
    print(f"{'tandem':10s} {e['layout']:34s} {tps:8.0f} {tps / n:9.0f} {e['tflops_per_gpu']:11.1f} {peak:8.2f} "
          f"{e.get('predicted_peak_gib', float('nan')):8.2f} {e.get('predicted_tokens_per_s', float('nan')):10.0f}")
for line in open(f"{out}/torch_fsdp.log"):
    if line.startswith("RESULT "):
        r = json.loads(line[7:])
        res["torch_fsdp"] = r
        if r.get("tokens_per_s"):
            g = r["gpus"]
            print(f"{'torch':10s} {'fsdp2 micro ' + str(r['micro']) + ' on ' + str(g):34s} {r['tokens_per_s']:8.0f} "
                  f"{r['tokens_per_s'] / g:9.0f} {r['model_tflops_per_gpu']:11.1f} {r['peak_mem_GiB']:8.2f}")
            mine = res.get(f"tandem_g{g}")
            if mine:
                print(f"Tandem / PyTorch FSDP2 on {g} GPUs: {mine['tokens_per_s'] / r['tokens_per_s']:.3f}")
        else:
            print(f"torch fsdp: {r.get('error')}")
json.dump(res, open(f"{out}/results.json", "w"), indent=1)
PY
