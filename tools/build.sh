#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release), all of it or the targets named:
#   bash tools/build.sh [release|debug|asan [TARGET...]]
set -euo pipefail
preset="${1:-release}"
shift || true
cd "$(dirname "$0")/.."
cmake --preset "$preset" >/dev/null
if [ $# -gt 0 ]; then
  cmake --build --preset "$preset" --target "$@"
else
  cmake --build --preset "$preset"
fi
