#!/usr/bin/env bash
# Installs what tilefuse needs to build and test on Debian 12 (bookworm), where it is missing.
set -euo pipefail
pkgs=(cmake g++ make llvm-22-dev llvm-22-tools libfmt-dev libzstd-dev zlib1g-dev libxml2-dev libgtest-dev libdlpack-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
fi
if [ ! -f /usr/local/cuda/include/cuda.h ]; then
  echo "setup: /usr/local/cuda/include/cuda.h is missing: tilefuse needs the CUDA toolkit's Driver API" >&2
  echo "       header (any CUDA 12/13 toolkit); no GPU is needed to build or test." >&2
  exit 1
fi
