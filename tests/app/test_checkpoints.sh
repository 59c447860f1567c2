#!/usr/bin/env bash
# Checkpoints end to end: resume in other layouts, interchange with Python (safetensors + numpy), stop
# signals, a killed rank, corruption. Usage: test_checkpoints.sh TANDEM_BINARY PYTHON.
# PYTHON must have numpy and safetensors. Prints one line per check and "N passed, M failed".
set -u
tandem="$1"
python="$2"
source "$(dirname "$0")/check_lib.sh"
# losses FILE FIRST LAST: "step loss" lines of metrics.jsonl for steps FIRST..LAST
losses() {
  "$python" -c "
import json, sys
for l in open('$1'):
    m = json.loads(l)
    if $2 <= m['step'] <= $3: print(m['step'], repr(m['loss']))"
}
# same_losses A B: per-step relative difference at most 1e-5
same_losses() {
  "$python" - "$1" "$2" <<'PY'
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
ok = len(a) == len(b) and len(a) > 0 and all(x[0] == y[0] and abs(float(x[1]) - float(y[1])) <= 1e-5 * abs(float(y[1])) for x, y in zip(a, b))
if not ok: print(a, b)
sys.exit(0 if ok else 1)
PY
}

cat >"$work/gpt.json" <<'JSON'
{
  "model": { "type": "gpt", "vocab_size": 64, "seq_len": 16, "dim": 32, "layers": 4, "heads": 4 },
  "data": { "type": "synthetic" },
  "train_batch_size": 8, "gradient_accumulation_steps": 4, "steps": 10, "seed": 5,
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-2, "weight_decay": 0.1, "eps": 1e-6 } },
  "checkpoint": { "every": 5, "keep": 5 }
}
JSON

# --- 10 steps on dp2 x pp2 with ZeRO-3, checkpoints at 5 and 10
run 300 "$tandem" train -n 4 "$work/gpt.json" --out "$work/full" \
  --set 'parallel={"virtual_gpus": 2, "pipeline": 2}' --set zero_optimization.stage=3
check "10 steps on dp2 x pp2, ZeRO-3, with checkpoints" $rc "$(tail -3 "$work/out")"
losses "$work/full/metrics.jsonl" 6 10 >"$work/want"
ck5="$work/full/checkpoints/step_00000005"
[ -f "$ck5/manifest.json" ] && [ -f "$ck5/rank_3.safetensors" ]
check "the step-5 checkpoint has a manifest and one file per rank" $?

# --- resume step 5 in other layouts: steps 6-10 as if never stopped
# (the global batch stays 8: with 4 virtual GPUs, 2 micro-batches of 1 each)
for layout in "1 {}" "2 {\"tensor\":2}" "4 {\"pipeline\":4}" "4 {\"virtual_gpus\":4} 2"; do
  read -r n par accum <<<"$layout"
  for zero in 0 2; do
    run 300 "$tandem" train -n "$n" "$work/gpt.json" --out "$work/r" --resume "$ck5" --set "parallel=$par" \
      --set zero_optimization.stage=$zero --set gradient_accumulation_steps=${accum:-4}
    losses "$work/r/metrics.jsonl" 6 10 >"$work/got"
    [ $rc -eq 0 ] && same_losses "$work/got" "$work/want"
    check "resume at step 5 on $n device(s) $par ZeRO-$zero: steps 6-10 match" $? "$(tail -2 "$work/out")"
    rm -rf "$work/r"
  done
done

# --- context parallelism: a llama's sequences split over 2 processes beside dp 2 under ZeRO-3, its step-5 checkpoint
# resumed on one device, and one device's resumed with the sequences split: steps 6-10 as if never stopped
cat >"$work/llama.json" <<'JSON'
{
  "model": { "type": "llama", "vocab_size": 64, "seq_len": 16, "hidden_size": 32, "intermediate_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2 },
  "data": { "type": "synthetic" },
  "train_batch_size": 8, "gradient_accumulation_steps": 2, "steps": 10, "seed": 5,
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-2, "weight_decay": 0.1, "eps": 1e-6 } },
  "checkpoint": { "every": 5, "keep": 5 }
}
JSON
run 300 "$tandem" train -n 4 "$work/llama.json" --out "$work/cp" --set 'parallel={"virtual_gpus": 2, "context": 2}' \
  --set zero_optimization.stage=3
check "10 steps of a llama on dp2 x cp2, ZeRO-3, with checkpoints" $rc "$(tail -3 "$work/out")"
losses "$work/cp/metrics.jsonl" 6 10 >"$work/want_cp"
run 300 "$tandem" train "$work/llama.json" --out "$work/r" --resume "$work/cp/checkpoints/step_00000005"
losses "$work/r/metrics.jsonl" 6 10 >"$work/got"
[ $rc -eq 0 ] && same_losses "$work/got" "$work/want_cp"
check "the dp2 x cp2 checkpoint resumed on one device: steps 6-10 match" $? "$(tail -2 "$work/out")"
run 300 "$tandem" train "$work/llama.json" --out "$work/one" --set steps=5
check "5 steps of the llama on one device" $rc "$(tail -2 "$work/out")"
run 300 "$tandem" train -n 2 "$work/llama.json" --out "$work/r2" --resume "$work/one/checkpoints/step_00000005" \
  --set 'parallel={"context": 2}' --set zero_optimization.stage=1
