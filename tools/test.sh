#!/usr/bin/env bash
# Installs what is missing, builds and runs the whole test suite: bash tools/test.sh [release|asan|debug]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
bash tools/install-deps.sh --tests
bash tools/build.sh "$preset"
ctest --preset "$preset" -j2
