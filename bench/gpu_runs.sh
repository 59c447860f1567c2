#!/usr/bin/env bash
# Runs a list of training runs on this machine's GPUs, Tandem and the PyTorch reference script in the same call,
# then prints the side-by-side table (bench/run_summary.py): tokens/s, model TFLOP/s per GPU, peak GiB per GPU,
# and the planner's predictions of peak and speed with their errors.
# Usage: bash bench/gpu_runs.sh BIN_DIR PYTORCH_SCRIPT OUT_DIR RUN_LIST [STEPS]
# RUN_LIST (bench/runs/*.txt), one run a line, '#' starts a comment:
#   tandem NAME GPUS DIM LAYERS HEADS BATCH MICRO PARALLEL ZERO   (PARALLEL: JSON without spaces, or auto;
#                                                                 MICRO and ZERO: '-' lets the planner choose)
#   torch NAME GPUS ARGS...                                       (arguments of the reference script)
# Every model is a gpt with T=1024, V=50304, bf16, AdamW, synthetic data. BENCH_DEVICE=cpu runs Tandem on the CPU.
set -u
bin="$1"
anchor="$2"
out="$3"
list="$4"
steps="${5:-6}"
source "$(dirname "$0")/gpu_env.sh" "$out"
gpus=$(nvidia-smi -L | grep -c '^GPU')

while read -r kind name n rest; do
  case "$kind" in '' | '#'*) continue ;; esac
  if [ "$n" -gt "$gpus" ]; then
    echo "$name: needs $n GPUs, this machine has $gpus: not run"
    continue
  fi
  if [ "$kind" = torch ]; then
    # shellcheck disable=SC2086  # the arguments are meant to split
    timeout 200 torchrun --standalone --nproc_per_node="$n" "$anchor" --steps "$steps" $rest </dev/null >"$out/$name.log" 2>&1 ||
      echo "$name: exit $?"
    continue
  fi
  read -r dim layers heads batch micro parallel zero <<<"$rest"
  [ "$parallel" = auto ] && parallel='"auto"'
  {
    echo "{ \"model\": { \"type\": \"gpt\", \"vocab_size\": 50304, \"seq_len\": 1024, \"dim\": $dim, \"layers\": $layers,"
    echo "  \"heads\": $heads }, \"data\": { \"type\": \"synthetic\" }, \"parallel\": $parallel,"
    echo "  \"train_batch_size\": $batch, \"steps\": $steps, \"seed\": 1, \"bf16\": { \"enabled\": true },"
    [ "$micro" = - ] || echo "  \"train_micro_batch_size_per_gpu\": $micro,"
    [ "$zero" = - ] || echo "  \"zero_optimization\": { \"stage\": $zero },"
    echo "  \"optimizer\": { \"type\": \"AdamW\", \"params\": { \"lr\": 1e-4 } }, \"checkpoint\": { \"every\": 0, \"at_end\": false } }"
  } >"$out/$name.json"
  timeout 240 "$bin/tandem" train -n "$n" "$out/$name.json" --device "${BENCH_DEVICE:-cuda}" --out "$out/$name" </dev/null >"$out/$name.log" 2>&1 ||
    { echo "$name: exit $?"; grep -v "^  " "$out/$name.log" | tail -3; }
done <"$list"
python3 "$(dirname "$0")/run_summary.py" "$out"
