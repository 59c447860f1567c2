#!/usr/bin/env bash
# The main job: "4 devices used as 2 virtual GPUs with twice the memory". Installs what is missing, builds,
# then trains the model of configs/demo.json (an MLP of 71.4M parameters, 1024-4096-8192-4096-10: 1.09 GiB of
# fp32 training state) where every device has a 768 MiB budget:
#   1. on one device, where it does not fit: the allocator refuses with the numbers;
#   2. on 4 devices as 2 virtual GPUs (2 pipeline stages each, ZeRO-1 across the two), where it trains.
# On CPU each device is one process with its own budget.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh release
tandem=build/release/apps/tandem/tandem
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo
echo "== 1 device, 768 MiB budget: does not fit"
if $tandem train configs/demo.json --set 'parallel={"virtual_gpus": 1}' --out runs/demo-1-device; then
  echo "demo: the model was expected not to fit on one device" >&2
  exit 1
fi

echo
echo "== 4 devices as 2 virtual GPUs of 2, 768 MiB budget each"
$tandem train -n 4 configs/demo.json --out runs/demo
