#!/usr/bin/env bash
# Installs Loom's build and test dependencies from Debian's packages (Debian 12),
# only those that are missing. Needs root (or sudo) when something must be installed.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config git
  libabsl-dev libboost-graph-dev libz3-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libjemalloc-dev libopenblas-dev
  libyaml-cpp-dev python3-dev python3-pybind11 python3-pytest
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "loom setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