losses "$work/r2/metrics.jsonl" 6 10 >"$work/got"
[ $rc -eq 0 ] && same_losses "$work/got" "$work/want_cp"
check "a one-device checkpoint resumed with each sequence over 2 processes: steps 6-10 match" $? "$(tail -2 "$work/out")"
rm -rf "$work/cp" "$work/r" "$work/one" "$work/r2"

# --- expert parallelism: a Qwen3-MoE's experts spread over 2 of 4 replicas under ZeRO-3 (each unit of experts sharded
# over the 2 ranks holding it), its step-5 checkpoint resumed on one device, and one device's resumed with the experts
# over 4: steps 6-10 as if never stopped (every layout's micro-batch 2 sequences, so the balance loss is the same)
cat >"$work/moe.json" <<'JSON'
{
  "model": { "type": "llama", "family": "qwen3_moe", "vocab_size": 64, "seq_len": 16, "hidden_size": 32,
             "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
             "norm_topk_prob": true, "mlp_only_layers": [1], "output_router_logits": true },
  "data": { "type": "synthetic" },
  "train_batch_size": 8, "gradient_accumulation_steps": 4, "steps": 10, "seed": 5,
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-2, "weight_decay": 0.1, "eps": 1e-6 } },
  "checkpoint": { "every": 5, "keep": 5 }
}
JSON
run 300 "$tandem" train -n 4 "$work/moe.json" --out "$work/ep" --set 'parallel={"virtual_gpus": 4, "expert": 2}' \
  --set zero_optimization.stage=3 --set gradient_accumulation_steps=1
check "10 steps of a Qwen3-MoE on dp4 with its experts over 2, ZeRO-3, with checkpoints" $rc "$(tail -3 "$work/out")"
losses "$work/ep/metrics.jsonl" 6 10 >"$work/want_ep"
run 300 "$tandem" train "$work/moe.json" --out "$work/r" --resume "$work/ep/checkpoints/step_00000005"
losses "$work/r/metrics.jsonl" 6 10 >"$work/got"
[ $rc -eq 0 ] && same_losses "$work/got" "$work/want_ep"
check "the experts-over-2 checkpoint resumed on one device: steps 6-10 match" $? "$(tail -2 "$work/out")"
run 300 "$tandem" train "$work/moe.json" --out "$work/one" --set steps=5
check "5 steps of the Qwen3-MoE on one device" $rc "$(tail -2 "$work/out")"
run 300 "$tandem" train -n 4 "$work/moe.json" --out "$work/r2" --resume "$work/one/checkpoints/step_00000005" \
  --set 'expert_parallel={"enabled": true, "autoep_size": 4}' --set zero_optimization.stage=1 \
  --set gradient_accumulation_steps=1
losses "$work/r2/metrics.jsonl" 6 10 >"$work/got"
[ $rc -eq 0 ] && same_losses "$work/got" "$work/want_ep"
check "a one-device checkpoint resumed with the experts over 4 (DeepSpeed's autoep_size): steps 6-10 match" $? \
  "$(tail -2 "$work/out")"
rm -rf "$work/ep" "$work/r" "$work/one" "$work/r2"

# --- export, read by Python; a file written by Python loads
run 300 "$tandem" train "$work/gpt.json" --out "$work/one" --resume "$ck5" --set steps=10
run 60 "$tandem" export "$work/one" --to "$work/model.safetensors"
check "tandem export writes one file" $rc "$(tail -2 "$work/out")"
"$python" - "$work/model.safetensors" "$work/one/checkpoints/step_00000010/rank_0.safetensors" <<'PY'
import json, sys
import numpy as np
from safetensors.numpy import load_file
from safetensors import safe_open
exported = load_file(sys.argv[1])
# The reference: the exported run's own checkpoint (one device: its pieces are whole parameters).
with safe_open(sys.argv[2], "np") as f:
    pieces = json.loads(f.metadata()["pieces"])
    ref = {p["name"]: f.get_tensor(k + "/value").reshape(p["shape"]) for k, p in pieces.items()}
names = {"wte.weight": (64, 32), "wpe.weight": (16, 32), "blocks.0.qkv.weight": (96, 32), "blocks.0.qkv.bias": (96,),
         "blocks.3.out.weight": (32, 128), "lnf.weight": (32,), "head.weight": (64, 32)}
assert all(exported[n].shape == s for n, s in names.items()), "PyTorch-style names and shapes"
assert set(exported) == set(ref), set(exported) ^ set(ref)
assert all(np.array_equal(exported[n], ref[n]) for n in ref), "exported values differ from the checkpoint's"
PY
check "Python reads the export: PyTorch names and shapes, the checkpoint's values exactly" $?

