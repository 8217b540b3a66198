#!/usr/bin/env bash
# Installs what is missing, builds the `loom` command and runs Loom's main job on
# the embedded default: the Llama 3 8B training step, summarised.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh loom
echo
echo "\$ loom show --model llama3-8b"
build/tools/loom show --model llama3-8b
