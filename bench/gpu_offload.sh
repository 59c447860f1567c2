#!/usr/bin/env bash
# Offload on one GPU and its host, beside the runs without offload and PyTorch FSDP2's CPU offload, in one call
# (docs/offload.md's targets): the host AdamW against the host's copy bandwidth and torch's CPU AdamW; the Llama-3-8B
# shape cut to 8 layers at 16 and 64 sequences a step, with and without the optimizer on the host; the shape cut to 24
# layers under a 24 GiB device budget beside it unbudgeted; a model past the largest that trains without offload
# (11.52B). Each offloaded run prints its step timeline (TANDEM_TIMELINE). Then the table: tok/s, peaks, ratios.
# Usage: bash bench/gpu_offload.sh BIN_DIR PYTORCH_LLAMA_SCRIPT OUT_DIR [BUDGET_S]
#   GPU_OFFLOAD_PARTS: any of "adamw l8 l8m2 torch l8x64 full24 full8b24 l28x24 capacity" (default all, in that
#   order);
#   GPU_OFFLOAD_STEPS (default 6): steps of each run (its speed: the tokens of the steps after the first over their time).
#   GPU_OFFLOAD_DRY=1 prints the commands and checks the configs with `tandem plan` instead of running them (works
#   without a GPU).
set -u
bin="$1"
anchor="$2"
out="$3"
budget="${4:-540}"
parts=" ${GPU_OFFLOAD_PARTS:-adamw l8 l8m2 torch l8x64 full24 full8b24 l28x24 capacity} "
dry="${GPU_OFFLOAD_DRY:-0}"
steps="${GPU_OFFLOAD_STEPS:-6}"
mkdir -p "$out"
if [ "$dry" = 1 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
else
  source "$(dirname "$0")/gpu_env.sh" "$out"
fi
started=$(date +%s)

source "$(dirname "$0")/budgeted_run.sh"

# llama NAME LAYERS BATCH MICRO CKPT EXTRA_JSON: the Llama-3-8B shape (d4096 h32 kv8 ffn 14336, V 128256 untied,
# rope_theta 500000) with LAYERS layers at T=2048, bf16, BATCH sequences a step; EXTRA_JSON is spliced in as more
# top-level keys (offload, budgets).
llama() {
  cat >"$out/$1.json" <<JSON
{ "model": { "type": "llama", "vocab_size": 128256, "seq_len": 2048, "hidden_size": 4096, "num_hidden_layers": $2,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "rms_norm_eps": 1e-5,
    "rope_theta": 500000, "tie_word_embeddings": false },
  "data": { "type": "synthetic" }, "train_batch_size": $3, "train_micro_batch_size_per_gpu": $4,
  "parallel": { "activation_checkpointing": $5 }, "steps": $steps, "seed": 1, "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4, "weight_decay": 0.1 } },
  "checkpoint": { "every": 0, "at_end": false }${6:+, $6} }
JSON
}

tandem() {  # NAME LIMIT_S [VAR=VALUE...]: OUT/NAME.json on the GPU, its timeline recorded at step 3 when it offloads
  if [ "$dry" = 1 ]; then
    "$bin/tandem" plan "$out/$1.json" --devices 1 --device-memory 139GiB --host-memory 120GiB >"$out/$1.plan" 2>&1 &&
      echo "$1: config valid ($(grep -c . "$out/$1.plan") lines of plan)" || { echo "$1: INVALID"; tail -3 "$out/$1.plan"; }
  fi
  run "$1" "$2" env TANDEM_TIMELINE=3 "${@:3}" "$bin/tandem" train "$out/$1.json" --device cuda --out "$out/$1"
}
# after_backward NAME LIMIT_S: NAME's config again as NAME_after with offload_optimizer.update "after_backward", its
# host update held until the backward ends (as with gradient clipping): the same losses, the timing before the update
# moved into the backward.
after_backward() {
  sed 's/"offload_optimizer": {/& "update": "after_backward",/' "$out/$1.json" >"$out/$1_after.json"
  tandem "$1_after" "$2"
}

cpu='"zero_optimization": { "stage": 2, "offload_optimizer": { "device": "cpu", "pin_memory": true } }'
all='"zero_optimization": { "stage": 3, "offload_optimizer": { "device": "cpu", "pin_memory": true },
  "offload_param": { "device": "cpu", "pin_memory": true } }'

