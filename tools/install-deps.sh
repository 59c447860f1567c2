#!/usr/bin/env bash
# Installs what Tandem builds and tests with, from the distribution's packages, when it is missing.
# Debian/Ubuntu. Uses sudo when not root. Prints nothing more than apt does.
set -euo pipefail

packages=(build-essential cmake git python3 libopenmpi-dev openmpi-bin libopenblas-dev nlohmann-json3-dev
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
