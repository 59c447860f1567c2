#!/usr/bin/env bash
# What a checkpoint costs a run, measured in one call: the disk's own write rate (dd with oflag=direct, into the folder
# the checkpoints go to), then a run with checkpoints written in the background (checkpoint.async, the default) and,
# unless BENCH_SYNC=0, the same run writing them at the step boundary. Reports the step time with and without a
# background write in flight, the time each checkpoint held the loop at its boundary, and the checkpoint write rate
# beside dd's. Default model: the full Llama-3-8B (8.03B parameters, fp32 compute with activation checkpointing on
# one GPU: its checkpoints are 96 GB each, and the run holds 2, so the folder needs about 200 GB free).
# Usage: bash bench/checkpoint_bench.sh TANDEM_BINARY OUT_DIR [MODEL]
#   MODEL: llama3-8b (default), gpt-d768 (the CPU figures of docs/benchmarks.md), tiny (a check of this script, seconds
#   on CPU)
#   BENCH_STEPS (default 32) and BENCH_EVERY (default 15): checkpoints at steps EVERY and 2 EVERY; the steps between
#   them overlap the first background write. BENCH_DD_GB (default 16, tiny 0.25): what dd writes. BENCH_DEVICE
#   (default auto). BENCH_LAYERS: fewer layers of the model's shape (its checkpoint shrinks with them). BENCH_BF16=1:
#   bf16 compute (fp32 master weights and moments, so the same checkpoint). BENCH_BATCH (llama3-8b; default 1):
#   sequences a step, in micro-batches of 1 (16: the 8B's run of bench/gpu_start.sh).
#   OUT_DIR gets the configs, logs, run folders (removed after, unless BENCH_KEEP=1) and summary.json.
set -u
bin=$(realpath "$1")
out=$(realpath -m "$2")
model=${3:-llama3-8b}
steps=${BENCH_STEPS:-32}
every=${BENCH_EVERY:-15}
device=${BENCH_DEVICE:-auto}
mkdir -p "$out" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

case $model in
  llama3-8b)
    layers=${BENCH_LAYERS:-32}
    dd_gb=${BENCH_DD_GB:-16}
    model_json='{ "type": "llama", "vocab_size": 128256, "seq_len": 2048, "hidden_size": 4096, "intermediate_size": 14336,
      "num_hidden_layers": '$layers', "num_attention_heads": 32, "num_key_value_heads": 8,
      "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000, "tie_word_embeddings": false }'
    batch='"train_batch_size": '${BENCH_BATCH:-1}', "train_micro_batch_size_per_gpu": 1'
    parallel='"parallel": { "activation_checkpointing": true }'
    ;;
  gpt-d768)
    # configs/gpt_124m.json's blocks (d768 L12) with a byte vocabulary and 128 positions: 85M parameters, 1.0 GB
    # checkpoints, a step of a few seconds on 2 CPU cores.
    layers=${BENCH_LAYERS:-12}
    dd_gb=${BENCH_DD_GB:-2}
    model_json='{ "type": "gpt", "vocab_size": 256, "seq_len": 128, "dim": 768, "layers": '$layers', "heads": 12 }'
    batch='"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1'
    parallel='"parallel": {}'
    ;;
  tiny)
    layers=${BENCH_LAYERS:-2}
    dd_gb=${BENCH_DD_GB:-0.25}
    model_json='{ "type": "llama", "vocab_size": 256, "seq_len": 32, "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": '$layers', "num_attention_heads": 4, "num_key_value_heads": 2 }'
    batch='"train_batch_size": 4'
    parallel='"parallel": {}'
    ;;
  *)
    echo "unknown model '$model': use llama3-8b, gpt-d768 or tiny" >&2
    exit 2
    ;;
esac

precision=""
[ "${BENCH_BF16:-0}" = 1 ] && precision='"bf16": { "enabled": true },'
config() {  # NAME ASYNC
  cat >"$out/$1.json" <<JSON
{ "model": $model_json,
  "data": { "type": "synthetic" }, $batch, "steps": $steps, "seed": 1, $parallel, $precision
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-5 } },
  "checkpoint": { "every": $every, "keep": 1, "at_end": false, "async": $2 } }
