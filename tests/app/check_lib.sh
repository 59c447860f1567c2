# Sourced by the end-to-end test scripts of this folder: a scratch folder $work (removed on exit), Open MPI
# allowed as root, and the helpers below. Each script ends with `report`.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
passed=0
failed=0

check() {  # check NAME EXIT-CODE [DETAIL]: one PASS or FAIL line
  if [ "$2" -eq 0 ]; then
    echo "PASS $1"
    passed=$((passed + 1))
  else
    echo "FAIL $1${3:+: $3}"
    failed=$((failed + 1))
  fi
}

run() {  # run SECONDS COMMAND...: output in $work/out, exit code in $rc, seconds taken in $secs
  local start
  start=$(date +%s)
  timeout "$1" "${@:2}" >"$work/out" 2>&1 </dev/null
  rc=$?
  secs=$(($(date +%s) - start))
}

tiny_config() {  # tiny_config FILE: a 4-layer gpt of 3 steps on synthetic data, the scripts' common run
  cat >"$1" <<'JSON'
{
  "model": { "type": "gpt", "vocab_size": 64, "seq_len": 16, "dim": 32, "layers": 4, "heads": 4 },
  "data": { "type": "synthetic" },
  "train_batch_size": 8, "gradient_accumulation_steps": 2, "steps": 3, "seed": 3,
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-3 } }
}
JSON
}

report() {  # the totals; fails when any check failed
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