"$python" - "$work/init.safetensors" <<'PY'
import sys
import numpy as np
from safetensors.numpy import save_file, load_file
shapes = {"wte.weight": (64, 32), "wpe.weight": (16, 32), "lnf.weight": (32,), "lnf.bias": (32,), "head.weight": (64, 32)}
for b in range(4):
    p = f"blocks.{b}."
    shapes.update({p + "ln1.weight": (32,), p + "ln1.bias": (32,), p + "qkv.weight": (96, 32), p + "qkv.bias": (96,),
                   p + "proj.weight": (32, 32), p + "proj.bias": (32,), p + "ln2.weight": (32,), p + "ln2.bias": (32,),
                   p + "fc.weight": (128, 32), p + "fc.bias": (128,), p + "out.weight": (32, 128), p + "out.bias": (32,)})
rng = np.random.default_rng(7)
save_file({n: rng.standard_normal(s).astype(np.float32) * 0.05 for n, s in shapes.items()}, sys.argv[1])
PY
run 300 "$tandem" train -n 2 "$work/gpt.json" --out "$work/init" --init "$work/init.safetensors" \
  --set 'parallel={"tensor": 2}' --set steps=1 --set optimizer.params.lr=0 --set optimizer.params.weight_decay=0
check "tandem train --init loads a file written by Python (tp2)" $rc "$(tail -2 "$work/out")"
"$tandem" export "$work/init" --to "$work/init_back.safetensors" >/dev/null 2>&1
"$python" - "$work/init.safetensors" "$work/init_back.safetensors" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert set(a) == set(b) and all(np.array_equal(a[n], b[n]) for n in a)
PY
check "the weights Python wrote come back unchanged through a tp2 run (lr 0)" $?

# --- a stop signal to one rank: the job finishes its step, saves, exits 0
"$tandem" train -n 4 "$work/gpt.json" --out "$work/sig" --set steps=100000 --set checkpoint.every=0 \
  --set 'parallel={"pipeline": 2, "virtual_gpus": 2}' >"$work/sig.out" 2>&1 &
launcher=$!
for _ in $(seq 1 300); do grep -q "^step 3/" "$work/sig.out" && break; sleep 0.2; done
rank_pid=$(pgrep -P "$(pgrep -P $launcher -n mpirun || echo $launcher)" | head -1)
[ -z "$rank_pid" ] && rank_pid=$(pgrep -f "tandem train.*$work/sig" | tail -1)
kill -TERM "$rank_pid"
wait $launcher
rc=$?
last=$(ls "$work/sig/checkpoints" 2>/dev/null | tail -1)
[ $rc -eq 0 ] && grep -q "stopped by a signal after step" "$work/sig.out" && [ -n "$last" ]
check "SIGTERM to one rank: the job saves ($last) and exits 0" $? "rc=$rc $(tail -3 "$work/sig.out")"

# --- a killed rank, then resume from the last checkpoint: only unsaved steps are lost. The checkpoints are written at
# the step boundary (checkpoint.async false): written in the background, step 5's could still be on its way when the
# kill comes three steps later on a loaded machine, and the test would depend on the machine's speed.
run 300 env TANDEM_FAULT=rank=1,step=8,kind=kill "$tandem" train -n 4 "$work/gpt.json" --out "$work/kill" \
  --set 'parallel={"virtual_gpus": 2, "pipeline": 2, "timeout_s": 5}' --set zero_optimization.stage=3 \
  --set checkpoint.async=false
[ $rc -ne 0 ] && [ -f "$work/kill/checkpoints/step_00000005/manifest.json" ]
check "a rank killed at step 8 fails the job; the step-5 checkpoint stands" $? "rc=$rc"
run 300 "$tandem" train -n 4 "$work/gpt.json" --out "$work/kill" --resume "$work/kill" \
  --set 'parallel={"virtual_gpus": 2, "pipeline": 2}' --set zero_optimization.stage=3
losses "$work/kill/metrics.jsonl" 6 10 >"$work/got"
[ $rc -eq 0 ] && same_losses "$work/got" "$work/want"
check "resuming after the kill gives the uninterrupted run's steps 6-10" $? "$(tail -2 "$work/out")"

# --- corruption: refused with the file's name, nothing overwritten
cp -r "$work/full/checkpoints/step_00000010" "$work/bad"
printf '\x01' | dd of="$work/bad/rank_2.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
before=$(cat "$work/bad/"*.safetensors | md5sum)
run 120 "$tandem" train -n 4 "$work/gpt.json" --out "$work/bad_out" --resume "$work/bad" --set steps=12 \
  --set 'parallel={"virtual_gpus": 2, "pipeline": 2}'
[ $rc -ne 0 ] && grep -q "rank_2.safetensors' is corrupted" "$work/out" && [ "$before" = "$(cat "$work/bad/"*.safetensors | md5sum)" ]
check "a corrupted rank file is refused by name and left untouched" $? "$(grep -m1 error "$work/out")"
rm "$work/bad/manifest.json"
run 60 "$tandem" train "$work/gpt.json" --resume "$work/bad" --set steps=12
[ $rc -ne 0 ] && grep -q "holds no complete checkpoint" "$work/out"
check "a folder without a manifest is not a checkpoint" $? "$(tail -1 "$work/out")"

report
