#!/usr/bin/env bash
# Long runs end to end: a run folder belongs to one job (its lock), the disk is checked before step 1 and a full disk
# during a checkpoint loses nothing complete, checkpoints written in the background survive a kill -9, and long reads
# and writes report their progress. Usage: test_runs.sh TANDEM_BINARY PYTHON (numpy and safetensors). Prints one line
# per check and "N passed, M failed".
set -u
tandem=$(realpath "$1")
python=$(realpath -s "$2")
source "$(dirname "$0")/check_lib.sh"
cd "$work" || exit 1

tiny_config tiny.json

# --- two jobs started together into one new folder: one trains, the other is refused at once naming the first
"$tandem" train tiny.json --out race --set steps=40 --set checkpoint.every=5 >race1.out 2>&1 &
p1=$!
"$tandem" train tiny.json --out race --set steps=40 --set checkpoint.every=5 >race2.out 2>&1 &
p2=$!
wait $p1
rc1=$?
wait $p2
rc2=$?
if [ $rc1 -eq 0 ]; then winner=race1.out loser=race2.out lrc=$rc2; else winner=race2.out loser=race1.out lrc=$rc1; fi
[ $((rc1 == 0 ? 1 : 0)) -ne $((rc2 == 0 ? 1 : 0)) ] && [ $lrc -ne 0 ] &&
  grep -q "^error: the run folder 'race' is in use by another job (host $(hostname), pid [0-9]*, since " "$loser" &&
  ! grep -q "^step " "$loser" && [ "$(wc -l <race/metrics.jsonl)" -eq 40 ] &&
  [ -f race/checkpoints/step_00000040/manifest.json ] && grep -q "done: 40 steps" "$winner"
check "two jobs into one new --out: one trains all 40 steps, the other is refused at once naming its holder" $? \
  "rc $rc1/$rc2; $(grep -h -E '^error|done' race1.out race2.out)"

# --- a --resume of a folder in use is refused naming the holder; a stale lock never blocks
"$tandem" train tiny.json --out busy --set steps=100000 --set checkpoint.every=2 >busy.out 2>&1 &
busy=$!
for _ in $(seq 1 300); do grep -q "^step 3/" busy.out && break; sleep 0.2; done
run 60 "$tandem" train tiny.json --out busy --overwrite
[ $rc -ne 0 ] && grep -q "the run folder 'busy' is in use by another job (host .*, pid $busy, since " out
check "a second job into a folder in use is refused, --overwrite or not, naming the holder's pid" $? "$(grep error out)"
run 60 "$tandem" train tiny.json --resume busy --out busy2 --set steps=200000
[ $rc -ne 0 ] && grep -q "cannot resume from 'busy.*': its run folder 'busy' is in use by a job (host .*, pid $busy" out
check "a --resume of a folder in use is refused naming the holder" $? "$(grep error out)"
kill -KILL $busy
wait $busy
# The holder died by SIGKILL: its lock file stays and still names it, but the kernel released the lock.
grep -q "\"pid\":$busy" busy/tandem.lock
check "the lock file still names the killed holder" $? "$(cat busy/tandem.lock)"
run 60 "$tandem" train tiny.json --resume busy --set "steps=$(($(wc -l <busy/metrics.jsonl) + 2))"
[ $rc -eq 0 ] && grep -q "resumed from busy" out
check "that stale lock does not block a resume into the folder" $? "$(grep -E 'error|resumed' out)"

# --- a --resume of a folder whose job runs and has no checkpoint yet: the lock is named, not "its run ended"
"$tandem" train tiny.json --out young --set steps=100000 --set checkpoint.every=100000 >young.out 2>&1 &
young=$!
for _ in $(seq 1 300); do grep -q "^step 3/" young.out && break; sleep 0.2; done
run 60 "$tandem" train tiny.json --resume young
[ $rc -ne 0 ] && grep -q "cannot resume from 'young': it is in use by a job (host .*, pid $young, since " out &&
  grep -q "has not written its first checkpoint yet" out && ! grep -q "ended" out && ! grep -q -- "--overwrite" out
