#!/usr/bin/env bash
# The command line as a user meets it: launching, layouts, the demo scenario, bad input and faults.
# Usage: test_cli.sh TANDEM_BINARY SOURCE_DIR. Prints one line per check and "N passed, M failed".
set -u
tandem="$1"
src="$2"
source "$(dirname "$0")/check_lib.sh"

cat >"$work/tiny.json" <<'JSON'
{
  "model": { "type": "gpt", "vocab_size": 64, "seq_len": 16, "dim": 32, "layers": 4, "heads": 4 },
  "data": { "type": "synthetic" },
  "train_batch_size": 8, "gradient_accumulation_steps": 2, "steps": 3, "seed": 3,
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-3 } }
}
JSON

# --- launching and layouts
run 120 "$tandem" train -n 2 "$work/tiny.json" --out "$work/a" --set 'parallel={"pipeline": 2}'
check "train -n 2 runs a 2-stage pipeline" $rc "$(tail -3 "$work/out")"
grep "^step" "$work/out" | sed 's/| [0-9.]* tok\/s.*//' >"$work/a.steps"
[ "$(grep -c 'rank 0 -> vgpu 0, stage 0, tp slot 0' "$work/out")" -eq 1 ]
check "the layout is printed once" $?
grep -q "Peak memory per device: cpu:0 .*, cpu:1 " "$work/out"
check "each device's peak is printed at the end" $?
grep -q "^rank 0 at its peak (.*micro-batch.*): parameters .*activations " "$work/out"
check "what rank 0 held at its peak, and when, is printed at the end" $?
[ "$(wc -l <"$work/a/metrics.jsonl")" -eq 3 ] && grep -q '"peak_bytes"' "$work/a/metrics.jsonl"
check "metrics.jsonl has one line per step with peak_bytes" $?

run 120 mpirun -n 2 --oversubscribe "$tandem" train "$work/tiny.json" --out "$work/b" --set 'parallel={"pipeline": 2}'
check "mpirun -np 2 tandem train runs" $rc "$(tail -3 "$work/out")"
grep "^step" "$work/out" | sed 's/| [0-9.]* tok\/s.*//' >"$work/b.steps"
cmp -s "$work/a.steps" "$work/b.steps"
check "mpirun -np 2 and -n 2 give the same losses" $?

run 120 "$tandem" train "$work/tiny.json" --out "$work/c"
grep "^step" "$work/out" | sed 's/| [0-9.]* tok\/s.*//' >"$work/c.steps"
cmp -s "$work/a.steps" "$work/c.steps"
check "the 2-stage pipeline prints the same losses as one device" $? "$(diff "$work/a.steps" "$work/c.steps")"

# --- bad layouts
run 60 "$tandem" train -n 3 "$work/tiny.json" --set 'parallel={"virtual_gpus": 2, "pipeline": 2}'
[ $rc -ne 0 ] && grep -q "needs 4 devices but the job has 3 processes: run with -n 4" "$work/out"
check "a layout that does not match the world size is refused" $? "$(tail -2 "$work/out")"
run 60 "$tandem" train -n 2 "$work/tiny.json" --set 'parallel={"tensor": 2}' --set model.heads=3 --set model.dim=33
[ $rc -ne 0 ] && grep -q "model.heads 3 is not divisible by parallel.tensor 2" "$work/out"
check "heads that do not divide over tp are refused" $? "$(tail -2 "$work/out")"
run 60 "$tandem" train -n 2 "$work/tiny.json" --set 'parallel={"pipeline": 2, "stages": [[0, 0], [1, 2]]}'
[ $rc -ne 0 ] && grep -q "parallel.stages covers blocks 0..2 but the model has 4 blocks" "$work/out"
check "a stage map that does not cover the layers is refused" $? "$(tail -2 "$work/out")"
run 60 "$tandem" train "$work/tiny.json" --set 'parallel={"pipeline": 2}'
[ $rc -ne 0 ] && grep -q "run with -n 2" "$work/out"
check "a multi-device layout on one process says to use -n" $? "$(tail -2 "$work/out")"

# --- bad config
run 30 "$tandem" train "$work/tiny.json" --set optimizer.params.lrr=1
[ $rc -ne 0 ] && grep -q "did you mean 'optimizer.params.lr'" "$work/out"
check "an unknown key names the nearest valid one" $? "$(tail -2 "$work/out")"
run 30 "$tandem" train "$work/tiny.json" --set train_micro_batch_size_per_gpu=3
[ $rc -ne 0 ] && grep -q "train_batch_size" "$work/out"
check "inconsistent batch sizes show the equation" $? "$(tail -2 "$work/out")"