if [[ $parts == *" adamw "* ]]; then
  echo "== the host AdamW: 268M parameters (4 GiB of state) beside a host copy and torch's CPU AdamW"
  run host_adamw 120 bash "$(dirname "$0")/host_adamw.sh" "$bin/../.." python3 268435456
fi

if [[ $parts == *" l8 "* ]]; then
  echo "== Llama-3-8B shape, 8 layers (2.80B), T 2048, 16 sequences a step"
  llama l8_device 8 16 2 false
  tandem l8_device 120
  # With the optimizer on the host the device has room for all 16 sequences in one micro-batch without
  # checkpointing: one copy of the gradient down a step. The host update in the backward, then after it (A/B).
  llama l8_cpu_m16 8 16 16 false "$cpu"
  tandem l8_cpu_m16 150
  after_backward l8_cpu_m16 150
fi

if [[ $parts == *" l8m2 "* ]]; then
  # The layout of l8_device with the optimizer on the host: its losses beside l8_device's give the GPU's bound; its
  # 8 micro-batches move the fp32 gradient sum down and up each time.
  llama l8_cpu_m2 8 16 2 false "$cpu"
  tandem l8_cpu_m2 150
  llama l8_cpu_m16c 8 16 16 true "$cpu"
  tandem l8_cpu_m16c 150
fi

if [[ $parts == *" torch "* ]]; then
  # Three warm-up steps and one timed one: a run that does not finish in the limit bounds its step from below.
  echo "== PyTorch FSDP2 with CPUOffloadPolicy on the 8-layer shape, 16 sequences a step"
  run torch_l8_fsdp_offload 200 torchrun --standalone --nproc_per_node=1 "$anchor" --shape 8b --layers 8 --mode fsdp \
    --offload --micro 2 --accum 8 --steps 1
fi

if [[ $parts == *" l8x64 "* ]]; then
  echo "== the same at 64 sequences a step"
  llama l8x64_device 8 64 2 false
  tandem l8x64_device 180
  # The optimizer on the host leaves the device room for 32 sequences a micro-batch without checkpointing (102.0 GiB
  # predicted): two micro-batches, so the fp32 gradient sum goes down twice a step and back up once.
  llama l8x64_cpu_m32 8 64 32 false "$cpu"
  tandem l8x64_cpu_m32 240
  after_backward l8x64_cpu_m32 240
  # ratio 0.8 keeps the first 20% of the parameters' optimizer on the device: the embedding (525M of 2.80B), whose
  # gradient comes last in the backward, so no host update is left after it.
  llama l8x64_cpu_m32_r80 8 64 32 false "${cpu/\"pin_memory\": true/\"pin_memory\": true, \"ratio\": 0.8}"
  tandem l8x64_cpu_m32_r80 240
fi

if [[ $parts == *" full24 "* ]]; then
  # The full 8B offloaded needs 18 bytes a parameter of host memory (fp32 master, moments and gradient, the 16-bit
  # values): 134.6 GiB, over the 128 GiB of this GPU's host. Its 24-layer cut (6.28B, 105.4 GiB) is the largest
  # 8B-shaped model this host can hold offloaded; micro 4 x 4 is the largest micro-batch under 24 GiB.
  echo "== the 8B shape with 24 layers (6.28B) under a 24 GiB device budget, everything offloaded, then unbudgeted"
  llama l24_24gib 24 16 4 true "$all, \"device_memory\": \"24GiB\""
  tandem l24_24gib 300
  llama l24_device 24 16 4 false
  tandem l24_device 180
fi

if [[ $parts == *" full8b24 "* ]]; then
  # With the optimizer alone on the host the device keeps the bf16 weights and the host no copy of them: 16 bytes a
  # parameter and two upload buffers of the largest layer, 121.6 GiB for the full 8B (8.03B), which the planner fits
  # under 24 GiB at micro 4 x 4 with checkpointing (the preflight refuses it, with the numbers, on a host with less
  # free). Beside it the full 8B unbudgeted, at micro 1 x 16 (136.2 GiB).
  echo "== the full Llama-3-8B (8.03B) under a 24 GiB device budget, the optimizer on the host, then unbudgeted"
  llama full8b_24gib 32 16 4 true '"zero_optimization": { "stage": 1, "offload_optimizer": { "device": "cpu", "pin_memory": true } }, "device_memory": "24GiB"'
  tandem full8b_24gib 300
  llama full8b_device 32 16 1 true
  tandem full8b_device 240
fi

