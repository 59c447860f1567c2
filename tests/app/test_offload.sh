#!/usr/bin/env bash
# Offload end to end (zero_optimization.offload_optimizer / offload_param): a run the device budget refuses trains
# with its optimizer in host memory or in swap files, with the same losses; checkpoints move between offloaded and
# not; bad nvme folders, a full disk, too little host memory are refused before step 1; a disk that fills during the
# run does not stop it (its swap space was reserved at the start). Needs root for the small tmpfs folders it mounts.
# Usage: test_offload.sh TANDEM_BINARY PYTHON. Prints one line per check and "N passed, M failed".
set -u
tandem="$1"
python="$2"
source "$(dirname "$0")/check_lib.sh"
mounts=()
cleanup_mounts() { for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done; rm -rf "$work"; }
trap cleanup_mounts EXIT

# losses FILE FIRST LAST: "step loss" of metrics.jsonl for steps FIRST..LAST, the loss as Python's repr (all digits)
losses() {
  "$python" -c "
import json
for l in open('$1'):
    m = json.loads(l)
    if $2 <= m['step'] <= $3: print(m['step'], repr(m['loss']))"
}
# same FILE FILE: identical and not empty
same() { [ -s "$1" ] && cmp -s "$1" "$2"; }
# tmpfs DIR SIZE [ro]: a small filesystem of its own at DIR
tmpfs() {
  mkdir -p "$1" && mount -t tmpfs -o "size=$2${3:+,$3}" tmpfs "$1" && mounts+=("$1")
}

cat >"$work/mlp.json" <<'JSON'
{
  "model": { "type": "mlp", "sizes": [256, 1024, 1024, 1024, 10] },
  "data": { "type": "synthetic", "samples": 512 },
  "train_batch_size": 32, "gradient_accumulation_steps": 2, "steps": 6, "seed": 7,
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-3, "weight_decay": 0.1 } },
  "gradient_clipping": 1.0,
  "zero_optimization": { "stage": 1 },
  "checkpoint": { "every": 3, "keep": 5 }
}
JSON
cpu='--set zero_optimization.offload_optimizer.device=cpu'

# --- the reference: no budget, nothing offloaded
run 300 "$tandem" train "$work/mlp.json" --out "$work/device"
check "6 steps with the state on the device" $rc "$(tail -3 "$work/out")"
losses "$work/device/metrics.jsonl" 1 6 >"$work/want"

# --- a budget the state does not fit: refused, with an offloaded layout to use
run 300 "$tandem" train "$work/mlp.json" --out "$work/refused" --set device_memory=24MiB
[ $rc -eq 1 ] && grep -q 'offload_optimizer' "$work/out" && ! grep -q '^step 1/' "$work/out"
check "over a 24 MiB budget: refused before step 1, naming offload_optimizer" $? "$(tail -3 "$work/out")"

# --- the same budget with the optimizer in host memory: trains under it, the same losses to the last bit
run 300 "$tandem" train "$work/mlp.json" --out "$work/host" --set device_memory=24MiB $cpu
check "with offload_optimizer cpu it trains under the 24 MiB budget" $rc "$(tail -3 "$work/out")"
grep -q 'offloaded state in host memory, peak per rank' "$work/out"
check "the run says how much host memory the offloaded state took" $? "$(tail -3 "$work/out")"
losses "$work/host/metrics.jsonl" 1 6 >"$work/got"
same "$work/got" "$work/want"
check "offloaded losses equal the device's bit for bit" $? "$(paste "$work/got" "$work/want" | head -3)"

# --- the step's timeline (TANDEM_TIMELINE=S): the recorded step's own update, one span for each offloaded unit, each
# after that unit's last gradient of the step came down (not the update of the step before, still running then)
run 300 env TANDEM_TIMELINE=3 "$tandem" train "$work/mlp.json" --out "$work/timeline" --set device_memory=24MiB $cpu \
  --set checkpoint.every=0
"$python" - "$work/timeline/timeline_rank0.json" <<'PY'
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
down, updates, early = {}, collections.Counter(), []
for e in events:
    if e["tid"] == "to host":
        down[e["name"]] = max(down.get(e["name"], 0.0), e["ts"] + e["dur"])
for e in events:
    if e["tid"] == "host AdamW":
        updates[e["name"]] += 1
        if e["ts"] < down.get(e["name"], float("inf")):
            early.append(e["name"])
print(f"{len(down)} units copied down, updates {dict(updates)}, before their gradient: {early}")
sys.exit(0 if down and set(updates) == set(down) and set(updates.values()) == {1} and not early else 1)
PY
check "the timeline holds the recorded step's own update: each unit once, after its gradient came down" $? ""
grep -q "^offload timeline of step 3 (rank 0, .*timeline_rank0.json" "$work/out"
check "... and the run names the timeline's file" $? "$(grep timeline "$work/out")"

