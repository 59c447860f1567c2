#!/usr/bin/env bash
# Long sequences on one GPU (docs/long-context.md): the Llama-3-8B shape cut to 8 layers (d4096 h32 kv8 ffn 14336,
# V 128256 untied, 2.80B), bf16, one sequence a step with activation checkpointing, at each T of GPU_LONG_T; and the
# same shape at T 2048, 16 sequences a step (micro 4 x 4, no checkpointing), the short-sequence speed to keep. Each
# run prints its tok/s and peak; the summary table comes last. With ANCHORS_DIR, transformers + Liger Kernel
# (ANCHORS_DIR/hf_liger.py, its wheel installed beside torch) runs the same shape and lengths in the same call.
# Usage: bash bench/gpu_long_context.sh BIN_DIR OUT_DIR [BUDGET_S [ANCHORS_DIR]]
#   GPU_LONG_T: the sequence lengths (default "32768 65536 131072"; empty: none).
#   GPU_LONG_ATTENTION: "deterministic" (the default attention), "nondeterministic"
#     (TANDEM_NONDETERMINISTIC_ATTENTION=1), or both (the default); "deterministic_gN" is the deterministic one with
#     its backward's blocks over N head groups (TANDEM_ATTENTION_BLOCK_GROUPS=N) rather than the rule's count, and
#     "deterministic_bN" with N GiB of dP a block (tiles.attention_block_bytes) rather than the preflight's choice
#     (8 where the plan fits the GPU with them, else 4), and
#     "deterministic_s0" or "_s1" with its whole-height blocks unsplit or split (TANDEM_ATTENTION_BLOCK_SPLIT);
#     these combine (deterministic_g8_b8_s1).
#   GPU_LONG_HOST_CKPT: "0" (the default), "1" (the checkpointed layer inputs in host memory:
#     parallel.cpu_checkpointing, runs named ..._host) or "0 1" (both, measured in the same call).
#   GPU_LONG_KEEP: "0" (the default), "1" (attention's output kept for the recomputation: parallel.keep_attention,
#     runs named ..._keep) or "0 1".
#   GPU_LONG_MODEL: "8l" (the default: the 8-layer shape, full training), "8b_lora" (the full 32-layer Llama-3-8B,
#     its bf16 base frozen, LoRA r 16 alpha 32 on all seven projections; Liger's side: hf_liger.py's LoRA through PEFT)
#     or "8b_offload" (the full 8B in full training, its optimizer in host memory but the first 15% of its layers':
#     offload_optimizer ratio 0.85; no Liger run).
#   GPU_LONG_LIMIT: the seconds each long run may take (default 240; a 256k step takes about 130 s).
#   GPU_LONG_LIGER_COMPILE: "0" (the default: Liger's side eager), "1" (each decoder layer under torch.compile,
#     hf_liger.py --compile, runs named liger_..._compiled) or "0 1"; Tandem's ratio is to the faster of a length's.
#   GPU_LONG_SHORT=0 leaves the T 2048 run out; GPU_LONG_STEPS (default 3) the steps of each run (Liger: that many
#     timed after one warm-up step).
#   GPU_LONG_DRY=1 prints the commands and checks the configs with `tandem plan` (works without a GPU).
set -u
bin="$1"
out="$2"
budget="${3:-540}"
anchors="${4:-}"
model="${GPU_LONG_MODEL:-8l}"
dry="${GPU_LONG_DRY:-0}"
steps="${GPU_LONG_STEPS:-3}"
lengths="${GPU_LONG_T-32768 65536 131072}"
attentions="${GPU_LONG_ATTENTION:-deterministic nondeterministic}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
if [ "$dry" = 1 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
else
  source "$here/gpu_env.sh" "$out"
fi
started=$(date +%s)
status=0
source "$here/budgeted_run.sh"

# config NAME T BATCH MICRO CKPT [HOST_CKPT [KEEP [BLOCK_GIB]]]: the shape of GPU_LONG_MODEL at sequence length T.
config() {
  local layers=8 lora="" tiles=""
  [ -n "${8:-}" ] && tiles=", \"tiles\": { \"attention_block_bytes\": \"${8}GiB\" }"
  if [ "$model" = 8b_lora ]; then
    layers=32
    lora=', "lora": { "r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj",
    "gate_proj", "up_proj", "down_proj"] }'
  elif [ "$model" = 8b_offload ]; then
    layers=32
    lora=', "zero_optimization": { "stage": 1, "offload_optimizer": { "device": "cpu", "pin_memory": true,
    "ratio": 0.85 } }'
  fi
  cat >"$out/$1.json" <<JSON
{ "model": { "type": "llama", "vocab_size": 128256, "seq_len": $2, "hidden_size": 4096, "num_hidden_layers": $layers,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "rms_norm_eps": 1e-5,
    "rope_theta": 500000, "max_position_embeddings": $2, "tie_word_embeddings": false },
  "data": { "type": "synthetic" }, "train_batch_size": $3, "train_micro_batch_size_per_gpu": $4,
  "parallel": { "activation_checkpointing": $5, "cpu_checkpointing": ${6:-false}, "keep_attention": ${7:-false} },
  "steps": $steps, "seed": 1, "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4, "weight_decay": 0.1 } },
  "checkpoint": { "every": 0, "at_end": false }$lora$tiles }
JSON
}

