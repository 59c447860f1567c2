#!/usr/bin/env bash
# Installs what is missing, builds and runs the test suite of a preset: bash tools/test.sh [release|asan|debug]
# release and debug run every test; asan runs every unit test and the "subset" entries of the equivalence matrix
# (tests/parallel/CMakeLists.txt says which cases and why), not the Python interchange checks (label python), the
# full matrix (label matrix) nor the largest planner cases (label large): it names what it leaves out before it
# starts. Each step prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
timed() {
  local what="$1" t0=$SECONDS
  shift
  "$@"
  echo "-- $preset: $what took $((SECONDS - t0)) s"
}
timed "installing" bash tools/install-deps.sh --tests
timed "building" bash tools/build.sh "$preset"
if [ "$preset" = asan ]; then
  echo "-- asan leaves out (run by the release suite):"
  ctest --test-dir build/asan -N -L '^(python|matrix|large)$' | sed -n 's/^ *Test *#[0-9]*: /     /p'
fi
# Twice as many slots as cores: the end-to-end scripts and the mpirun tests (2 slots each) wait on process starts
# and on each other more than they compute, and a pair of them keeps both cores busy.
timed "testing" ctest --preset "$preset" -j"$((2 * $(nproc)))"
