#!/usr/bin/env bash
# Mixture of experts on one GPU beside transformers, in one call: the Qwen3-30B-A3B shape (hidden 2048, 32 heads over 4
# kv heads of 128, 128 experts of 768 with top-8 routing and norm_topk_prob, vocab 151936, the balance loss in the
# loss) cut to 8 layers, full training, T 2048, 8 sequences per optimizer step, bf16 with fp32 master weights, random
# weights and tokens. Tandem at micro 4 x 2 and 8 x 1 (its preflight predicts each peak under balanced routing), then
# shared/anchors/hf_moe.py (transformers' Qwen3MoeForCausalLM with its grouped_mm experts, micro 4 x 2, the anchor's
# best); prints tokens/s, peaks and the ratios, and writes OUT_DIR/moe.json.
# MOE_BENCH_MODE=lora: the full 48-layer Qwen3-30B-A3B (30.5B parameters) with a LoRA adapter (r 16, alpha 32) on q, k,
# v and o, the base frozen in bf16, activation checkpointing, micro 2 x 4 on both sides (hf_moe.py --lora --checkpoint).
# Usage: bash bench/gpu_moe.sh BIN_DIR OUT_DIR ANCHORS_DIR
#   MOE_BENCH_SHAPE=tiny MOE_BENCH_DEVICE=cpu: the same runs on a tiny shape (hidden 64, 2 layers, 8 experts of 32,
#   top 2, V 512, T 64) on the CPU: the dry run that shows the script works end to end without a GPU.
#   MOE_BENCH_STEPS (default 6): Tandem's steps (its speed is the median of those after the second).
#   MOE_BENCH_COMPILE=1: transformers' decoder layers under torch.compile (hf_moe.py --compile).
#   MOE_BENCH_GROUPED="loop one_call": Tandem's runs once for each of the experts' product paths named
#   (TANDEM_GROUPED_GEMM), beside one transformers run; default: the path the rule takes.
set -u
bin="$1"
out="$2"
anchors="$3"
here=$(cd "$(dirname "$0")" && pwd)
shape="${MOE_BENCH_SHAPE:-8l}"
device="${MOE_BENCH_DEVICE:-cuda}"
steps="${MOE_BENCH_STEPS:-6}"
mode="${MOE_BENCH_MODE:-full}"
python="${PYTHON:-python3}"
if [ "$device" = cuda ]; then
  source "$here/gpu_env.sh" "$out"
else
  mkdir -p "$out"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
fi
case "$shape" in
  8l) model='"vocab_size": 151936, "seq_len": 2048, "hidden_size": 2048, "num_hidden_layers": 8,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
    "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "max_position_embeddings": 4096'
    seq=2048 layers=8 ;;
  tiny) model='"vocab_size": 512, "seq_len": 64, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "max_position_embeddings": 64'
    seq=64 layers=2 ;;
  *) echo "MOE_BENCH_SHAPE: '$shape' is not 8l or tiny"; exit 2 ;;
esac
status=0
splits=("4 2" "8 1")
extra='"bf16": { "enabled": true }'
hf_extra=(--micro 4 --accum 2 --experts grouped_mm)
if [ "$mode" = lora ]; then
  [ "$shape" = 8l ] && model="${model/\"num_hidden_layers\": 8/\"num_hidden_layers\": 48}" && layers=48
  splits=("2 4")
  extra='"bf16": { "enabled": true }, "parallel": { "activation_checkpointing": true },
  "lora": { "r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"] }'
  hf_extra=(--micro 2 --accum 4 --experts grouped_mm --lora --checkpoint)
fi