JSON
}

# The disk first, in the folder the checkpoints go to, bypassing the page cache as a long write does.
dd_count=$(python3 -c "print(max(1, int($dd_gb * 16)))")  # 64 MiB blocks
echo "== dd: $dd_count x 64 MiB with oflag=direct into $out"
dd if=/dev/zero of="$out/dd.bin" bs=64M count="$dd_count" oflag=direct 2>"$out/dd.log"
dd_rc=$?
rm -f "$out/dd.bin"
cat "$out/dd.log"
[ $dd_rc -eq 0 ] || echo "dd failed (exit $dd_rc): no disk rate to compare with"

runs=(async)
[ "${BENCH_SYNC:-1}" = 1 ] && runs+=(sync)
for name in "${runs[@]}"; do
  config "$name" "$([ "$name" = async ] && echo true || echo false)"
  rm -rf "$out/run_$name"
  echo "== $name: $steps steps, checkpoints at $every and $((2 * every)), keep 1"
  "$bin" train "$out/$name.json" --out "$out/run_$name" --device "$device" 2>&1 | tee "$out/$name.log" |
    grep -E "^(preflight|model:|checkpoint step|saved checkpoint|done:|error)"
  echo "exit ${PIPESTATUS[0]}" >>"$out/$name.log"
done

python3 - "$out" "$every" "${runs[@]}" <<'PY'
import json, os, re, statistics, sys
out, every, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rate_of(text):  # "1.2 GB/s" or "650 MB/s" -> bytes/s
    m = re.search(r"([0-9.]+) ([kMGT]?B)/s", text)
    return float(m.group(1)) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m.group(2)] if m else None
unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
summary = {"dd_bytes_per_s": rate_of(open(os.path.join(out, "dd.log")).read())}
for name in runs:
    path = os.path.join(out, "run_" + name, "metrics.jsonl")
    if not os.path.exists(path):
        print("%s: no metrics (see %s.log)" % (name, name)); continue
    m = [json.loads(l) for l in open(path)]
    # Steps 1-2 warm up (GEMM timing); the checkpoint steps themselves are counted by their boundary time.
    plain = [r["step_s"] for r in m if r["step"] > 2 and not r.get("checkpoint_writing") and "checkpoint_s" not in r]
    during = [r["step_s"] for r in m if r.get("checkpoint_writing")]
    blocked = {r["step"]: r["checkpoint_s"] for r in m if "checkpoint_s" in r}
    log = open(os.path.join(out, name + ".log")).read()
    writes = [(float(s), n, u, float(r), ru) for n, u, s, r, ru in
              re.findall(r"saved checkpoint \S+ \(([0-9.]+) (\w+); .* written in ([0-9.]+) s, ([0-9.]+) (\w+)/s\)", log)]
    s = {"step_s_median": statistics.median(plain) if plain else None,
         "step_s_during_write_median": statistics.median(during) if during else None,
         "steps_during_write": len(during), "blocked_s": blocked,
         "write_s": [w[0] for w in writes], "write_bytes_per_s": [w[3] * unit[w[4]] for w in writes]}
    summary[name] = s
    print("%s: median step %s s; during a background write %s s (%d steps); blocked at the boundary %s; write rate %s"
          % (name, s["step_s_median"], s["step_s_during_write_median"], len(during),
             ", ".join("step %d: %.3f s" % kv for kv in sorted(blocked.items())),
             ", ".join("%.1f MiB/s" % (b / 2**20) for b in s["write_bytes_per_s"])))
    if summary["dd_bytes_per_s"] and s["write_bytes_per_s"]:
        print("  write rate against dd oflag=direct: %s" % ", ".join(
            "%.0f%%" % (100 * b / summary["dd_bytes_per_s"]) for b in s["write_bytes_per_s"]))
    if s["step_s_median"] and blocked:
        print("  blocked at the boundary as a share of one step: %s" % ", ".join(
            "%.1f%%" % (100 * v / s["step_s_median"]) for v in blocked.values()))
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
PY
[ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$out"/run_*