if [[ $parts == *" l28x24 "* ]]; then
  # The full 8B's optimizer needs 119.9 GiB of host memory, past what a 128 GiB host gives it (the preflight refuses
  # it); 28 layers of its shape (7.16B) need 106.9 GiB. The same 24 GiB budget, then unbudgeted at micro 1 x 16.
  echo "== 28 layers of the Llama-3-8B shape (7.16B) under a 24 GiB device budget, the optimizer on the host, then unbudgeted"
  llama l28_24gib 28 16 4 true '"zero_optimization": { "stage": 1, "offload_optimizer": { "device": "cpu", "pin_memory": true } }, "device_memory": "24GiB"'
  tandem l28_24gib 300
  llama l28_device 28 16 1 true
  tandem l28_device 200
fi

if [[ $parts == *" capacity "* ]]; then
  # Without offload the full 8B (8.03B, 136.2 GiB at micro 1 x 16) is the largest that trains on one H200; 48 layers
  # of its shape are 11.52B (1.43x), half of the optimizer on the host (the device ~113 GiB, the host ~98 GiB).
  echo "== past the largest model without offload: the 8B shape with 48 layers (11.52B), half its optimizer on the host"
  llama capacity_l48 48 16 1 true '"zero_optimization": { "stage": 2, "offload_optimizer": { "device": "cpu", "pin_memory": true, "ratio": 0.5 } }'
  tandem capacity_l48 300
fi

[ "$dry" = 1 ] && exit 0
echo
echo "== results"
python3 - "$out" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
def metrics(name):
    path = os.path.join(out, name, "metrics.jsonl")
    if not os.path.exists(path): return None
    rows = [json.loads(l) for l in open(path)]
    # The first step times the GEMMs and warms the host. The steps after it by their total time: an update that runs
    # past a step's end moves time into the next step, so single steps swing while their sum does not.
    rows = rows[1:] or rows
    tokens = sum(r["tokens_per_s"] * r["step_s"] for r in rows)
    return tokens / sum(r["step_s"] for r in rows), max(r["peak_bytes"] for r in rows) / 2**30
def torch(name):
    path = os.path.join(out, name + ".log")
    if not os.path.exists(path): return None
    m = re.search(r"RESULT (\{.*\})", open(path).read())
    return json.loads(m.group(1)) if m else None
rows = {}
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    name = os.path.basename(f)[:-5]
    r = metrics(name)
    if r: rows[name] = r
for name, (tps, gib) in rows.items():
    log = open(os.path.join(out, name + ".log")).read()
    host = re.search(r"offloaded state in host memory, peak per rank: 0 ([0-9.]+ [KMG]iB)", log)
    line = re.search(r"offload timeline of step 3 .*?: (.*)", log)
    print(f"{name:18s} {tps:10.0f} tok/s  device peak {gib:6.2f} GiB" + (f"  host {host.group(1)}" if host else ""))
    if line: print(f"{'':18s} timeline: {line.group(1)}")
t = torch("torch_l8_fsdp_offload")
if os.path.exists(os.path.join(out, "torch_l8_fsdp_offload.log")):
    print("torch_l8_fsdp_offload " + (f"{t['tokens_per_s']:10.0f} tok/s, {t['step_s']:.1f} s a step" if t and "tokens_per_s" in t
                                      else "no result in its limit: see its log and exit line"))
def losses(name):
    path = os.path.join(out, name, "metrics.jsonl")
    return [json.loads(l)["loss"] for l in open(path)] if os.path.exists(path) else None
def compare(x, y, what):
    a, b = losses(x), losses(y)
    if a and b and len(a) == len(b):
        print(f"losses {what}: " + " ".join(f"{p:.6f}/{q:.6f}" for p, q in zip(a, b)) +
              f"; largest difference {max(abs(p - q) for p, q in zip(a, b)):.3g}")
compare("l8_device", "l8_cpu_m2", "on the device / offloaded")
for name in ("l8_cpu_m16", "l8x64_cpu_m32"):
    compare(name, name + "_after", "with the update in / after the backward")
def ratio(a, b):
    if a in rows and b in rows: print(f"{a} / {b}: {rows[a][0] / rows[b][0]:.3f}")
for a in ("l8_cpu_m2", "l8_cpu_m16c", "l8_cpu_m16", "l8_cpu_m16_after"): ratio(a, "l8_device")
ratio("l8x64_cpu_m32", "l8x64_device")
ratio("l8x64_cpu_m32_after", "l8x64_device")
ratio("l8x64_cpu_m32_r80", "l8x64_device")
ratio("l24_24gib", "l24_device")
ratio("full8b_24gib", "full8b_device")
PY
