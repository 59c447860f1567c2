#!/usr/bin/env bash
# Installs what Tandem builds and tests with, from the distribution's packages, when it is missing.
# Debian/Ubuntu. Uses sudo when not root. Prints nothing more than apt does.
# bash tools/install-deps.sh [--tests]: with --tests also PyTorch, transformers, peft and tensorboard (a 5-6 GB
# download), which only the Hugging Face and monitor tests need (tools/test.sh passes it; the demo does not).
set -euo pipefail

packages=(build-essential cmake git python3 python3-venv procps libopenmpi-dev openmpi-bin libopenblas-dev
          libopenblas-openmp-dev nlohmann-json3-dev
          libcli11-dev libgtest-dev googletest zlib1g-dev clang-format base-files)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# A Python for the interchange tests and tools/prepare_data.py (numpy, safetensors and tokenizers from PyPI; jinja2
# renders chat templates), kept under build/.
cd "$(dirname "$0")/.."
if ! build/pyvenv/bin/python -c "import numpy, safetensors, tokenizers, jinja2" 2>/dev/null; then
  echo "installing numpy, safetensors, tokenizers and jinja2 into build/pyvenv"
  python3 -m venv build/pyvenv
  build/pyvenv/bin/python -m pip install --quiet --disable-pip-version-check numpy safetensors tokenizers jinja2
fi

# PyTorch, transformers and peft: the Hugging Face tests compare Tandem's losses with theirs and load its exports
# (peft: the LoRA adapters); tensorboard: its own reader checks the event files a run writes.
if [ "${1:-}" = --tests ] && ! build/pyvenv/bin/python -c "import torch, transformers, peft, tensorboard" 2>/dev/null; then
  echo "installing torch, transformers, peft and tensorboard into build/pyvenv"
  build/pyvenv/bin/python -m pip install --quiet --disable-pip-version-check torch transformers peft tensorboard
fi

# With the CUDA toolkit present: cudnn-frontend's headers (header-only, from PyPI) for cuDNN's fused attention;
# cmake/cuda.cmake finds them in this environment.
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } &&
  ! ls build/pyvenv/lib/python3*/site-packages/include/cudnn_frontend.h >/dev/null 2>&1; then
  echo "installing cudnn-frontend headers into build/pyvenv"
  build/pyvenv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps nvidia-cudnn-frontend
fi
