#!/usr/bin/env bash
# Speed on one GPU beside PyTorch, in one call of under 9 minutes: for gpt d1600 L48 (1.64B, micro 8 x 2), d2048 L24
# (micro 8 x 2) and d4096 L32 (6.86B, micro 4 x 4), all with 16 sequences of 1024 tokens per step, V=50304, bf16,
# AdamW and synthetic data: Tandem's tokens/s, then PyTorch (the reference script, --mode single) compiled and
# eager. The 1.64B also runs once with TANDEM_PROFILE=1 first: its per-op time breakdown is printed at the end. The
# first PyTorch run measures the bf16 GEMM peak (--probe), against which the table states each run's model TFLOP/s.
# Usage: bash bench/gpu_speed.sh BIN_DIR PYTORCH_SCRIPT OUT_DIR
#   BIN_DIR holds the tandem binary; OUT_DIR gets each run's config, log and folder, and results.json.
#   GPU_SPEED_STEPS (default 5): Tandem's steps (its speed is the median of the steps after the second);
#   GPU_SPEED_TORCH_STEPS (default 3): PyTorch's timed steps after its 3 warm-up steps;
#   GPU_SPEED_BUDGET_S (default 520): a run starts only when it fits in what is left of this, so the whole call
#   ends in time; a run that does not fit is reported as skipped.
#   GPU_SPEED_MODELS (default "1b6 d2048 6b9"): which of the three models run; GPU_SPEED_EAGER=0 leaves out the
#   eager PyTorch runs (compiled is PyTorch's best configuration and the one the ratio is taken against).
set -u
bin="$1"
anchor="$2"
out="$3"
source "$(dirname "$0")/gpu_env.sh" "$out"
steps="${GPU_SPEED_STEPS:-5}"
torch_steps="${GPU_SPEED_TORCH_STEPS:-3}"
budget="${GPU_SPEED_BUDGET_S:-520}"
models=" ${GPU_SPEED_MODELS:-1b6 d2048 6b9} "
eager="${GPU_SPEED_EAGER:-1}"
started=$(date +%s)
status=0

# run NAME LIMIT_S COMMAND...: runs it under timeout with what is left of the budget (at most LIMIT_S), logging to
# OUT/NAME.log; skipped when fewer than LIMIT_S / 2 seconds are left.
run() {
  local name="$1" limit="$2"
  shift 2
  local left=$((budget - ($(date +%s) - started)))
  if [ "$left" -lt $((limit / 2)) ]; then
    echo "$name: skipped, ${left} s of the budget left"
    return
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  local t0
  t0=$(date +%s)
  timeout "$limit" "$@" </dev/null >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $(($(date +%s) - t0)) s"
  if [ $rc -ne 0 ]; then
    status=1
    grep -v "^  " "$out/$name.log" | tail -3
  fi
}

# tandem_config NAME DIM LAYERS HEADS MICRO: the run's config, OUT/NAME.json.
tandem_config() {
  cat >"$out/$1.json" <<JSON
{ "model": { "type": "gpt", "vocab_size": 50304, "seq_len": 1024, "dim": $2, "layers": $3, "heads": $4 },
  "data": { "type": "synthetic" }, "train_batch_size": 16, "train_micro_batch_size_per_gpu": $5,
  "steps": $steps, "seed": 1, "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-4 } }, "checkpoint": { "every": 0, "at_end": false } }
JSON
}

tandem() {  # NAME LIMIT_S
  run "$1" "$2" "$bin/tandem" train "$out/$1.json" --device cuda --out "$out/$1"
}

torch() {  # NAME LIMIT_S ARGS...
  local name="$1" limit="$2"
  shift 2
  run "$name" "$limit" torchrun --standalone --nproc_per_node=1 "$anchor" --mode single --steps "$torch_steps" "$@"
}

probe=--probe  # the first PyTorch run measures the GEMM peak
if [[ $models == *" 1b6 "* ]]; then
  echo "== gpt d1600 L48 h25 (1.64B), micro 8 x 2"
  tandem_config profile_1b6 1600 48 25 8
  TANDEM_PROFILE=1 tandem profile_1b6 90
  tandem_config tandem_1b6 1600 48 25 8
  tandem tandem_1b6 90
  torch torch_1b6_compile 150 --dim 1600 --layers 48 --heads 25 --micro 8 --accum 2 --compile $probe
  probe=
  [ "$eager" = 0 ] || torch torch_1b6_eager 60 --dim 1600 --layers 48 --heads 25 --micro 8 --accum 2
fi

if [[ $models == *" d2048 "* ]]; then
  echo "== gpt d2048 L24 h16, micro 8 x 2"
  tandem_config tandem_d2048 2048 24 16 8
  tandem tandem_d2048 80
  torch torch_d2048_compile 120 --dim 2048 --layers 24 --heads 16 --micro 8 --accum 2 --compile $probe
  probe=
  [ "$eager" = 0 ] || torch torch_d2048_eager 60 --dim 2048 --layers 24 --heads 16 --micro 8 --accum 2
fi

if [[ $models == *" 6b9 "* ]]; then
  echo "== gpt d4096 L32 h32 (6.86B), micro 4 x 4"
  tandem_config tandem_6b9 4096 32 32 4
  tandem tandem_6b9 110
  torch torch_6b9_compile 150 --dim 4096 --layers 32 --heads 32 --micro 4 --accum 4 --compile $probe
  [ "$eager" = 0 ] || torch torch_6b9_eager 70 --dim 4096 --layers 32 --heads 32 --micro 4 --accum 4
fi

echo "== speed ($(($(date +%s) - started)) s)"
python3 "$(dirname "$0")/run_summary.py" --speed "$out" || status=1
echo "== where the 1.64B step goes (TANDEM_PROFILE=1: Tandem's ops timed by CUDA events)"
sed -n '/^op profile (/,/not timed)$/p' "$out/profile_1b6.log"
exit $status