paths="${MOE_BENCH_GROUPED:-default}"
for path in $paths; do
for split in "${splits[@]}"; do
  read -r micro accum <<<"$split"
  name="tandem_m${micro}"
  [ "$path" = default ] || name="tandem_${path}_m${micro}"
  cat >"$out/$name.json" <<JSON
{ "model": { "type": "llama", "family": "qwen3_moe", $model, "norm_topk_prob": true, "output_router_logits": true,
    "router_aux_loss_coef": 0.001, "rms_norm_eps": 1e-6, "tie_word_embeddings": false },
  "data": { "type": "synthetic" }, "train_batch_size": $((micro * accum)), "train_micro_batch_size_per_gpu": $micro,
  "steps": $steps, "seed": 1, $extra,
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4 } }, "checkpoint": { "every": 0, "at_end": false } }
JSON
  echo "== Tandem: qwen3_moe $shape ($mode), T $seq, micro $micro x $accum, experts' products: $path"
  grouped=()
  [ "$path" = default ] || grouped=(env "TANDEM_GROUPED_GEMM=$path")
  timeout 500 "${grouped[@]}" "$bin/tandem" train "$out/$name.json" --device "$device" --out "$out/$name" --overwrite \
    </dev/null >"$out/$name.log" 2>&1
  rc=$?
  echo "tandem micro $micro: exit $rc"
  [ $rc -eq 0 ] || { status=1; grep -v "^  " "$out/$name.log" | tail -3; }
done
done

echo "== transformers Qwen3MoeForCausalLM ($mode): ${hf_extra[*]}"
hf_args=(--layers "$layers" --seq "$seq" --steps 3 "${hf_extra[@]}")
[ "${MOE_BENCH_COMPILE:-0}" = 1 ] && hf_args+=(--compile)
if [ "$device" = cuda ]; then
  timeout 500 "$python" "$anchors/hf_moe.py" "${hf_args[@]}" </dev/null >"$out/hf_moe.log" 2>&1
  rc=$?
  echo "hf_moe: exit $rc"
  [ $rc -eq 0 ] || { status=1; tail -3 "$out/hf_moe.log"; }
else
  echo "hf_moe: needs a GPU, not run"
fi

"$python" - "$out" $paths <<'PY' || status=1
import json, re, statistics, sys
out = sys.argv[1]
rows = {}
for micro, path in ((m, p) for p in sys.argv[2:] for m in (2, 4, 8)):
    name = f"tandem_m{micro}" if path == "default" else f"tandem_{path}_m{micro}"
    try:
        steps = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if '"loss"' in l]
        log = open(f"{out}/{name}.log").read()
    except OSError:
        continue
    pred = re.search(r"predicted peak per device: ([0-9.]+ [KMG]iB)", log)
    label = f"micro {micro}" + ("" if path == "default" else f", {path}")
    rows[label] = {"tokens_per_s": statistics.median(s["tokens_per_s"] for s in (steps[2:] or steps)),
                   "peak_GiB": max(s["peak_bytes"] for s in steps) / 2**30, "predicted": pred.group(1) if pred else None,
                   "losses": [s["loss"] for s in steps]}
    r = rows[label]
    print(f"Tandem {label}: {r['tokens_per_s']:.0f} tok/s, peak {r['peak_GiB']:.2f} GiB (predicted "
          f"{r['predicted']}), losses {', '.join(f'{l:.4f}' for l in r['losses'])}")
hf = {}
try:
    m = re.search(r"^RESULT (.*)$", open(f"{out}/hf_moe.log").read(), re.M)
    hf = json.loads(m.group(1)) if m else {}
except OSError:
    pass
if hf.get("tokens_per_s"):
    print(f"transformers grouped_mm{' compiled' if hf.get('compile') else ''} micro {hf['micro']} x {hf['accum']}: "
          f"{hf['tokens_per_s']:.0f} tok/s, peak "
          f"{hf['peak_mem_GiB']:.2f} GiB")
    for label, r in rows.items():
        print(f"Tandem {label} / transformers: {r['tokens_per_s'] / hf['tokens_per_s']:.3f}x")
elif hf:
    print("transformers:", json.dumps(hf))
json.dump({"tandem": rows, "transformers": hf}, open(f"{out}/moe.json", "w"), indent=1)
sys.exit(0 if rows else 1)
PY
exit $status