check "a --resume of a running job's folder before its first checkpoint names the job, not an ended run" $? \
  "$(grep error out)"
kill -KILL $young
wait $young

# --- a run that died before its first checkpoint: the refusal says so and offers --overwrite, not --resume
run 60 env TANDEM_FAULT=rank=0,step=2,kind=kill "$tandem" train tiny.json --out early
run 60 "$tandem" train tiny.json --out early
[ $rc -ne 0 ] && grep -q "the run folder 'early' holds a run that ended before its first checkpoint (metrics.jsonl)" out &&
  grep -q -- "--overwrite" out && ! grep -q -- "--resume" out
check "a folder whose run died before its first checkpoint: the refusal says so and offers --overwrite" $? \
  "$(grep error out)"
run 60 "$tandem" train tiny.json --resume early
[ $rc -ne 0 ] && grep -q "its run ended before its first checkpoint" out && grep -q -- "--out early --overwrite" out
check "... and --resume of it says there is nothing to resume and how to start again" $? "$(grep error out)"
run 60 "$tandem" train tiny.json --out early --overwrite
check "... --overwrite then trains in it" $rc "$(grep error out)"

# --- the disk: checked before step 1 against what the run holds at once, and a disk that fills during a checkpoint.
# A small tmpfs, mounted here when the test runs as root (as CI does), is a real file system whose statvfs says how
# little is free and whose writes fail with ENOSPC. Without it: the check is made to need more than any disk has (a
# keep of 10^8 checkpoints), and the failing write comes from RLIMIT_FSIZE (ulimit -f), whose writes fail with EFBIG.
small="$work/small"
mkdir -p "$small"
trap 'umount "$small" 2>/dev/null; rm -rf "$work"' EXIT
tmpfs=0
[ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=2m tmpfs "$small" 2>/dev/null && tmpfs=1
echo "disk checks on $([ $tmpfs -eq 1 ] && echo "a 2 MiB tmpfs" || echo "the work folder's disk with RLIMIT_FSIZE (no mount)")"
if [ $tmpfs -eq 1 ]; then
  run 60 "$tandem" train -n 2 tiny.json --out "$small/r" --set steps=20 --set checkpoint.every=2
else
  run 60 "$tandem" train -n 2 tiny.json --out "$small/r" --set steps=100000000 --set checkpoint.every=1 \
    --set checkpoint.keep=100000000
fi
[ $rc -ne 0 ] && grep -q "^error: not enough disk space for [0-9]* checkpoints of .* (checkpoint.keep [0-9]*, and 1 being written): they need .* bytes) on the file system of '$small/r/checkpoints', which has .* bytes) free: .*write the run elsewhere with --out DIR" out &&
  ! grep -q "^step " out && [ ! -e "$small/r/metrics.jsonl" ]
check "checkpoints that do not fit are refused before step 1 with the numbers and what to change" $? "$(grep error out)"
if [ $tmpfs -eq 1 ]; then
  grep -q "set checkpoint.keep to [0-9]* or less" out
  check "... naming the checkpoint.keep that fits" $? "$(grep error out)"
  run 60 "$tandem" train -n 2 tiny.json --out "$small/r" --set steps=4 --set checkpoint.every=2 --set checkpoint.keep=1
  [ $rc -eq 0 ] && [ "$(ls "$small/r/checkpoints")" = "step_00000004" ]
  check "... and with that keep the run trains and keeps its checkpoint" $? "$(grep -E 'error|done' out)"
  rm -rf "$small/r"
  # A run that writes no checkpoint (every 0, at_end false) reserves no space: with 200 KiB free, less than one of its
  # checkpoints (about 680 KiB), it trains.
  dd if=/dev/zero of="$small/filler" bs=1024 count=$(($(df --output=avail -B1024 "$small" | tail -1) - 200)) \
    >/dev/null 2>&1
  run 60 "$tandem" train tiny.json --out "$small/n" --set checkpoint.every=0 --set checkpoint.at_end=false
  [ $rc -eq 0 ] && grep -q "^done: 3 steps" out && [ -z "$(ls "$small/n/checkpoints" 2>/dev/null)" ]
  check "a run that writes no checkpoint trains on a disk with no room for one" $? "$(grep -E 'error|done' out)"
  rm -rf "$small/n" "$small/filler"
  # Someone else fills the disk while the run goes on.
  "$tandem" train -n 2 tiny.json --out "$small/f" --set steps=1000000 --set checkpoint.every=2 \
    --set checkpoint.keep=1 >fill.out 2>&1 &
  job=$!
  for _ in $(seq 1 300); do grep -q "^saved checkpoint .*step_00000004" fill.out && break; sleep 0.1; done
  dd if=/dev/zero of="$small/filler" bs=64k >/dev/null 2>&1
  wait $job
  rc=$?
else
  run 120 bash -c "ulimit -f 200; exec '$tandem' train -n 2 tiny.json --out fsize --set steps=6 --set checkpoint.every=2"
  cp out fill.out
fi
newest=$(sed -n 's/.*The newest complete checkpoint is of step \([0-9]*\) .*/\1/p' fill.out | head -1)
failed_step=$(sed -n 's/.*checkpoint step_0*\([0-9]*\) could not be written.*/\1/p' fill.out | head -1)
folder=$([ $tmpfs -eq 1 ] && echo "$small/f" || echo fsize)
if [ $tmpfs -eq 1 ]; then
  [ $rc -ne 0 ] && grep -q "No space left on device" fill.out && [ -n "$newest" ] && [ "$failed_step" = $((newest + 2)) ] &&
    [ -f "$folder/checkpoints/$(printf 'step_%08d' "$newest")/manifest.json" ] &&
    [ -z "$(ls -d "$folder"/checkpoints/*.tmp 2>/dev/null)" ]
else
  [ $rc -ne 0 ] && grep -q "File too large" fill.out && grep -q "The newest complete checkpoint is none" fill.out &&
    [ -z "$(ls -d "$folder"/checkpoints/*.tmp 2>/dev/null)" ]
fi
check "a checkpoint that cannot be written: its .tmp is removed, the newest complete one kept and named, exit $rc" $? \
  "$(grep -m1 -E '^error' fill.out)"
rm -f "$small/filler"
if [ $tmpfs -eq 1 ]; then
  # Leave about 600 KiB free: less than the export's weights and the 1 MiB it adds for headers.
  dd if=/dev/zero of="$small/filler" bs=1k count=$(($(df -k --output=avail "$small" | tail -1) - 600)) >/dev/null 2>&1
  run 60 "$tandem" export "$folder" --to "$small/w.safetensors"
  [ $rc -ne 0 ] && grep -q "^error: not enough disk space for the export (one safetensors file, fp32)" out &&
    [ ! -e "$small/w.safetensors" ]
  check "an export that does not fit its destination is refused before it reads anything" $? "$(grep error out)"
else
  check "an export that does not fit its destination is refused (needs a tmpfs: run as root where mount works)" 1
fi

# --- checkpoints written in the background: the same files as written on the spot, a kill -9 in the middle of one
# leaves the one before it the newest complete, and a resume from there gives the uninterrupted run's losses.
pp2='parallel={"pipeline": 2}'
run 120 "$tandem" train -n 2 tiny.json --out async --set steps=6 --set checkpoint.every=2 --set checkpoint.keep=5 \
  --set "$pp2"
run 120 "$tandem" train -n 2 tiny.json --out sync --set steps=6 --set checkpoint.every=2 --set checkpoint.keep=5 \
  --set "$pp2" --set checkpoint.async=false
same=0
for s in 2 4 6; do
  d=$(printf 'step_%08d' $s)
  for f in rank_0.safetensors rank_1.safetensors; do cmp -s "async/checkpoints/$d/$f" "sync/checkpoints/$d/$f" || same=1; done
done
[ $same -eq 0 ] && grep -q '"checkpoint_writing":true' async/metrics.jsonl && ! grep -q '"checkpoint_writing"' sync/metrics.jsonl
check "background and on-the-spot checkpoints write the same files; metrics.jsonl says which steps overlapped a write" $?
run 120 env TANDEM_FAULT=rank=1,step=4,kind=kill_in_write "$tandem" train -n 2 tiny.json --out killed --set steps=6 \
  --set checkpoint.every=2 --set checkpoint.keep=5 --set 'parallel={"pipeline": 2}'
[ $rc -ne 0 ] && grep -q "killed while writing" out && [ -f killed/checkpoints/step_00000002/manifest.json ] &&
  [ ! -e killed/checkpoints/step_00000004 ] && [ ! -e killed/checkpoints/step_00000004.tmp/manifest.json ] &&
  [ -e killed/checkpoints/step_00000004.tmp/rank_1.safetensors.tmp ]
check "a rank killed (SIGKILL) halfway through its background write: step 2 stays the newest complete checkpoint" $? \
  "rc=$rc $(ls killed/checkpoints/ killed/checkpoints/*.tmp 2>&1 | tr '\n' ' ')"
run 120 "$tandem" train -n 2 tiny.json --resume killed --set steps=6 --set checkpoint.every=2 --set checkpoint.keep=5 \
  --set 'parallel={"pipeline": 2}'
"$python" - async/metrics.jsonl killed/metrics.jsonl <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:])
sys.exit(0 if len(a) == len(b) == 6 and a == b else 1)
PY
[ $? -eq 0 ] && grep -q "resumed from killed/checkpoints/step_00000002" out && [ ! -e killed/checkpoints/step_00000004.tmp ]
check "resuming it from step 2 gives the uninterrupted run's losses, and the killed write's folder is swept" $? \
  "$(grep -E 'error|resumed' out)"

