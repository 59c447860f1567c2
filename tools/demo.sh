#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the demo config. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh release
build/release/apps/tandem/tandem train configs/gpt_text.json --out runs/demo