tandem() {  # NAME LIMIT_S [ENV=VALUE...]
  local name="$1" limit="$2"
  shift 2
  if [ "$dry" = 1 ]; then
    "$bin/tandem" plan "$out/$name.json" --devices 1 --rates h200 | tail -2
    return
  fi
  run "$name" "$limit" env "$@" "$bin/tandem" train "$out/$name.json" --device cuda --out "$out/$name" --overwrite
}

if [ "${GPU_LONG_SHORT:-1}" != 0 ]; then
  config l8_t2048 2048 16 4 false
  tandem l8_t2048 150
fi
bool() { [ "$1" = 1 ] && echo true || echo false; }
for t in $lengths; do
  for a in $attentions; do
    for host in ${GPU_LONG_HOST_CKPT:-0}; do
      for keep in ${GPU_LONG_KEEP:-0}; do
        name="l8_t${t}_${a}"
        [ "$model" != 8l ] && name="${model}_t${t}_${a}"
        [ "$host" = 1 ] && name="${name}_host"
        [ "$keep" = 1 ] && name="${name}_keep"
        block_gib=""
        [[ "$a" =~ _b([0-9]+) ]] && block_gib="${BASH_REMATCH[1]}"
        config "$name" "$t" 1 1 true "$(bool "$host")" "$(bool "$keep")" "$block_gib"
        envs=(TANDEM_NONDETERMINISTIC_ATTENTION=0)
        [ "$a" = nondeterministic ] && envs=(TANDEM_NONDETERMINISTIC_ATTENTION=1)
        [[ "$a" =~ _g([0-9]+) ]] && envs+=("TANDEM_ATTENTION_BLOCK_GROUPS=${BASH_REMATCH[1]}")
        [[ "$a" =~ _s([01]) ]] && envs+=("TANDEM_ATTENTION_BLOCK_SPLIT=${BASH_REMATCH[1]}")
        tandem "$name" "${GPU_LONG_LIMIT:-240}" "${envs[@]}"
      done
    done
  done
  if [ -n "$anchors" ] && [ "$model" != 8b_offload ]; then
    liger_args=(--layers 8 --full)
    [ "$model" = 8b_lora ] && liger_args=(--layers 32)
    for compiled in ${GPU_LONG_LIGER_COMPILE:-0}; do
      suffix="" extra=()
      [ "$compiled" = 1 ] && suffix=_compiled extra=(--compile)
      run "liger_${model}_t${t}${suffix}" "${GPU_LONG_LIMIT:-240}" "${PYTHON:-python3}" "$anchors/hf_liger.py" \
        "${liger_args[@]}" "${extra[@]}" --seq "$t" --micro 1 --accum 1 --warmup 1 --steps "$steps"
    done
  fi
done

echo "== long context ($(($(date +%s) - started)) s)"
[ "$dry" = 1 ] && exit 0
# name, tok/s of the steps after the first, the peak and its prediction: from each run's metrics.jsonl (or, for a run
# refused before step 1, the line that says why); Liger's from its RESULT line, and each Tandem run's ratio to the
# Liger run of its length.
"${PYTHON:-python3}" - "$out" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
liger = {}
for log in sorted(glob.glob(os.path.join(out, "liger_*.log"))):
    name = os.path.basename(log)[:-4]
    res = [json.loads(l[7:]) for l in open(log) if l.startswith("RESULT ")]
    if not res or res[-1].get("oom") or "tokens_per_s" not in res[-1]:
        print(f"{name:36s} no step: {'out of memory' if res and res[-1].get('oom') else 'see its log'}")
        continue
    r = res[-1]
    key = (name.split("_t")[0][len("liger_"):], int(r["seq"]))
    liger[key] = max(liger.get(key, 0), r["tokens_per_s"])
    print(f"{name:36s} {r['tokens_per_s']:9.0f} tok/s  peak {r['peak_mem_GiB']:7.2f} GiB  loss {r['losses'][-1]:.4f}")
for cfg in sorted(glob.glob(os.path.join(out, "*.json"))):
    name = os.path.basename(cfg)[:-5]
    if not (name.startswith("l8_") or name.startswith("8b_")):
        continue
    run, log = os.path.join(out, name), os.path.join(out, name + ".log")
    rows = []
    try:
        with open(os.path.join(run, "metrics.jsonl")) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except OSError:
        pass
    rows = [r for r in rows if "loss" in r]
    if not rows:
        why = ""
        if os.path.exists(log):
            lines = [l.strip() for l in open(log) if l.strip()]
            why = next((l for l in lines if "error" in l.lower() or "needs" in l or "refus" in l),
                       lines[-1] if lines else "")
        print(f"{name:36s} no step: {why[:150]}")
        continue
    timed = rows[1:] or rows
    tokens = sum(r["tokens_per_s"] * r["step_s"] for r in timed)
    secs = sum(r["step_s"] for r in timed)
    peak = max(r["peak_bytes"] for r in rows)
    predicted = rows[-1].get("predicted_peak_bytes", 0)
    t = int(re.search(r"_t(\d+)", name).group(1))
    base = liger.get((name.split("_t")[0] if name.startswith("8b_") else "8l", t))
    ratio = f"  {tokens / secs / base:.3f}x Liger (its faster run)" if base else ""
    print(f"{name:36s} {tokens / secs:9.0f} tok/s  peak {peak / 2**30:7.2f} GiB ({peak} bytes, predicted {predicted})"
          f"  loss {rows[-1]['loss']:.4f}{ratio}")
PY
exit $status
