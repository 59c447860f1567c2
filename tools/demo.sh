#!/usr/bin/env bash
# The main job: "4 devices used as 2 virtual GPUs with twice the memory". Installs what is missing, builds,
# then runs tools/demo_run.sh: on CPU (no GPU), the model of configs/demo.json (an MLP of 71.4M parameters,
# 1.09 GiB of fp32 training state) under a 768 MiB budget per device, refused on one device and trained on 4
# processes as 2 virtual GPUs (2 pipeline stages each, ZeRO-1 across the two); with GPUs, a 13.1B gpt that fits
# no single GPU, the same way (configs/demo_gpu.json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
# The demo needs the command alone; tools/test.sh builds the tests.
bash tools/build.sh release tandem
bash tools/demo_run.sh build/release/apps/tandem/tandem
