#!/usr/bin/env bash
# Installs Loom's build and test dependencies: Debian's packages (Debian 12), only
# those that are missing (needs root or sudo then), and the Python environment
# .venv with the pinned packages of python/requirements.txt (torch, transformers,
# pytest) and python/titan-requirements.txt (torchtitan 0.2.2 and its import chain),
# made again whenever either file changes. With --no-python, only the Debian
# packages: enough to build the `loom` command (a CI gate needs no torch).
set -euo pipefail
cd "$(dirname "$0")/.."

python_env=1
for arg in "$@"; do
  case "$arg" in
    --no-python) python_env=0 ;;
    *) echo "loom setup: unknown argument '$arg' (known: --no-python)" >&2; exit 2 ;;
  esac
done

packages=(
  g++ cmake ninja-build pkg-config git
  libabsl-dev libboost-graph-dev libz3-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libjemalloc-dev libopenblas-dev
  libyaml-cpp-dev python3-dev python3-pybind11 python3-pytest python3-venv
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

if [ "$python_env" = 0 ]; then
  exit 0
fi

# The Python environment, from Debian's interpreter (the one pybind11 builds for).
# torchtitan's chain goes in without dependency resolution (python/titan-requirements.txt).
requirements=python/requirements.txt
titan_requirements=python/titan-requirements.txt
stamp=.venv/requirements.sha256
want=$(cat "$requirements" "$titan_requirements" | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python3 ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "loom setup: making .venv from $requirements and $titan_requirements"
  rm -rf .venv
  /usr/bin/python3 -m venv .venv
  .venv/bin/python3 -m pip install --quiet --disable-pip-version-check -r "$requirements"
  .venv/bin/python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    -r "$titan_requirements"
  echo "$want" > "$stamp"
fi

# The CUDA backend's cuBLAS and NCCL, where a CUDA compiler is found (the toolkit
# alone has neither): pinned wheels unpacked into .cuda-deps, made again whenever
# tools/cuda-requirements.txt changes. Without nvcc nothing is installed and the
# build has no CUDA plugin.
nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [ -n "$nvcc" ]; then
  cuda_requirements=tools/cuda-requirements.txt
  cuda_stamp=.cuda-deps/requirements.sha256
  cuda_want=$(sha256sum "$cuda_requirements" | cut -d' ' -f1)
  if [ "$(cat "$cuda_stamp" 2>/dev/null)" != "$cuda_want" ]; then
    echo "loom setup: unpacking cuBLAS and NCCL into .cuda-deps from $cuda_requirements"
    rm -rf .cuda-deps
    .venv/bin/python3 -m pip install --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --target .cuda-deps -r "$cuda_requirements"
    echo "$cuda_want" > "$cuda_stamp"
  fi
fi
