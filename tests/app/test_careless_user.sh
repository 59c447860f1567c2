#!/usr/bin/env bash
# What a careless user runs into, end to end: failures exit non-zero with one message under every launcher, a
# run never writes into another run's folder, a dead rank is named at once, a bad token id fails before step 1,
# and the resume, export and --init mistakes. Usage: test_careless_user.sh TANDEM_BINARY PYTHON (numpy and
# safetensors). Prints one line per check and "N passed, M failed".
set -u
tandem=$(realpath "$1")
python=$(realpath -s "$2")
source "$(dirname "$0")/check_lib.sh"
cd "$work" || exit 1

tiny_config tiny.json
printf '{ "model": { "type": "gpt", }\n' >broken.json

# --- every failure exits non-zero with its message once, the same under one process, -n 4 and mpirun -np 4
# error_text: the text of the output's one "error..." line (after "error: "), or a note when it is not one line
error_text() { [ "$(grep -c '^error' out)" -eq 1 ] && grep '^error' out | sed 's/^error[^:]*: //' || echo "not one error line"; }
while IFS='|' read -r name args; do
  read -ra argv <<<"$args"
  run 60 "$tandem" train "${argv[@]}"
  one_rc=$rc
  one=$(error_text)
  run 60 "$tandem" train -n 4 "${argv[@]}"
  n_rc=$rc
  n=$(error_text)
  run 60 mpirun -np 4 --oversubscribe "$tandem" train "${argv[@]}"
  [ $one_rc -ne 0 ] && [ $n_rc -ne 0 ] && [ $rc -ne 0 ] && [ "$one" != "not one error line" ] && [ "$one" = "$n" ] &&
    [ "$(error_text)" = "$one" ]
  check "$name: exit codes $one_rc / $n_rc / $rc, one message, the same under each launcher" $? "$one | $n | $(error_text)"
done <<'CASES'
invalid JSON|broken.json
an unknown key|tiny.json --set optimizer.params.lrr=1
a bad value|tiny.json --set steps=0
heads that do not divide dim|tiny.json --set model.heads=3
an override without '='|tiny.json --set steps
CASES

# --- DeepSpeed's getting-started config, a model and data added: trains as it stands on 4 processes, and as 4 as 2
cat >ds.json <<'JSON'
{
  "train_batch_size": 8,
  "gradient_accumulation_steps": 1,
  "optimizer": { "type": "Adam", "params": { "lr": 0.00015, "weight_decay": 0.01 } },
  "fp16": { "enabled": true },
  "zero_optimization": {
    "stage": 2,
    "allgather_partitions": true,
    "allgather_bucket_size": 5e8,
    "overlap_comm": true,
    "reduce_scatter": true,
    "reduce_bucket_size": 5e8,
    "contiguous_gradients": true
  },
  "model": { "type": "gpt", "vocab_size": 64, "seq_len": 16, "dim": 32, "layers": 4, "heads": 4 },
  "data": { "type": "synthetic" },
  "steps": 3
}
JSON
run 120 "$tandem" train -n 4 ds.json --out ds4
[ $rc -eq 0 ] && [ "$(grep -c '^warning: these DeepSpeed keys have no effect in Tandem: ' out)" -eq 1 ] &&
  grep -q "allgather_bucket_size.*overlap_comm.*reduce_bucket_size" out && grep -q "ZeRO stage 2, f16 compute" out &&
  grep -q "done: 3 steps" out
check "DeepSpeed's getting-started config trains on 4 processes, its no-effect keys named in one warning" $?   "$(grep -E '^warning|^error|model:|done' out)"
run 120 "$tandem" train -n 4 ds.json --out ds22 --set 'parallel={"virtual_gpus": 2, "pipeline": 2}' \
  --set gradient_accumulation_steps=2
[ $rc -eq 0 ] && grep -q "dp 2 x pp 2 x tp 1 (4 devices as 2 virtual GPUs of 2), ZeRO stage 2" out &&
  grep -q "done: 3 steps" out
check "... and as 4 devices used as 2 virtual GPUs of 2" $? "$(grep -E '^error|model:|done' out)"

# --- run folders: a new one per run, never another run's
mkdir fresh && cd fresh || exit 1
run 60 "$tandem" train ../tiny.json
first=$(sed -n 's/^run folder: \([^ ]*\) .*/\1/p' ../out)
run 60 "$tandem" train ../tiny.json
second=$(sed -n 's/^run folder: \([^ ]*\) .*/\1/p' ../out)
[ -n "$first" ] && [ -n "$second" ] && [ "$first" != "$second" ] && [ "${first#runs/}" != "$first" ] &&
  [ "$(wc -l <"$first/metrics.jsonl")" -eq 3 ] && [ "$(wc -l <"$second/metrics.jsonl")" -eq 3 ] &&
  [ "$(readlink runs/latest)" = "$(basename "$second")" ]