# --- long reads and writes say how they go (TANDEM_PROGRESS_S=0: a line at every chunk instead of every 5 s)
run 120 env TANDEM_PROGRESS_S=0 "$tandem" train -n 2 tiny.json --out prog --set steps=2
grep -q "^writing checkpoint step_00000002 (rank 0's file): .* of .* (100%), .*/s, ETA " out &&
  grep -q "^copying checkpoint state to host memory: " out && grep -q "^saved checkpoint prog/checkpoints/step_00000002 (" out
check "a checkpoint write reports bytes, rate and ETA" $? "$(grep -E 'checkpoint' out | head -3)"
run 120 env TANDEM_PROGRESS_S=0 "$tandem" train -n 2 tiny.json --resume prog --set steps=3
grep -q "^resuming from prog/checkpoints/step_00000002 (checksums, then the state): .* of .* (100%)" out
check "a resume reports its reading" $? "$(grep -E 'resum' out | head -3)"
run 120 env TANDEM_PROGRESS_S=0 "$tandem" export prog --to prog.safetensors
grep -q "^reading checkpoint .*: weights: .* (100%)" out && grep -q "^writing prog.safetensors: .* (100%)" out
check "an export reports its reading and writing" $? "$(head -3 out)"
run 120 env TANDEM_PROGRESS_S=0 "$tandem" train tiny.json --out init --init prog.safetensors --set steps=1
grep -q "^loading initial weights from prog.safetensors (this rank's part, as fp32): .* (100%)" out
check "--init reports its reading" $? "$(grep -E 'initial' out | head -3)"
run 60 "$tandem" train -n 2 tiny.json --out quiet --set steps=2
! grep -q -E "^(writing|copying) checkpoint" out
check "work of less than 3 s says nothing as it goes" $? "$(grep -E '^(writing|copying)' out | head -2)"

report
