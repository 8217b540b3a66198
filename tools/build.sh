#!/usr/bin/env bash
# Configures and builds Loom into build/ (Release with debug info, Ninja).
# Extra arguments are Ninja targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
jobs=$(nproc 2>/dev/null || echo 2)
ninja -C build -j "$jobs" "$@"
