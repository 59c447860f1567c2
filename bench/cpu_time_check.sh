#!/usr/bin/env bash
# The time model on this CPU host: calibrates the host (`tandem calibrate`, 1 and 2 processes), trains a small
# gpt in a few layouts on CPU processes, and prints measured tokens/s beside the planner's prediction with the
# calibrated rates and with the built-in "cpu" rates.
# Usage: bash bench/cpu_time_check.sh TANDEM_BINARY OUT_DIR
set -eu
tandem="$1"
out="$2"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
OMP_NUM_THREADS=$cores "$tandem" calibrate --out "$out/rates_1.json" | tail -3
OMP_NUM_THREADS=$(((cores + 1) / 2)) mpirun --allow-run-as-root --oversubscribe -n 2 "$tandem" calibrate \
  --out "$out/rates_2.json" | tail -4

cat >"$out/model.json" <<'JSON'
{
  "model": { "type": "gpt", "vocab_size": 2048, "seq_len": 256, "dim": 256, "layers": 4, "heads": 4 },
  "data": { "type": "synthetic" }, "train_batch_size": 16, "steps": 6, "seed": 1,
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-3 } }, "checkpoint": { "every": 0, "at_end": false }
}
JSON
predict() {  # predict DEVICES LAYOUT RATES: the planner's tokens/s
  "$tandem" plan "$out/model.json" --devices "$1" --rates "$3" --explain "$2" |
    sed -n 's/^  step [0-9.]* m\{0,1\}s, \([0-9.]*\)\(k\{0,1\}\) tok\/s.*/\1 \2/p' |
    awk '{ print ($2 == "k") ? $1 * 1000 : $1 }'
}
printf "%-28s %10s %16s %7s %16s %7s\n" layout "tok/s" "pred calibrated" err "pred built-in" err
while read -r n layout parallel zero micro; do
  "$tandem" train -n "$n" "$out/model.json" --device cpu --out "$out/$layout" --set "parallel=$parallel" \
    --set zero_optimization.stage="$zero" --set train_micro_batch_size_per_gpu="$micro" </dev/null >"$out/$layout.log" 2>&1
  measured=$(python3 -c "import json,statistics,sys; r=[json.loads(l) for l in open(sys.argv[1])][2:]; \
print(statistics.median(x['tokens_per_s'] for x in r))" "$out/$layout/metrics.jsonl")
  calibrated=$(predict "$n" "$layout" "$out/rates_$n.json")
  builtin=$(predict "$n" "$layout" cpu)
  python3 -c "import sys; m, c, b = map(float, sys.argv[2:]); \
print('%-28s %10.0f %16.0f %+6.0f%% %16.0f %+6.0f%%' % (sys.argv[1], m, c, (c / m - 1) * 100, b, (b / m - 1) * 100))" \
    "$layout" "$measured" "$calibrated" "$builtin"
done <<'RUNS'
1 dp1,pp1,tp1,zero0,micro8 {} 0 8
1 dp1,pp1,tp1,zero0,micro2 {} 0 2
2 dp2,pp1,tp1,zero1,micro8 {"virtual_gpus":2} 1 8
2 dp1,pp2,tp1,zero0,micro4 {"pipeline":2} 0 4
2 dp1,pp1,tp2,zero0,micro8 {"tensor":2} 0 8
RUNS