check "without --out each run gets its own folder under runs/, printed, and runs/latest names the newest" $? \
  "$first $second $(ls runs)"
cd .. || exit 1

run 60 "$tandem" train tiny.json --out a --set checkpoint.every=1 --set checkpoint.keep=2
before=$(cat a/metrics.jsonl a/checkpoints/*/* | md5sum)
run 60 "$tandem" train -n 2 tiny.json --out a --set checkpoint.every=1 --set checkpoint.keep=2 --set seed=9
[ $rc -ne 0 ] && [ "$(grep -c "^error: the run folder 'a' holds another run" out)" -eq 1 ] &&
  grep -q -- "--resume a" out && grep -q -- "--overwrite" out && [ "$before" = "$(cat a/metrics.jsonl a/checkpoints/*/* | md5sum)" ]
check "a second run into the same --out is refused, and the first run's files are untouched" $? "$(grep error out)"
run 60 "$tandem" train -n 2 tiny.json --out a --overwrite --set seed=9
[ $rc -eq 0 ] && [ "$(wc -l <a/metrics.jsonl)" -eq 3 ] && [ "$(ls a/checkpoints)" = "step_00000003" ]
check "--overwrite replaces the other run's metrics and checkpoints" $? "$(ls a/checkpoints)"
run 60 "$tandem" train tiny.json --resume a --set steps=5 --set checkpoint.every=1
[ $rc -eq 0 ] && grep -q "^run folder: a " out && [ "$(wc -l <a/metrics.jsonl)" -eq 5 ]
check "--resume without --out continues in the run's own folder" $? "$(grep -E 'run folder|error' out)"
run 60 "$tandem" train tiny.json --resume a/checkpoints/step_00000004 --set steps=6
[ $rc -ne 0 ] && grep -q "holds checkpoints after step_00000004 (the newest is step_00000005)" out
check "resuming an older checkpoint into its own folder (which would mix two continuations) is refused" $? \
  "$(grep error out)"

# --- resume mistakes
run 60 "$tandem" train tiny.json --resume a --out b --set steps=2
[ $rc -ne 0 ] && grep -q "is at step 5, past this run's steps (2)" out
check "resuming with steps below the checkpoint's step is refused" $? "$(grep error out)"
run 60 "$tandem" train tiny.json --resume a --set steps=5
[ $rc -eq 0 ] && grep -q "at step 5 of 5: nothing to train" out
check "resuming a finished run says there is nothing to train" $? "$(tail -2 out)"
run 60 "$tandem" train tiny.json --resume a --out c --set steps=6 --set train_batch_size=16
[ $rc -eq 0 ] && grep -q "warning: resuming with train_batch_size 16 where the checkpoint was trained with 8" out
check "resuming with another global batch says so" $? "$(grep -E 'warning|error' out)"

# --- a dead rank is named at once, whichever rank it is, under -n and under mpirun. The watchdog's timeout is the
# default 300 s and each run is given 120: one that ended by the timeout would be stopped first (exit 124), so the
# message proves the dead rank was noticed, however loaded the machine.
for r in 0 1 3; do
  run 120 env TANDEM_FAULT=rank=$r,step=2,kind=kill "$tandem" train -n 4 tiny.json --out "dead$r"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank $r is dead: its process has exited" out
  check "rank $r killed under -n 4: named dead after ${secs}s (exit $rc)" $? "$(grep -m2 -E 'watchdog|error' out)"
done
run 120 env TANDEM_FAULT=rank=2,step=2,kind=kill mpirun -np 4 --oversubscribe "$tandem" train tiny.json --out dead_mpirun
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 2" out
check "rank 2 killed under mpirun -np 4: named after ${secs}s (exit $rc)" $? "$(grep -m2 rank out)"

# --- stop signals to the launcher save and exit 0
for sig in TERM INT; do
  "$tandem" train -n 2 tiny.json --out "sig$sig" --set steps=100000 >"sig$sig.out" 2>&1 &
  launcher=$!
  for _ in $(seq 1 300); do grep -q "^step 3/" "sig$sig.out" && break; sleep 0.2; done
  kill -"$sig" $launcher
  wait $launcher
  rc=$?
  [ $rc -eq 0 ] && grep -q "stopped by a signal after step" "sig$sig.out" && [ -n "$(ls "sig$sig/checkpoints")" ]
  check "SIG$sig to the launcher: every rank saves and the job exits 0" $? "rc=$rc $(tail -2 "sig$sig.out")"
done