# --- faults: a hung rank and a killed rank end the job with the watchdog's message (not by the run's own limit, exit
# 124); how long the watchdog waited past its 5 s depends on the machine's load, so the message's figure is not checked
run 90 env TANDEM_FAULT=rank=2,step=2,kind=hang "$tandem" train -n 4 "$work/tiny.json" \
  --set 'parallel={"virtual_gpus": 2, "pipeline": 2, "timeout_s": 5}'
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "\[tandem watchdog\] rank .* has waited [0-9]* s, over the 5 s timeout" \
  "$work/out" && grep -q "not arrived: 2\|from rank 2\|to rank 2" "$work/out"
check "a hung rank is named by the watchdog (exit $rc after ${secs}s)" $? "$(grep watchdog "$work/out" | head -2)"
run 90 env TANDEM_FAULT=rank=1,step=2,kind=kill "$tandem" train -n 4 "$work/tiny.json" --set 'parallel={"timeout_s": 5}'
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 is dead: its process has exited" "$work/out"
check "a killed rank is named dead by the watchdog (exit $rc after ${secs}s)" $? "$(grep watchdog "$work/out" | head -2)"

# --- the planner answers the original question for the demo model on 4 devices
run 120 "$tandem" plan "$src/configs/demo.json" --devices 4 --top 100
[ $rc -eq 0 ] && grep -q "dp2 pp2 tp1" "$work/out" && grep -q "dp4 pp1 tp1 .* no " "$work/out"
check "tandem plan lists 2 virtual GPUs of 2 and marks 4 plain replicas as not fitting" $? "$(tail -5 "$work/out")"

# --- how long a sequence fits: the tiny gpt on 2 devices of 8 MiB, in steps of 64 tokens
run 120 "$tandem" plan "$work/tiny.json" --devices 2 --device-memory 8MiB --max-seq-len 4096 --seq-len-step 64
[ $rc -eq 0 ] && grep -q "^Longest seq_len that fits: [0-9]* tokens" "$work/out" &&
  grep -q "^What stops seq_len [0-9]*: nothing fits in 8.0 MiB per device" "$work/out"
check "tandem plan --max-seq-len names the longest seq_len and what stops the next" $? "$(tail -4 "$work/out")"
run 30 "$tandem" plan "$work/tiny.json" --devices 2 --device-memory 8MiB --max-seq-len 32 --seq-len-step 64
[ $rc -ne 0 ] && grep -q "give --seq-len-step 32 or less, or --max-seq-len 64 or more" "$work/out"
check "a --max-seq-len below the step is refused, saying what to change" $? "$(tail -2 "$work/out")"

run 300 "$tandem" train -n 4 "$src/configs/demo.json" --set parallel=auto --set steps=1 --out "$work/auto"
[ $rc -eq 0 ] && grep -q "parallel: auto -> " "$work/out" && grep -q "done: 1 steps" "$work/out"
check "\"parallel\": \"auto\" trains the planner's choice" $? "$(tail -3 "$work/out")"
python3 - "$work/out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
predicted = float(re.search(r"predicted peak per device: ([0-9.]+) MiB", text).group(1))
measured = max(float(x) for x in re.findall(r"cpu:\d+ ([0-9.]+) MiB", text.split("done:")[1]))
sys.exit(0 if abs(predicted - measured) <= 0.05 * measured else 1)
PY
check "the preflight's predicted peak is within 5% of the measured one" $? "$(grep -E 'predicted|done:' "$work/out")"

# --- the demo as the README runs it (tools/demo_run.sh; no GPU here, so the CPU scenario)
run 600 bash "$src/tools/demo_run.sh" "$tandem"
[ $rc -eq 0 ] && grep -q "this run needs 1.1 GiB on its fullest device .* over \"device_memory\" 768.0 MiB" "$work/out"
check "demo: one device is refused before training, with the numbers" $? "$(grep -E '^error|^==' "$work/out")"
grep -q "done: 30 steps" "$work/out"
check "demo: 4 devices as 2 virtual GPUs train" $? "$(tail -3 "$work/out")"
python3 - "$work/out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
line = [l for l in text.splitlines() if l.startswith("done:")][0]
peaks = [float(x) for x in re.findall(r"cpu:\d+ ([0-9.]+) MiB", line)]
last = float(re.findall(r"^step 30/30 \| loss ([0-9.]+)", text, re.M)[0])
sys.exit(0 if len(peaks) == 4 and max(peaks) < 768 and last < 0.2 else 1)
PY
check "demo: every device stays under its 768 MiB budget and the loss falls below 0.2" $? "$(grep -E 'done:|step 30/30' "$work/out")"

# --- tandem info: what the build runs on; its last line is what scripts read
run 60 "$tandem" info
[ $rc -eq 0 ] && grep -q "^MPI: " "$work/out" && grep -q "^CUDA backend: " "$work/out" &&
  tail -1 "$work/out" | grep -qE "^usable GPUs: [0-9]+$"
check "tandem info names MPI and the CUDA backend and ends with the usable GPU count" $? "$(cat "$work/out")"

report
