#!/usr/bin/env bash
# Installs what is missing, builds Loom and runs the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
ctest --test-dir build --output-on-failure --timeout 600 -j "$jobs"