# --- without gradient clipping the update needs nothing of the whole step: each unit's starts in the backward, as its
# gradient comes down (offload_optimizer.update "after_backward" keeps it after the backward); the same losses either
# way.
# Layers of 2048 so that the backward below the first updated unit lasts far longer than a thread takes to wake.
cat >"$work/deep.json" <<'JSON'
{
  "model": { "type": "mlp", "sizes": [256, 2048, 2048, 2048, 2048, 2048, 10] },
  "data": { "type": "synthetic", "samples": 512 },
  "train_batch_size": 32, "gradient_accumulation_steps": 2, "steps": 4, "seed": 7, "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-3, "weight_decay": 0.1 } },
  "zero_optimization": { "stage": 2, "offload_optimizer": { "device": "cpu" } },
  "checkpoint": { "every": 0, "at_end": false }
}
JSON
# starts WHEN DIR: checks when the recorded step's host updates start against the end of its backward
starts() {
  "$python" - "$1" "$2/timeline_rank0.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[2]))["traceEvents"]
backward_end = max(e["ts"] + e["dur"] for e in events if e["tid"] == "device" and e["name"].startswith("backward"))
starts = sorted(e["ts"] for e in events if e["tid"] == "host AdamW")
print(f"{len(starts)} updates, the first {starts[0] - backward_end:+.0f} us from the end of the backward")
sys.exit(0 if len(starts) == 6 and (starts[0] < backward_end) == (sys.argv[1] == "in") else 1)
PY
}
run 300 env TANDEM_TIMELINE=3 "$tandem" train "$work/deep.json" --out "$work/in_backward"
[ $rc -eq 0 ] && starts in "$work/in_backward" >"$work/when" 2>&1
check "without clipping the host update starts in the backward" $? "$(cat "$work/when"; tail -3 "$work/out")"
update='--set zero_optimization.offload_optimizer.update'
run 300 env TANDEM_TIMELINE=3 "$tandem" train "$work/deep.json" --out "$work/after_backward" $update=after_backward
[ $rc -eq 0 ] && starts after "$work/after_backward" >"$work/when" 2>&1
check "... and after it with offload_optimizer.update after_backward" $? "$(cat "$work/when"; tail -3 "$work/out")"
losses "$work/in_backward/metrics.jsonl" 1 4 >"$work/in_backward.losses"
losses "$work/after_backward/metrics.jsonl" 1 4 >"$work/after_backward.losses"
same "$work/in_backward.losses" "$work/after_backward.losses"
check "... with the same losses, bit for bit" $? "$(paste "$work/in_backward.losses" "$work/after_backward.losses" | head -3)"
run 30 "$tandem" train "$work/deep.json" --out "$work/bad_update" $update=sometimes
refusal="'zero_optimization.offload_optimizer.update' must be one of \"in_backward\", \"after_backward\", got \"sometimes\""
[ $rc -ne 0 ] && ! grep -q '^step 1/' "$work/out" && grep -qF "$refusal" "$work/out"
check "... and another value of offload_optimizer.update is refused before step 1, naming the key" $? \
  "$(tail -3 "$work/out")"

# --- checkpoints are layout-free: offloaded -> not, and back, continue as if never stopped
run 300 "$tandem" train "$work/mlp.json" --resume "$work/host/checkpoints/step_00000003" --out "$work/to_device"
losses "$work/to_device/metrics.jsonl" 4 6 >"$work/got"
losses "$work/device/metrics.jsonl" 4 6 >"$work/want46"
[ $rc -eq 0 ] && same "$work/got" "$work/want46"
check "an offloaded run's checkpoint resumes on the device with the same losses" $? "$(tail -3 "$work/out")"
run 300 "$tandem" train "$work/mlp.json" --resume "$work/device/checkpoints/step_00000003" --out "$work/to_host" $cpu
losses "$work/to_host/metrics.jsonl" 4 6 >"$work/got"
[ $rc -eq 0 ] && same "$work/got" "$work/want46"
check "a device run's checkpoint resumes offloaded with the same losses" $? "$(tail -3 "$work/out")"

