#!/usr/bin/env bash
# The demo's runs, given a built tandem binary (tools/demo.sh installs, builds, then calls this).
# With 2 or more GPUs (and a CUDA build) it shows the scenario on GPUs with configs/demo_gpu.json, a 13.1B gpt
# whose training state (220 GiB) fits no single 141 GiB GPU:
#   1. on one GPU: refused by the preflight before anything is allocated, with the numbers;
#   2. with 4 GPUs, on all 4 as 2 virtual GPUs of 2 (2 pipeline stages each, ZeRO-1 across the two);
#      with 2 or 3 GPUs, on 2 as 1 virtual GPU of 2 (2 pipeline stages).
# Otherwise the CPU scenario with configs/demo.json: a 71.4M-parameter MLP under a 768 MiB budget per device,
# refused on 1 device and trained on 4 processes as 2 virtual GPUs of 2.
# Usage: bash tools/demo_run.sh TANDEM_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
tandem="$1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

gpus=$("$tandem" info | sed -n 's/^usable GPUs: //p')
if [ "${gpus:-0}" -ge 2 ]; then
  echo "== $gpus GPUs: configs/demo_gpu.json (gpt 13.1B, bf16) on 1 GPU: does not fit"
  if "$tandem" train configs/demo_gpu.json --device cuda --set 'parallel={"virtual_gpus": 1}'; then
    echo "demo: the model was expected not to fit on one GPU" >&2
    exit 1
  fi
  echo
  if [ "$gpus" -ge 4 ]; then
    echo "== 4 GPUs as 2 virtual GPUs of 2"
    "$tandem" train -n 4 configs/demo_gpu.json --device cuda
  else
    echo "== 2 GPUs as 1 virtual GPU of 2 (4 GPUs would train it as 2 virtual GPUs of 2)"
    "$tandem" train -n 2 configs/demo_gpu.json --device cuda \
      --set 'parallel={"virtual_gpus": 1, "pipeline": 2, "schedule": "1f1b"}' --set zero_optimization.stage=0
  fi
  exit 0
fi

echo "== 1 device, 768 MiB budget: does not fit"
if "$tandem" train configs/demo.json --device cpu --set 'parallel={"virtual_gpus": 1}'; then
  echo "demo: the model was expected not to fit on one device" >&2
  exit 1
fi

echo
echo "== 4 devices as 2 virtual GPUs of 2, 768 MiB budget each"
"$tandem" train -n 4 configs/demo.json --device cpu
