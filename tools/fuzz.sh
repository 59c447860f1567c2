#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (clang, ASan + UBSan) into build/fuzz, replays fuzz/regressions/*,
# then fuzzes each target for SECONDS (default 60) from seeds made here: bash tools/fuzz.sh [SECONDS]
# Exits non-zero when a regression input fails or a target finds a crash, a timeout or a leak; the log and
# the input that did it are named in the output.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
targets=(config_fuzzer safetensors_fuzzer tokens_fuzzer)
out=build/fuzz

# --- clang with the libFuzzer runtime, and what the tandem modules build with -----------------------------
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
need() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}
need clang cmake nlohmann-json3-dev zlib1g-dev libomp-dev
# Debian 12 ships libFuzzer and the sanitizer runtimes apart from clang, as libclang-rt-<major>-dev.
major=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
if apt-cache show "libclang-rt-$major-dev" >/dev/null 2>&1; then need "libclang-rt-$major-dev"; fi
probe=$(mktemp -d)
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>"$probe/err"; then
  cat "$probe/err" >&2
  echo "clang++ $major cannot link -fsanitize=fuzzer: install its compiler-rt (libclang-rt-$major-dev)" >&2
  exit 1
fi
rm -rf "$probe"

# --- build --------------------------------------------------------------------------------------------------
cmake -S fuzz -B "$out" -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$out" -j"${FUZZ_JOBS:-2}" >/dev/null

# --- seeds, made fresh each run so none are committed -------------------------------------------------------
for t in "${targets[@]}"; do mkdir -p "$out/corpus/$t" "$out/artifacts/$t" "$out/logs"; done
# The targets' scratch files; a crashed target cannot remove its own, so they are cleared here.
rm -rf "$out/tmp"
mkdir -p "$out/tmp"
export TMPDIR="$PWD/$out/tmp"
c="$out/corpus/config_fuzzer"
for f in configs/*.json; do
  name=$(basename "$f" .json)
  cp "$f" "$c/$name.json"  # starts with '{' (odd): the in-memory path only
  { printf ' '; cat "$f"; } >"$c/$name.file.json"  # a leading space (even): load_config() as well
done
# Overrides follow the JSON text, one after each NUL byte.
{ printf ' '; cat configs/gpt_text.json; printf '\0model.dim=96\0scheduler.params.total_num_steps=300'; } \
  >"$c/gpt_text.overrides"
printf ' {"model": {"type": "mlp", "sizes": [4, 2]}}\0optimizer.type=adam\0data.samples=8\0device_memory=1GiB' \
  >"$c/mlp_minimal.overrides"
# Numbers at the end of an input are easy for libFuzzer's integer mutations to grow: the batch arithmetic
# and the dim/heads check get their own.
{
  printf '{"model": {"type": "mlp", "sizes": [4, 2]}}'
  printf '\0train_micro_batch_size_per_gpu=16\0gradient_accumulation_steps=2'
} >"$c/batch.overrides"
{
  printf '{"model": {"type": "gpt", "vocab_size": 256, "seq_len": 8, "dim": 32, "layers": 1, "heads": 4}}'
  printf '\0train_batch_size=8\0model.heads=4\0model.dim=96'
} >"$c/gpt_small.overrides"
"$out/seed_writer" "$out/corpus/safetensors_fuzzer" "$out/corpus/tokens_fuzzer"

dict() {
  case "$1" in
    config_fuzzer) echo "-dict=fuzz/config.dict" ;;
    safetensors_fuzzer) echo "-dict=fuzz/safetensors.dict" ;;
  esac
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
limits=(-timeout=10 -rss_limit_mb=2048)
failed=0

# --- regressions: every saved input runs once, alone, and must pass ----------------------------------------
for t in "${targets[@]}"; do
  [ -d "fuzz/regressions/$t" ] || continue
  mapfile -t files < <(find "fuzz/regressions/$t" -type f | sort)
  [ ${#files[@]} -gt 0 ] || continue
  bad=0
  for f in "${files[@]}"; do
    log="$out/logs/$t.$(basename "$f").log"
    "$out/$t" "${limits[@]}" "$f" >"$log" 2>&1 && continue
    bad=$((bad + 1))
    echo "$t: REGRESSION $f fails (log: $log)"
    grep -E 'ERROR: |runtime error|SUMMARY|violated|uncaught|terminate' "$log" | head -3 | sed 's/^/  /'
  done
  echo "$t: $((${#files[@]} - bad)) of ${#files[@]} regression inputs pass"
  [ "$bad" -eq 0 ] || failed=1
done

# --- fuzzing ------------------------------------------------------------------------------------------------
for t in "${targets[@]}"; do
  log="$out/logs/$t.log"
  rc=0
  # shellcheck disable=SC2046  # dict prints one option or nothing
  "$out/$t" "$out/corpus/$t" $(dict "$t") -max_total_time="$seconds" "${limits[@]}" -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$t/" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "$t: ${runs:-?} executions in ${seconds}s, nothing found"
  else
    failed=1
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "$t: FOUND after ${runs:-?} executions (exit $rc): ${artifact:-no input saved} (log: $log)"
    grep -E 'ERROR: |runtime error|SUMMARY|violated|uncaught|terminate' "$log" | head -5 | sed 's/^/  /'
  fi
done
exit "$failed"