# --- nvme: swap files in a folder, the same losses, nothing left behind; parameters too (stage 3)
mkdir -p "$work/swap"
nvme="--set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path=$work/swap"
run 300 "$tandem" train "$work/mlp.json" --out "$work/nvme" --set device_memory=24MiB $nvme
losses "$work/nvme/metrics.jsonl" 1 6 >"$work/got"
[ $rc -eq 0 ] && same "$work/got" "$work/want" && [ -z "$(ls -A "$work/swap")" ]
check "offload_optimizer nvme: the same losses, no file left in nvme_path" $? "$(tail -3 "$work/out")"
grep -q "predicted offload_optimizer swap files: .* a node in $work/swap" "$work/out"
check "the preflight says the swap files' size" $? "$(head -5 "$work/out")"
for async in true false; do
  run 300 "$tandem" train "$work/mlp.json" --out "$work/nvme_$async" $nvme --set checkpoint.async=$async
  run 300 "$tandem" train "$work/mlp.json" --resume "$work/nvme_$async/checkpoints/step_00000003" --out "$work/nvme_back_$async"
  losses "$work/nvme_back_$async/metrics.jsonl" 4 6 >"$work/got"
  [ $rc -eq 0 ] && same "$work/got" "$work/want46"
  check "an nvme run's checkpoint (async $async) resumes on the device with the same losses" $? "$(tail -3 "$work/out")"
done
run 300 "$tandem" train "$work/mlp.json" --out "$work/nvme3" $nvme --set zero_optimization.stage=3 \
  --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path="$work/swap"
run 300 "$tandem" train "$work/mlp.json" --out "$work/device3" --set zero_optimization.stage=3
losses "$work/nvme3/metrics.jsonl" 1 6 >"$work/got"
losses "$work/device3/metrics.jsonl" 1 6 >"$work/want3"
[ $rc -eq 0 ] && same "$work/got" "$work/want3"
check "offload_param nvme as well: the same losses as ZeRO-3 on the device" $? "$(tail -3 "$work/out")"

# --- bad input, each refused before step 1 with what to do
run 300 "$tandem" train "$work/mlp.json" --out "$work/bad1" \
  --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$work/none"
[ $rc -eq 1 ] && grep -q "nvme_path '$work/none' is not a folder" "$work/out" && ! grep -q '^step 1/' "$work/out"
check "a missing nvme_path is refused before step 1" $? "$(tail -2 "$work/out")"

if tmpfs "$work/ro" 64M ro; then
  run 300 "$tandem" train "$work/mlp.json" --out "$work/bad2" \
    --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$work/ro"
  [ $rc -eq 1 ] && grep -q "not writable" "$work/out" && ! grep -q '^step 1/' "$work/out"
  check "a read-only nvme_path is refused before step 1" $? "$(tail -2 "$work/out")"
else
  check "a read-only nvme_path is refused before step 1" 1 "mounting a read-only tmpfs failed (the test needs root)"
fi

if tmpfs "$work/small" 1M; then
  run 300 "$tandem" train "$work/mlp.json" --out "$work/bad3" \
    --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$work/small"
  [ $rc -eq 1 ] && grep -q "not enough disk space for the offload_optimizer swap files .* on the file system of '$work/small'" "$work/out" &&
    ! grep -q '^step 1/' "$work/out"
  check "an nvme_path too small for the swap files is refused before step 1, with the numbers" $? "$(tail -2 "$work/out")"
else
  check "an nvme_path too small for the swap files is refused before step 1, with the numbers" 1 "mounting failed"
fi

run 300 "$tandem" train "$work/mlp.json" --out "$work/bad4" $cpu --set host_memory=8MiB
[ $rc -eq 1 ] && grep -q 'this run needs .* of host memory on a node' "$work/out" && grep -q '"host_memory"' "$work/out" &&
  ! grep -q '^step 1/' "$work/out"
check "too little host memory for the offloaded state is refused before step 1" $? "$(tail -2 "$work/out")"

# --- the disk fills while the run swaps: it goes on (its space was reserved when it started)
if tmpfs "$work/fills" 64M; then
  "$tandem" train "$work/mlp.json" --out "$work/filled" --set steps=400 --set checkpoint.every=0 \
    --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$work/fills" \
    >"$work/filled.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q '^step 2/' "$work/filled.log" && break; sleep 0.1; done
  dd if=/dev/zero of="$work/fills/filler" bs=1M >/dev/null 2>&1  # until the disk is full
  before=$(grep -c '^step ' "$work/filled.log")
  free=$(df --output=avail -B1 "$work/fills" | tail -1)
  wait $pid
  rc=$?
  after=$(grep -c '^step ' "$work/filled.log")
  [ $rc -eq 0 ] && [ "$free" -lt 1048576 ] && [ "$after" -gt "$before" ] && grep -q '^done: 400 steps' "$work/filled.log"
  check "a disk that fills during the run does not stop its swap" $? \
    "exit $rc, free after the fill $free B, progress lines $before -> $after; $(tail -2 "$work/filled.log")"
else
  check "a disk that fills during the run does not stop its swap" 1 "mounting a tmpfs failed (the test needs root)"
fi

report