# --- token ids are checked once before step 1, on every rank's share of the file
"$python" - tokens.bin <<'PY'
import sys
import numpy as np
ids = np.random.default_rng(1).integers(0, 64, size=3_000_000, dtype=np.uint16)
ids[2_500_000] = 64  # one id past the vocabulary, far from the start
ids.tofile(sys.argv[1])
PY
for n in 1 2; do
  run 120 "$tandem" train -n $n tiny.json --out "tok$n" --set 'data={"type": "tokens", "path": "tokens.bin"}'
  [ $rc -ne 0 ] && grep -q "token id 64 at index 2,500,000 (byte offset 5,000,000) is >= model.vocab_size 64" out &&
    ! grep -q "^step " out
  check "a bad token id fails before step 1 on $n process(es)" $? "$(grep -E '^error|^step' out | head -2)"
done

# --- export never writes over a file or into a checkpoint
run 60 "$tandem" export a --to a/checkpoints/step_00000005/model.safetensors
[ $rc -ne 0 ] && grep -q "lies inside the checkpoint" out
check "export into a checkpoint's own folder is refused" $? "$(tail -1 out)"
run 60 "$tandem" export a --to w.safetensors
run 60 "$tandem" export a --to w.safetensors
[ $rc -ne 0 ] && grep -q "'w.safetensors' exists" out
check "export over an existing file is refused" $? "$(tail -1 out)"
run 60 "$tandem" export a --to w.safetensors --overwrite
check "export --overwrite replaces it" $rc "$(tail -1 out)"

# --- --init: exactly the model's tensors, finite
"$python" - w.safetensors <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file, save_file
w = load_file(sys.argv[1])
save_file({**w, "lm_head.extra": np.zeros(3, np.float32)}, "extra.safetensors")
bad = dict(w)
bad["blocks.1.fc.weight"] = bad["blocks.1.fc.weight"].copy()
bad["blocks.1.fc.weight"][0, 5] = np.nan
save_file(bad, "nan.safetensors")
huge = dict(w)
huge["head.weight"] = np.full_like(w["head.weight"], 3e38)
save_file(huge, "huge.safetensors")
PY
run 60 "$tandem" train tiny.json --out i1 --init extra.safetensors
[ $rc -ne 0 ] && grep -q "1 tensor the model does not have ('lm_head.extra')" out
check "--init with a tensor the model does not have is refused by name" $? "$(grep error out)"
run 60 "$tandem" train -n 2 tiny.json --out i2 --init nan.safetensors --set 'parallel={"tensor": 2}'
[ $rc -ne 0 ] && grep -q "tensor 'blocks.1.fc.weight' holds nan at element 5" out
check "--init with a NaN weight is refused at load, naming the tensor and element" $? "$(grep error out)"
run 60 "$tandem" train tiny.json --out i3 --init huge.safetensors
[ $rc -ne 0 ] && grep -q "the first of this run, before any update: the weights it started from (the --init file)" out
check "a non-finite loss before any update blames the starting weights, not the learning rate" $? "$(grep error out)"

# --- LoRA runs: their checkpoints hold the adapters alone
cat >lora.json <<'JSON'
{
  "model": { "type": "llama", "vocab_size": 64, "seq_len": 16, "hidden_size": 32, "intermediate_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2 },
  "lora": { "r": 4, "target_modules": ["q_proj", "down_proj"] },
  "data": { "type": "synthetic" },
  "train_batch_size": 4, "steps": 2, "optimizer": { "type": "AdamW", "params": { "lr": 1e-3 } }
}
JSON
run 60 "$tandem" train lora.json --out l1
check "a LoRA run trains" $rc "$(tail -2 out)"
run 60 "$tandem" export l1 --to l1_hf --format hf
[ $rc -ne 0 ] && grep -q "holds the adapters alone. Export them with --format peft" out && [ ! -e l1_hf ]
check "--format hf of a LoRA checkpoint is refused, naming --format peft and --merge" $? "$(tail -1 out)"
run 60 "$tandem" export a --to a_peft --format peft
[ $rc -ne 0 ] && grep -q 'is for checkpoints of LoRA runs' out
check "--format peft of a checkpoint without LoRA is refused" $? "$(tail -1 out)"
run 60 "$tandem" train lora.json --out l2 --init w.safetensors
[ $rc -ne 0 ] && grep -q 'with "lora": a LoRA run.s checkpoints hold the adapters alone' out
check "--init beside lora is refused, naming model.from_pretrained" $? "$(grep error out)"
run 60 "$tandem" train lora.json --out l3 --set 'lora.target_modules=["lm_head"]'
[ $rc -ne 0 ] && grep -q "names 'lm_head', which is lm_head: Tandem adapts the blocks' projections" out
check "a LoRA target on the head is refused before anything trains" $? "$(grep error out)"

report
